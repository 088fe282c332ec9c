//! What `dlock exec` gives its command for guarded writes with redis-cli
//! (the server in DLOCK_URL, DLOCK_HOST, DLOCK_PORT), and `dlock check`'s
//! exit codes.

use crate::cli::{dead_url, dlock, run, Dir, Server, SEC};
use dlock_client::Locker;

/// The command gets the server dlock used (not an inherited one), and the
/// documented one-line guarded write with redis-cli works while the lock
/// is held; the same line after the lock was released writes nothing
/// (NOTHELD).
#[test]
fn exec_exports_the_server_for_guarded_writes_with_redis_cli() {
    let server = Server::start();
    let dir = Dir::new();
    let url = server.url();
    // The documented line, with the CLI matching the server under test.
    let cli = crate::common::server::cli_binary();
    let cli = cli.to_string_lossy();
    let guarded =
        format!("{cli} -u \"$DLOCK_URL\" DLOCK.GUARD \"$DLOCK_RESOURCE\" FENCE \"$DLOCK_FENCE\"");
    let script = format!(
        "echo \"$DLOCK_URL $DLOCK_HOST $DLOCK_PORT ${{DLOCK_SOCKET-unset}}\" > {env}; \
         {guarded} SET '{{job}}:k' held > {out}; \
         echo \"$DLOCK_FENCE\" > {fence}",
        env = dir.sh("env"),
        out = dir.sh("out"),
        fence = dir.sh("fence"),
    );
    let (code, _, err) = run(
        dlock(&dead_url())
            .env("DLOCK_HOST", "inherited")
            .env("DLOCK_SOCKET", "/inherited")
            .args(["exec", "--url", &url, "{job}", "--", "sh", "-c", &script]),
        &dir,
        30 * SEC,
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        dir.read("env"),
        format!("{url} 127.0.0.1 {} unset", server.port())
    );
    assert_eq!(dir.read("out"), "OK");
    let mut c = server.conn();
    let v: Option<String> = redis::cmd("GET").arg("{job}:k").query(&mut c).unwrap();
    assert_eq!(v.as_deref(), Some("held"));
    // The lock was released when the command ended: its fence proves
    // nothing any more.
    let stale = std::process::Command::new(&*cli)
        .args([
            "-u",
            &url,
            "DLOCK.GUARD",
            "{job}",
            "FENCE",
            &dir.read("fence"),
        ])
        .args(["SET", "{job}:k", "late"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&stale.stdout);
    assert!(said.contains("NOTHELD"), "{said}");
    let v: Option<String> = redis::cmd("GET").arg("{job}:k").query(&mut c).unwrap();
    assert_eq!(v.as_deref(), Some("held"));
}

/// Redlock (several --url): no server is exported, and inherited values
/// are removed (a write on one of its servers is not protected).
#[test]
fn exec_over_redlock_exports_no_server() {
    let servers: Vec<Server> = (0..2).map(|_| Server::start()).collect();
    let dir = Dir::new();
    let script = format!(
        "echo \"${{DLOCK_URL-unset}} ${{DLOCK_HOST-unset}} ${{DLOCK_PORT-unset}}\" > {env}",
        env = dir.sh("env")
    );
    let (code, _, err) = run(
        dlock(&servers[0].url())
            .env("DLOCK_HOST", "inherited")
            .env("DLOCK_PORT", "1")
            .args([
                "exec",
                "--url",
                &servers[0].url(),
                "--url",
                &servers[1].url(),
            ])
            .args(["r", "--", "sh", "-c", &script]),
        &dir,
        30 * SEC,
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(dir.read("env"), "unset unset unset");
}

/// `dlock check RESOURCE FENCE`: 0 while FENCE is a live hold, 1 once not
/// (another fence, released); 64 for a bad fence or several servers, 69
/// for a server that cannot be reached.
#[test]
fn check_exits_0_when_live_and_1_when_not() {
    let server = Server::start();
    let dir = Dir::new();
    let url = server.url();
    let locker = Locker::new(&url).unwrap();
    let g = locker.try_lock("job", 60 * SEC).unwrap().unwrap();
    let fence = g.fence().to_string();
    let other = (g.fence() + 1).to_string();
    let check = |args: &[&str]| {
        let (code, out, err) = run(dlock(&url).arg("check").args(args), &dir, 30 * SEC);
        assert_eq!(out, "", "check prints nothing");
        (code, err)
    };
    assert_eq!(check(&["job", &fence]).0, 0);
    assert_eq!(check(&["job", &other]).0, 1);
    assert_eq!(check(&["other", &fence]).0, 1);
    for bad in [
        &["job"][..],
        &["job", "0"],
        &["job", "x"],
        &["job", "1", "2"],
    ] {
        assert_eq!(check(bad).0, 64, "{bad:?}");
    }
    let (code, err) = check(&["--url", &url, "--url", &dead_url(), "job", &fence]);
    assert_eq!(code, 64, "{err}");
    let (code, _, err) = run(
        dlock(&dead_url()).args(["check", "job", &fence]),
        &dir,
        30 * SEC,
    );
    assert_eq!(code, 69, "{err}");
    assert!(g.release().unwrap());
    assert_eq!(check(&["job", &fence]).0, 1);
}
