//! Synthetic histories: for each checker a correct one that passes and one
//! with a planted bug that it catches.
use super::*;
use crate::history::{Kind, Meta, Op, Outcome, Phase, Resource, Value};

mod adversarial;
mod election;
mod guard;
mod handover_permits;
mod input;
mod liveness;
mod priority;
mod safety;
mod sessions;

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
            election: false,
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
                workloads: vec!["locks".into()],
                priority_aging_ms: None,
                proxied: None,
            })],
            next: 1,
        }
    }

    /// A history of the election workload alone: its resource `e0`.
    fn election() -> Self {
        let mut h = H::new();
        if let Event::Meta(m) = &mut h.events[0] {
            m.workloads = vec!["election".into()];
            m.resources.push(Resource {
                name: "e0".into(),
                group: "main".into(),
                kind: Kind::Plain,
                election: true,
            });
        }
        h
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
            late: false,
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
    Op::new(
        command,
        res.split(',').map(String::from).collect(),
        token.into(),
    )
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
