//! Steps of the wall clock under a running server, made with libfaketime
//! (`LD_PRELOAD`, an offset read from a file at every clock read; the
//! monotonic clock left alone, as a step of the system clock leaves it).
//! A `WAIT` is a duration and keeps it whatever the wall clock does; a
//! lease ends when the server expires its key, on the wall clock, as a
//! Redis TTL does (docs/safety.md, "Clock steps").
//!
//! libfaketime cannot start a server linked against Debian's shared
//! jemalloc (its start-up and jemalloc's call each other's clock reads):
//! on such a server (Debian's redis-server 7.0) these tests say so and
//! pass without running, as on a server where libfaketime does not reach
//! both the server's clock and the module's (Valkey 9.1.2: its `TIME`
//! follows a step only at times, and the module's clock reads never do).
//! They run on the Redis builds in
//! `../shared/servers` (`DLOCK_SERVER=/work/shared/servers/redis-8.6.3/redis-server`).
use crate::common;

use common::lock::*;
use common::waiter::Waiter;
use common::*;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
const HOUR_S: i64 = 3600;
const HOUR_MS: u64 = 3_600_000;

/// The offset file of one server's clock.
struct Clock {
    file: PathBuf,
}

impl Clock {
    fn new() -> Clock {
        // One file per server: tests run side by side in one process.
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let file = std::env::temp_dir().join(format!("dlock-clock-{}-{n}", std::process::id()));
        let clock = Clock { file };
        clock.set(0);
        clock
    }

    /// Moves the server's wall clock to `offset_s` seconds from the real
    /// time: written whole, then renamed, so no read sees half a line.
    fn set(&self, offset_s: i64) {
        let tmp = self.file.with_extension("tmp");
        std::fs::write(&tmp, format!("{offset_s:+}\n")).unwrap();
        std::fs::rename(&tmp, &self.file).unwrap();
    }
}

impl Drop for Clock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
    }
}

/// A server whose wall clock the test steps; `None` (said on stderr) when
/// the server cannot run under libfaketime.
fn start() -> Option<(Server, Clock)> {
    assert!(
        Path::new(LIBFAKETIME).exists(),
        "{LIBFAKETIME} is missing: install Debian's libfaketime (make deps)"
    );
    let clock = Clock::new();
    let started = Server::builder()
        .env("LD_PRELOAD", LIBFAKETIME)
        .env("FAKETIME_TIMESTAMP_FILE", clock.file.display().to_string())
        .env("FAKETIME_NO_CACHE", "1")
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .try_start();
    match started {
        Ok(s) => Some((s, clock)),
        Err(log) if log.contains("libfaketime") => {
            eprintln!(
                "not run: {} does not start under libfaketime (a clash with its \
                 allocator's clock reads); run with a server from ../shared/servers",
                server_binary().to_string_lossy()
            );
            None
        }
        Err(log) => panic!("{log}"),
    }
}

/// The server's own wall clock (`TIME`), in seconds.
fn server_time_s(c: &mut redis::Connection) -> i64 {
    let t: Vec<String> = redis::cmd("TIME").query(c).unwrap();
    t[0].parse().unwrap()
}

/// `DLOCK.ACQUIRE res token ttl_ms WAIT wait_ms` from a client of its own.
fn wait_for(s: &Server, res: &str, token: &str, wait_ms: u64) -> Waiter {
    let mut cmd = redis::cmd("DLOCK.ACQUIRE");
    cmd.arg(res).arg(token).arg(60_000).arg("WAIT").arg(wait_ms);
    Waiter::send(s, cmd)
}

