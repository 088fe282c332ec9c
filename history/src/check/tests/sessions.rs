//! The sessions' rules: a correct history passes; a grant inside a killed
//! session's lock-delay, a hold found after its session's end, a DEADLOCK
//! refusal of a session that held nothing and a cycle left standing are
//! caught.
use super::*;

fn session(command: Command, id: &str) -> Op {
    Op {
        session: Some(id.into()),
        ..Op::new(command, Vec::new(), String::new())
    }
}

fn open(id: &str, ttl_ms: u64, lock_delay_ms: u64) -> Op {
    Op {
        ttl_ms: Some(ttl_ms),
        lock_delay_ms: (lock_delay_ms > 0).then_some(lock_delay_ms),
        ..session(Command::SessionOpen, id)
    }
}

fn bound(res: &str, token: &str, id: &str, wait_ms: Option<u64>) -> Op {
    Op {
        session: Some(id.into()),
        wait_ms,
        ..acq(res, token, 0)
    }
}

/// Session A (lock-delay 500 ms) holds m0 and is killed at 100 ms by
/// client 2, which is granted m0 at `granted_ms`.
fn killed_with_delay(granted_ms: u64) -> H {
    let mut h = H::new();
    h.op(1, 0, ms(1), open("A", 1000, 500), ok(Value::Int(1)));
    h.op(
        1,
        ms(2),
        ms(3),
        bound("m0", "c1-1", "A", None),
        ok(Value::Fence(10)),
    );
    h.op(
        2,
        ms(100),
        ms(101),
        session(Command::SessionKill, "A"),
        ok(Value::Int(1)),
    );
    let wait = Op {
        wait_ms: Some(2000),
        ..acq("m0", "c2-1", 300)
    };
    h.op(2, ms(102), ms(granted_ms), wait, ok(Value::Fence(20)));
    h
}

#[test]
fn a_grant_after_the_lock_delay_passes() {
    let r = killed_with_delay(601).check();
    assert!(r.violations.is_empty(), "{:?}", r.violations);
}

#[test]
fn a_grant_inside_the_lock_delay_is_caught() {
    let r = killed_with_delay(300).check();
    assert_eq!(found(&r, "mutex").len(), 1, "{:?}", r.violations);
}

/// Session A holds m0, is closed (answered 1) at 100 ms; a probe of its
/// hold at 200 ms answers `probe`.
fn probed(probe: i64) -> H {
    let mut h = H::new();
    h.op(1, 0, ms(1), open("A", 1000, 0), ok(Value::Int(1)));
    h.op(
        1,
        ms(2),
        ms(3),
        bound("m0", "c1-1", "A", None),
        ok(Value::Fence(10)),
    );
    h.op(
        1,
        ms(100),
        ms(101),
        session(Command::SessionClose, "A"),
        ok(Value::Int(1)),
    );
    let p = Op {
        probe: true,
        session: Some("A".into()),
        ..op(Command::Release, "m0", "c1-1")
    };
    h.op(1, ms(200), ms(201), p, ok(Value::Int(probe)));
    h
}

#[test]
fn a_hold_that_outlives_its_session_is_caught() {
    let r = probed(0).check();
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    let r = probed(1).check();
    assert_eq!(found(&r, "sessions").len(), 1, "{:?}", r.violations);
}

/// Sessions A and B hold m0 and m2 (exclusive); A waits for m2 from 10 ms;
/// B asks to wait for m0 at 20 ms and is answered `b_outcome`.
fn crossed(b_outcome: Option<Outcome>, a_holds: bool) -> H {
    let mut h = H::new();
    h.op(1, 0, ms(1), open("A", 5000, 0), ok(Value::Int(1)));
    h.op(2, 0, ms(1), open("B", 5000, 0), ok(Value::Int(1)));
    if a_holds {
        h.op(
            1,
            ms(2),
            ms(3),
            bound("m0", "c1-1", "A", None),
            ok(Value::Fence(10)),
        );
    }
    h.op(
        2,
        ms(2),
        ms(3),
        bound("m2", "c2-1", "B", None),
        ok(Value::Fence(11)),
    );
    h.op(
        1,
        ms(10),
        ms(1011),
        bound("m2", "c1-2", "A", Some(1000)),
        ok(Value::Nil),
    );
    h.op(
        2,
        ms(20),
        ms(521),
        bound("m0", "c2-2", "B", Some(500)),
        b_outcome,
    );
    h.op(
        1,
        ms(2000),
        ms(2001),
        session(Command::SessionClose, "A"),
        ok(Value::Int(1)),
    );
    h.op(
        2,
        ms(2000),
        ms(2001),
        session(Command::SessionClose, "B"),
        ok(Value::Int(1)),
    );
    h
}

fn deadlock(through: &str) -> Option<Outcome> {
    Some(Outcome::Fail {
        error: format!(
            "DEADLOCK waiting would close a cycle of sessions waiting for each other, through {through}"
        ),
    })
}

#[test]
fn a_deadlock_refusal_needs_a_hold_in_the_cycle() {
    let r = crossed(deadlock("'m0' 'm2'"), true).check();
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    // A refusal through a resource B never held.
    let r = crossed(deadlock("'m0' 'm4'"), true).check();
    let v = found(&r, "sessions");
    assert_eq!(v.len(), 1, "{:?}", r.violations);
    assert!(v[0].what.contains("which it did not hold"), "{:?}", v);
}

#[test]
fn a_cycle_left_standing_is_caught() {
    // Without A's hold on m0 there is no cycle: both waits may run out.
    let r = crossed(ok(Value::Nil), false).check();
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    let r = crossed(ok(Value::Nil), true).check();
    let v = found(&r, "sessions");
    assert_eq!(v.len(), 1, "{:?}", r.violations);
    assert!(v[0].what.starts_with("a cycle left standing"), "{:?}", v);
}
