//! `dlock exec`: mutual exclusion, exit codes, the environment, process
//! groups, setup errors.

use crate::cli::{
    dead_url, dlock, holder, now_ns, run, spans, timed_script, wait_until, Dir, Dlock, Server, SEC,
};
use dlock_client::Locker;
use std::time::Instant;

/// Several runs on one resource, started together: their commands never
/// overlap (each writes its start and end time) and get rising fences in
/// the order they ran.
#[test]
fn concurrent_execs_serialize_and_fences_rise() {
    let server = Server::start();
    let dir = Dir::new();
    let mut runs: Vec<Dlock> = (0..3)
        .map(|n| {
            Dlock::spawn(
                dlock(&server.url())
                    .args(["exec", "--wait", "30s", "--ttl", "5s", "job", "--"])
                    .args(["sh", "-c", &timed_script(&dir, n, "0.3")]),
                &dir,
                &format!("d{n}"),
            )
        })
        .collect();
    for r in &mut runs {
        assert_eq!(r.wait(60 * SEC), 0, "{}", r.stderr());
    }
    let spans = spans(&dir, 3);
    for w in spans.windows(2) {
        assert!(w[0].1 < w[1].0, "commands overlapped: {spans:?}");
        assert!(w[0].2 < w[1].2, "fences did not rise: {spans:?}");
    }
    assert_eq!(holder(&mut server.conn(), "job"), None, "released");
}

/// A busy lock: `--no-wait` exits 75 (or `--conflict-exit-code`), so does
/// a wait that runs out; the command never runs.
#[test]
fn a_busy_lock_exits_75_or_the_conflict_code() {
    let server = Server::start();
    let dir = Dir::new();
    let locker = Locker::new(&server.url()).unwrap();
    let _held = locker.try_lock("busy", 60 * SEC).unwrap().unwrap();
    let marker = dir.sh("ran");
    let cmd = format!("touch {marker}");
    let (code, _, err) = run(
        dlock(&server.url()).args(["exec", "--no-wait", "busy", "sh", "-c", &cmd]),
        &dir,
        20 * SEC,
    );
    assert_eq!(code, 75, "{err}");
    assert!(err.contains("busy is busy"), "{err}");
    let (code, _, err) = run(
        dlock(&server.url()).args([
            "exec",
            "--no-wait",
            "--conflict-exit-code",
            "3",
            "busy",
            "--",
            "sh",
            "-c",
            &cmd,
        ]),
        &dir,
        20 * SEC,
    );
    assert_eq!(code, 3, "{err}");
    let t = Instant::now();
    let (code, _, err) = run(
        dlock(&server.url()).args(["exec", "--wait", "400ms", "busy", "--", "sh", "-c", &cmd]),
        &dir,
        20 * SEC,
    );
    assert_eq!(code, 75, "{err}");
    assert!(t.elapsed() >= crate::common::ms(400), "{:?}", t.elapsed());
    assert!(err.contains("still busy after 400ms"), "{err}");
    assert!(!dir.exists("ran"), "the command ran without the lock");
    // Not a terminal: no status line while waiting.
    assert!(!err.contains("waiting for"), "{err}");
}

/// The command's exit status and death by signal (128+N) come through,
/// and the lock is released after each; a command that cannot run exits
/// 127 (not found) or 126 (not executable), and releases too.
#[test]
fn exit_status_and_signals_pass_through() {
    let server = Server::start();
    let dir = Dir::new();
    let mut c = server.conn();
    for (script, want) in [
        ("exit 0", 0),
        ("exit 7", 7),
        ("kill -TERM $$", 128 + libc::SIGTERM),
        ("kill -KILL $$", 128 + libc::SIGKILL),
    ] {
        let (code, _, err) = run(
            dlock(&server.url()).args(["exec", "--no-wait", "r", "--", "sh", "-c", script]),
            &dir,
            20 * SEC,
        );
        assert_eq!(code, want, "{script}: {err}");
        assert_eq!(holder(&mut c, "r"), None, "{script}: not released");
    }
    let (code, _, err) = run(
        dlock(&server.url()).args(["exec", "r", "--", "/nonexistent/command"]),
        &dir,
        20 * SEC,
    );
    assert_eq!(code, 127, "{err}");
    assert!(err.contains("command not found"), "{err}");
    std::fs::write(dir.path("script"), "#!/bin/sh\ntrue\n").unwrap();
    let (code, _, err) = run(
        dlock(&server.url()).args(["exec", "r", "--", &dir.sh("script")]),
        &dir,
        20 * SEC,
    );
    assert_eq!(code, 126, "{err}");
    assert_eq!(holder(&mut c, "r"), None, "not released");
}

