//! The linearizability checker's tests: hand-written histories, lost
//! replies, cross-validation against `consistency_model`, long histories.
use super::model::{Decision, Input, LockModel, Output, State};
use super::wgl::{self, Model};
use super::*;
use crate::history::{HoldView, InfoView, Meta, Op, Resource};

/// Builds histories on `lin`: `l0` plain, `l1` read-write, `l2` LIMIT 2.
struct H {
    events: Vec<Event>,
    next_id: u64,
}

fn acq(res: &str, token: &str) -> Op {
    Op {
        ttl_ms: Some(3_600_000),
        ..Op::new(Command::Acquire, vec![res.into()], token.into())
    }
}
fn shared(mut op: Op) -> Op {
    op.mode = Mode::Shared;
    op
}
fn owner(mut op: Op, o: &str) -> Op {
    op.owner = Some(o.into());
    op
}
fn limit(mut op: Op, n: u32) -> Op {
    op.limit = Some(n);
    op
}
fn cmd(c: Command, res: &str, token: &str) -> Op {
    let mut op = acq(res, token);
    op.command = c;
    op.ttl_ms = None;
    op
}
fn rel(res: &str, token: &str) -> Op {
    cmd(Command::Release, res, token)
}
fn ext(res: &str, token: &str) -> Op {
    cmd(Command::Extend, res, token)
}
fn info(res: &str) -> Op {
    cmd(Command::Info, res, "")
}
fn fence(f: u64) -> Outcome {
    Outcome::Ok {
        value: Value::Fence(f),
    }
}
fn nil() -> Outcome {
    Outcome::Ok { value: Value::Nil }
}
fn int(i: i64) -> Outcome {
    Outcome::Ok {
        value: Value::Int(i),
    }
}
fn lost() -> Outcome {
    Outcome::Info {
        reason: "closed".into(),
    }
}
fn fail(e: &str) -> Outcome {
    Outcome::Fail { error: e.into() }
}
/// `INFO` showing (token, owner, fence, shared).
fn holds(hs: &[(&str, &str, u64, bool)]) -> Outcome {
    Outcome::Ok {
        value: Value::Holds(InfoView {
            holds: hs
                .iter()
                .map(|&(t, o, f, s)| HoldView {
                    token: t.into(),
                    owner: o.into(),
                    fence: f,
                    mode: if s { Mode::Shared } else { Mode::Exclusive },
                    ttl_ms: 1000,
                })
                .collect(),
            waiters: 0,
        }),
    }
}

impl H {
    fn new() -> Self {
        let r = |name: &str, kind| Resource {
            name: name.into(),
            group: "lin".into(),
            kind,
            election: false,
        };
        H {
            events: vec![Event::Meta(Meta {
                seed: 1,
                secs: 1,
                clients: 4,
                server: "test".into(),
                broken: None,
                resources: vec![
                    r("l0", Kind::Plain),
                    r("l1", Kind::Rwlock),
                    r("l2", Kind::Semaphore { limit: 2 }),
                    Resource {
                        name: "m0".into(),
                        group: "main".into(),
                        kind: Kind::Plain,
                        election: false,
                    },
                ],
                workloads: vec!["locks".into()],
                priority_aging_ms: None,
                proxied: None,
            })],
            next_id: 0,
        }
    }
    /// An invocation at `t`; returns its id.
    fn invoke(&mut self, process: u64, t: u64, op: Op) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        self.events.push(Event::Invoke {
            t,
            process,
            client: process as u32,
            id,
            op,
        });
        id
    }
    fn complete(&mut self, process: u64, t: u64, id: u64, outcome: Outcome) {
        self.events.push(Event::Complete {
            t,
            process,
            client: process as u32,
            id,
            outcome,
        });
    }
    /// A whole operation over [t0, t1] (events appended in time order by
    /// the caller's choice; the checker sorts by time anyway).
    fn op(&mut self, process: u64, t0: u64, t1: u64, op: Op, outcome: Outcome) -> u64 {
        let id = self.invoke(process, t0, op);
        self.complete(process, t1, id, outcome);
        id
    }
    fn check(&self) -> Vec<Violation> {
        let (v, _) = check_with_stats(&self.events);
        for x in &v {
            eprintln!("{}: {} {:?}", x.checker, x.what, x.ops);
        }
        v
    }
}

/// The tests' seeded random numbers.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        let mut s = self.0;
        let r = wgl::splitmix(&mut s);
        self.0 = s;
        r
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

mod crossval;
mod histories;
mod long;
