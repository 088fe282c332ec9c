//! `dlock sessions list|info|kill`, and `dlock exec` holding its lock in a
//! session. The tests named `session_*` need a server with sessions and
//! say so when they skip; the others run on any server.

use crate::cli::{dlock, run, wait_until, Dir, Dlock, Server, SEC};
use crate::common::{has_sessions, session_field};

fn open(c: &mut redis::Connection, id: &str) {
    let _: i64 = redis::cmd("DLOCK.SESSION")
        .arg("OPEN")
        .arg(id)
        .arg(60_000)
        .query(c)
        .unwrap();
}

#[test]
fn sessions_on_a_server_without_them_exit_69_saying_so() {
    let server = Server::start();
    if has_sessions(&mut server.conn()) {
        eprintln!("skipped: the server has sessions");
        return;
    }
    let dir = Dir::new();
    for args in [&["sessions", "list"][..], &["sessions", "kill", "x"]] {
        let (code, out, err) = run(dlock(&server.url()).args(args), &dir, 10 * SEC);
        assert_eq!(code, 69, "{args:?}: {err}");
        assert!(err.contains("older than sessions"), "{err}");
        assert_eq!(out, "");
    }
}

#[test]
fn sessions_usage_errors_exit_64() {
    let dir = Dir::new();
    let url = "redis://127.0.0.1:1/";
    for args in [
        &["sessions"][..],
        &["sessions", "show"],
        &["sessions", "kill"],
        &["sessions", "list", "x"],
        &["sessions", "info", "a", "--match", "b"],
    ] {
        let (code, _, err) = run(dlock(url).args(args), &dir, 10 * SEC);
        assert_eq!(code, 64, "{args:?}: {err}");
        assert!(err.contains("dlock sessions --help"), "{err}");
    }
    let (code, out, _) = run(dlock(url).args(["sessions", "--help"]), &dir, 10 * SEC);
    assert_eq!(code, 0);
    assert!(out.starts_with("dlock sessions list"), "{out}");
}

#[test]
fn session_list_info_and_kill() {
    let server = Server::start();
    let mut c = server.conn();
    if !has_sessions(&mut c) {
        eprintln!("skipped: the server has no sessions (DLOCK.SESSION)");
        return;
    }
    open(&mut c, "worker-1");
    open(&mut c, "worker-2");
    open(&mut c, "batch-1");
    let _: i64 = redis::cmd("DLOCK.ACQUIRE")
        .arg("job")
        .arg("t1")
        .arg(0)
        .arg("SESSION")
        .arg("worker-1")
        .query(&mut c)
        .unwrap();
    let dir = Dir::new();
    let (code, out, err) = run(
        dlock(&server.url()).args(["sessions", "list"]),
        &dir,
        10 * SEC,
    );
    assert_eq!(code, 0, "{err}");
    let lines: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(lines[0], ["SESSION", "TTL", "HOLDS", "WAITS", "BOUND"]);
    let ids: Vec<&str> = lines[1..].iter().map(|l| l[0]).collect();
    assert_eq!(ids, ["batch-1", "worker-1", "worker-2"]);
    assert_eq!(lines[2][2..], ["1", "0", "no"], "{out}");

    let (code, out, _) = run(
        dlock(&server.url()).args(["sessions", "list", "--match", "worker-*"]),
        &dir,
        10 * SEC,
    );
    assert_eq!(code, 0);
    assert_eq!(out.lines().count(), 3, "{out}");

    let (code, out, _) = run(
        dlock(&server.url()).args(["sessions", "info", "worker-1"]),
        &dir,
        10 * SEC,
    );
    assert_eq!(code, 0);
    assert!(out.starts_with("session worker-1\n"), "{out}");
    assert!(out.contains("  session-ttl: 60.000s\n"), "{out}");
    assert!(out.contains("  holds: 1\n"), "{out}");

    let kill = |id: &str| {
        run(
            dlock(&server.url()).args(["sessions", "kill", id]),
            &dir,
            10 * SEC,
        )
    };
    let (code, out, _) = kill("worker-1");
    assert_eq!(code, 0);
    assert!(out.starts_with("killed worker-1 on "), "{out}");
    assert_eq!(session_field(&mut c, "worker-1", "ttl"), None);
    wait_until(5 * SEC, "the hold released", || {
        crate::common::is_free(&mut c, "job")
    });
    let (code, _, err) = kill("worker-1");
    assert_eq!(code, 79, "{err}");
    assert!(err.contains("no session worker-1"), "{err}");
    let (code, _, _) = run(
        dlock(&server.url()).args(["sessions", "info", "worker-1"]),
        &dir,
        10 * SEC,
    );
    assert_eq!(code, 79);
}

/// `dlock exec` holds its lock in a session; killing the session ends the
/// command and dlock exits 79.
#[test]
fn session_exec_holds_its_lock_in_a_session_and_its_kill_ends_the_command() {
    let server = Server::start();
    let mut c = server.conn();
    if !has_sessions(&mut c) {
        eprintln!("skipped: the server has no sessions (DLOCK.SESSION)");
        return;
    }
    let dir = Dir::new();
    let script = format!(
        "echo $$ > {group}; touch {started}; sleep 60",
        group = dir.sh("group"),
        started = dir.sh("started"),
    );
    let mut d = Dlock::spawn(
        dlock(&server.url())
            .args(["exec", "--ttl", "3s", "--grace", "500ms", "job", "--"])
            .args(["sh", "-c", &script]),
        &dir,
        "d",
    )
    .group_file(dir.path("group"));
    wait_until(20 * SEC, "the command started", || dir.exists("started"));
    let (code, out, err) = run(
        dlock(&server.url()).args(["sessions", "list"]),
        &dir,
        10 * SEC,
    );
    assert_eq!(code, 0, "{err}");
    let rows: Vec<Vec<String>> = out
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect();
    assert_eq!(rows.len(), 1, "one session: {out}");
    assert_eq!(rows[0][2], "1", "holding the lock: {out}");
    let (code, _, err) = run(
        dlock(&server.url()).args(["sessions", "kill", &rows[0][0]]),
        &dir,
        10 * SEC,
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(d.wait(10 * SEC), 79, "{}", d.stderr());
}

/// A finished `dlock exec` closes its session rather than leaving it to its
/// ttl (the process exits without running destructors).
#[test]
fn session_exec_closes_its_session_when_done() {
    let server = Server::start();
    let mut c = server.conn();
    if !has_sessions(&mut c) {
        eprintln!("skipped: the server has no sessions (DLOCK.SESSION)");
        return;
    }
    let dir = Dir::new();
    let (code, _, err) = run(
        dlock(&server.url()).args(["exec", "--ttl", "60s", "job", "--", "true"]),
        &dir,
        20 * SEC,
    );
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = run(
        dlock(&server.url()).args(["sessions", "list"]),
        &dir,
        10 * SEC,
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 1, "no session left: {out}");
}
