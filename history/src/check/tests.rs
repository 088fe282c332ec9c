//! Synthetic histories: for each checker a correct one that passes and one
//! with a planted bug that it catches.
use super::*;
use crate::history::{Kind, Meta, Op, Outcome, Phase, Resource, Value};

/// Milliseconds to the history's microseconds.
const fn ms(x: u64) -> u64 {
    x * 1000
}

struct H {
    events: Vec<Event>,
    next: u64,
}

impl H {
    fn new() -> Self {
        let r = |name: &str, group: &str, kind| Resource {
            name: name.into(),
            group: group.into(),
            kind,
        };
        H {
            events: vec![Event::Meta(Meta {
                seed: 42,
                secs: 1,
                clients: 8,
                server: "test".into(),
                broken: None,
                resources: vec![
                    r("m0", "main", Kind::Plain),
                    r("m2", "main", Kind::Rwlock),
                    r("m4", "main", Kind::Semaphore { limit: 2 }),
                    r("l0", "lin", Kind::Plain),
                ],
            })],
            next: 1,
        }
    }

    /// Records an op invoked at `t0` and, unless `outcome` is None,
    /// completed at `t1`; returns its id.
    fn op(&mut self, client: u32, t0: u64, t1: u64, op: Op, outcome: Option<Outcome>) -> u64 {
        let id = self.next;
        self.next += 1;
        let process = u64::from(client);
        self.events.push(Event::Invoke {
            t: t0,
            process,
            client,
            id,
            op,
        });
        if let Some(outcome) = outcome {
            self.events.push(Event::Complete {
                t: t1,
                process,
                client,
                id,
                outcome,
            });
        }
        id
    }

    #[allow(clippy::too_many_arguments)]
    fn write(
        &mut self,
        t: u64,
        client: u32,
        res: &str,
        token: &str,
        fence: u64,
        ok: bool,
        high: u64,
    ) {
        self.events.push(Event::Write {
            t,
            client,
            resource: res.into(),
            token: token.into(),
            fence,
            accepted: ok,
            highest: high,
        });
    }

    fn fault(&mut self, kind: FaultKind, start: u64, end: u64, client: Option<u32>) {
        for (t, phase) in [(start, Phase::Start), (end, Phase::End)] {
            self.events.push(Event::Fault {
                t,
                fault: kind,
                phase,
                group: "main".into(),
                client,
                detail: String::new(),
            });
        }
    }

    fn check(&self) -> Report {
        check(&self.events)
    }
}

fn op(command: Command, res: &str, token: &str) -> Op {
    Op {
        command,
        resources: res.split(',').map(String::from).collect(),
        token: token.into(),
        ttl_ms: None,
        mode: Mode::Exclusive,
        limit: None,
        owner: None,
        wait_ms: None,
        durable: false,
        retry_of: None,
        leave_after_ms: None,
        probe: false,
    }
}

fn acq(res: &str, token: &str, ttl_ms: u64) -> Op {
    Op {
        ttl_ms: Some(ttl_ms),
        ..op(Command::Acquire, res, token)
    }
}

fn ok(v: Value) -> Option<Outcome> {
    Some(Outcome::Ok { value: v })
}

fn info(reason: &str) -> Option<Outcome> {
    Some(Outcome::Info {
        reason: reason.into(),
    })
}

fn found(r: &Report, checker: &str) -> Vec<Violation> {
    r.violations
        .iter()
        .filter(|v| v.checker == checker)
        .cloned()
        .collect()
}

/// Client 1 holds m0 from 1 ms to its release at 500 ms; client 2 gets it
/// at 500 ms (touching, not overlapping).
fn two_holders(h: &mut H) {
    h.op(1, 0, ms(1), acq("m0", "c1-1", 1000), ok(Value::Fence(10)));
    h.write(ms(2), 1, "m0", "c1-1", 10, true, 10);
    h.op(
        1,
        ms(500),
        ms(501),
        op(Command::Release, "m0", "c1-1"),
        ok(Value::Int(1)),
    );
    h.op(
        2,
        ms(499),
        ms(500),
        acq("m0", "c2-1", 1000),
        ok(Value::Fence(20)),
    );
    h.write(ms(600), 2, "m0", "c2-1", 20, true, 20);
    h.op(
        2,
        ms(700),
        ms(701),
        op(Command::Release, "m0", "c2-1"),
        ok(Value::Int(1)),
    );
}

#[test]
fn a_correct_history_has_no_violations() {
    let mut h = H::new();
    two_holders(&mut h);
    // Reentrant and downgraded holds of one owner share its fence.
    let owned = |token: &str, mode| Op {
        owner: Some("app".into()),
        mode,
        ..acq("m2", token, 1000)
    };
    h.op(
        3,
        ms(800),
        ms(801),
        owned("c3-1", Mode::Exclusive),
        ok(Value::Fence(30)),
    );
    h.op(
        3,
        ms(802),
        ms(803),
        owned("c3-2", Mode::Shared),
        ok(Value::Fence(30)),
    );
    h.op(
        4,
        ms(804),
        ms(805),
        acq("m4", "c4-1", 1000),
        ok(Value::Fence(40)),
    );
    h.op(
        5,
        ms(804),
        ms(805),
        acq("m4", "c5-1", 1000),
        ok(Value::Fence(41)),
    );
    let r = h.check();
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!(r.ops, 8);
    assert_eq!(r.by_op["acquire"]["ok"], 6);
    assert_eq!(r.by_op["acquire owner"]["ok"], 2);
    assert_eq!(r.by_op["acquire shared"]["ok"], 1);
}

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

#[test]
fn coverage_reports_every_gap_and_the_summary_comes_last() {
    let h = H::new();
    let r = h.check();
    assert_eq!(r.gaps.len(), 7 + 8 + 10 + 3 + 1, "{:?}", r.gaps);
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
fn half_a_million_ops_check_quickly() {
    let mut h = H::new();
    let names = ["m0", "m2", "m4", "l0"];
    let mut fence = 1_000;
    let mut ops = 0;
    let mut k: u64 = 0;
    while ops < 500_000 {
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
    let started = std::time::Instant::now();
    let r = h.check();
    let took = started.elapsed();
    println!(
        "{} ops, {} events checked in {took:?}",
        r.ops,
        h.events.len()
    );
    assert!(r.violations.is_empty(), "{:?}", &r.violations[..3]);
    assert!(took < std::time::Duration::from_secs(5), "{took:?}");
}
