//! `mutex`, `fences`, `sink`, `lost`.
use super::*;

#[test]
fn mutex_catches_two_exclusive_holds_at_once() {
    let mut h = H::new();
    h.op(1, 0, ms(1), acq("m0", "c1-1", 1000), ok(Value::Fence(10)));
    h.op(
        2,
        ms(100),
        ms(101),
        acq("m0", "c2-1", 1000),
        ok(Value::Fence(20)),
    );
    let v = found(&h.check(), "mutex");
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].ops, vec![1, 2]);
}

#[test]
fn mutex_reader_beside_a_writer_and_a_permit_too_many() {
    let mut h = H::new();
    let shared = |token: &str| Op {
        mode: Mode::Shared,
        ..acq("m2", token, 1000)
    };
    h.op(1, 0, ms(1), shared("c1-1"), ok(Value::Fence(10)));
    h.op(2, 0, ms(1), shared("c2-1"), ok(Value::Fence(11)));
    assert!(found(&h.check(), "mutex").is_empty());
    h.op(
        3,
        ms(10),
        ms(11),
        acq("m2", "c3-1", 1000),
        ok(Value::Fence(12)),
    );
    assert_eq!(found(&h.check(), "mutex").len(), 1);
    // A semaphore of 2: the third permit is one too many.
    let permit = |token: &str| Op {
        limit: Some(2),
        ..acq("m4", token, 1000)
    };
    h.op(4, 0, ms(1), permit("c4-1"), ok(Value::Fence(20)));
    h.op(5, 0, ms(1), permit("c5-1"), ok(Value::Fence(21)));
    assert_eq!(found(&h.check(), "mutex").len(), 1);
    h.op(6, ms(2), ms(3), permit("c6-1"), ok(Value::Fence(22)));
    assert_eq!(found(&h.check(), "mutex").len(), 2);
}

#[test]
fn fences_catches_a_fence_given_to_two_owners() {
    let mut h = H::new();
    h.op(1, 0, ms(1), acq("m0", "c1-1", 100), ok(Value::Fence(10)));
    h.op(
        2,
        ms(500),
        ms(501),
        acq("m0", "c2-1", 100),
        ok(Value::Fence(10)),
    );
    let v = found(&h.check(), "fences");
    assert_eq!(v.len(), 2, "reused and not above: {v:?}");
    assert!(v[0].what.contains("and to owner c2-1"), "{}", v[0].what);
}

#[test]
fn fences_catches_a_fence_going_down_after_a_failover() {
    let mut h = H::new();
    h.op(1, 0, ms(1), acq("m0", "c1-1", 100), ok(Value::Fence(100)));
    h.fault(FaultKind::Failover, ms(200), ms(300), None);
    h.op(
        2,
        ms(500),
        ms(501),
        acq("m0", "c2-1", 100),
        ok(Value::Fence(50)),
    );
    // A retry whose first try was sent before the other grant completed
    // may get a lower fence: the first try may have taken effect then.
    let first = h.op(3, 0, ms(2), acq("m2", "c3-1", 100), info("closed"));
    h.op(4, 0, ms(1), acq("m2", "c4-1", 100), ok(Value::Fence(200)));
    let retry = Op {
        retry_of: Some(first),
        ..acq("m2", "c3-1", 100)
    };
    h.op(3, ms(3), ms(4), retry, ok(Value::Fence(150)));
    let v = found(&h.check(), "fences");
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].what.contains("after a failover"), "{}", v[0].what);
}

#[test]
fn sink_catches_a_refused_write_of_a_believed_holder() {
    let mut h = H::new();
    two_holders(&mut h);
    // After its bound (1000 ms - 5 ms) the write is no longer believed.
    h.op(
        3,
        ms(800),
        ms(801),
        acq("l0", "c3-1", 1000),
        ok(Value::Fence(30)),
    );
    h.write(ms(1796), 3, "l0", "c3-1", 30, false, 31);
    assert!(found(&h.check(), "sink").is_empty());
    h.write(ms(900), 3, "l0", "c3-1", 30, false, 31);
    let v = found(&h.check(), "sink");
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0]
        .what
        .contains("acknowledged write refused: sink had 31"));
    // The sink itself accepting a lower fence after a higher one.
    h.write(ms(950), 2, "m0", "c2-1", 15, true, 20);
    assert_eq!(found(&h.check(), "sink").len(), 2);
}

