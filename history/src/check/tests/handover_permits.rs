//! Handovers, weighted permits and resizes: correct histories pass, and
//! each planted bug is caught (`mutex` weighing permits against the largest
//! limit in force, `fences` for a handover, the belief a refused handover
//! keeps, the FIFO rule leaving a handed-over waiter out).
use super::*;

/// `m4` is a semaphore of limit 2 (`H::new`).
fn permits(token: &str, k: u32) -> Op {
    Op {
        limit: Some(2),
        permits: (k > 1).then_some(k),
        ..acq("m4", token, 1000)
    }
}

fn resize(n: u32) -> Op {
    Op {
        limit: Some(n),
        ..op(Command::Resize, "m4", "")
    }
}

fn release_to(res: &str, token: &str, to: &str) -> Op {
    Op {
        to: Some(to.into()),
        ..op(Command::Release, res, token)
    }
}

fn fail(error: &str) -> Option<Outcome> {
    Some(Outcome::Fail {
        error: error.into(),
    })
}

#[test]
fn permits_count_as_many_against_the_limit() {
    let mut fit = H::new();
    fit.op(1, 0, ms(1), permits("c1-1", 2), ok(Value::Fence(10)));
    fit.op(2, ms(2), ms(3), permits("c2-1", 1), ok(Value::Fence(11)));
    let r = fit.check();
    assert_eq!(found(&r, "mutex").len(), 1, "2 + 1 permits on a limit of 2");
    assert!(found(&r, "mutex")[0]
        .what
        .contains("3 permits held at once, limit 2"));
    let mut one = H::new();
    one.op(1, 0, ms(1), permits("c1-1", 1), ok(Value::Fence(10)));
    one.op(2, ms(2), ms(3), permits("c2-1", 1), ok(Value::Fence(11)));
    assert!(found(&one.check(), "mutex").is_empty());
}

#[test]
fn a_resize_up_allows_more_and_a_resize_down_less() {
    // Resized to 4 while held: 2 + 2 permits fit.
    let mut up = H::new();
    up.op(1, 0, ms(1), permits("c1-1", 2), ok(Value::Fence(10)));
    up.op(3, ms(2), ms(3), resize(4), ok(Value::Int(2)));
    up.op(2, ms(4), ms(5), permits("c2-1", 2), ok(Value::Fence(11)));
    assert!(found(&up.check(), "mutex").is_empty());
    // A resize whose outcome is unknown may have taken effect: no verdict.
    let mut unknown = H::new();
    unknown.op(1, 0, ms(1), permits("c1-1", 2), ok(Value::Fence(10)));
    unknown.op(3, ms(2), ms(3), resize(4), info("closed"));
    unknown.op(2, ms(4), ms(5), permits("c2-1", 2), ok(Value::Fence(11)));
    assert!(found(&unknown.check(), "mutex").is_empty());
    // Up to 4, then surely back down to 2 long before: 2 + 2 is too many.
    let mut down = H::new();
    down.op(3, 0, ms(1), resize(4), ok(Value::Int(2)));
    down.op(3, ms(10), ms(11), resize(2), ok(Value::Int(4)));
    down.op(1, ms(20), ms(21), permits("c1-1", 2), ok(Value::Fence(10)));
    down.op(2, ms(22), ms(23), permits("c2-1", 2), ok(Value::Fence(11)));
    assert_eq!(found(&down.check(), "mutex").len(), 1);
    // The same, with a failover right after the resize down: it may have
    // been lost, so the limit of 4 may be back.
    let mut lost = H::new();
    lost.op(3, 0, ms(1), resize(4), ok(Value::Int(2)));
    lost.op(3, ms(10), ms(11), resize(2), ok(Value::Int(4)));
    lost.fault(FaultKind::Failover, ms(12), ms(15), None);
    lost.op(1, ms(20), ms(21), permits("c1-1", 2), ok(Value::Fence(10)));
    lost.op(2, ms(22), ms(23), permits("c2-1", 2), ok(Value::Fence(11)));
    assert!(found(&lost.check(), "mutex").is_empty());
    // A resize answered nil (nothing held) or an error changed nothing.
    for outcome in [
        ok(Value::Nil),
        fail("ERR n must be an integer from 2 to 1048576"),
    ] {
        let mut none = H::new();
        none.op(3, 0, ms(1), resize(4), outcome);
        none.op(1, ms(20), ms(21), permits("c1-1", 2), ok(Value::Fence(10)));
        none.op(2, ms(22), ms(23), permits("c2-1", 2), ok(Value::Fence(11)));
        assert_eq!(found(&none.check(), "mutex").len(), 1);
    }
}

