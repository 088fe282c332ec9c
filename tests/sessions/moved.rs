//! A bound hold moved where its session is not: `DUMP`/`RESTORE` (what
//! `MIGRATE` does) makes it an ordinary hold ending at its session's
//! deadline as of the dump; a key renamed away from the registry's view is
//! released once touched after its session ended.

use std::time::Duration;

use crate::common::{wait_until, Server};

fn open(c: &mut redis::Connection, id: &str, ttl_ms: u64) {
    let _: i64 = redis::cmd("DLOCK.SESSION")
        .arg(&["OPEN", id])
        .arg(ttl_ms)
        .query(c)
        .unwrap();
}

fn pttl(c: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(c).unwrap()
}

/// Dumps `key` from `from` and restores it (TTL 0, as `MIGRATE` sends a
/// key without one) on `to`.
fn move_key(from: &mut redis::Connection, to: &mut redis::Connection, key: &str) {
    let payload: Vec<u8> = redis::cmd("DUMP").arg(key).query(from).unwrap();
    let _: () = redis::cmd("RESTORE")
        .arg(key)
        .arg(0)
        .arg(payload)
        .query(to)
        .unwrap();
}

#[test]
fn a_restored_bound_hold_ends_at_its_sessions_deadline() {
    let src = Server::start();
    let dst = Server::start();
    let (mut a, mut b) = (src.conn(), dst.conn());
    open(&mut a, "s", 1500);
    for (key, extra) in [
        ("plain", &[][..]),
        ("shared", &["SHARED"][..]),
        ("owned", &["OWNER", "o"][..]),
    ] {
        let f: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
            .arg(&[key, "t", "0"])
            .arg(extra)
            .arg(&["SESSION", "s"])
            .query(&mut a)
            .unwrap();
        assert!(f.is_some());
        assert_eq!(pttl(&mut a, key), -1, "{key}: a bound hold has no TTL");
        move_key(&mut a, &mut b, key);
    }
    // On the target the holds stand, then end with the session's deadline:
    // nobody is granted them before, anyone after.
    for key in ["plain", "shared", "owned"] {
        let busy: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
            .arg(&[key, "other", "10000"])
            .query(&mut b)
            .unwrap();
        assert_eq!(busy, None, "{key} is still held on the target");
    }
    wait_until(Duration::from_secs(10), "the moved holds end", || {
        ["plain", "shared", "owned"].iter().all(|key| {
            let f: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
                .arg(&[*key, "other", "10000"])
                .query(&mut b)
                .unwrap();
            f.is_some()
        })
    });
}

#[test]
fn a_renamed_bound_hold_is_released_when_touched_after_its_session_ended() {
    let s = Server::start();
    let mut c = s.conn();
    open(&mut c, "s", 60_000);
    let _: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
        .arg(&["old", "t", "0", "SESSION", "s"])
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("RENAME")
        .arg(&["old", "new"])
        .query(&mut c)
        .unwrap();
    let closed: i64 = redis::cmd("DLOCK.SESSION")
        .arg(&["CLOSE", "s"])
        .query(&mut c)
        .unwrap();
    assert_eq!(closed, 1);
    let f: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
        .arg(&["new", "other", "10000"])
        .query(&mut c)
        .unwrap();
    assert!(
        f.is_some(),
        "the renamed hold of the closed session is gone"
    );
}

#[test]
fn a_session_end_publishes_a_release_for_each_resource() {
    let s = Server::start();
    let mut c = s.conn();
    let mut events = s.lock_events("r", Duration::from_secs(10));
    open(&mut c, "s", 60_000);
    let _: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
        .arg(&["r", "t", "0", "SESSION", "s"])
        .query(&mut c)
        .unwrap();
    assert_eq!(
        crate::common::next_lock_event(&mut events).unwrap(),
        "dlock.acquired"
    );
    let _: i64 = redis::cmd("DLOCK.SESSION")
        .arg(&["CLOSE", "s"])
        .query(&mut c)
        .unwrap();
    assert_eq!(
        crate::common::next_lock_event(&mut events).unwrap(),
        "dlock.released"
    );
}
