//! A resource nobody holds whose queue waits for its handoff reads as
//! reserved: a version of its own, told apart from free and from the end
//! of a wait, and its observers wake as it becomes reserved and as it
//! stops being so.
//!
//! The handoff is held back deterministically: the fence clock is pushed
//! to its ceiling (a lock restored with the largest fence), so once the
//! holder's lock is deleted no fence is left to grant the queued waiter,
//! and the resource stays reserved until that waiter leaves.
use super::*;
use common::dump::{payload_with_fence, restore};
use common::waiter::Waiter;

/// `res` held, one waiter queued on it, and no fence left for a handoff.
fn held_with_a_stuck_queue(s: &Server, c: &mut Connection, res: &str) -> Waiter {
    grant(c, res, "holder", LONG_TTL);
    let w = Waiter::send(s, {
        let mut cmd = redis::cmd("DLOCK.ACQUIRE");
        cmd.arg(res).arg("w").arg(LONG_TTL).arg("WAIT").arg(30_000);
        cmd
    });
    wait_waiters(c, res, 1);
    grant(c, "template", "t", LONG_TTL);
    let payload = payload_with_fence(c, "template", i64::MAX);
    restore(c, "maxed", 0, &payload).unwrap();
    wait_until(SOON, "the fence clock at its ceiling", || {
        info_field(c, "dlock", "dlock_last_fence").as_deref() == Some(&i64::MAX.to_string())
    });
    w
}

/// The reserved map: no token (nil), fence 0, ttl -2, and its queue.
fn assert_reserved(raw: &Value, waiters: i64) {
    let pairs: Vec<(Vec<u8>, Value)> = match raw {
        Value::Array(items) => items
            .chunks(2)
            .map(|kv| (as_bytes(&kv[0]), kv[1].clone()))
            .collect(),
        Value::Map(kv) => kv.iter().map(|(k, v)| (as_bytes(k), v.clone())).collect(),
        other => panic!("expected the reserved map, got {other:?}"),
    };
    assert_eq!(
        pairs,
        vec![
            (b"token".to_vec(), Value::Nil),
            (b"fence".to_vec(), Value::Int(0)),
            (b"ttl".to_vec(), Value::Int(-2)),
            (b"waiters".to_vec(), Value::Int(waiters)),
        ]
    );
}

#[test]
fn reserved_free_and_the_end_of_a_wait_are_three_replies() {
    let s = Server::start();
    let mut c = s.conn();
    let w = held_with_a_stuck_queue(&s, &mut c, "r");
    let (held, mut o) = watch(&s, &mut c, "r");
    assert_ne!(held, FREE);

    // The holder's lock is deleted: nobody holds it, the handoff waits.
    let _: i64 = redis::cmd("DEL").arg("r").query(&mut c).unwrap();
    let got = changed(&mut c, &mut o, "r", &held);
    let reserved = got.version.clone();
    assert_ne!(reserved, FREE, "reserved is not free");
    assert!(got.info.is_none(), "no holder: {:?}", got.raw);
    assert_reserved(&got.raw, 1);
    assert_eq!(
        observe(&mut c, "r").version,
        reserved,
        "a state, not a moment"
    );

    // An observer that last saw the resource free is answered at once.
    let v: Value = observe_cmd("r", Some(FREE), Some(0)).query(&mut c).unwrap();
    let got = parse(v).expect("an answer, not the end of a wait");
    assert_eq!(got.version, reserved);
    assert_reserved(&got.raw, 1);

    // One that saw it reserved waits, and its wait ends with nil.
    let t = Instant::now();
    let v: Value = observe_cmd("r", Some(&reserved), Some(200))
        .query(&mut c)
        .unwrap();
    assert_eq!(v, Value::Nil, "the end of the wait: nil");
    assert!(
        t.elapsed() >= Duration::from_millis(200),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(observers(&mut c), 0);

    // The waiter leaves: free, and the observer of the reserved state wakes.
    let mut o = Observer::start(&s, "r", &reserved, 30_000);
    wait_observers(&mut c, 1);
    let n: i64 = redis::cmd("CLIENT")
        .arg("UNBLOCK")
        .arg(w.id)
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 1);
    assert_eq!(w.reply().0.unwrap(), None, "the waiter timed out");
    let got = changed(&mut c, &mut o, "r", &reserved);
    assert_eq!((got.version.as_str(), got.raw), (FREE, Value::Nil));
    assert_eq!(observers(&mut c), 0);
}

#[test]
fn an_observer_of_the_free_resource_wakes_when_its_queue_is_reserved_and_freed() {
    // Free -> held -> reserved -> free, followed by one observer that
    // re-observes with each version it is given.
    let s = Server::start();
    let mut c = s.conn();
    let (v, mut o) = watch(&s, &mut c, "r");
    assert_eq!(v, FREE);
    let w = held_with_a_stuck_queue(&s, &mut c, "r");
    let held = changed(&mut c, &mut o, "r", FREE);
    assert_eq!(held.info.unwrap().token, b"holder");

    let mut o = Observer::start(&s, "r", &held.version, 30_000);
    wait_observers(&mut c, 1);
    let _: i64 = redis::cmd("DEL").arg("r").query(&mut c).unwrap();
    let reserved = changed(&mut c, &mut o, "r", &held.version);
    assert_ne!(reserved.version, FREE);
    assert_reserved(&reserved.raw, 1);

    let mut o = Observer::start(&s, "r", &reserved.version, 30_000);
    wait_observers(&mut c, 1);
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(w.id)
        .query(&mut c)
        .unwrap();
    assert!(w.reply().0.is_err(), "the waiter's connection is gone");
    let free = changed(&mut c, &mut o, "r", &reserved.version);
    assert_eq!(free.version, FREE);
}

#[test]
fn an_observer_of_a_free_resource_wakes_when_a_queued_set_reserves_it() {
    // `b` is free; a set of `a` (held) and `b` queues on both, and keeps
    // `b` free for itself: reserved, a new version.
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "{s}a", "holder", LONG_TTL);
    let (v, mut o) = watch(&s, &mut c, "{s}b");
    assert_eq!(v, FREE);
    let w = Waiter::send(&s, {
        let mut cmd = redis::cmd("DLOCK.MACQUIRE");
        cmd.arg(2)
            .arg("{s}a")
            .arg("{s}b")
            .arg("set")
            .arg(LONG_TTL)
            .arg("WAIT")
            .arg(30_000);
        cmd
    });
    let got = changed(&mut c, &mut o, "{s}b", FREE);
    assert_reserved(&got.raw, 1);
    // The holder releases: the set takes both, and the observer of the
    // reserved state hears of it.
    let mut o = Observer::start(&s, "{s}b", &got.version, 30_000);
    wait_observers(&mut c, 1);
    release(&mut c, "{s}a", "holder");
    let held = changed(&mut c, &mut o, "{s}b", &got.version);
    assert_eq!(held.info.expect("held by the set").token, b"set");
    assert!(w.reply().0.unwrap().is_some(), "the set was granted");
}