/// Client 1 holds m0 (fence 10) and hands it over to client 2's waiter,
/// sent before client 1's grant was answered, and granted `fence`.
fn handover(h: &mut H, fence: u64) {
    h.op(1, 0, ms(1), acq("m0", "c1-1", 1000), ok(Value::Fence(10)));
    let waiter = Op {
        wait_ms: Some(2000),
        ..acq("m0", "c2-1", 1000)
    };
    h.op(2, 0, ms(101), waiter, ok(Value::Fence(fence)));
    h.op(
        1,
        ms(100),
        ms(101),
        release_to("m0", "c1-1", "c2-1"),
        ok(Value::Int(1)),
    );
    h.op(
        2,
        ms(200),
        ms(201),
        op(Command::Release, "m0", "c2-1"),
        ok(Value::Int(1)),
    );
}

#[test]
fn a_handover_grants_a_higher_fence() {
    let mut good = H::new();
    handover(&mut good, 11);
    let r = good.check();
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!(r.by_op["release to"]["ok"], 1);
    // The waiter asked before the holder's grant, so only the handover
    // rule knows its fence must be higher.
    let mut bad = H::new();
    handover(&mut bad, 9);
    let v = found(&bad.check(), "fences");
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(
        v[0].what.contains("handed the hold of token c1-1"),
        "{}",
        v[0].what
    );
}

#[test]
fn a_refused_handover_keeps_the_hold_believed() {
    // Refused at 100 ms: client 1 still holds until its release at 300 ms,
    // so client 2's grant at 200 ms overlaps it.
    let mut h = H::new();
    h.op(1, 0, ms(1), acq("m0", "c1-1", 1000), ok(Value::Fence(10)));
    h.op(
        1,
        ms(100),
        ms(101),
        release_to("m0", "c1-1", "nobody"),
        fail("NOTWAITING dlock: waiter_token is not queued on the resource"),
    );
    h.op(
        2,
        ms(199),
        ms(200),
        acq("m0", "c2-1", 1000),
        ok(Value::Fence(20)),
    );
    h.op(
        1,
        ms(300),
        ms(301),
        op(Command::Release, "m0", "c1-1"),
        ok(Value::Int(1)),
    );
    assert_eq!(found(&h.check(), "mutex").len(), 1);
    // Answered 1 instead, the belief ends with it.
    let mut ended = H::new();
    ended.op(1, 0, ms(1), acq("m0", "c1-1", 1000), ok(Value::Fence(10)));
    ended.op(
        1,
        ms(100),
        ms(101),
        release_to("m0", "c1-1", "c2-1"),
        ok(Value::Int(1)),
    );
    ended.op(
        2,
        ms(99),
        ms(200),
        Op {
            wait_ms: Some(500),
            ..acq("m0", "c2-1", 1000)
        },
        ok(Value::Fence(20)),
    );
    assert!(found(&ended.check(), "mutex").is_empty());
}

