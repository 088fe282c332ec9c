//! A fresh machine: `.ci/deps.sh` (the first step of `make run` and `make
//! test`) stops at once, before installing anything, with one line saying
//! which Rust to install when cargo or rustc is missing or too old. The
//! script runs with a PATH holding only bash (and fake cargo and rustc where
//! a test says so): no apt-get, dpkg or sudo is reachable, so nothing can be
//! installed whatever the script does.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

struct Bin(PathBuf);

impl Bin {
    fn with_bash(name: &str) -> Bin {
        let dir = std::env::temp_dir().join(format!("dlock-fresh-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let bash = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .map(|d| d.join("bash"))
            .find(|b| b.is_file())
            .expect("bash on PATH");
        symlink(&bash, dir.join("bash")).unwrap();
        Bin(dir)
    }

    /// A `tool` that answers `--version` with `version`.
    fn fake(&self, tool: &str, version: &str) {
        let path = self.0.join(tool);
        std::fs::write(
            &path,
            format!(
                "#!{}\necho '{tool} {version} (0000000 2022-08-10)'\n",
                self.0.join("bash").display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// `.ci/deps.sh` with this folder as the whole PATH: exit code, stdout,
    /// stderr.
    fn deps(&self) -> (Option<i32>, String, String) {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let out = Command::new(self.0.join("bash"))
            .arg(root.join(".ci/deps.sh"))
            .arg("redis")
            .env_clear()
            .env("PATH", &self.0)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

impl Drop for Bin {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn assert_stops_with_one_line(bin: &Bin, says: &str) {
    let (code, out, err) = bin.deps();
    assert_eq!(code, Some(1), "stdout: {out}\nstderr: {err}");
    assert_eq!(out, "", "nothing else may run");
    let want = format!(
        "dlock needs Rust >= {} (cargo and rustc; {says}); install it with rustup: https://rustup.rs",
        env!("CARGO_PKG_RUST_VERSION")
    );
    assert!(
        err.starts_with(&want) && err.lines().count() == 1,
        "wanted one line starting {want:?}, got {err:?}"
    );
}

#[test]
fn without_cargo_deps_stops_at_once_saying_what_to_install() {
    let bin = Bin::with_bash("none");
    assert_stops_with_one_line(&bin, "cargo is missing");
}

#[test]
fn an_old_rustc_stops_it_too() {
    let bin = Bin::with_bash("old");
    bin.fake("cargo", env!("CARGO_PKG_RUST_VERSION"));
    bin.fake("rustc", "1.63.0");
    assert_stops_with_one_line(&bin, "rustc is 1.63, too old");
}

#[test]
fn the_minimum_rust_version_is_in_every_manifest() {
    assert!(!env!("CARGO_PKG_RUST_VERSION").is_empty());
    let client = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/rust/Cargo.toml"),
    )
    .unwrap();
    let line = format!("rust-version = \"{}\"", env!("CARGO_PKG_RUST_VERSION"));
    assert!(
        client.lines().any(|l| l == line),
        "clients/rust/Cargo.toml lacks {line}"
    );
}
