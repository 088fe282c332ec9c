//! Signals to `dlock exec` (forwarded to the command's group, or ending
//! dlock while it waits), `kill -9` of dlock, and the terminal: the status
//! line while waiting, the command's foreground group.

use crate::cli::{alive, dlock, holder, kill, wait_until, Dir, Dlock, Server, SEC};
use crate::common::ms;
use dlock_client::Locker;
use std::time::{Duration, Instant};

/// SIGTERM to dlock goes to the command, which traps it and exits 3 s
/// later: the lock stays held until the command has exited (renewed: past
/// the 2 s ttl), then is released, and dlock exits with the command's
/// status.
#[test]
fn sigterm_to_dlock_is_forwarded_and_the_lock_held_until_the_command_exits() {
    let server = Server::start();
    let dir = Dir::new();
    let script = format!(
        "trap 'sleep 3; date +%s%N > {exited}; exit 1' TERM; echo $$ > {group}; \
         touch {started}; while :; do sleep 0.05; done",
        exited = dir.sh("exited"),
        group = dir.sh("group"),
        started = dir.sh("started"),
    );
    // A 2 s ttl: the lock must be renewed while the command finishes.
    let mut d = Dlock::spawn(
        dlock(&server.url())
            .args(["exec", "--ttl", "2s", "--grace", "300ms", "term", "--"])
            .args(["sh", "-c", &script]),
        &dir,
        "d",
    )
    .group_file(dir.path("group"));
    wait_until(20 * SEC, "the command started", || dir.exists("started"));
    let mut c = server.conn();
    let (token, _) = holder(&mut c, "term").expect("held");
    assert!(kill(d.pid(), libc::SIGTERM));
    let signalled = Instant::now();
    let mut held_late = false;
    while d.try_code().is_none() {
        // Held, or else the command has exited (in this order).
        let h = holder(&mut c, "term");
        let exited = dir.exists("exited");
        assert!(
            h.as_ref().is_some_and(|(t, _)| *t == token) || exited,
            "released before the command exited"
        );
        held_late |= h.is_some() && signalled.elapsed() > ms(2300);
        assert!(signalled.elapsed() < 20 * SEC, "dlock did not exit");
        std::thread::sleep(ms(20));
    }
    assert_eq!(d.wait(SEC), 1, "{}", d.stderr());
    assert!(dir.exists("exited"));
    assert!(held_late, "not held (renewed) until the command exited");
    assert_eq!(
        holder(&mut c, "term"),
        None,
        "released after the command exited"
    );
}

/// `kill -9` of dlock: the kernel kills the command (PR_SET_PDEATHSIG).
#[test]
fn killing_dlock_kills_the_command() {
    let server = Server::start();
    let dir = Dir::new();
    let script = format!(
        "echo $$ > {group}; touch {started}; exec sleep 60",
        group = dir.sh("group"),
        started = dir.sh("started"),
    );
    let mut d = Dlock::spawn(
        dlock(&server.url()).args(["exec", "k9", "--", "sh", "-c", &script]),
        &dir,
        "d",
    )
    .group_file(dir.path("group"));
    wait_until(20 * SEC, "the command started", || dir.exists("started"));
    let child = dir.wait_number("group", 5 * SEC) as i32;
    assert!(alive(child));
    assert!(kill(d.pid(), libc::SIGKILL));
    assert_eq!(d.wait(10 * SEC), 128 + libc::SIGKILL);
    wait_until(10 * SEC, "the command to die with dlock", || !alive(child));
}

/// On a terminal, a wait longer than a second shows one status line (time,
/// the holder's fence, the queue) that is erased when the lock is granted,
/// and the command gets the terminal: it reads from it (in a background
/// group, SIGTTIN would stop it). Runs dlock under script(1) for a
/// pseudo-terminal; skipped without it.
#[test]
fn waiting_on_a_terminal_shows_a_status_line() {
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("script(1) not found: skipped");
        return;
    }
    let server = Server::start();
    let dir = Dir::new();
    let locker = Locker::new(&server.url()).unwrap();
    let held = locker.try_lock("tty", 60 * SEC).unwrap().unwrap();
    let fence = held.fence();
    let inner = format!(
        "{} exec --wait 30s tty -- sh -c 'echo $$ > {}; read -r x; echo granted'",
        env!("CARGO_BIN_EXE_dlock"),
        dir.sh("group")
    );
    let mut d = Dlock::spawn(
        std::process::Command::new("script")
            .args(["-qfec", &inner, "/dev/null"])
            .env("DLOCK_URL", server.url())
            .stdin(std::process::Stdio::null()),
        &dir,
        "d",
    )
    .group_file(dir.path("group"));
    let mut c = server.conn();
    wait_until(20 * SEC, "dlock queued", || {
        crate::common::waiters(&mut c, "tty") == 1
    });
    std::thread::sleep(Duration::from_millis(2500));
    held.release().unwrap();
    assert_eq!(d.wait(20 * SEC), 0, "{}", d.stderr());
    let out = d.stdout();
    assert!(
        out.contains("waiting for tty (")
            && out.contains(&format!("held by fence {fence}, 1 queued")),
        "{out:?}"
    );
    // Erased before the command's output.
    let granted = out.find("granted").expect("the command ran");
    assert!(out[..granted].ends_with("\r\x1b[2K"), "{out:?}");
}

