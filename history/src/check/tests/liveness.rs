//! `liveness` (FIFO included), coverage, the report, and the timing.
use super::*;

#[test]
fn liveness_catches_a_probe_answering_1_and_counts_a_left_waiter() {
    let mut h = H::new();
    let wait = |token: &str, leave| Op {
        wait_ms: Some(100),
        leave_after_ms: leave,
        ..acq("m0", token, 1000)
    };
    let probe = |token: &str| Op {
        probe: true,
        ..op(Command::Release, "m0", token)
    };
    h.op(1, 0, ms(100), wait("c1-1", None), ok(Value::Nil));
    h.op(1, ms(101), ms(102), probe("c1-1"), ok(Value::Int(0)));
    h.op(2, 0, ms(50), wait("c2-1", Some(50)), info("left"));
    h.op(2, ms(51), ms(52), probe("c2-1"), ok(Value::Int(1)));
    let r = h.check();
    assert!(found(&r, "liveness").is_empty(), "{:?}", r.violations);
    assert_eq!(r.known_limits[CLOSING_CONNECTION], 1);
    assert_eq!(r.by_op["acquire left"]["info"], 1);
    h.op(3, ms(200), ms(300), wait("c3-1", None), ok(Value::Nil));
    h.op(3, ms(301), ms(302), probe("c3-1"), ok(Value::Int(1)));
    let v = found(&h.check(), "liveness");
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].what.contains("granted after its waiter was told nil"));
}

#[test]
fn liveness_catches_pending_ops_timeouts_and_early_nils() {
    let mut h = H::new();
    let wait = |token: &str| Op {
        wait_ms: Some(1000),
        ..acq("m0", token, 1000)
    };
    // Unblocked: an early nil is fine.
    h.op(1, 0, ms(10), wait("c1-1"), ok(Value::Nil));
    h.fault(FaultKind::ClientUnblock, ms(5), ms(6), Some(1));
    assert!(found(&h.check(), "liveness").is_empty());
    h.op(2, 0, 0, wait("c2-1"), None);
    h.op(3, 0, ms(31000), wait("c3-1"), info("timeout"));
    h.op(4, 0, ms(10), wait("c4-1"), ok(Value::Nil));
    let v = found(&h.check(), "liveness");
    assert_eq!(v.len(), 3, "{v:?}");
    assert!(v.iter().any(|v| v.what.contains("never completed")));
    assert!(v
        .iter()
        .any(|v| v.what.contains("no reply within wait + 30 s")));
    assert!(v.iter().any(|v| v.what.contains("before its timeout")));
}

#[test]
fn liveness_catches_a_fifo_pass_over() {
    let mut h = H::new();
    let wait = |token: &str| Op {
        wait_ms: Some(5000),
        ..acq("m0", token, 1000)
    };
    h.op(1, 0, ms(1), acq("m0", "c1-1", 3000), ok(Value::Fence(5)));
    h.op(2, ms(10), ms(2000), wait("c2-1"), ok(Value::Fence(10)));
    h.op(3, ms(600), ms(2600), wait("c3-1"), ok(Value::Fence(20)));
    assert!(found(&h.check(), "liveness").is_empty());
    // Client 4 queued first but its fence is above client 5's.
    h.op(
        4,
        ms(10_000),
        ms(12_000),
        wait("c4-1"),
        ok(Value::Fence(40)),
    );
    h.op(
        5,
        ms(10_600),
        ms(11_000),
        wait("c5-1"),
        ok(Value::Fence(30)),
    );
    // Client 6 queued first and was told nil long after client 8 got it.
    h.op(6, ms(20_000), ms(25_000), wait("c6-1"), ok(Value::Nil));
    h.op(
        8,
        ms(20_600),
        ms(21_000),
        wait("c8-1"),
        ok(Value::Fence(50)),
    );
    let v = found(&h.check(), "liveness");
    assert_eq!(v.len(), 2, "{v:?}");
    assert!(v.iter().all(|v| v.what.contains("FIFO")));
    // A fault near either pass-over excuses it.
    h.fault(FaultKind::DebugSleep, ms(9_500), ms(9_600), None);
    h.fault(FaultKind::ClientPause, ms(20_700), ms(20_800), None);
    assert!(found(&h.check(), "liveness").is_empty());
}

/// Client 4 queued on m0 600 ms before client 5 and was granted after it:
/// a pass-over, caught without faults.
fn fifo_pass_over(h: &mut H) {
    let wait = |token: &str| Op {
        wait_ms: Some(5000),
        ..acq("m0", token, 1000)
    };
    h.op(1, 0, ms(1), acq("m0", "c1-1", 3000), ok(Value::Fence(5)));
    h.op(4, ms(100), ms(3000), wait("c4-1"), ok(Value::Fence(40)));
    h.op(5, ms(700), ms(2000), wait("c5-1"), ok(Value::Fence(30)));
}

