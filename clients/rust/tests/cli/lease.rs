//! `dlock exec` when the lease ends under the command: lost (the server
//! answers 0), or running out while renewals fail.

use crate::cli::{alive, dlock, wait_until, Dir, Dlock, Server, SEC};
use std::time::Instant;

/// A command that ignores SIGTERM and whose background job (a grandchild)
/// ignores it too: `$$` in `group`, the job's pid in `job`, then `started`.
fn stubborn(dir: &Dir) -> String {
    format!(
        "trap '' TERM; echo $$ > {group}; sleep 60 & echo $! > {job}; touch {started}; wait",
        group = dir.sh("group"),
        job = dir.sh("job"),
        started = dir.sh("started"),
    )
}

/// An admin deletes the lock while the command runs: the next renewal is
/// answered 0, the group gets SIGTERM at once and SIGKILL `--grace` later,
/// so the command and its grandchild (both ignoring SIGTERM) are gone
/// before the lease's deadline; dlock exits 79.
#[test]
fn a_lost_lease_kills_the_whole_group_by_the_deadline() {
    let server = Server::start();
    let dir = Dir::new();
    let ttl = 3 * SEC;
    let mut d = Dlock::spawn(
        dlock(&server.url())
            // --no-session: the DEL below is seen by the next renewal.
            .args(["exec", "--no-session", "--ttl", "3s", "--grace", "500ms"])
            .args(["lost", "--"])
            .args(["sh", "-c", &stubborn(&dir)]),
        &dir,
        "d",
    )
    .group_file(dir.path("group"));
    wait_until(20 * SEC, "the command started", || dir.exists("started"));
    let leader = dir.wait_number("group", 5 * SEC) as i32;
    let job = dir.wait_number("job", 5 * SEC) as i32;
    let mut c = server.conn();
    let _: i64 = redis::cmd("DEL").arg("lost").query(&mut c).unwrap();
    let deleted = Instant::now();
    // The lease the server had ended at the latest a ttl after the DEL (the
    // last renewal was sent before it); the group must be gone by then.
    // Slack for a loaded machine.
    wait_until(ttl + 5 * SEC, "the group to end", || {
        !alive(leader) && !alive(job)
    });
    let took = deleted.elapsed();
    assert!(took < ttl + 2 * SEC, "took {took:?}");
    assert_eq!(d.wait(10 * SEC), 79, "{}", d.stderr());
    let err = d.stderr();
    assert!(err.contains("lease on lost was lost"), "{err}");
}

/// Renewals fail (the server is stopped): SIGTERM when the lease has
/// `--grace` left, SIGKILL at its end. The command traps SIGTERM (writes a
/// marker) and keeps running; it is gone by the deadline; dlock exits 79.
#[test]
fn failing_renewals_end_the_command_before_the_lease_ends() {
    let server = Server::start();
    let dir = Dir::new();
    let script = format!(
        "trap 'date +%s%N > {term}' TERM; echo $$ > {group}; touch {started}; \
         while :; do sleep 0.05; done",
        term = dir.sh("term"),
        group = dir.sh("group"),
        started = dir.sh("started"),
    );
    let mut d = Dlock::spawn(
        dlock(&server.url())
            .args(["exec", "--ttl", "3s", "--grace", "900ms", "srv", "--"])
            .args(["sh", "-c", &script]),
        &dir,
        "d",
    )
    .group_file(dir.path("group"));
    wait_until(20 * SEC, "the command started", || dir.exists("started"));
    let leader = dir.wait_number("group", 5 * SEC) as i32;
    server.stop();
    let stopped = Instant::now();
    // The lease was last renewed before the stop: it ends within a ttl,
    // and the command with it (slack for a loaded machine).
    wait_until(3 * SEC + 5 * SEC, "the command to end", || !alive(leader));
    let took = stopped.elapsed();
    // dlock's release gets no answer from a stopped server: it gives up.
    let code = d.wait(10 * SEC);
    server.cont();
    assert_eq!(code, 79, "{}", d.stderr());
    assert!(
        took < 3 * SEC + 2 * SEC,
        "the command outlived its lease: {took:?}"
    );
    assert!(dir.exists("term"), "no SIGTERM before the SIGKILL");
    assert!(!alive(leader), "the command survived its lease");
    let err = d.stderr();
    assert!(err.contains("renewing srv keeps failing"), "{err}");
}

