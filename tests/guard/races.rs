//! A guard in the same event-loop turn as what ends or moves a hold: a
//! release, a handoff to a waiter, a session's end, an expiry inside a
//! script. The guard sees the hold as it stands at that point of the turn.
use super::*;
use std::time::Duration;

#[test]
fn a_release_earlier_in_the_transaction_ends_the_proof() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "r", "t", 60_000);
    let mut release = redis::cmd("DLOCK.RELEASE");
    release.arg(&["r", "t"]);
    let replies = transaction(
        &mut c,
        &[
            guard_cmd("r", &token("t"), &["SET", "d", "before"]),
            release,
            guard_cmd("r", &token("t"), &["SET", "d", "after"]),
        ],
    );
    assert_eq!(replies[0], Value::Okay);
    assert_eq!(replies[1], Value::Int(1));
    assert!(
        matches!(&replies[2], Value::ServerError(e) if e.code() == "NOTHELD"),
        "{:?}",
        replies[2]
    );
    assert_eq!(get(&mut c, "d").as_deref(), Some("before"));
}

#[test]
fn a_waiter_handed_the_lock_in_the_same_transaction_may_write_at_once() {
    let s = Server::start();
    let mut holder = s.conn();
    grant(&mut holder, "r", "a", 60_000);
    let mut waiter = s.conn();
    let port = s.port();
    let t = std::thread::spawn(move || {
        let _ = port;
        let f: Option<u64> = redis::cmd("DLOCK.ACQUIRE")
            .arg(&["r", "b", "60000", "WAIT", "20000"])
            .query(&mut waiter)
            .unwrap();
        f
    });
    wait_waiters(&mut holder, "r", 1);
    let mut release = redis::cmd("DLOCK.RELEASE");
    release.arg(&["r", "a"]);
    let replies = transaction(
        &mut holder,
        &[
            release,
            guard_cmd("r", &token("b"), &["SET", "d", "b-wrote"]),
            guard_cmd("r", &token("a"), &["SET", "d", "a-wrote"]),
        ],
    );
    assert_eq!(replies[0], Value::Int(1));
    assert_eq!(replies[1], Value::Okay, "b holds from the release on");
    assert!(
        matches!(&replies[2], Value::ServerError(e) if e.code() == "NOTHELD"),
        "{:?}",
        replies[2]
    );
    let granted = t.join().unwrap();
    assert!(granted.is_some());
    assert_eq!(get(&mut holder, "d").as_deref(), Some("b-wrote"));
}

#[test]
fn a_session_killed_earlier_in_the_transaction_ends_its_holds_proof() {
    let s = Server::start();
    let mut c = s.conn();
    let _: i64 = redis::cmd("DLOCK.SESSION")
        .arg(&["OPEN", "s", "60000"])
        .query(&mut c)
        .unwrap();
    let f: u64 = redis::cmd("DLOCK.ACQUIRE")
        .arg(&["r", "t", "60000", "SESSION", "s"])
        .query(&mut c)
        .unwrap();
    let mut kill = redis::cmd("DLOCK.SESSION");
    kill.arg(&["KILL", "s"]);
    let replies = transaction(
        &mut c,
        &[
            guard_cmd("r", &["FENCE", &f.to_string()], &["SET", "d", "before"]),
            kill,
            guard_cmd("r", &["FENCE", &f.to_string()], &["SET", "d", "after"]),
            guard_cmd("r", &token("t"), &["SET", "d", "after"]),
        ],
    );
    assert_eq!(replies[0], Value::Okay);
    for r in &replies[2..] {
        assert!(
            matches!(r, Value::ServerError(e) if e.code() == "NOTHELD"),
            "{r:?}"
        );
    }
    assert_eq!(get(&mut c, "d").as_deref(), Some("before"));
}

#[test]
fn a_guard_in_a_script_sees_the_hold_as_dlock_info_does_there() {
    // A script that outlives the lease: the guard inside it answers as
    // DLOCK.INFO and key expiry answer at that point of the script, and a
    // guard after the script is refused.
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "r", "t", 200);
    let script = r#"
        local start = redis.call('TIME')
        local spins = 0
        while spins < 2000000 do
            local now = redis.call('TIME')
            if (now[1] - start[1]) * 1000000 + (now[2] - start[2]) > 400000 then break end
            spins = spins + 1
        end
        local info = redis.call('DLOCK.INFO', KEYS[1])
        local ok = redis.pcall('DLOCK.GUARD', KEYS[1], 'TOKEN', 't', 'SET', KEYS[2], 'in-script')
        return {info and 1 or 0, type(ok) == 'table' and ok['err'] and 0 or 1}
    "#;
    let got: Vec<i64> = redis::cmd("EVAL")
        .arg(&[script, "2", "r", "d"])
        .query(&mut c)
        .unwrap();
    assert_eq!(got[0], got[1], "the guard agrees with DLOCK.INFO: {got:?}");
    assert_eq!(get(&mut c, "d").is_some(), got[1] == 1);
    std::thread::sleep(Duration::from_millis(50));
    wait_until(SOON, "the lease to end", || info(&mut c, "r").is_none());
    assert_eq!(
        err_of(guard(&mut c, "r", &token("t"), &["SET", "d", "late"])),
        NOTHELD
    );
}
