//! The `dlock` tool over TLS: `--tls-ca`, `--tls-cert`, `--tls-key` and
//! their `DLOCK_TLS_*` variables, its exit codes for the refusals.

use crate::common::{holder, SEC};
use crate::tls::certs::Certs;
use crate::tls::TlsServer;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `dlock ARGS` with no `DLOCK_*` variable inherited, its output in
/// `certs`'s dir; (exit code, stdout, stderr) within `within`.
pub fn dlock<S: AsRef<std::ffi::OsStr> + std::fmt::Debug>(
    certs: &Certs,
    args: &[S],
    env: &[(&str, &str)],
    within: Duration,
) -> (i32, String, String) {
    let out = certs.dir().join("dlock.out");
    let err = certs.dir().join("dlock.err");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dlock"));
    for (k, _) in std::env::vars() {
        if k.starts_with("DLOCK_") {
            cmd.env_remove(k);
        }
    }
    let mut child = cmd
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let end = Instant::now() + within;
    let code = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s.code().unwrap_or(-1);
        }
        if Instant::now() >= end {
            let _ = child.kill();
            let _ = child.wait();
            panic!("dlock {args:?} still running after {within:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let read = |p| std::fs::read_to_string(p).unwrap();
    (code, read(&out), read(&err))
}

/// `status` and `exec` over TLS (flags, and the environment), and the
/// client certificate a server requires.
/// `args`, then the options naming the test CA and the client certificate
/// and key (mutual TLS).
pub fn with_mutual_tls(certs: &Certs, args: &[&str]) -> Vec<String> {
    let mut out: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    for (flag, file) in [
        ("--tls-ca", "ca.crt"),
        ("--tls-cert", "client.crt"),
        ("--tls-key", "client.key"),
    ] {
        out.push(flag.to_string());
        out.push(certs.path(file).display().to_string());
    }
    out
}

#[test]
fn the_tool_over_tls() {
    let certs = Certs::new();
    let s = TlsServer::start(&certs, "server", true);
    let url = s.url("127.0.0.1");
    let ca = certs.path("ca.crt").display().to_string();
    let cert = certs.path("client.crt").display().to_string();
    let key = certs.path("client.key").display().to_string();
    let args = with_mutual_tls(&certs, &["--url", &url]);
    let (code, out, err) = dlock(
        &certs,
        &[&args[..], &["status".to_string(), "job".to_string()]].concat(),
        &[],
        10 * SEC,
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("free"), "{out}");

    // The command runs holding the lock, seen through the plain port.
    let plain = s.server.port();
    let script = format!(
        "redis-cli -p {plain} --no-raw DLOCK.INFO job | grep -c token > {}",
        certs.path("seen").display()
    );
    let env = [
        ("DLOCK_URL", url.as_str()),
        ("DLOCK_TLS_CA", ca.as_str()),
        ("DLOCK_TLS_CERT", cert.as_str()),
        ("DLOCK_TLS_KEY", key.as_str()),
    ];
    let (code, out, err) = dlock(
        &certs,
        &["exec", "--no-wait", "job", "--", "sh", "-c", &script],
        &env,
        20 * SEC,
    );
    assert_eq!(code, 0, "{out}{err}");
    let seen = std::fs::read_to_string(certs.path("seen")).unwrap();
    assert_eq!(
        seen.trim(),
        "1",
        "the lock was not held while the command ran"
    );
    assert_eq!(holder(&mut s.server.conn(), "job"), None);

    // Without the client certificate: refused, the server's exit code.
    let (code, _, err) = dlock(
        &certs,
        &["--tls-ca", &ca, "status", "job"],
        &[("DLOCK_URL", url.as_str())],
        10 * SEC,
    );
    assert_eq!(code, 69, "{err}");
    assert!(
        err.contains("TLS handshake refused") && err.contains(&format!("127.0.0.1:{}", s.tls_port)),
        "{err}"
    );
}

/// An unknown CA and a wrong name exit 69 naming the server; a certificate
/// without its key, an unreadable file, or TLS options with a `redis://`
/// URL are usage errors (64) naming what is wrong.
#[test]
fn the_tool_refuses_what_does_not_verify() {
    let certs = Certs::new();
    let s = TlsServer::start(&certs, "misnamed", false);
    let url = s.url("127.0.0.1");
    let ca = certs.path("ca.crt").display().to_string();
    let other = certs.path("other-ca.crt").display().to_string();
    let addr = format!("127.0.0.1:{}", s.tls_port);
    let refused = |args: &[&str], why: &str| {
        let (code, out, err) = dlock(&certs, args, &[], 10 * SEC);
        assert_eq!(code, 69, "{out}{err}");
        assert!(err.contains(&addr) && err.contains(why), "{err}");
    };
    refused(
        &["--url", &url, "--tls-ca", &other, "status", "job"],
        "UnknownIssuer",
    );
    refused(&["--url", &url, "status", "job"], "UnknownIssuer");
    refused(
        &["--url", &url, "--tls-ca", &ca, "status", "job"],
        "not valid for name",
    );
    refused(
        &[
            "acquire",
            "--url",
            &url,
            "--tls-ca",
            &ca,
            "--no-wait",
            "job",
        ],
        "not valid for name",
    );
    assert_eq!(holder(&mut s.server.conn(), "job"), None);

    let cert = certs.path("client.crt").display().to_string();
    let missing = certs.path("missing.pem").display().to_string();
    let usage = |args: &[&str], env: &[(&str, &str)], why: &str| {
        let (code, out, err) = dlock(&certs, args, env, 10 * SEC);
        assert_eq!(code, 64, "{out}{err}");
        assert!(err.contains(why), "{why}: {err}");
    };
    usage(
        &["--url", &url, "--tls-cert", &cert, "status", "job"],
        &[],
        "--tls-cert needs the certificate's private key",
    );
    usage(
        &["--url", &url, "status", "job"],
        &[("DLOCK_TLS_KEY", cert.as_str())],
        "DLOCK_TLS_KEY needs its certificate",
    );
    usage(
        &["--url", &url, "--tls-ca", &missing, "status", "job"],
        &[],
        &missing,
    );
    usage(
        &[
            "--url",
            &format!("redis://127.0.0.1:{}/", s.server.port()),
            "--tls-ca",
            &ca,
            "status",
            "job",
        ],
        &[],
        "rediss://",
    );
    usage(
        &[
            "--url", &url, "--tls-ca", &ca, "status", "--tls-ca", &other, "job",
        ],
        &[],
        "--tls-ca given twice",
    );

    // A rediss:// URL naming the plaintext port: the handshake stalls, and
    // the timeout says what to check.
    let plain = format!("rediss://127.0.0.1:{}/", s.server.port());
    let (code, out, err) = dlock(
        &certs,
        &["--url", &plain, "--tls-ca", &ca, "status", "job"],
        &[],
        60 * SEC,
    );
    assert_eq!(code, 69, "{out}{err}");
    assert!(err.contains("is this the server's tls-port?"), "{err}");
}

/// `dlock list` over TLS (its connections of its own keep the settings).
#[test]
fn list_over_tls() {
    let certs = Certs::new();
    let s = TlsServer::start(&certs, "server", true);
    let _: redis::Value = redis::cmd("DLOCK.ACQUIRE")
        .arg("job")
        .arg("t1")
        .arg("30000")
        .query(&mut s.server.conn())
        .unwrap();
    let url = s.url("localhost");
    let (code, out, err) = dlock(
        &certs,
        &with_mutual_tls(&certs, &["list", "--url", &url]),
        &[],
        10 * SEC,
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("job"), "{out}");
}