#[test]
fn fifo_catches_a_pass_over_without_faults_and_counts_judged_pairs() {
    let mut h = H::new();
    fifo_pass_over(&mut h);
    let r = h.check();
    let v = found(&r, "liveness");
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].what.contains("FIFO"));
    assert_eq!(r.fifo_judged["m0"], 1);
    assert!(!r.gaps.iter().any(|g| g.contains("FIFO")), "{:?}", r.gaps);
    let text = r.render(&h.events, std::time::Duration::from_millis(1));
    assert!(text.contains("fifo: 1 pairs judged (l0 0, m0 1)"), "{text}");
    // A lost reply (another, proxied client's) changes nothing.
    h.fault(FaultKind::LostReply, ms(800), ms(801), None);
    assert_eq!(found(&h.check(), "liveness").len(), 1);
}

#[test]
fn fifo_a_stall_or_crash_in_the_window_excuses() {
    for kind in [
        FaultKind::ClientPause,
        FaultKind::DebugSleep,
        FaultKind::SlowScript,
        FaultKind::Kill9Always,
        FaultKind::Kill9Everysec,
        FaultKind::Failover,
        FaultKind::FailoverStale,
    ] {
        let mut h = H::new();
        fifo_pass_over(&mut h);
        // Before A's request, within the 1 s margin.
        h.fault(kind, ms(50), ms(60), None);
        let r = h.check();
        assert!(
            found(&r, "liveness").is_empty(),
            "{kind:?}: {:?}",
            r.violations
        );
        assert_eq!(r.fifo_judged["m0"], 0);
        assert!(r.gaps.iter().any(|g| g.contains("FIFO")), "{:?}", r.gaps);
    }
    // On the other group, or after B's grant, a pause changes nothing.
    let mut h = H::new();
    fifo_pass_over(&mut h);
    h.fault(FaultKind::ClientPause, ms(2500), ms(2600), None);
    if let Some(Event::Fault { group, .. }) = h.events.last_mut() {
        *group = "lin".into();
    }
    h.fault(FaultKind::DebugSleep, ms(2100), ms(2200), None);
    assert_eq!(found(&h.check(), "liveness").len(), 1);
}

#[test]
fn fifo_a_kill_or_unblock_excuses_only_for_a_or_b() {
    for kind in [FaultKind::ClientKill, FaultKind::ClientUnblock] {
        // Another client's: the rest keep their order.
        let mut h = H::new();
        fifo_pass_over(&mut h);
        h.fault(kind, ms(500), ms(501), Some(6));
        assert_eq!(found(&h.check(), "liveness").len(), 1, "{kind:?}");
        // A's (up to A's completion) or B's.
        for (client, at) in [(4, 2500), (5, 900)] {
            let mut h = H::new();
            fifo_pass_over(&mut h);
            h.fault(kind, ms(at), ms(at + 1), Some(client));
            assert!(
                found(&h.check(), "liveness").is_empty(),
                "{kind:?} {client}"
            );
        }
        // One that names no client may have hit either.
        let mut h = H::new();
        fifo_pass_over(&mut h);
        h.fault(kind, ms(500), ms(501), None);
        assert!(found(&h.check(), "liveness").is_empty(), "{kind:?}");
    }
    // An unblock of A told nil early, before B's grant: excused.
    let mut h = H::new();
    let wait = |token: &str| Op {
        wait_ms: Some(5000),
        ..acq("m0", token, 1000)
    };
    h.op(4, ms(100), ms(1500), wait("c4-1"), ok(Value::Nil));
    h.op(5, ms(700), ms(2000), wait("c5-1"), ok(Value::Fence(30)));
    assert_eq!(found(&h.check(), "liveness").len(), 2, "early nil and FIFO");
    h.fault(FaultKind::ClientUnblock, ms(1400), ms(1401), Some(4));
    assert!(found(&h.check(), "liveness").is_empty());
}

#[test]
fn coverage_reports_every_gap_and_the_summary_comes_last() {
    let h = H::new();
    let r = h.check();
    assert_eq!(r.gaps.len(), 7 + 8 + 10 + 3 + 1 + 1, "{:?}", r.gaps);
    assert_eq!(r.failures(), r.gaps.len() as u64);
    let mut h = H::new();
    h.op(1, 0, ms(1), acq("m0", "c1-1", 1000), ok(Value::Fence(10)));
    h.op(
        2,
        ms(100),
        ms(101),
        acq("m0", "c2-1", 1000),
        ok(Value::Fence(20)),
    );
    let r = h.check();
    assert!(!r.gaps.iter().any(|g| g.contains("plain resource")));
    let text = r.render(&h.events, std::time::Duration::from_millis(3));
    assert!(text.contains("\"c2-1\""), "{text}");
    assert!(text.contains("check took 3 ms"));
    assert_eq!(
        text.lines().last(),
        Some("history: 2 ops, 0 faults, 1 violations, seed 42")
    );
}