/// Whether the step reached both clocks a test relies on: the server's
/// (its `TIME` moved by about `by_s`) and the module's (a lease it grants
/// now shows its whole length to the server's `PTTL`). Some builds read
/// the wall clock past libfaketime, the server's or the module's (Valkey
/// 9.1.2 does, each at times); the test then says so and stops, since the
/// two clocks would disagree, as they never do outside a test.
fn stepped(c: &mut redis::Connection, by_s: i64) -> bool {
    let real = now_ms() / 1000;
    let shown = server_time_s(c);
    if (shown - real - by_s).abs() >= 60 {
        eprintln!(
            "not run: {}'s TIME reads {shown}, not the real {real} stepped by {by_s} s: \
             its clock does not follow libfaketime",
            server_binary().to_string_lossy()
        );
        return false;
    }
    let left = probe_lease_ms(c);
    if (left - PROBE_TTL_MS as i64).abs() >= 60_000 {
        eprintln!(
            "not run: under {}, a lease of {PROBE_TTL_MS} ms the module grants shows \
             {left} ms to PTTL: the module's clock does not follow libfaketime",
            server_binary().to_string_lossy()
        );
        return false;
    }
    true
}

const PROBE: &str = "clock-probe";
const PROBE_TTL_MS: u64 = 3 * HOUR_MS;

/// `PTTL` of a lease of `PROBE_TTL_MS` granted now (then released): the
/// module sets the key's deadline on its clock, the server counts it down
/// on its own.
fn probe_lease_ms(c: &mut redis::Connection) -> i64 {
    assert!(acquire(c, PROBE, "probe", PROBE_TTL_MS).is_some());
    let left = pttl(c, PROBE);
    assert_eq!(release(c, PROBE, "probe"), 1);
    left
}

/// An hour forward during a `WAIT 60000`: the waiter still waits, stays
/// queued through every command that drops given-up waiters, and gets the
/// lock when it is released. The holder's lease, a key with a TTL, is an
/// hour shorter, as any key's TTL would be.
#[test]
fn a_forward_step_does_not_end_a_wait() {
    let Some((s, clock)) = start() else { return };
    let mut c = s.conn();
    assert!(acquire(&mut c, "r", "holder", 3 * HOUR_MS).is_some());
    let w = wait_for(&s, "r", "waiter", 60_000);
    wait_blocked_clients(&mut c, 1);

    clock.set(HOUR_S);
    if !stepped(&mut c, HOUR_S) {
        return;
    }
    // A try on the resource and a grant both drop the waiters whose WAIT
    // has run out: this one has not.
    assert_eq!(try_acquire(&mut c, "r", "other", 1000).unwrap(), None);
    assert_eq!(waiters(&mut c, "r"), 1);
    assert!(w.pending(), "the WAIT ended with the step");
    let left = pttl(&mut c, "r");
    assert!(
        left > 0 && left <= 2 * HOUR_MS as i64,
        "the lease moved with the wall clock: {left} ms left"
    );
    assert_eq!(release(&mut c, "r", "holder"), 1);
    let (fence, _) = w.granted();
    assert!(fence > 0);
    assert_eq!(blocked_clients(&mut c), 0);
}

/// An hour back during a `WAIT 5000`: the waiter gets nil when its 5 s are
/// over (within the reply's deadline), not an hour later. The holder's
/// lease is an hour longer, as any key's TTL would be.
#[test]
fn a_backward_step_does_not_stretch_a_wait() {
    let Some((s, clock)) = start() else { return };
    let mut c = s.conn();
    assert!(acquire(&mut c, "r", "holder", HOUR_MS).is_some());
    let w = wait_for(&s, "r", "waiter", 5_000);
    wait_blocked_clients(&mut c, 1);

    clock.set(-HOUR_S);
    if !stepped(&mut c, -HOUR_S) {
        return;
    }
    let (reply, _) = w.reply();
    assert_eq!(reply.unwrap(), None, "timed out with nil");
    assert_eq!(blocked_clients(&mut c), 0);
    assert_eq!(waiters(&mut c, "r"), 0);
    let left = pttl(&mut c, "r");
    assert!(
        left > HOUR_MS as i64,
        "the lease moved with the wall clock: {left} ms left"
    );
    // The queue works on: a new waiter is served at the release.
    let w2 = wait_for(&s, "r", "next", 60_000);
    wait_blocked_clients(&mut c, 1);
    assert_eq!(release(&mut c, "r", "holder"), 1);
    assert!(w2.granted().0 > 0);
}

