//! Adversarial histories for three rules: `shown` (what `INFO` showed), the
//! owner's fence on a reentrant grant (`fences`), and a loss after a renewal
//! that followed the failover (`lost`).
use super::*;
use crate::history::{HoldView, InfoView};

fn shown(holds: &[(&str, &str, u64, Mode)]) -> Option<Outcome> {
    ok(Value::Holds(InfoView {
        holds: holds
            .iter()
            .map(|&(token, owner, fence, mode)| HoldView {
                token: token.into(),
                owner: owner.into(),
                fence,
                mode,
                ttl_ms: 100,
            })
            .collect(),
        waiters: 0,
    }))
}

fn info_op(res: &str) -> Op {
    op(Command::Info, res, "")
}

#[test]
fn shown_passes_what_the_server_may_hold() {
    let mut h = H::new();
    h.op(1, 0, ms(1), acq("m0", "c1-1", 1000), ok(Value::Fence(10)));
    h.op(
        9,
        ms(10),
        ms(11),
        info_op("m0"),
        shown(&[("c1-1", "c1-1", 10, Mode::Exclusive)]),
    );
    // A lost reply: shown with whatever fence it got.
    h.op(2, ms(20), ms(25), acq("m2", "c2-1", 1000), info("closed"));
    h.op(
        9,
        ms(30),
        ms(31),
        info_op("m2"),
        shown(&[("c2-1", "c2-1", 20, Mode::Exclusive)]),
    );
    // A waiter that left may be granted after its close, even after a probe.
    let waiter = Op {
        wait_ms: Some(100),
        leave_after_ms: Some(50),
        ..acq("m4", "c3-1", 1000)
    };
    h.op(3, ms(40), ms(90), waiter, info("left"));
    h.op(
        3,
        ms(91),
        ms(92),
        op(Command::Release, "m4", "c3-1"),
        ok(Value::Int(0)),
    );
    h.op(
        9,
        ms(93),
        ms(94),
        info_op("m4"),
        shown(&[("c3-1", "c3-1", 30, Mode::Exclusive)]),
    );
    let r = h.check();
    assert!(found(&r, "shown").is_empty(), "{:?}", found(&r, "shown"));
}

#[test]
fn shown_catches_a_waiter_granted_after_its_nil_a_release_that_kept_the_hold_and_a_moved_fence() {
    let mut h = H::new();
    // Told nil after its WAIT, then shown holding: a ghost grant.
    let waiter = Op {
        wait_ms: Some(100),
        ..acq("m0", "c1-1", 1000)
    };
    h.op(1, 0, ms(100), waiter, ok(Value::Nil));
    h.op(
        9,
        ms(300),
        ms(301),
        info_op("m0"),
        shown(&[("c1-1", "c1-1", 10, Mode::Exclusive)]),
    );
    assert_eq!(found(&h.check(), "shown").len(), 1);
    // Released (1) and shown later.
    let reader = |t: &str| Op {
        mode: Mode::Shared,
        ..acq("m2", t, 1000)
    };
    h.op(2, 0, ms(1), reader("c2-1"), ok(Value::Fence(20)));
    h.op(3, 0, ms(1), reader("c3-1"), ok(Value::Fence(21)));
    h.op(
        2,
        ms(10),
        ms(11),
        op(Command::Release, "m2", "c2-1"),
        ok(Value::Int(1)),
    );
    h.op(
        9,
        ms(20),
        ms(21),
        info_op("m2"),
        shown(&[
            ("c2-1", "c2-1", 20, Mode::Shared),
            ("c3-1", "c3-1", 21, Mode::Shared),
        ]),
    );
    assert_eq!(found(&h.check(), "shown").len(), 2);
    // A retry answered fence 31 while the server kept fence 30.
    h.op(4, ms(40), ms(45), acq("m4", "c4-1", 1000), info("closed"));
    let retry = Op {
        retry_of: Some(h.next - 1),
        ..acq("m4", "c4-1", 1000)
    };
    h.op(4, ms(46), ms(47), retry, ok(Value::Fence(31)));
    h.op(
        9,
        ms(50),
        ms(51),
        info_op("m4"),
        shown(&[("c4-1", "c4-1", 30, Mode::Exclusive)]),
    );
    // Two exclusive owners shown at once.
    h.op(5, 0, ms(1), acq("l0", "c5-1", 10_000), ok(Value::Fence(40)));
    h.op(
        9,
        ms(60),
        ms(61),
        info_op("l0"),
        shown(&[
            ("c5-1", "c5-1", 40, Mode::Exclusive),
            ("c6-1", "c6-1", 41, Mode::Exclusive),
        ]),
    );
    let v = found(&h.check(), "shown");
    assert_eq!(v.len(), 5, "{v:?}");
    for what in [
        "answered fence 31",
        "beside",
        "no request",
        "refused",
        "after its release",
    ] {
        assert!(v.iter().any(|x| x.what.contains(what)), "{what}: {v:?}");
    }
}

#[test]
fn fences_catches_a_reentrant_hold_with_a_fresh_fence() {
    let mut h = H::new();
    let owned = |token: &str| Op {
        owner: Some("o1".into()),
        ..acq("m2", token, 1000)
    };
    h.op(1, 0, ms(1), owned("c1-1"), ok(Value::Fence(10)));
    h.op(1, ms(10), ms(11), owned("c1-2"), ok(Value::Fence(10)));
    assert!(found(&h.check(), "fences").is_empty());
    h.op(1, ms(20), ms(21), owned("c1-3"), ok(Value::Fence(12)));
    let v = found(&h.check(), "fences");
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(
        v[0].what.contains("while it held fence 10"),
        "{}",
        v[0].what
    );
    // After a failover the held fence may be gone: not judged.
    let mut h = H::new();
    h.op(1, 0, ms(1), owned("c1-1"), ok(Value::Fence(10)));
    h.fault(FaultKind::Failover, ms(5), ms(8), None);
    h.op(1, ms(20), ms(21), owned("c1-3"), ok(Value::Fence(12)));
    assert!(found(&h.check(), "fences").is_empty());
}

#[test]
fn lost_is_not_excused_by_a_failover_before_a_renewal() {
    let mut h = H::new();
    let ext = || Op {
        ttl_ms: Some(1000),
        ..op(Command::Extend, "m0", "c1-1")
    };
    h.op(1, 0, ms(1), acq("m0", "c1-1", 1000), ok(Value::Fence(10)));
    h.fault(FaultKind::Failover, ms(100), ms(200), None);
    // The new master had it after the failover...
    h.op(1, ms(300), ms(301), ext(), ok(Value::Int(1)));
    // ...so losing it later is no failover's doing.
    h.op(1, ms(600), ms(601), ext(), ok(Value::Int(0)));
    let r = h.check();
    assert_eq!(found(&r, "lost").len(), 1, "{:?}", r.violations);
}