/// The command sees `DLOCK_RESOURCE`, `DLOCK_TOKEN` and `DLOCK_FENCE` of
/// its own grant, whatever the parent's environment had.
#[test]
fn the_environment_names_the_grant() {
    let server = Server::start();
    let dir = Dir::new();
    let script = format!(
        "echo \"$DLOCK_RESOURCE $DLOCK_TOKEN $DLOCK_FENCE\" > {env}.tmp; mv {env}.tmp {env}; \
         while [ ! -e {go} ]; do sleep 0.05; done",
        env = dir.sh("env"),
        go = dir.sh("go")
    );
    let mut d = Dlock::spawn(
        dlock(&server.url())
            .env("DLOCK_RESOURCE", "inherited")
            .env("DLOCK_TOKEN", "stale-token")
            .env("DLOCK_FENCE", "1")
            .args(["exec", "env:res", "--", "sh", "-c", &script]),
        &dir,
        "d",
    );
    wait_until(20 * SEC, "the command's environment", || dir.exists("env"));
    let env = dir.read("env");
    let (token, fence) = holder(&mut server.conn(), "env:res").expect("held");
    assert_eq!(env, format!("env:res {token} {fence}"));
    std::fs::write(dir.path("go"), "").unwrap();
    assert_eq!(d.wait(20 * SEC), 0, "{}", d.stderr());
}

/// The lock is released only after the whole process group has exited:
/// a background job that outlives the command keeps it held.
#[test]
fn the_lock_outlives_the_command_until_its_group_exits() {
    let server = Server::start();
    let dir = Dir::new();
    let script = format!(
        "echo $$ > {group}; (sleep 1; date +%s%N > {late}) & exit 0",
        group = dir.sh("group"),
        late = dir.sh("late")
    );
    let mut d = Dlock::spawn(
        dlock(&server.url()).args(["exec", "bg", "--", "sh", "-c", &script]),
        &dir,
        "d",
    )
    .group_file(dir.path("group"));
    let mut c = server.conn();
    wait_until(20 * SEC, "the command started", || dir.exists("group"));
    // Until the background job has written its marker, the lock is held
    // (checked in this order: a free lock means the marker was there).
    let end = Instant::now() + 20 * SEC;
    while d.try_code().is_none() {
        let held = holder(&mut c, "bg").is_some();
        assert!(
            held || dir.exists("late"),
            "released before the group exited"
        );
        assert!(Instant::now() < end, "dlock did not exit: {}", d.stderr());
        std::thread::sleep(crate::common::ms(20));
    }
    assert_eq!(d.wait(SEC), 0, "{}", d.stderr());
    assert!(dir.exists("late"), "dlock exited before its group");
    let late: i64 = dir.read("late").parse().unwrap();
    assert!(late <= now_ns());
    assert_eq!(holder(&mut c, "bg"), None);
}

/// Setup errors: an unreachable server exits 69 (waiting or not); a bad
/// `--grace` or duration, a missing command, a bad `--url` among several,
/// `--token` with several `--url`s exit 64. The command never runs.
#[test]
fn setup_errors_have_their_codes() {
    let dir = Dir::new();
    let cmd = format!("touch {}", dir.sh("ran"));
    let url = dead_url();
    for wait in [["--wait", "10s"], ["--no-wait", "--ttl=5s"]] {
        let (code, _, err) = run(
            dlock(&url)
                .arg("exec")
                .args(wait)
                .args(["r", "sh", "-c", &cmd]),
            &dir,
            30 * SEC,
        );
        assert_eq!(code, 69, "{err}");
        assert!(err.contains("unavailable"), "{err}");
    }
    for bad in [
        &["--ttl", "3s", "--grace", "1s", "r", "true"][..],
        &["--ttl", "30", "r", "true"],
        &["--wait", "soon", "r", "true"],
        &["--limit", "0", "r", "true"],
        &["--bogus", "r", "true"],
        &["r"],
        &["--url", "nonsense://a/", "--url", "redis://b/", "r", "true"],
    ] {
        let (code, _, err) = run(dlock(&url).arg("exec").args(bad), &dir, 20 * SEC);
        assert_eq!(code, 64, "{bad:?}: {err}");
        assert!(err.contains("dlock:"), "{err}");
    }

    let (_, _, err) = run(
        dlock(&url).args(["exec", "--grace", "10s", "r", "true"]),
        &dir,
        20 * SEC,
    );
    assert!(err.contains("below a third of --ttl 30s"), "{err}");
    assert!(!dir.exists("ran"));
}

/// A semaphore and shared holds through `exec`: permits coexist, and a
/// full semaphore is busy.
#[test]
fn limit_and_shared_holds() {
    let server = Server::start();
    let dir = Dir::new();
    let locker = Locker::new(&server.url()).unwrap();
    let _p1 = locker.request("sem").limit(2).acquire().unwrap().unwrap();
    let (code, _, err) = run(
        dlock(&server.url()).args(["exec", "--no-wait", "--limit", "2", "sem", "true"]),
        &dir,
        20 * SEC,
    );
    assert_eq!(code, 0, "a second permit: {err}");
    let _p2 = locker.request("sem").limit(2).acquire().unwrap().unwrap();
    let (code, _, _) = run(
        dlock(&server.url()).args(["exec", "--no-wait", "--limit", "2", "sem", "true"]),
        &dir,
        20 * SEC,
    );
    assert_eq!(code, 75, "both permits taken");
    let _r = locker.request("rw").shared().acquire().unwrap().unwrap();
    let (code, _, err) = run(
        dlock(&server.url()).args(["exec", "--no-wait", "--shared", "rw", "true"]),
        &dir,
        20 * SEC,
    );
    assert_eq!(code, 0, "readers share: {err}");
    let (code, _, _) = run(
        dlock(&server.url()).args(["exec", "--no-wait", "rw", "true"]),
        &dir,
        20 * SEC,
    );
    assert_eq!(code, 75, "a writer waits for the reader");
}
