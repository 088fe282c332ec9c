//! Certificates made for one test by the `openssl` command (EC P-256 keys:
//! quick to make): a CA, a server certificate for `localhost` and
//! 127.0.0.1 and one for another name, a client certificate, and a
//! second CA that vouches for nothing here. Removed on drop.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

pub struct Certs {
    dir: PathBuf,
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

impl Certs {
    pub fn new() -> Certs {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("dlock-tls-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let certs = Certs { dir };
        certs.ca("ca");
        certs.ca("other-ca");
        certs.leaf(
            "server",
            "ca",
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth",
        );
        certs.leaf(
            "misnamed",
            "ca",
            "subjectAltName=DNS:db.example\nextendedKeyUsage=serverAuth",
        );
        certs.leaf("client", "ca", "extendedKeyUsage=clientAuth");
        certs.leaf("stranger", "other-ca", "extendedKeyUsage=clientAuth");
        certs
    }

    /// `NAME.crt` or `NAME.key`.
    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn ca(&self, name: &str) {
        self.openssl(&[
            "req",
            "-x509",
            "-new",
            "-nodes",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.crt"),
            "-days",
            "2",
            "-subj",
            &format!("/CN=dlock test {name}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign",
        ]);
    }

    /// `name.crt`/`name.key` signed by CA `ca`, with these extensions.
    fn leaf(&self, name: &str, ca: &str, extensions: &str) {
        let ext = format!("{name}.ext");
        std::fs::write(
            self.dir.join(&ext),
            format!("basicConstraints=CA:FALSE\n{extensions}\n"),
        )
        .unwrap();
        self.openssl(&[
            "req",
            "-new",
            "-nodes",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
            "-subj",
            &format!("/CN={name}"),
        ]);
        let serial = (COUNTER.fetch_add(1, Ordering::Relaxed) + 1000).to_string();
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{ca}.crt"),
            "-CAkey",
            &format!("{ca}.key"),
            "-set_serial",
            &serial,
            "-days",
            "2",
            "-extfile",
            &ext,
            "-out",
            &format!("{name}.crt"),
        ]);
    }

    fn openssl(&self, args: &[&str]) {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(&self.dir)
            .output()
            .unwrap_or_else(|e| panic!("cannot run openssl (install it: .ci/deps.sh): {e}"));
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