/// 500k operations, correct, over every kind of resource.
#[test]
fn the_check_grows_linearly_with_the_history() {
    // Not a time limit (the machine's load would decide it) but how the
    // time grows: eight times the operations must cost well under the
    // 64 times a quadratic check would (half of it), the best of two runs
    // each.
    let small = best_check_time(40_000);
    let large = best_check_time(320_000);
    let ratio = large.as_secs_f64() / small.as_secs_f64().max(1e-6);
    println!("40,000 ops in {small:?}, 320,000 in {large:?}: x{ratio:.1}");
    assert!(ratio < 32.0, "8x the operations took x{ratio:.1} the time");
}

fn best_check_time(ops_wanted: usize) -> std::time::Duration {
    (0..2)
        .map(|_| {
            let h = big_history(ops_wanted);
            let started = std::time::Instant::now();
            let r = h.check();
            let took = started.elapsed();
            assert!(r.violations.is_empty(), "{:?}", &r.violations[..3]);
            took
        })
        .min()
        .unwrap_or_default()
}

/// A clean history of about `ops_wanted` operations on four resources,
/// through the file format and back.
fn big_history(ops_wanted: usize) -> H {
    let mut h = H::new();
    let names = ["m0", "m2", "m4", "l0"];
    let mut fence = 1_000;
    let mut ops = 0;
    let mut k: u64 = 0;
    while ops < ops_wanted {
        let (res, client) = (names[(k % 4) as usize], (k % 16) as u32);
        let t = k * 100;
        let token = format!("c{client}-{k}");
        fence += 1;
        let a = Op {
            wait_ms: k.is_multiple_of(3).then_some(1000),
            limit: (res == "m4").then_some(2),
            ..acq(res, &token, 1000)
        };
        h.op(client, t, t + 20, a, ok(Value::Fence(fence)));
        h.write(t + 30, client, res, &token, fence, true, fence);
        let e = Op {
            ttl_ms: Some(1000),
            ..op(Command::Extend, res, &token)
        };
        h.op(client, t + 40, t + 50, e, ok(Value::Int(1)));
        h.op(
            client,
            t + 300,
            t + 310,
            op(Command::Release, res, &token),
            ok(Value::Int(1)),
        );
        if k % 1000 == 999 {
            h.fault(FaultKind::DebugSleep, t + 50, t + 90, None);
        }
        ops += 3;
        k += 1;
    }
    // Through the file format and back.
    let mut file = Vec::new();
    let mut w = crate::history::Writer::new(&mut file);
    for e in &h.events {
        w.event(e).unwrap();
    }
    w.flush().unwrap();
    h.events = crate::history::read(&file[..]).unwrap();
    h
}

/// The fault thread records `client_unblock` as started, then opens a
/// connection and sends `CLIENT UNBLOCK`: a `WAIT` the client began after
/// the start is the one unblocked, and its early nil is the unblock's.
#[test]
fn an_unblock_under_way_excuses_a_wait_begun_after_its_start() {
    let mut h = H::new();
    let wait = Op {
        wait_ms: Some(1000),
        ..acq("m0", "c1-1", 1000)
    };
    h.fault(FaultKind::ClientUnblock, ms(5), ms(8), Some(1));
    h.op(1, ms(6), ms(7), wait.clone(), ok(Value::Nil));
    assert!(found(&h.check(), "liveness").is_empty());
    // An unblock that ended before the wait began excuses nothing.
    h.op(
        1,
        ms(9),
        ms(20),
        Op {
            token: "c1-2".into(),
            ..wait
        },
        ok(Value::Nil),
    );
    let v = found(&h.check(), "liveness");
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].what.contains("before its timeout"), "{}", v[0].what);
}

#[test]
fn the_meta_line_names_the_clients_behind_the_proxy() {
    // Client 7's waiter lost its connection and a probe found it granted:
    // a dropped reply only for a client behind the proxy.
    let history = |proxied: Option<Vec<u32>>| {
        let mut h = H::new();
        if let Event::Meta(m) = &mut h.events[0] {
            m.proxied = proxied;
        }
        let wait = Op {
            wait_ms: Some(100),
            ..acq("m0", "c7-1", 1000)
        };
        h.op(7, 0, ms(50), wait, info("closed"));
        let probe = Op {
            probe: true,
            ..op(Command::Release, "m0", "c7-1")
        };
        h.op(7, ms(51), ms(52), probe, ok(Value::Int(1)));
        h.check()
    };
    // Older histories: every fourth client (7 % 4 == 3) is behind it.
    let old = history(None);
    assert!(found(&old, "liveness").is_empty(), "{:?}", old.violations);
    assert_eq!(old.known_limits[DROPPED_REPLY], 1);
    assert!(found(&history(Some(vec![7])), "liveness").is_empty());
    // Named direct, client 7's probe is judged.
    assert_eq!(found(&history(Some(vec![3])), "liveness").len(), 1);
}
