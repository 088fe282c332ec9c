//! Priorities: "FIFO within a priority, bounded passing across", the
//! passes the bound allows counted as coverage, and the wait of priority
//! 0 against its bound.
use super::*;

/// A history whose servers age one level per 200 ms.
fn aged() -> H {
    let mut h = H::new();
    if let Event::Meta(m) = &mut h.events[0] {
        m.priority_aging_ms = Some(200);
    }
    h
}

fn wait(token: &str, priority: Option<u16>) -> Op {
    Op {
        wait_ms: Some(5000),
        priority,
        ..acq("m0", token, 1000)
    }
}

/// A (priority 0) is sent at 100 ms; B (3) 600 ms later, inside its
/// window (500 ms for arrival + 3 x 200 ms), passes it: allowed. C (3),
/// 1200 ms after A, surely ranks behind A and is granted first: caught.
#[test]
fn a_higher_priority_passes_only_inside_its_window() {
    let mut h = aged();
    h.op(1, 0, ms(1), acq("m0", "c1-1", 3000), ok(Value::Fence(5)));
    h.op(
        2,
        ms(100),
        ms(2050),
        wait("c2-1", None),
        ok(Value::Fence(40)),
    );
    h.op(
        5,
        ms(700),
        ms(1500),
        wait("c5-1", Some(3)),
        ok(Value::Fence(30)),
    );
    let r = h.check();
    assert!(found(&r, "liveness").is_empty(), "{:?}", r.violations);
    assert!(found(&r, "priority").is_empty(), "{:?}", r.violations);
    assert_eq!(r.fifo_passes["m0"], 1);
    assert_eq!(r.fifo_judged["m0"], 0);
    assert!(
        !r.gaps.iter().any(|g| g.contains("priorit")),
        "{:?}",
        r.gaps
    );
    h.op(
        6,
        ms(1300),
        ms(1800),
        wait("c6-1", Some(3)),
        ok(Value::Fence(35)),
    );
    let r = h.check();
    let v = found(&r, "liveness");
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(
        v[0].what.contains("FIFO") && v[0].what.contains("priority 0 and 3"),
        "{v:?}"
    );
    // A and C judged; B and C (one priority) too, in order.
    assert_eq!(r.fifo_judged["m0"], 2);
    let text = r.render(&h.events, std::time::Duration::from_millis(1));
    assert!(
        text.contains("priority: m0: 1 passes within the window"),
        "{text}"
    );
    // Without priorities the same sends are a plain pass-over each.
    let mut fifo = H::new();
    fifo.op(1, 0, ms(1), acq("m0", "c1-1", 3000), ok(Value::Fence(5)));
    fifo.op(
        2,
        ms(100),
        ms(3000),
        wait("c2-1", None),
        ok(Value::Fence(40)),
    );
    fifo.op(
        5,
        ms(700),
        ms(2000),
        wait("c5-1", None),
        ok(Value::Fence(30)),
    );
    assert_eq!(found(&fifo.check(), "liveness").len(), 1);
}

/// A lower priority never passes: B (0) sent 600 ms after A (3) is
/// judged at once.
#[test]
fn a_lower_or_equal_priority_is_judged_after_the_arrival_allowance_alone() {
    for (pa, pb) in [(3, 0), (3, 3)] {
        let mut h = aged();
        h.op(1, 0, ms(1), acq("m0", "c1-1", 3000), ok(Value::Fence(5)));
        h.op(
            2,
            ms(100),
            ms(3000),
            wait("c2-1", Some(pa)),
            ok(Value::Fence(40)),
        );
        h.op(
            5,
            ms(700),
            ms(2000),
            wait("c5-1", Some(pb)),
            ok(Value::Fence(30)),
        );
        assert_eq!(found(&h.check(), "liveness").len(), 1, "{pa} {pb}");
    }
}

/// Priorities used and no pass seen inside a window: a coverage gap.
#[test]
fn priorities_without_a_pass_seen_are_a_coverage_gap() {
    let mut h = aged();
    h.op(1, 0, ms(1), acq("m0", "c1-1", 3000), ok(Value::Fence(5)));
    h.op(
        2,
        ms(100),
        ms(2000),
        wait("c2-1", None),
        ok(Value::Fence(30)),
    );
    h.op(
        5,
        ms(700),
        ms(3000),
        wait("c5-1", Some(3)),
        ok(Value::Fence(40)),
    );
    let r = h.check();
    assert!(found(&r, "liveness").is_empty(), "{:?}", r.violations);
    assert!(
        r.gaps
            .iter()
            .any(|g| g.contains("no request of a higher priority")),
        "{:?}",
        r.gaps
    );
}

/// The bound on a wait of priority 0: 2 x 500 ms + 3 x 200 ms + 1 client
/// x a lease of 1000 ms = 2600 ms. A wait of 2500 ms passes, one of 2700
/// ms (granted, or told nil) is starvation, unless a fault was near.
#[test]
fn a_wait_of_priority_0_past_its_bound_is_caught() {
    for (waited, outcome, caught) in [
        (2500, ok(Value::Fence(40)), false),
        (2700, ok(Value::Fence(40)), true),
        (2700, ok(Value::Nil), true),
    ] {
        let mut h = aged();
        h.op(5, 0, ms(1), wait("c5-1", Some(3)), ok(Value::Fence(30)));
        let nil = matches!(outcome, Some(Outcome::Ok { value: Value::Nil }));
        let a = Op {
            wait_ms: Some(if nil { waited } else { 5000 }),
            ..wait("c2-1", Some(0))
        };
        h.op(2, ms(100), ms(100 + waited), a, outcome);
        let r = h.check();
        let v = found(&r, "priority");
        assert_eq!(v.len(), usize::from(caught), "{waited} {v:?}");
        assert_eq!(r.priority["m0"].bound_us, ms(2600));
        if caught {
            assert!(v[0].what.contains("past the bound of 2600 ms"), "{v:?}");
            h.fault(FaultKind::DebugSleep, ms(500), ms(600), None);
            assert!(found(&h.check(), "priority").is_empty());
        }
    }
}
