//! `dlock acquire`, `extend`, `release`, `status` and the help texts.

use crate::cli::{dead_url, dlock, holder, run, Dir, Paused, SEC};
use crate::common::{pttl, Server};
use dlock_client::Locker;
use std::time::Instant;

/// A script's lease: `acquire` prints "TOKEN FENCE" and leaves the lock
/// held after it exits; `extend` and `release` work by token and exit 79
/// once the token holds nothing; `--token` picks the token.
#[test]
fn acquire_extend_release_by_token() {
    let server = Server::start();
    let dir = Dir::new();
    let url = server.url();
    let mut c = server.conn();
    let (code, out, err) = run(
        dlock(&url).args(["acquire", "--ttl", "20s", "--no-wait", "job"]),
        &dir,
        20 * SEC,
    );
    assert_eq!(code, 0, "{err}");
    let words: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(words.len(), 2, "{out:?}");
    let (token, fence) = (words[0].to_string(), words[1].parse::<u64>().unwrap());
    assert_eq!(
        holder(&mut c, "job"),
        Some((token.clone(), fence)),
        "still held"
    );
    assert!(pttl(&mut c, "job") <= 20_000);

    let (code, _, err) = run(
        dlock(&url).args(["acquire", "--no-wait", "job"]),
        &dir,
        20 * SEC,
    );
    assert_eq!(code, 75, "{err}");
    let (code, _, _) = run(
        dlock(&url).args([
            "acquire",
            "--wait",
            "300ms",
            "--conflict-exit-code",
            "9",
            "job",
        ]),
        &dir,
        20 * SEC,
    );
    assert_eq!(code, 9);

    let (code, _, err) = run(
        dlock(&url).args(["extend", "job", &token, "--ttl", "2m"]),
        &dir,
        20 * SEC,
    );
    assert_eq!(code, 0, "{err}");
    assert!(pttl(&mut c, "job") > 60_000);
    let (code, _, err) = run(dlock(&url).args(["release", "job", &token]), &dir, 20 * SEC);
    assert_eq!(code, 0, "{err}");
    assert_eq!(holder(&mut c, "job"), None);
    for cmd in ["release", "extend"] {
        let (code, _, err) = run(dlock(&url).args([cmd, "job", &token]), &dir, 20 * SEC);
        assert_eq!(code, 79, "{cmd}: {err}");
        assert!(err.contains("not held by token"), "{err}");
    }

    // --token: the holder's own token; acquiring again with it is a retry.
    let (code, out, err) = run(
        dlock(&url).args(["acquire", "--token", "script-1", "job"]),
        &dir,
        20 * SEC,
    );
    assert_eq!(code, 0, "{err}");
    let fence: u64 = out.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert_eq!(out.trim(), format!("script-1 {fence}"));
    let (_, again, _) = run(
        dlock(&url).args(["acquire", "--no-wait", "--token", "script-1", "job"]),
        &dir,
        20 * SEC,
    );
    assert_eq!(again, out, "same token: the same grant");
    let (code, _, _) = run(
        dlock(&url).args(["release", "job", "script-1"]),
        &dir,
        20 * SEC,
    );
    assert_eq!(code, 0);
}

