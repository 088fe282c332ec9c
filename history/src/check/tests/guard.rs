//! The guarded sink's rule, table-driven: a history where only live
//! holders' writes were carried out passes; a stale holder's write carried
//! out (after a release, past its lease, after a renewal found it lost, a
//! proof never granted), a refused write in the sink, a live holder's
//! write refused, an acknowledged write missing, a half-applied batch and
//! an entry pushed twice are caught; a release or a write a failover may
//! have lost is counted as that known limit instead.
use super::*;
use crate::history::Guarded;

fn guard(token: &str, fence: Option<u64>, entry: &str, batch: bool) -> Op {
    Op {
        guard: Some(Guarded {
            fence,
            entry: entry.into(),
            batch,
            lua: false,
        }),
        ..op(Command::Guard, "m0", token)
    }
}

fn notheld() -> Option<Outcome> {
    Some(Outcome::Fail {
        error: "NOTHELD dlock: not a live hold".into(),
    })
}

/// The sink of m0 read at 5 s.
fn read(h: &mut H, entries: &[&str], count: i64) {
    let value = Value::Sink {
        entries: entries.iter().map(|e| e.to_string()).collect(),
        count,
    };
    h.op(
        9,
        ms(5000),
        ms(5001),
        op(Command::SinkRead, "m0", ""),
        ok(value),
    );
}

/// Client 1 holds m0 (token c1-1, fence 10, ttl 1000 ms) from 1 ms and
/// writes twice while it holds: by FENCE at 10 ms, by TOKEN in a batch at
/// 20 ms.
fn holder() -> H {
    let mut h = H::new();
    h.op(1, 0, ms(1), acq("m0", "c1-1", 1000), ok(Value::Fence(10)));
    let w = guard("c1-1", Some(10), "1:10:1", false);
    h.op(1, ms(10), ms(11), w, ok(Value::Int(1)));
    let w = guard("c1-1", None, "1:10:2", true);
    h.op(1, ms(20), ms(21), w, ok(Value::Int(2)));
    h
}

fn release(h: &mut H) {
    let r = op(Command::Release, "m0", "c1-1");
    h.op(1, ms(100), ms(101), r, ok(Value::Int(1)));
}

/// One write of the holder after its hold ended, at `at_ms`, answered
/// `outcome`.
fn late(h: &mut H, at_ms: u64, fence: Option<u64>, outcome: Option<Outcome>) {
    let w = guard("c1-1", fence, "1:10:3", false);
    h.op(1, ms(at_ms), ms(at_ms + 1), w, outcome);
}

struct Case {
    name: &'static str,
    build: fn() -> H,
    violations: usize,
    limits: u64,
}