#[test]
fn a_waiter_handed_the_lock_is_not_judged_by_fifo() {
    // A queued at 0, B at 1000 ms; the holder hands over to B at 1200 ms.
    let mut h = H::new();
    let waits = |token: &str| Op {
        wait_ms: Some(5000),
        ..acq("m0", token, 1000)
    };
    h.op(9, 0, ms(1), acq("m0", "c9-1", 3000), ok(Value::Fence(5)));
    h.op(1, ms(1), ms(1400), waits("c1-1"), ok(Value::Fence(30)));
    h.op(2, ms(1000), ms(1201), waits("c2-1"), ok(Value::Fence(20)));
    h.op(
        9,
        ms(1200),
        ms(1201),
        release_to("m0", "c9-1", "c2-1"),
        ok(Value::Int(1)),
    );
    h.op(
        2,
        ms(1300),
        ms(1301),
        op(Command::Release, "m0", "c2-1"),
        ok(Value::Int(1)),
    );
    let r = h.check();
    assert!(found(&r, "liveness").is_empty(), "{:?}", r.violations);
    // Without the handover the same order is a FIFO violation.
    let mut plain = H::new();
    plain.op(9, 0, ms(1), acq("m0", "c9-1", 3000), ok(Value::Fence(5)));
    plain.op(1, ms(1), ms(1400), waits("c1-1"), ok(Value::Fence(30)));
    plain.op(2, ms(1000), ms(1201), waits("c2-1"), ok(Value::Fence(20)));
    plain.op(
        9,
        ms(1200),
        ms(1201),
        op(Command::Release, "m0", "c9-1"),
        ok(Value::Int(1)),
    );
    plain.op(
        2,
        ms(1300),
        ms(1301),
        op(Command::Release, "m0", "c2-1"),
        ok(Value::Int(1)),
    );
    let v = found(&plain.check(), "liveness");
    assert_eq!(v.len(), 1, "{v:?}");
}

/// A history with `w0`, a semaphore whose requests name `LIMIT 4`.
fn with_w0() -> H {
    let mut h = H::new();
    if let Event::Meta(m) = &mut h.events[0] {
        m.resources.push(Resource {
            name: "w0".into(),
            group: "main".into(),
            kind: Kind::Semaphore { limit: 4 },
            election: false,
        });
    }
    h
}

fn w0(token: &str, k: u32, ttl_ms: u64) -> Op {
    Op {
        limit: Some(4),
        permits: (k > 1).then_some(k),
        ..acq("w0", token, ttl_ms)
    }
}

#[test]
fn the_named_limit_comes_back_only_after_a_break() {
    // An anchor holds one permit from 1 ms to 5 s; resized down to 2 at
    // 10 ms; 1 + 2 permits at 100 ms pass the limit in force.
    let history = |anchor_until: u64| {
        let mut h = with_w0();
        h.op(9, 0, ms(1), w0("c9-1", 1, 5000), ok(Value::Fence(5)));
        h.op(
            9,
            ms(anchor_until),
            ms(anchor_until + 1),
            op(Command::Release, "w0", "c9-1"),
            ok(Value::Int(1)),
        );
        let down = Op {
            limit: Some(2),
            ..op(Command::Resize, "w0", "")
        };
        h.op(8, ms(10), ms(11), down, ok(Value::Int(4)));
        h.op(
            1,
            ms(100),
            ms(101),
            w0("c1-1", 2, 1000),
            ok(Value::Fence(10)),
        );
        h
    };
    let held = history(4000);
    assert_eq!(
        found(&held.check(), "mutex").len(),
        1,
        "held throughout: the limit is 2"
    );
    // The anchor let go at 50 ms: w0 may have been free and re-created
    // with LIMIT 4 (c1's 2 permits then fit beside nobody).
    let mut gap = history(50);
    gap.op(2, ms(60), ms(61), w0("c2-1", 1, 1000), ok(Value::Fence(11)));
    assert!(found(&gap.check(), "mutex").is_empty());
}

#[test]
fn a_handover_answered_1_grants_the_target() {
    let history = |fault: bool| {
        let mut h = H::new();
        h.op(1, 0, ms(1), acq("m0", "c1-1", 1000), ok(Value::Fence(10)));
        let waiter = Op {
            wait_ms: Some(300),
            ..acq("m0", "c2-1", 1000)
        };
        h.op(2, ms(5), ms(305), waiter, ok(Value::Nil));
        h.op(
            1,
            ms(100),
            ms(101),
            release_to("m0", "c1-1", "c2-1"),
            ok(Value::Int(1)),
        );
        if fault {
            h.fault(FaultKind::ClientUnblock, ms(100), ms(101), Some(2));
        }
        h
    };
    let v = found(&history(false).check(), "fences");
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].what.contains("was told nil"), "{}", v[0].what);
    assert!(
        found(&history(true).check(), "fences").is_empty(),
        "unblocked: revoked"
    );
}
