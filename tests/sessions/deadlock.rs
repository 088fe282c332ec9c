//! Deadlock refusal: a bound `WAIT` that would close a cycle of sessions
//! waiting for each other is refused at once, naming the cycle's
//! resources, and changes nothing; a wait that closes no cycle (or a cycle
//! through holds no session owns) is queued as always.

use std::time::Duration;

use crate::common::waiter::Waiter;
use crate::common::{wait_until, Server};

fn open(c: &mut redis::Connection, id: &str) {
    let n: i64 = redis::cmd("DLOCK.SESSION")
        .arg(&["OPEN", id, "60000"])
        .query(c)
        .unwrap();
    assert_eq!(n, 1);
}

fn hold(c: &mut redis::Connection, res: &str, token: &str, session: &str) {
    let f: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
        .arg(&[res, token, "0", "SESSION", session])
        .query(c)
        .unwrap();
    assert!(f.is_some(), "{token} holds {res}");
}

fn bound_wait(res: &str, token: &str, session: &str, ms: u64) -> redis::Cmd {
    let mut cmd = redis::cmd("DLOCK.ACQUIRE");
    cmd.arg(&[res, token, "0", "SESSION", session, "WAIT"])
        .arg(ms);
    cmd
}

fn waiters(c: &mut redis::Connection, res: &str) -> i64 {
    let info: Vec<redis::Value> = redis::cmd("DLOCK.INFO").arg(res).query(c).unwrap();
    let mut it = info.iter();
    while let Some(k) = it.next() {
        let v = it.next().unwrap();
        if matches!(k, redis::Value::BulkString(b) if b == b"waiters") {
            return redis::from_redis_value(v).unwrap();
        }
    }
    panic!("no waiters field in {info:?}");
}

/// Waits until `res` has `n` waiters.
fn queued(c: &mut redis::Connection, res: &str, n: i64) {
    wait_until(Duration::from_secs(10), "the waiter queued", || {
        waiters(c, res) == n
    });
}

#[test]
fn a_wait_that_closes_a_cycle_of_two_is_refused_and_changes_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    open(&mut c, "A");
    open(&mut c, "B");
    hold(&mut c, "x", "a1", "A");
    hold(&mut c, "y", "b1", "B");
    // B waits for x, which A holds.
    let b = Waiter::send(&s, bound_wait("x", "b2", "B", 20_000));
    queued(&mut c, "x", 1);
    // A asking to wait for y (B's) would close the cycle.
    let err = bound_wait("y", "a2", "A", 20_000)
        .query::<Option<i64>>(&mut c)
        .unwrap_err();
    let text = format!("{err}");
    assert!(text.starts_with("DEADLOCK"), "{text}");
    assert!(text.contains("'y'") && text.contains("'x'"), "{text}");
    // Nothing changed: y has no waiter, both still hold, B still waits.
    assert_eq!(waiters(&mut c, "y"), 0);
    assert_eq!(waiters(&mut c, "x"), 1);
    assert!(b.pending());
    // Without WAIT it is only busy: nil, no error.
    let nil: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
        .arg(&["y", "a2", "0", "SESSION", "A"])
        .query(&mut c)
        .unwrap();
    assert_eq!(nil, None);
    // A lets go: B is granted x, and A may now wait for y.
    let _: i64 = redis::cmd("DLOCK.RELEASE")
        .arg(&["x", "a1"])
        .query(&mut c)
        .unwrap();
    b.granted();
}

#[test]
fn a_longer_cycle_is_found_and_named_in_wait_order() {
    let s = Server::start();
    let mut c = s.conn();
    for id in ["A", "B", "C"] {
        open(&mut c, id);
    }
    hold(&mut c, "x", "a", "A");
    hold(&mut c, "y", "b", "B");
    hold(&mut c, "z", "c", "C");
    // B waits for z (C's), C waits for x (A's).
    let wb = Waiter::send(&s, bound_wait("z", "b2", "B", 20_000));
    queued(&mut c, "z", 1);
    let wc = Waiter::send(&s, bound_wait("x", "c2", "C", 20_000));
    queued(&mut c, "x", 1);
    let err = bound_wait("y", "a2", "A", 20_000)
        .query::<Option<i64>>(&mut c)
        .unwrap_err();
    let text = format!("{err}");
    let (y, z, x) = (
        text.find("'y'").unwrap(),
        text.find("'z'").unwrap(),
        text.find("'x'").unwrap(),
    );
    assert!(y < z && z < x, "{text}");
    assert!(wb.pending() && wc.pending());
}