/// `status` in text and JSON: free, a plain lock, shared holds, waiters.
#[test]
fn status_shows_holds_fences_ttls_and_waiters() {
    let server = Server::start();
    let dir = Dir::new();
    let url = server.url();
    let status = |args: &[&str]| {
        let (code, out, err) = run(dlock(&url).arg("status").args(args), &dir, 20 * SEC);
        assert_eq!(code, 0, "{err}");
        out
    };
    assert_eq!(status(&["res"]), "res: free\n");
    assert_eq!(
        status(&["--json", "res"]),
        "{\"resource\":\"res\",\"state\":\"free\",\"kind\":\"lock\",\"limit\":1,\"waiters\":0,\"holds\":[]}\n"
    );
    let locker = Locker::new(&url).unwrap();
    let g = locker.try_lock("res", 30 * SEC).unwrap().unwrap();
    // A waiter, queued on the server.
    let l2 = locker.clone();
    let waiter = std::thread::spawn(move || {
        l2.request("res")
            .ttl(SEC)
            .wait(20 * SEC)
            .acquire()
            .unwrap()
            .map(|g| g.fence())
    });
    let mut c = server.conn();
    crate::cli::wait_until(20 * SEC, "the waiter queued", || {
        crate::common::waiters(&mut c, "res") == 1
    });
    let text = status(&["res"]);
    assert!(text.starts_with("res: held, lock, 1 waiting\n"), "{text}");
    assert!(
        text.contains(&format!("exclusive  {:<20}", g.fence())),
        "{text}"
    );
    assert!(text.contains(g.token()), "{text}");
    let json = status(&["--json", "res"]);
    let head = format!(
        "{{\"resource\":\"res\",\"state\":\"held\",\"kind\":\"lock\",\"limit\":1,\"waiters\":1,\"holds\":[{{\"token\":\"{}\",\"owner\":null,\"fence\":{},\"ttl_ms\":",
        g.token(),
        g.fence()
    );
    assert!(json.starts_with(&head), "{json}");
    assert!(json.ends_with(",\"mode\":\"exclusive\"}]}\n"), "{json}");
    g.release().unwrap();
    assert!(waiter.join().unwrap().is_some());

    let _r1 = locker.request("rw").shared().acquire().unwrap().unwrap();
    let _r2 = locker.request("rw").shared().acquire().unwrap().unwrap();
    let text = status(&["rw"]);
    assert!(text.starts_with("rw: held, rwlock, 0 waiting\n"), "{text}");
    assert_eq!(text.matches("  shared ").count(), 2, "{text}");
    let json = status(&["--json", "rw"]);
    assert_eq!(json.matches("\"mode\":\"shared\"").count(), 2, "{json}");
    let _s = locker.request("sem").limit(3).acquire().unwrap().unwrap();
    assert!(status(&["sem"]).starts_with("sem: held, semaphore (limit 3), 0 waiting\n"));
}

/// The script commands: 69 when the server is unreachable, 64 on usage
/// errors.
#[test]
fn script_commands_exit_codes_on_errors() {
    let dir = Dir::new();
    let url = dead_url();
    for args in [
        &["status", "r"][..],
        &["acquire", "--no-wait", "r"],
        &["acquire", "r"],
        &["extend", "r", "tok"],
        &["release", "r", "tok"],
    ] {
        let (code, _, err) = run(dlock(&url).args(args), &dir, 30 * SEC);
        assert_eq!(code, 69, "{args:?}: {err}");
    }
    for args in [
        &[][..],
        &["frobnicate"],
        &["status"],
        &["status", "a", "b"],
        &["extend", "r"],
        &["release", "r", "t", "u"],
        &["extend", "--ttl", "0", "r", "t"],
        &["acquire", "--token", "", "r"],
        &["release", "--ttl", "1s", "r", "t"],
        &["--url"],
    ] {
        let (code, _, err) = run(dlock(&url).args(args), &dir, 20 * SEC);
        assert_eq!(code, 64, "{args:?}: {err}");
        assert!(err.contains("--help"), "{args:?}: {err}");
    }
}