/// The command succeeds, but its lease was deleted meanwhile (before any
/// renewal noticed): the final release answers 0, and dlock exits 79, not 0.
#[test]
fn a_release_answered_0_exits_79_even_when_the_command_succeeded() {
    let server = Server::start();
    let dir = Dir::new();
    let script = format!(
        "touch {started}; while [ ! -e {go} ]; do sleep 0.05; done; exit 0",
        started = dir.sh("started"),
        go = dir.sh("go"),
    );
    let mut d = Dlock::spawn(
        dlock(&server.url()).args(["exec", "--ttl", "60s", "gone", "--", "sh", "-c", &script]),
        &dir,
        "d",
    );
    wait_until(20 * SEC, "the command started", || dir.exists("started"));
    let _: i64 = redis::cmd("DEL")
        .arg("gone")
        .query(&mut server.conn())
        .unwrap();
    std::fs::write(dir.path("go"), "").unwrap();
    assert_eq!(d.wait(20 * SEC), 79, "{}", d.stderr());
    let err = d.stderr();
    assert!(
        err.contains("lease on gone was lost") && err.contains("exited with 0"),
        "{err}"
    );
}

/// How renewals stop getting through in [`renewals_stop_and_dlock_exits_79`].
#[derive(Clone, Copy, Debug)]
pub enum Outage {
    /// `kill -9` of the server: refused at once.
    Killed,
    /// SIGSTOP of the server: connections accepted, never answered.
    Stopped,
}

/// `dlock CMD` (exec or elect) runs a command that dies of the SIGTERM
/// dlock sends when renewals have failed until only `--grace` is left:
/// dlock exits 79 (the lease ended the command), not the 143 of the
/// command's death, which a script could not tell from a SIGTERM someone
/// else sent.
pub fn renewals_stop_and_dlock_exits_79(cmd: &str, outage: Outage) {
    let mut server = Server::start();
    let dir = Dir::new();
    let script = format!(
        "echo $$ > {group}; touch {started}; while :; do sleep 0.05; done",
        group = dir.sh("group"),
        started = dir.sh("started"),
    );
    let mut d = Dlock::spawn(
        dlock(&server.url())
            .args([cmd, "--ttl", "3s", "--grace", "900ms", "outage", "--"])
            .args(["sh", "-c", &script]),
        &dir,
        "d",
    )
    .group_file(dir.path("group"));
    wait_until(20 * SEC, "the command started", || dir.exists("started"));
    let leader = dir.wait_number("group", 5 * SEC) as i32;
    let paused = match outage {
        Outage::Killed => {
            server.kill9();
            None
        }
        Outage::Stopped => Some(crate::cli::Paused::new(&server)),
    };
    // The lease ends within a ttl of the outage; dlock's release gets no
    // answer and gives up (slack for a loaded machine).
    let code = d.wait(3 * SEC + 10 * SEC);
    drop(paused);
    let err = d.stderr();
    assert_eq!(code, 79, "{outage:?}: {err}");
    assert!(!alive(leader), "the command survived its lease");
    assert!(err.contains("renewing outage keeps failing"), "{err}");
    assert!(
        err.contains("died of SIGTERM"),
        "not ended by the SIGTERM: {err}"
    );
}

#[test]
fn exec_exits_79_when_the_server_is_killed() {
    renewals_stop_and_dlock_exits_79("exec", Outage::Killed);
}

#[test]
fn exec_exits_79_when_the_server_is_stopped() {
    renewals_stop_and_dlock_exits_79("exec", Outage::Stopped);
}
