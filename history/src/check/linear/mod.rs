//! Checker 6, `linearizability` (docs/history.md): per `lin` resource
//! (P-compositionality), the history of single-resource `ACQUIRE`,
//! `RELEASE`, `EXTEND` and `INFO` must be linearizable against the
//! sequential specification of the lock (`model`), decided by the Wing &
//! Gong search with Lowe's memoization (`wgl`).
//!
//! What each recorded operation becomes:
//! - `ok`: its reply, to be predicted by the model (a durable grant no
//!   replica acknowledged was still granted: its fence).
//! - `fail` with a lock-logic error (`model::ErrKind`): that error, to be
//!   predicted. Any other error (`LOADING`, `BUSY`, `MASTERDOWN`,
//!   `READONLY`, `NOREPLICAS`, `MISCONF`, `UNBLOCKED`, `QUARANTINE`,
//!   `TRYAGAIN`, `WRONGTYPE`, argument errors) changed nothing whatever the
//!   state: left out.
//! - `info`: may have taken effect, once, at any instant between its
//!   invocation and its completion; never completed: up to the end. An
//!   `EXTEND` or `INFO` changes nothing either way: left out.
#![cfg_attr(not(test), allow(dead_code))] // until check/mod.rs calls it

pub mod model;
pub mod wgl;

#[cfg(test)]
mod tests;

use crate::check::Violation;
use crate::history::{Command, Event, Kind, Mode, Outcome, Value};
use model::{ErrKind, Input, LockModel, Output, Shown};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};
use wgl::Operation;

const CHECKER: &str = "linearizability";

/// Search steps per partition before it is declared undecided.
pub const BUDGET: u64 = 200_000_000;

/// The figures of one partition.
#[derive(Clone, Debug)]
pub struct Stats {
    pub resource: String,
    /// Operations checked (of which `unknown` with a lost reply).
    pub ops: usize,
    pub unknown: usize,
    /// Left out: errors that changed nothing, lost `EXTEND`/`INFO` replies.
    pub left_out: usize,
    /// Operations the model does not cover (`WAIT`, set commands) naming
    /// this resource; the model treats a `WAIT` as if it had none and
    /// ignores set commands, so any violation is suspect when this is not 0.
    pub unmodeled: usize,
    pub linearizable: bool,
    pub steps: u64,
    pub cache: usize,
    pub max_states: usize,
    pub took: Duration,
}

pub fn check(events: &[Event]) -> Vec<Violation> {
    check_with_stats(events).0
}

/// Interned names: tokens and owners share one namespace.
#[derive(Default)]
struct Names(HashMap<String, u32>);

impl Names {
    fn id(&mut self, name: &str) -> u32 {
        let next = self.0.len() as u32;
        *self.0.entry(name.to_string()).or_insert(next)
    }
}

/// One resource's operations, ready for the search.
#[derive(Default)]
struct Partition {
    names: Names,
    ops: Vec<Operation<Input, Output>>,
    unknown: usize,
    left_out: usize,
    unmodeled: usize,
}