/// `dlock --help` (examples, exit codes) and each command's `--help`
/// document every option.
#[test]
fn help_documents_every_option() {
    let dir = Dir::new();
    let url = dead_url();
    let help = |args: &[&str]| {
        let (code, out, err) = run(dlock(&url).args(args), &dir, 20 * SEC);
        assert_eq!(code, 0, "{args:?}: {err}");
        out
    };
    let main = help(&["--help"]);
    for s in [
        "EXAMPLES",
        "EXIT STATUS",
        "64",
        "69",
        "75",
        "79",
        "126",
        "127",
        "128+N",
        "exec",
        "status",
        "acquire",
        "extend",
        "release",
        "list",
        "DLOCK_URL",
    ] {
        assert!(main.contains(s), "dlock --help lacks {s}");
    }
    assert_eq!(help(&["help"]), main);
    let exec = help(&["exec", "--help"]);
    for s in [
        "--url",
        "--ttl",
        "--wait",
        "--no-wait",
        "--shared",
        "--limit",
        "--permits",
        "--priority",
        "--grace",
        "--conflict-exit-code",
        "DLOCK_TOKEN",
        "DLOCK_FENCE",
        "DLOCK_RESOURCE",
    ] {
        assert!(exec.contains(s), "dlock exec --help lacks {s}");
    }
    assert_eq!(help(&["help", "exec"]), exec);
    let acquire = help(&["acquire", "-h"]);
    for s in [
        "--token",
        "--ttl",
        "--wait",
        "--no-wait",
        "--shared",
        "--limit",
        "--permits",
        "--priority",
    ] {
        assert!(acquire.contains(s), "dlock acquire --help lacks {s}");
    }
    assert!(help(&["extend", "--help"]).contains("--ttl"));
    assert!(help(&["release", "--help"]).contains("79"));
    assert!(help(&["status", "--help"]).contains("--json"));
}

/// `extend` and `release` on a server that accepts connections but never
/// answers (SIGSTOP): 69 within the library's io timeout and retries,
/// naming the server.
#[test]
fn extend_and_release_give_up_on_a_paused_server() {
    let server = Server::start();
    let dir = Dir::new();
    let url = server.url();
    let guard = Locker::new(&url)
        .unwrap()
        .try_lock("job", 60 * SEC)
        .unwrap()
        .unwrap();
    let token = guard.token().to_string();
    // Held by token from here on, as a script's lease is.
    std::mem::forget(guard);
    let paused = Paused::new(&server);
    for args in [&["extend", "job", &token][..], &["release", "job", &token]] {
        let t = Instant::now();
        let (code, _, err) = run(dlock(&url).args(args), &dir, 20 * SEC);
        let took = t.elapsed();
        assert_eq!(code, 69, "{args:?}: {err}");
        assert!(took < 6 * SEC, "{args:?} took {took:?}");
        let addr = format!("127.0.0.1:{}", server.port());
        assert!(err.contains(&addr), "{args:?} names no server: {err}");
    }
    drop(paused);
    let mut c = server.conn();
    assert_eq!(holder(&mut c, "job").map(|h| h.0), Some(token));
}

/// Redlock mode with one server of three paused: a majority answers, so
/// `extend` and `release` succeed within a few seconds.
#[test]
fn redlock_extend_and_release_with_one_of_three_paused() {
    let servers: Vec<Server> = (0..3).map(|_| Server::start()).collect();
    let dir = Dir::new();
    let urls: Vec<String> = servers
        .iter()
        .flat_map(|s| ["--url".to_string(), s.url()])
        .collect();
    let (code, out, err) = run(
        dlock(&servers[0].url())
            .args(&urls)
            .args(["acquire", "--no-wait", "--ttl", "60s", "job"]),
        &dir,
        20 * SEC,
    );
    assert_eq!(code, 0, "{err}");
    let token = out.split_whitespace().next().unwrap().to_string();
    let paused = Paused::new(&servers[0]);
    let t = Instant::now();
    let (code, _, err) = run(
        dlock(&servers[0].url())
            .args(&urls)
            .args(["extend", "--ttl", "2m", "job", &token]),
        &dir,
        20 * SEC,
    );
    assert_eq!(code, 0, "extend: {err}");
    assert!(t.elapsed() < 5 * SEC, "extend took {:?}", t.elapsed());
    for s in &servers[1..] {
        assert!(
            pttl(&mut s.conn(), "job") > 60_000,
            "extended on the others"
        );
    }
    let t = Instant::now();
    let (code, _, err) = run(
        dlock(&servers[0].url())
            .args(&urls)
            .args(["release", "job", &token]),
        &dir,
        20 * SEC,
    );
    assert_eq!(code, 0, "release: {err}");
    assert!(t.elapsed() < 5 * SEC, "release took {:?}", t.elapsed());
    drop(paused);
    for s in &servers[1..] {
        assert_eq!(holder(&mut s.conn(), "job"), None, "released on the others");
    }
}