/// SIGINT, SIGHUP, SIGQUIT and SIGTERM sent to dlock all reach the
/// command (which traps them, and exits on the last).
#[test]
fn every_forwarded_signal_reaches_the_command() {
    let server = Server::start();
    let dir = Dir::new();
    let got = dir.sh("got");
    let script = format!(
        "for s in INT HUP QUIT; do trap \"echo $s >> {got}\" $s; done; \
         trap 'echo TERM >> {got}; exit 0' TERM; echo $$ > {group}; touch {started}; \
         while :; do sleep 0.05; done",
        group = dir.sh("group"),
        started = dir.sh("started"),
    );
    let mut d = Dlock::spawn(
        dlock(&server.url()).args(["exec", "sig", "--", "sh", "-c", &script]),
        &dir,
        "d",
    )
    .group_file(dir.path("group"));
    wait_until(20 * SEC, "the command started", || dir.exists("started"));
    for (sig, name) in [
        (libc::SIGINT, "INT"),
        (libc::SIGHUP, "HUP"),
        (libc::SIGQUIT, "QUIT"),
        (libc::SIGTERM, "TERM"),
    ] {
        assert!(kill(d.pid(), sig));
        wait_until(20 * SEC, name, || {
            std::fs::read_to_string(dir.path("got")).is_ok_and(|g| g.lines().any(|l| l == name))
        });
    }
    assert_eq!(d.wait(20 * SEC), 0, "{}", d.stderr());
    assert_eq!(holder(&mut server.conn(), "sig"), None);
}

/// A signal while dlock waits for the lock ends dlock by that signal; the
/// server forgets the waiter, and the command never runs.
#[test]
fn a_signal_while_waiting_ends_dlock_and_leaves_the_queue() {
    let server = Server::start();
    let dir = Dir::new();
    let locker = Locker::new(&server.url()).unwrap();
    let held = locker.try_lock("q", 60 * SEC).unwrap().unwrap();
    let mut d = Dlock::spawn(
        dlock(&server.url()).args(["exec", "q", "--", "touch", &dir.sh("ran")]),
        &dir,
        "d",
    );
    let mut c = server.conn();
    wait_until(20 * SEC, "dlock queued", || {
        crate::common::waiters(&mut c, "q") == 1
    });
    assert!(kill(d.pid(), libc::SIGINT));
    assert_eq!(d.wait(20 * SEC), 128 + libc::SIGINT, "{}", d.stderr());
    wait_until(20 * SEC, "the waiter gone", || {
        crate::common::waiters(&mut c, "q") == 0
    });
    held.release().unwrap();
    assert_eq!(
        holder(&mut c, "q"),
        None,
        "nothing granted to the dead waiter"
    );
    assert!(!dir.exists("ran"));
}

/// A stopped command still acts on a forwarded signal (SIGCONT follows
/// it), so dlock does not wait for it forever.
#[test]
fn a_stopped_command_gets_forwarded_signals() {
    let server = Server::start();
    let dir = Dir::new();
    let script = format!(
        "echo $$ > {group}; touch {started}; exec sleep 60",
        group = dir.sh("group"),
        started = dir.sh("started"),
    );
    let mut d = Dlock::spawn(
        dlock(&server.url()).args(["exec", "stopped", "--", "sh", "-c", &script]),
        &dir,
        "d",
    )
    .group_file(dir.path("group"));
    wait_until(20 * SEC, "the command started", || dir.exists("started"));
    let child = dir.wait_number("group", 5 * SEC) as i32;
    assert!(kill(child, libc::SIGSTOP));
    wait_until(10 * SEC, "the command stopped", || {
        std::fs::read_to_string(format!("/proc/{child}/stat")).is_ok_and(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('T'))
        })
    });
    assert!(kill(d.pid(), libc::SIGTERM));
    assert_eq!(d.wait(20 * SEC), 128 + libc::SIGTERM, "{}", d.stderr());
    assert_eq!(holder(&mut server.conn(), "stopped"), None);
}
