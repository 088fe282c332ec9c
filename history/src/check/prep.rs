//! Preparation shared by every checker: the events in time order, each
//! operation with its invocation and completion, the faults as intervals,
//! every grant, and the holds the clients *believed* they had.
use crate::history::{Command, Event, FaultKind, Kind, Mode, Op, Outcome, Value};
use std::collections::HashMap;

/// How long before its lease's end a client stops believing a hold (µs).
pub const MARGIN_US: u64 = 5_000;

pub struct Res<'a> {
    pub name: &'a str,
    pub group: &'a str,
    pub kind: Kind,
}

/// One operation: its invocation and, unless pending, its completion.
pub struct OpRec<'a> {
    pub id: u64,
    pub client: u32,
    pub op: &'a Op,
    pub invoke: u64,
    pub complete: Option<u64>,
    pub outcome: Option<&'a Outcome>,
    /// Interned token.
    pub token: u32,
    /// Resource indices of `op.resources`.
    pub res: Vec<u32>,
    /// The invocation time of the first operation of its retry chain: a
    /// grant may have taken effect as early as that.
    pub root_invoke: u64,
}

impl OpRec<'_> {
    pub fn value(&self) -> Option<&Value> {
        match self.outcome {
            Some(Outcome::Ok { value }) => Some(value),
            _ => None,
        }
    }
    /// The fence of a grant, acknowledged or not.
    pub fn granted(&self) -> Option<u64> {
        match self.value() {
            Some(Value::Fence(f)) | Some(Value::Unacknowledged(f)) => Some(*f),
            _ => None,
        }
    }
    pub fn int(&self) -> Option<i64> {
        match self.value() {
            Some(Value::Int(n)) => Some(*n),
            _ => None,
        }
    }
    pub fn info_reason(&self) -> Option<&str> {
        match self.outcome {
            Some(Outcome::Info { reason }) => Some(reason),
            _ => None,
        }
    }
}

/// A hold a client believed it had on one resource over `[start, end)`.
pub struct Hold {
    /// The op (index) whose grant started the belief.
    pub op: usize,
    pub client: u32,
    pub token: u32,
    pub owner: u32,
    pub res: u32,
    pub mode: Mode,
    pub fence: u64,
    pub start: u64,
    /// Where the server still surely held it: the last successful renewal's
    /// invocation plus its ttl, minus the margin.
    pub bound: u64,
    pub end: u64,
    /// The bound as set by the last durable (acknowledged) grant, if any.
    pub durable_bound: Option<u64>,
    /// The earliest the grant can have taken effect.
    pub grant_invoke: u64,
}

/// One member of a grant (acknowledged or not).
pub struct Grant {
    pub op: usize,
    pub res: u32,
    pub owner: u32,
    pub fence: u64,
    pub invoke: u64,
    pub complete: u64,
}

/// A reply saying the server no longer had a hold it still owed.
pub struct Loss {
    pub hold: usize,
    pub op: usize,
}

pub struct FaultRec {
    pub kind: FaultKind,
    pub group: String,
    pub client: Option<u32>,
    pub start: u64,
    pub end: u64,
}

pub struct WriteRec<'a> {
    pub t: u64,
    pub client: u32,
    pub res: u32,
    /// `u32::MAX` when the token was never used by an operation.
    pub token: u32,
    pub token_name: &'a str,
    pub fence: u64,
    pub accepted: bool,
    pub highest: u64,
}

pub struct Prepared<'a> {
    pub seed: u64,
    pub resources: Vec<Res<'a>>,
    /// In invocation order.
    pub ops: Vec<OpRec<'a>>,
    pub by_id: HashMap<u64, usize>,
    pub names: Vec<&'a str>,
    pub holds: Vec<Hold>,
    /// Holds by (client, token, resource), by start.
    pub holds_by_key: HashMap<(u32, u32, u32), Vec<usize>>,
    pub grants: Vec<Grant>,
    pub losses: Vec<Loss>,
    /// By start.
    pub faults: Vec<FaultRec>,
    /// Running maximum of `faults[..=i].end`.
    pub fault_end_max: Vec<u64>,
    /// In time order.
    pub writes: Vec<WriteRec<'a>>,
    /// `Info` events with reason `timeout`, and ops that never completed,
    /// are found from `ops`.
    pub completes_without_invoke: Vec<u64>,
}

