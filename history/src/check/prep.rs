//! Preparation shared by every checker: the events in time order, each
//! operation with its invocation and completion, the faults as intervals,
//! every grant, and the holds the clients *believed* they had.
use crate::history::{Event, FaultKind, Kind, Mode, Op, Outcome, Value};
use std::collections::HashMap;

/// How long before its lease's end a client stops believing a hold (µs).
pub const MARGIN_US: u64 = 5_000;

pub struct Res<'a> {
    pub name: &'a str,
    pub group: &'a str,
    pub kind: Kind,
    /// An election's resource (its holds are leaderships).
    pub election: bool,
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
    /// The permits it counts for on a semaphore (`PERMITS k`; else 1).
    pub permits: u32,
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
    /// The invocation of the last grant or renewal answered so far (while
    /// beliefs are built): the server had the hold after it.
    pub renewed: u64,
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
    /// The hold's last grant or renewal before the reply (its first try's
    /// invocation for a grant): only a fault after it explains the loss.
    pub since: u64,
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
    /// Made after its holder's belief ended (a paused leader).
    pub late: bool,
}

pub struct Prepared<'a> {
    pub seed: u64,
    /// The workloads the meta line names (`locks`, `election`).
    pub workloads: &'a [String],
    /// The servers' `dlock.priority-aging-ms` (the meta line's; absent in
    /// histories written before priorities).
    pub priority_aging_ms: Option<u64>,
    /// The meta line's clients behind the proxy (None: every fourth).
    pub proxied_clients: Option<&'a [u32]>,
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
    /// Every session the history opened (`session_bounds.rs`), by id.
    pub session_recs: Vec<super::session_bounds::SessionRec<'a>>,
    pub session_of: HashMap<&'a str, usize>,
}

impl<'a> Prepared<'a> {
    pub fn new(events: &'a [Event]) -> Self {
        let mut order: Vec<&Event> = events.iter().collect();
        order.sort_by_key(|e| event_t(e));
        let mut p = Prepared {
            seed: 0,
            workloads: &[],
            priority_aging_ms: None,
            proxied_clients: None,
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
            session_recs: Vec::new(),
            session_of: HashMap::new(),
        };
        let mut res_ix: HashMap<&'a str, u32> = HashMap::new();
        let mut interned: HashMap<&'a str, u32> = HashMap::new();
        let mut open_faults: HashMap<(FaultKind, &str), usize> = HashMap::new();
        for e in order {
            match e {
                Event::Meta(m) => {
                    p.seed = m.seed;
                    p.workloads = &m.workloads;
                    p.priority_aging_ms = m.priority_aging_ms;
                    p.proxied_clients = m.proxied.as_deref();
                    for r in &m.resources {
                        res_ix.entry(&r.name).or_insert_with(|| {
                            p.resources.push(Res {
                                name: &r.name,
                                group: &r.group,
                                kind: r.kind,
                                election: r.election,
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
                    late,
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
                        late: *late,
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
        p.sessions();
        p
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

    /// Whether a fault that can lose acknowledged writes on `group` (a
    /// failover, a stale one, an everysec crash: the asynchronous replication
    /// limit, docs/safety.md#what-dlock-does-not-guarantee) was under way at
    /// some time in `[from, to]`.
    pub fn lossy_fault(&self, group: &str, from: u64, to: u64) -> bool {
        self.fault_overlaps(from, to, |f| {
            f.group == group
                && matches!(
                    f.kind,
                    FaultKind::Failover | FaultKind::FailoverStale | FaultKind::Kill9Everysec
                )
        })
    }

    /// Whether `client` talked through the lost-reply proxy.
    pub fn proxied(&self, client: u32) -> bool {
        match self.proxied_clients {
            Some(list) => list.contains(&client),
            None => client % 4 == 3,
        }
    }

    /// Whether the workload `name` ran.
    pub fn ran(&self, name: &str) -> bool {
        self.workloads.iter().any(|w| w == name)
    }
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

pub(super) fn intern<'a>(
    map: &mut HashMap<&'a str, u32>,
    names: &mut Vec<&'a str>,
    s: &'a str,
) -> u32 {
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
            election: false,
        });
        list.len() as u32 - 1
    })
}