pub fn check_with_stats(events: &[Event]) -> (Vec<Violation>, Vec<Stats>) {
    let mut kinds: BTreeMap<String, Kind> = BTreeMap::new();
    for e in events {
        if let Event::Meta(m) = e {
            for r in m.resources.iter().filter(|r| r.group == "lin") {
                kinds.insert(r.name.clone(), r.kind);
            }
        }
    }
    let mut completes: HashMap<u64, (u64, &Outcome)> = HashMap::new();
    for e in events {
        if let Event::Complete { t, id, outcome, .. } = e {
            completes.insert(*id, (*t, outcome));
        }
    }
    let mut parts: BTreeMap<&str, Partition> = kinds
        .keys()
        .map(|k| (k.as_str(), Partition::default()))
        .collect();
    for e in events {
        let Event::Invoke { t, id, op, .. } = e else {
            continue;
        };
        let single = matches!(
            op.command,
            Command::Acquire | Command::Release | Command::Extend | Command::Info
        );
        if !single || op.resources.len() != 1 {
            for r in &op.resources {
                if let Some(p) = parts.get_mut(r.as_str()) {
                    p.unmodeled += 1;
                }
            }
            continue;
        }
        let Some(p) = parts.get_mut(op.resources[0].as_str()) else {
            continue;
        };
        if op.wait_ms.is_some() {
            p.unmodeled += 1;
        }
        let token = p.names.id(&op.token);
        let input = match op.command {
            Command::Acquire => Input::Acquire {
                token,
                owner: op.owner.as_deref().map(|o| p.names.id(o)),
                shared: op.mode == Mode::Shared,
                limit: op.limit,
            },
            Command::Release => Input::Release { token },
            Command::Extend => Input::Extend { token },
            _ => Input::Info,
        };
        let (ret, output) = match completes.get(id) {
            None => (u64::MAX, Output::Unknown),
            Some(&(ct, outcome)) => {
                let output = match outcome {
                    Outcome::Info { .. } => Output::Unknown,
                    Outcome::Fail { error } => match ErrKind::of(error) {
                        Some(k) => Output::Error(k),
                        None => {
                            p.left_out += 1;
                            continue;
                        }
                    },
                    Outcome::Ok { value } => match value {
                        Value::Fence(f) | Value::Unacknowledged(f) => Output::Fence(*f),
                        Value::Nil => Output::Nil,
                        Value::Int(i) => Output::Int(*i),
                        // Only `OBSERVE` and a sink read answer these:
                        // neither is modelled.
                        Value::Observed { .. } | Value::Sink { .. } => {
                            p.left_out += 1;
                            continue;
                        }
                        Value::Holds(view) if view.holds.is_empty() => Output::Nil,
                        Value::Holds(view) => {
                            let mut shown: Vec<Shown> = view
                                .holds
                                .iter()
                                .map(|h| Shown {
                                    token: p.names.id(&h.token),
                                    owner: p.names.id(&h.owner),
                                    fence: h.fence,
                                    shared: h.mode == Mode::Shared,
                                })
                                .collect();
                            shown.sort();
                            Output::Holds(shown)
                        }
                    },
                };
                (ct, output)
            }
        };
        if output == Output::Unknown {
            if matches!(input, Input::Extend { .. } | Input::Info) {
                p.left_out += 1;
                continue;
            }
            p.unknown += 1;
        }
        p.ops.push(Operation {
            id: *id,
            call: *t,
            ret,
            input,
            output,
        });
    }

    let mut violations = Vec::new();
    let mut stats = Vec::new();
    for (name, p) in parts {
        let kind = kinds[name];
        let start = Instant::now();
        let s = wgl::check(&LockModel, &p.ops, BUDGET);
        let took = start.elapsed();
        if !s.linearizable {
            violations.push(explain(name, kind, &p, &s));
        }
        stats.push(Stats {
            resource: name.to_string(),
            ops: p.ops.len(),
            unknown: p.unknown,
            left_out: p.left_out,
            unmodeled: p.unmodeled,
            linearizable: s.linearizable,
            steps: s.steps,
            cache: s.cache,
            max_states: s.max_states,
            took,
        });
    }
    (violations, stats)
}

fn explain(name: &str, kind: Kind, p: &Partition, s: &wgl::Search<model::State>) -> Violation {
    let mut ops = s.pending.clone();
    ops.extend(s.blocked);
    ops.sort_unstable();
    ops.dedup();
    let mut what = if s.gave_up {
        format!(
            "{name} ({kind:?}): undecided after {} search steps ({} ops); \
             the longest linearizable prefix found has {} ops",
            s.steps,
            p.ops.len(),
            s.prefix
        )
    } else {
        format!(
            "{name} ({kind:?}): not linearizable ({} ops): the longest linearizable prefix \
             has {} ops (last {:?}); after it none of the pending ops {:?} can take effect \
             with the reply it got, and op {} returned before it could",
            p.ops.len(),
            s.prefix,
            s.prefix_tail,
            s.pending,
            s.blocked.map_or("?".to_string(), |b| b.to_string()),
        )
    };
    let names: HashMap<u32, &str> = p.names.0.iter().map(|(k, v)| (*v, k.as_str())).collect();
    let states: Vec<String> = s
        .states
        .iter()
        .take(4)
        .map(|st| describe(st, &names))
        .collect();
    what.push_str(&format!("; possible states then: {}", states.join(" | ")));
    if p.unmodeled > 0 {
        what.push_str(&format!(
            " ({} ops on it the model does not cover: WAIT or set commands)",
            p.unmodeled
        ));
    }
    Violation {
        checker: CHECKER,
        what,
        ops,
    }
}

fn describe(s: &model::State, names: &HashMap<u32, &str>) -> String {
    if s.holds.is_empty() {
        return format!("free (last fence {})", s.last);
    }
    let holds: Vec<String> = s
        .holds
        .iter()
        .map(|h| {
            let fence = match h.fence {
                model::Fence::Known(f) => f.to_string(),
                model::Fence::Unknown { .. } => "?".to_string(),
            };
            format!(
                "{}{}/{}@{}",
                names.get(&h.token).unwrap_or(&"?"),
                if h.shared { " shared" } else { "" },
                names.get(&h.owner).unwrap_or(&"?"),
                fence
            )
        })
        .collect();
    format!(
        "held (limit {}, last fence {}): {}",
        s.limit,
        s.last,
        holds.join(", ")
    )
}