impl<'a> Prepared<'a> {
    pub fn new(events: &'a [Event]) -> Self {
        let mut order: Vec<&Event> = events.iter().collect();
        order.sort_by_key(|e| event_t(e));
        let mut p = Prepared {
            seed: 0,
            resources: Vec::new(),
            ops: Vec::new(),
            by_id: HashMap::new(),
            names: Vec::new(),
            holds: Vec::new(),
            holds_by_key: HashMap::new(),
            grants: Vec::new(),
            losses: Vec::new(),
            faults: Vec::new(),
            fault_end_max: Vec::new(),
            writes: Vec::new(),
            completes_without_invoke: Vec::new(),
        };
        let mut res_ix: HashMap<&'a str, u32> = HashMap::new();
        let mut interned: HashMap<&'a str, u32> = HashMap::new();
        let mut open_faults: HashMap<(FaultKind, &str), usize> = HashMap::new();
        for e in order {
            match e {
                Event::Meta(m) => {
                    p.seed = m.seed;
                    for r in &m.resources {
                        res_ix.entry(&r.name).or_insert_with(|| {
                            p.resources.push(Res {
                                name: &r.name,
                                group: &r.group,
                                kind: r.kind,
                            });
                            p.resources.len() as u32 - 1
                        });
                    }
                }
                Event::Invoke {
                    t, client, id, op, ..
                } => {
                    let token = intern(&mut interned, &mut p.names, &op.token);
                    let res = op
                        .resources
                        .iter()
                        .map(|r| resource(&mut res_ix, &mut p.resources, r))
                        .collect();
                    let root_invoke = op
                        .retry_of
                        .and_then(|r| p.by_id.get(&r))
                        .map_or(*t, |&i| p.ops[i].root_invoke);
                    p.by_id.insert(*id, p.ops.len());
                    p.ops.push(OpRec {
                        id: *id,
                        client: *client,
                        op,
                        invoke: *t,
                        complete: None,
                        outcome: None,
                        token,
                        res,
                        root_invoke,
                    });
                }
                Event::Complete { t, id, outcome, .. } => match p.by_id.get(id) {
                    Some(&i) if p.ops[i].complete.is_none() => {
                        p.ops[i].complete = Some(*t);
                        p.ops[i].outcome = Some(outcome);
                    }
                    _ => p.completes_without_invoke.push(*id),
                },
                Event::Write {
                    t,
                    client,
                    resource: r,
                    token,
                    fence,
                    accepted,
                    highest,
                } => {
                    let res = resource(&mut res_ix, &mut p.resources, r);
                    let tok = interned.get(token.as_str()).copied().unwrap_or(u32::MAX);
                    p.writes.push(WriteRec {
                        t: *t,
                        client: *client,
                        res,
                        token: tok,
                        token_name: token,
                        fence: *fence,
                        accepted: *accepted,
                        highest: *highest,
                    });
                }
                Event::Fault {
                    t,
                    fault,
                    phase,
                    group,
                    client,
                    ..
                } => match phase {
                    crate::history::Phase::Start => {
                        open_faults.insert((*fault, group), p.faults.len());
                        p.faults.push(FaultRec {
                            kind: *fault,
                            group: group.clone(),
                            client: *client,
                            start: *t,
                            end: u64::MAX,
                        });
                    }
                    crate::history::Phase::End => {
                        if let Some(i) = open_faults.remove(&(*fault, group.as_str())) {
                            p.faults[i].end = *t;
                        }
                    }
                },
            }
        }
        let mut m = 0;
        p.fault_end_max = p
            .faults
            .iter()
            .map(|f| {
                m = m.max(f.end);
                m
            })
            .collect();
        p.collect_grants(&mut interned);
        p.believe();
        p
    }

    fn collect_grants(&mut self, interned: &mut HashMap<&'a str, u32>) {
        for (i, o) in self.ops.iter().enumerate() {
            if !matches!(o.op.command, Command::Acquire | Command::Macquire) {
                continue;
            }
            let (Some(fence), Some(complete)) = (o.granted(), o.complete) else {
                continue;
            };
            for &r in &o.res {
                let owner = match (&o.op.owner, self.resources[r as usize].kind) {
                    (_, Kind::Semaphore { .. }) | (None, _) => o.token,
                    (Some(name), _) => intern(interned, &mut self.names, name),
                };
                self.grants.push(Grant {
                    op: i,
                    res: r,
                    owner,
                    fence,
                    invoke: o.root_invoke,
                    complete,
                });
            }
        }
    }

