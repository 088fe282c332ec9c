//! `dlock exec --on-wanted SIGNAL`: the command hears that someone waits.

use crate::cli::{dlock, run, wait_until, Dir, Dlock, Server, SEC};
use dlock_client::Locker;

/// A command that traps USR1 yields: it exits at once, the lock goes to
/// the waiter, and dlock exits with the command's status.
#[test]
fn on_wanted_signals_the_command_when_someone_waits() {
    let server = Server::start();
    let dir = Dir::new();
    let script = format!(
        "trap 'touch {wanted}; exit 7' USR1; echo $$ > {group}; touch {started}; \
         while :; do sleep 0.05; done",
        wanted = dir.sh("wanted"),
        group = dir.sh("group"),
        started = dir.sh("started"),
    );
    let mut d = Dlock::spawn(
        dlock(&server.url())
            .args(["exec", "--ttl", "1s", "--on-wanted", "USR1", "yield", "--"])
            .args(["sh", "-c", &script]),
        &dir,
        "d",
    )
    .group_file(dir.path("group"));
    wait_until(20 * SEC, "the command started", || dir.exists("started"));
    assert!(!dir.exists("wanted"), "nobody waits yet");
    let url = server.url();
    let waiter = std::thread::spawn(move || {
        let locker = Locker::new(&url).unwrap();
        locker
            .request("yield")
            .wait(30 * SEC)
            .acquire()
            .unwrap()
            .is_some()
    });
    assert_eq!(d.wait(20 * SEC), 7, "{}", d.stderr());
    assert!(dir.exists("wanted"), "the command got USR1");
    assert!(waiter.join().unwrap(), "the waiter got the lock");
}

#[test]
fn on_wanted_takes_a_signal_name_or_number() {
    let server = Server::start();
    let dir = Dir::new();
    for bad in ["KILL", "0", "32", "USR3", ""] {
        let (code, _, err) = run(
            dlock(&server.url()).args(["exec", "--on-wanted", bad, "r", "--", "true"]),
            &dir,
            10 * SEC,
        );
        assert_eq!(code, 64, "--on-wanted {bad:?}: {err}");
        assert!(err.contains("--on-wanted"), "{err}");
    }
    let (code, _, err) = run(
        dlock(&server.url()).args(["exec", "--on-wanted", "sigusr2", "r", "--", "true"]),
        &dir,
        10 * SEC,
    );
    assert_eq!(code, 0, "{err}");
}