/// A step forward past a lease's end ends the lease: the server expires
/// the key, and the queue's head gets the lock. This is the server's rule
/// for every key with a TTL; docs/safety.md says what it means for holders.
#[test]
fn a_forward_step_past_a_lease_hands_it_over() {
    let Some((s, clock)) = start() else { return };
    let mut c = s.conn();
    assert!(acquire(&mut c, "r", "holder", HOUR_MS / 2).is_some());
    let w = wait_for(&s, "r", "waiter", 0);
    wait_blocked_clients(&mut c, 1);

    clock.set(HOUR_S);
    if !stepped(&mut c, HOUR_S) {
        return;
    }
    let (fence, mut wc) = w.granted();
    assert!(fence > 0);
    assert_eq!(held(&mut wc, "r").token, b"waiter");
}

/// `DLOCK.OBSERVE res SINCE version WAIT wait_ms` sent on a connection of
/// its own, its reply not read yet.
fn observe_from(s: &Server, res: &str, since: &str, wait_ms: u64) -> redis::Connection {
    let mut o = s.conn();
    let cmd = redis::cmd("DLOCK.OBSERVE")
        .arg(res)
        .arg("SINCE")
        .arg(since)
        .arg("WAIT")
        .arg(wait_ms)
        .get_packed_command();
    o.send_packed_command(&cmd).unwrap();
    o
}

fn version(c: &mut redis::Connection, res: &str) -> String {
    let v: (String, redis::Value) = redis::cmd("DLOCK.OBSERVE").arg(res).query(c).unwrap();
    v.0
}

fn observers(c: &mut redis::Connection) -> i64 {
    info_field(c, "dlock", "dlock_observers")
        .unwrap()
        .parse()
        .unwrap()
}

/// An hour forward during an observer's `WAIT 60000`: it is not answered
/// nil when another observer's `WAIT 3000` ends (its wait is a length of
/// time), and hears the next change.
#[test]
fn a_forward_step_does_not_end_an_observers_wait() {
    let Some((s, clock)) = start() else { return };
    let mut c = s.conn();
    assert!(acquire(&mut c, "r", "holder", 3 * HOUR_MS).is_some());
    let seen = version(&mut c, "r");
    let mut o = observe_from(&s, "r", &seen, 60_000);
    let mut short = observe_from(&s, "q", "0000000000000000", 3_000);
    wait_until(
        std::time::Duration::from_secs(10),
        "the observers wait",
        || observers(&mut c) == 2,
    );

    clock.set(HOUR_S);
    if !stepped(&mut c, HOUR_S) {
        return;
    }
    // The short wait ends: reckoned on the wall clock, the long one would
    // end with it.
    short
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    assert_eq!(short.recv_response().unwrap(), redis::Value::Nil);
    assert_eq!(observers(&mut c), 1, "the long WAIT ended with the step");
    assert_eq!(release(&mut c, "r", "holder"), 1);
    o.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    let got = o.recv_response().unwrap();
    assert!(
        matches!(&got, redis::Value::Array(a) if a.len() == 2),
        "the change, not nil: {got:?}"
    );
    assert_eq!(observers(&mut c), 0);
}

/// An hour back during an observer's `WAIT 2000`: nil when its 2 s are
/// over (within the reply's deadline), not an hour later.
#[test]
fn a_backward_step_does_not_stretch_an_observers_wait() {
    let Some((s, clock)) = start() else { return };
    let mut c = s.conn();
    assert!(acquire(&mut c, "r", "holder", HOUR_MS).is_some());
    let seen = version(&mut c, "r");
    let mut o = observe_from(&s, "r", &seen, 2_000);
    wait_until(
        std::time::Duration::from_secs(10),
        "the observer waits",
        || observers(&mut c) == 1,
    );

    clock.set(-HOUR_S);
    if !stepped(&mut c, -HOUR_S) {
        return;
    }
    o.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    assert_eq!(o.recv_response().unwrap(), redis::Value::Nil);
    assert_eq!(observers(&mut c), 0);
}