    /// Runs each (client, token, resource)'s operations through what the
    /// client believes: grants start a hold, renewals move its bound,
    /// `RELEASE` ends it, a 0 reply before the bound is a loss.
    fn believe(&mut self) {
        // Grants by (op, res) to find owners again.
        let mut owner_of: HashMap<(usize, u32), u32> = HashMap::new();
        for g in &self.grants {
            owner_of.insert((g.op, g.res), g.owner);
        }
        let mut by_key: HashMap<(u32, u32, u32), Vec<usize>> = HashMap::new();
        for (i, o) in self.ops.iter().enumerate() {
            if o.op.command == Command::Info || o.outcome.is_none() && !is_release(o.op) {
                continue;
            }
            for &r in &o.res {
                by_key.entry((o.client, o.token, r)).or_default().push(i);
            }
        }
        let mut keys: Vec<_> = by_key.into_iter().collect();
        keys.sort_unstable_by_key(|(k, _)| *k);
        for ((client, token, res), list) in keys {
            let mut cur: Option<usize> = None;
            for i in list {
                let o = &self.ops[i];
                let ttl = o.op.ttl_ms.unwrap_or(0) * 1000;
                let new_bound = (o.invoke + ttl).saturating_sub(MARGIN_US);
                match o.op.command {
                    Command::Acquire | Command::Macquire => {
                        let Some(Value::Fence(fence)) = o.value() else {
                            continue;
                        };
                        let complete = o.complete.unwrap_or(o.invoke);
                        let durable = o.op.durable.then_some(new_bound);
                        match cur {
                            Some(h) if self.holds[h].fence == *fence => {
                                let h = &mut self.holds[h];
                                h.bound = new_bound;
                                h.end = new_bound;
                                h.durable_bound = durable.or(h.durable_bound);
                            }
                            _ => {
                                cur = Some(self.holds.len());
                                self.holds.push(Hold {
                                    op: i,
                                    client,
                                    token,
                                    owner: owner_of.get(&(i, res)).copied().unwrap_or(token),
                                    res,
                                    mode: o.op.mode,
                                    fence: *fence,
                                    start: complete,
                                    bound: new_bound,
                                    end: new_bound,
                                    durable_bound: durable,
                                    grant_invoke: o.root_invoke,
                                });
                            }
                        }
                    }
                    Command::Extend | Command::Mextend => {
                        let (Some(h), Some(n)) = (cur, o.int()) else {
                            continue;
                        };
                        if n >= 1 {
                            self.holds[h].bound = new_bound;
                            self.holds[h].end = new_bound;
                        } else if o.complete.unwrap_or(u64::MAX) < self.holds[h].bound {
                            self.losses.push(Loss { hold: h, op: i });
                        }
                    }
                    Command::Release | Command::Mrelease => {
                        let Some(h) = cur.take() else { continue };
                        let hold = &mut self.holds[h];
                        hold.end = hold.bound.min(o.invoke);
                        let short = match o.int() {
                            Some(n) if o.op.command == Command::Release => n == 0,
                            Some(n) => n < o.res.len() as i64,
                            None => false,
                        };
                        if short && o.complete.unwrap_or(u64::MAX) < hold.bound {
                            self.losses.push(Loss { hold: h, op: i });
                        }
                    }
                    Command::Info => {}
                }
            }
        }
        for (i, h) in self.holds.iter().enumerate() {
            self.holds_by_key
                .entry((h.client, h.token, h.res))
                .or_default()
                .push(i);
        }
        // One loss per op: a set's 0 reply names its first member.
        let mut seen = std::collections::HashSet::new();
        self.losses.retain(|l| seen.insert(l.op));
    }

    /// Whether a fault overlaps `[from, to]` (`any` filters its kind).
    pub fn fault_overlaps(&self, from: u64, to: u64, any: impl Fn(&FaultRec) -> bool) -> bool {
        let n = self.faults.partition_point(|f| f.start <= to);
        // `fault_end_max` only grows: walk back while some fault so far
        // still ends at or after `from`.
        (0..n)
            .rev()
            .take_while(|&i| self.fault_end_max[i] >= from)
            .any(|i| self.faults[i].end >= from && any(&self.faults[i]))
    }

    /// Whether a fault started within `[from, to]`.
    pub fn fault_started(&self, from: u64, to: u64, any: impl Fn(&FaultRec) -> bool) -> bool {
        let lo = self.faults.partition_point(|f| f.start < from);
        let hi = self.faults.partition_point(|f| f.start <= to);
        self.faults[lo..hi.max(lo)].iter().any(any)
    }

    pub fn proxied(client: u32) -> bool {
        client % 4 == 3
    }
}

fn is_release(op: &Op) -> bool {
    matches!(op.command, Command::Release | Command::Mrelease)
}

fn event_t(e: &Event) -> u64 {
    match e {
        Event::Meta(_) => 0,
        Event::Invoke { t, .. }
        | Event::Complete { t, .. }
        | Event::Write { t, .. }
        | Event::Fault { t, .. } => *t,
    }
}

fn intern<'a>(map: &mut HashMap<&'a str, u32>, names: &mut Vec<&'a str>, s: &'a str) -> u32 {
    *map.entry(s).or_insert_with(|| {
        names.push(s);
        names.len() as u32 - 1
    })
}

fn resource<'a>(map: &mut HashMap<&'a str, u32>, list: &mut Vec<Res<'a>>, name: &'a str) -> u32 {
    *map.entry(name).or_insert_with(|| {
        list.push(Res {
            name,
            group: "?",
            kind: Kind::Plain,
        });
        list.len() as u32 - 1
    })
}