#[test]
fn a_wait_without_a_cycle_is_queued() {
    let s = Server::start();
    let mut c = s.conn();
    for id in ["A", "B", "C"] {
        open(&mut c, id);
    }
    hold(&mut c, "x", "a", "A");
    hold(&mut c, "y", "b", "B");
    // B waits for z, held by C, who waits for nothing: A may wait for y.
    hold(&mut c, "z", "c", "C");
    let wb = Waiter::send(&s, bound_wait("z", "b2", "B", 20_000));
    queued(&mut c, "z", 1);
    let wa = Waiter::send(&s, bound_wait("y", "a2", "A", 20_000));
    queued(&mut c, "y", 1);
    // Two waits behind each other's holder are no cycle while C lets go.
    let _: i64 = redis::cmd("DLOCK.RELEASE")
        .arg(&["z", "c"])
        .query(&mut c)
        .unwrap();
    wb.granted();
    assert!(wa.pending());
}

#[test]
fn waits_not_bound_to_sessions_are_not_judged() {
    // The same shape with A's second request unbound (no SESSION): the
    // server cannot tell it is A's, so it queues, as without sessions.
    let s = Server::start();
    let mut c = s.conn();
    open(&mut c, "A");
    open(&mut c, "B");
    hold(&mut c, "x", "a1", "A");
    hold(&mut c, "y", "b1", "B");
    let _b = Waiter::send(&s, bound_wait("x", "b2", "B", 20_000));
    queued(&mut c, "x", 1);
    let mut cmd = redis::cmd("DLOCK.ACQUIRE");
    cmd.arg(&["y", "a2", "10000", "WAIT", "20000"]);
    let _a = Waiter::send(&s, cmd);
    queued(&mut c, "y", 1);
}

#[test]
fn a_cycle_through_a_lock_and_a_read_lock_is_found() {
    let s = Server::start();
    let mut c = s.conn();
    open(&mut c, "A");
    open(&mut c, "B");
    // A holds a lock (`LIMIT 1` is the plain lock); B holds a read lock.
    let f: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
        .arg(&["pool", "a1", "0", "LIMIT", "1", "SESSION", "A"])
        .query(&mut c)
        .unwrap();
    assert!(f.is_some());
    let f: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
        .arg(&["doc", "b1", "0", "SHARED", "SESSION", "B"])
        .query(&mut c)
        .unwrap();
    assert!(f.is_some());
    let mut w = redis::cmd("DLOCK.ACQUIRE");
    w.arg(&[
        "pool", "b2", "0", "LIMIT", "1", "SESSION", "B", "WAIT", "20000",
    ]);
    let _b = Waiter::send(&s, w);
    queued(&mut c, "pool", 1);
    // A asks to write the document B reads.
    let err = bound_wait("doc", "a2", "A", 20_000)
        .query::<Option<i64>>(&mut c)
        .unwrap_err();
    assert!(format!("{err}").starts_with("DEADLOCK"), "{err}");
}

#[test]
fn waiting_for_what_the_session_holds_under_another_token_is_queued() {
    // Another thread sharing the session may hold it and let go.
    let s = Server::start();
    let mut c = s.conn();
    open(&mut c, "A");
    hold(&mut c, "x", "a1", "A");
    let w = Waiter::send(&s, bound_wait("x", "a2", "A", 20_000));
    queued(&mut c, "x", 1);
    let _: i64 = redis::cmd("DLOCK.RELEASE")
        .arg(&["x", "a1"])
        .query(&mut c)
        .unwrap();
    w.granted();
}

#[test]
fn a_semaphore_with_a_holder_that_waits_for_nothing_is_no_deadlock() {
    // X has two permits, held by B and C; A holds Y and waits for X. B's
    // wait for Y is no deadlock: C may give its permit back, and then A
    // gets X and lets Y go.
    let s = Server::start();
    let mut c = s.conn();
    for id in ["A", "B", "C"] {
        open(&mut c, id);
    }
    for (token, session) in [("b", "B"), ("c", "C")] {
        let f: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
            .arg(&["x", token, "0", "LIMIT", "2", "SESSION", session])
            .query(&mut c)
            .unwrap();
        assert!(f.is_some());
    }
    hold(&mut c, "y", "a", "A");
    let mut w = redis::cmd("DLOCK.ACQUIRE");
    w.arg(&[
        "x", "a2", "0", "LIMIT", "2", "SESSION", "A", "WAIT", "20000",
    ]);
    let a = Waiter::send(&s, w);
    queued(&mut c, "x", 1);
    let b = Waiter::send(&s, bound_wait("y", "b2", "B", 20_000));
    queued(&mut c, "y", 1);
    let _: i64 = redis::cmd("DLOCK.RELEASE")
        .arg(&["x", "c"])
        .query(&mut c)
        .unwrap();
    a.granted();
    let _: i64 = redis::cmd("DLOCK.RELEASE")
        .arg(&["y", "a"])
        .query(&mut c)
        .unwrap();
    b.granted();
}