#[test]
fn lost_counts_a_failover_loss_and_catches_a_durable_one() {
    let mut h = H::new();
    let extend = |res: &str, token: &str| Op {
        ttl_ms: Some(1000),
        ..op(Command::Extend, res, token)
    };
    // Not durable, lost in a failover: the documented limit.
    h.op(1, 0, ms(1), acq("m0", "c1-1", 1000), ok(Value::Fence(10)));
    h.fault(FaultKind::Failover, ms(100), ms(200), None);
    h.op(1, ms(300), ms(301), extend("m0", "c1-1"), ok(Value::Int(0)));
    let r = h.check();
    assert!(found(&r, "lost").is_empty());
    assert_eq!(r.known_limits[ASYNC_REPLICATION], 1);
    // Durable: no failover excuses it.
    let durable = Op {
        durable: true,
        ..acq("m2", "c2-1", 1000)
    };
    h.op(2, 0, ms(1), durable, ok(Value::Fence(20)));
    h.op(
        2,
        ms(300),
        ms(301),
        op(Command::Release, "m2", "c2-1"),
        ok(Value::Int(0)),
    );
    // kill9_always never explains a loss; after the bound a 0 is fine.
    h.op(
        3,
        ms(2000),
        ms(2001),
        acq("m4", "c3-1", 500),
        ok(Value::Fence(30)),
    );
    h.fault(FaultKind::Kill9Always, ms(2100), ms(2200), None);
    h.op(
        3,
        ms(2300),
        ms(2301),
        extend("m4", "c3-1"),
        ok(Value::Int(0)),
    );
    h.op(
        3,
        ms(2600),
        ms(2601),
        extend("m4", "c3-1"),
        ok(Value::Int(0)),
    );
    let r = h.check();
    let v = found(&r, "lost");
    assert_eq!(v.len(), 2, "{v:?}");
    assert!(v[0].what.contains("durable"), "{}", v[0].what);
    assert_eq!(r.known_limits[ASYNC_REPLICATION], 1);
}

#[test]
fn a_durable_grant_shortened_by_its_holder_guarantees_only_the_shorter_lease() {
    // Durable for 2 s, shortened to 1 s by an EXTEND, then lengthened by
    // extends that only the old master acknowledged: a failover keeps the
    // shortened lease, so a 0 after it ended is the documented limit.
    let mut h = H::new();
    let extend = |ttl: u64| Op {
        ttl_ms: Some(ttl),
        ..op(Command::Extend, "m4", "c4-1")
    };
    let durable = Op {
        durable: true,
        ..acq("m4", "c4-1", 2000)
    };
    h.op(4, 0, ms(1), durable, ok(Value::Fence(40)));
    h.op(4, ms(2), ms(3), extend(1000), ok(Value::Int(1)));
    h.fault(FaultKind::FailoverStale, ms(900), ms(1400), None);
    h.op(4, ms(950), ms(951), extend(1000), ok(Value::Int(1)));
    h.op(
        4,
        ms(1500),
        ms(1501),
        op(Command::Release, "m4", "c4-1"),
        ok(Value::Int(0)),
    );
    let r = h.check();
    assert!(found(&r, "lost").is_empty(), "{:?}", found(&r, "lost"));
    assert_eq!(r.known_limits[ASYNC_REPLICATION], 1);
}

/// `failover_stale` is recorded as started when the replica is stopped,
/// 200 to 600 ms before the master dies: a grant made in between never
/// reached the replica, and its loss is the documented limit.
#[test]
fn lost_counts_a_grant_made_after_a_failover_began() {
    let mut h = H::new();
    let extend = Op {
        ttl_ms: Some(1000),
        ..op(Command::Extend, "m0", "c1-1")
    };
    h.fault(FaultKind::FailoverStale, ms(100), ms(900), None);
    h.op(
        1,
        ms(200),
        ms(201),
        acq("m0", "c1-1", 2000),
        ok(Value::Fence(10)),
    );
    h.op(1, ms(1000), ms(1001), extend.clone(), ok(Value::Int(0)));
    let r = h.check();
    assert!(found(&r, "lost").is_empty(), "{:?}", r.violations);
    assert_eq!(r.known_limits[ASYNC_REPLICATION], 1);
    // A failover over before the grant was asked for explains nothing.
    h.op(
        2,
        ms(1100),
        ms(1101),
        acq("m2", "c2-1", 2000),
        ok(Value::Fence(20)),
    );
    h.op(
        2,
        ms(1500),
        ms(1501),
        Op {
            resources: vec!["m2".into()],
            token: "c2-1".into(),
            ..extend
        },
        ok(Value::Int(0)),
    );
    let v = found(&h.check(), "lost");
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].what.contains("no failover"), "{}", v[0].what);
}