const CASES: &[Case] = &[
    Case {
        name: "a write after the release, refused",
        build: || {
            let mut h = holder();
            release(&mut h);
            late(&mut h, 200, Some(10), notheld());
            read(&mut h, &["1:10:1", "1:10:2"], 1);
            h
        },
        violations: 0,
        limits: 0,
    },
    Case {
        name: "a write after the release, carried out",
        build: || {
            let mut h = holder();
            release(&mut h);
            late(&mut h, 200, Some(10), ok(Value::Int(3)));
            read(&mut h, &["1:10:1", "1:10:2", "1:10:3"], 1);
            h
        },
        violations: 1,
        limits: 0,
    },
    Case {
        name: "a write after the release whose reply was lost, found in the sink",
        build: || {
            let mut h = holder();
            release(&mut h);
            late(&mut h, 200, None, info("closed"));
            read(&mut h, &["1:10:1", "1:10:2", "1:10:3"], 1);
            h
        },
        violations: 1,
        limits: 0,
    },
    Case {
        name: "a write after the release, carried out across a failover",
        build: || {
            let mut h = holder();
            release(&mut h);
            h.fault(FaultKind::Failover, ms(150), ms(190), None);
            late(&mut h, 200, Some(10), ok(Value::Int(3)));
            read(&mut h, &["1:10:1", "1:10:2", "1:10:3"], 1);
            h
        },
        violations: 0,
        limits: 1,
    },
    Case {
        name: "a write within the lease's slack, carried out",
        build: || {
            let mut h = holder();
            late(&mut h, 1030, None, ok(Value::Int(3)));
            read(&mut h, &["1:10:1", "1:10:2", "1:10:3"], 1);
            h
        },
        violations: 0,
        limits: 0,
    },
    Case {
        name: "a write past the lease, carried out",
        build: || {
            let mut h = holder();
            late(&mut h, 1200, None, ok(Value::Int(3)));
            read(&mut h, &["1:10:1", "1:10:2", "1:10:3"], 1);
            h
        },
        violations: 1,
        limits: 0,
    },
    Case {
        name: "a write past an extended lease, carried out",
        build: || {
            let mut h = holder();
            let e = Op {
                ttl_ms: Some(1000),
                ..op(Command::Extend, "m0", "c1-1")
            };
            h.op(1, ms(500), ms(501), e, ok(Value::Int(1)));
            // Live until 1501 ms (+ slack): judged only later.
            late(&mut h, 1200, Some(10), ok(Value::Int(3)));
            let w = guard("c1-1", Some(10), "1:10:4", false);
            h.op(1, ms(1600), ms(1601), w, ok(Value::Int(4)));
            read(&mut h, &["1:10:1", "1:10:2", "1:10:3", "1:10:4"], 1);
            h
        },
        violations: 1,
        limits: 0,
    },
    Case {
        name: "a write after a renewal found the hold lost, carried out",
        build: || {
            let mut h = holder();
            h.fault(FaultKind::FailoverStale, ms(100), ms(200), None);
            let e = Op {
                ttl_ms: Some(1000),
                ..op(Command::Extend, "m0", "c1-1")
            };
            h.op(1, ms(300), ms(301), e, ok(Value::Int(0)));
            late(&mut h, 400, Some(10), ok(Value::Int(3)));
            read(&mut h, &["1:10:1", "1:10:2", "1:10:3"], 1);
            h
        },
        violations: 1,
        // The loss itself (`lost`).
        limits: 1,
    },
    Case {
        name: "a FENCE no grant ever had, carried out",
        build: || {
            let mut h = holder();
            late(&mut h, 30, Some(11), ok(Value::Int(3)));
            read(&mut h, &["1:10:1", "1:10:2", "1:10:3"], 1);
            h
        },
        violations: 1,
        limits: 0,
    },
    Case {
        name: "a refused write whose entry is in the sink",
        build: || {
            let mut h = holder();
            release(&mut h);
            late(&mut h, 200, Some(10), notheld());
            read(&mut h, &["1:10:1", "1:10:2", "1:10:3"], 1);
            h
        },
        violations: 1,
        limits: 0,
    },
    Case {
        name: "a live holder's write refused NOTHELD",
        build: || {
            let mut h = holder();
            late(&mut h, 50, Some(10), notheld());
            read(&mut h, &["1:10:1", "1:10:2"], 1);
            h
        },
        violations: 1,
        limits: 0,
    },
    Case {
        name: "an acknowledged write missing from the sink",
        build: || {
            let mut h = holder();
            read(&mut h, &["1:10:2"], 1);
            h
        },
        violations: 1,
        limits: 0,
    },
    Case {
        name: "an acknowledged write missing after an everysec crash",
        build: || {
            let mut h = holder();
            h.fault(FaultKind::Kill9Everysec, ms(30), ms(300), None);
            read(&mut h, &["1:10:2"], 1);
            h
        },
        violations: 0,
        limits: 1,
    },
    Case {
        name: "a batch applied in part, an entry nobody pushed, an entry pushed twice",
        build: || {
            let mut h = holder();
            read(&mut h, &["1:10:1", "1:10:2", "7:1:1", "1:10:1"], 0);
            h
        },
        violations: 3,
        limits: 0,
    },
];

#[test]
fn the_guard_rule_judges_each_case() {
    for c in CASES {
        let r = (c.build)().check();
        let v = found(&r, "guard");
        assert_eq!(v.len(), c.violations, "{}: {v:#?}", c.name);
        let limits = r.known_limits.get(ASYNC_REPLICATION).copied().unwrap_or(0);
        assert_eq!(limits, c.limits, "{}: {:?}", c.name, r.known_limits);
        let others: Vec<_> = r
            .violations
            .iter()
            .filter(|v| v.checker != "guard")
            .collect();
        assert!(others.is_empty(), "{}: {others:#?}", c.name);
    }
}

#[test]
fn a_stale_write_names_the_op_that_ended_the_hold() {
    let r = (CASES[1].build)().check();
    let v = found(&r, "guard");
    assert_eq!(v.len(), 1, "{v:#?}");
    // The acquire (1) and two writes (2, 3), the release (4), the write (5).
    assert_eq!(v[0].ops, vec![4, 5]);
    assert!(v[0].what.contains("released by op 4"), "{}", v[0].what);
    let stats = r.guard.expect("the guard rule ran");
    assert_eq!((stats.stale, stats.after_release), (1, 1));
}
