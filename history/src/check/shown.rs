//! `shown`: what `DLOCK.INFO` (and `DLOCK.OBSERVE`, which shows the same)
//! showed on any group must be a state the server could be in. Every `INFO` reply is an observation of the holds at
//! one instant within its operation:
//! - no two holds it shows conflict (an exclusive hold beside another
//!   owner's hold, more holds of a semaphore than the largest limit it
//!   was given);
//! - a token it shows was asked for: some `ACQUIRE`/`MACQUIRE` of that
//!   token naming the resource, invoked before the `INFO` completed, may
//!   have been granted (a grant, an unknown outcome, or still pending). A
//!   token whose every request was answered nil or an error holds nothing
//!   (a waiter told nil and granted later, a grant never revoked);
//! - a token released for sure (`RELEASE` answered 1, `MRELEASE` answered
//!   every member) before the `INFO` was invoked, and not asked for again
//!   after that release began, is not shown, unless a failover or an
//!   everysec crash of its group since the release may have lost it;
//! - a token whose last request before the `INFO` completed was answered
//!   with fence `g` before the `INFO` was invoked is shown with fence `g`
//!   (a same-token retry, a refresh: the hold keeps the fence it was
//!   answered).
//!
//! A waiter that left (closed its own connection) may be granted after
//! the close it recorded: its request is taken to last for ever.
use super::prep::{OpRec, Prepared};
use super::Violation;
use crate::history::{Command, Kind, Mode, Outcome, Value};
use std::collections::HashMap;

pub fn check(p: &Prepared) -> Vec<Violation> {
    // A resized semaphore may hold up to the largest limit it was given.
    let limits = super::limits::Limits::new(p);
    // Acquires and sure releases by (token name, resource), in invocation
    // order (ops are).
    let mut acquires: HashMap<(&str, u32), Vec<usize>> = HashMap::new();
    let mut releases: HashMap<(&str, u32), Vec<usize>> = HashMap::new();
    for (i, o) in p.ops.iter().enumerate() {
        let sure_release = match (o.op.command, o.int()) {
            (Command::Release, Some(1)) => true,
            (Command::Mrelease, Some(n)) => n == o.res.len() as i64,
            _ => false,
        };
        for &r in &o.res {
            let key = (o.op.token.as_str(), r);
            match o.op.command {
                Command::Acquire | Command::Macquire => acquires.entry(key).or_default().push(i),
                Command::Release | Command::Mrelease if sure_release => {
                    releases.entry(key).or_default().push(i)
                }
                _ => {}
            }
        }
    }
    let mut out = Vec::new();
    for o in &p.ops {
        // `OBSERVE` shows what `INFO` would when its reply is sent.
        let (view, done) = match (o.op.command, o.value(), o.complete) {
            (Command::Info, Some(Value::Holds(view)), Some(done)) => (view, done),
            (
                Command::Observe,
                Some(Value::Observed {
                    holds: Some(view), ..
                }),
                Some(done),
            ) => (view, done),
            _ => continue,
        };
        let Some(&r) = o.res.first() else { continue };
        let name = p.resources[r as usize].name;
        let v = |what: String, mut ops: Vec<u64>| {
            ops.push(o.id);
            ops.sort_unstable();
            ops.dedup();
            Violation {
                checker: "shown",
                what: format!(
                    "{name}: {} (op {}) showed {what}",
                    super::command_name(o.op.command).to_uppercase(),
                    o.id
                ),
                ops,
            }
        };
        let kind = match p.resources[r as usize].kind {
            Kind::Semaphore { limit } => Kind::Semaphore {
                limit: limits.ever(r, limit),
            },
            kind => kind,
        };
        if let Some(what) = conflict(kind, view) {
            out.push(v(what, Vec::new()));
        }
        for h in &view.holds {
            let asked: Vec<usize> = acquires
                .get(&(h.token.as_str(), r))
                .map(|l| {
                    l.iter()
                        .copied()
                        .filter(|&a| p.ops[a].invoke < done)
                        .collect()
                })
                .unwrap_or_default();
            let may: Vec<usize> = asked
                .iter()
                .copied()
                .filter(|&a| may_grant(&p.ops[a]))
                .collect();
            if may.is_empty() {
                let ids = asked.iter().map(|&a| p.ops[a].id).collect();
                out.push(v(
                    format!(
                        "token {} holding (fence {}), but {}",
                        h.token,
                        h.fence,
                        if asked.is_empty() {
                            "no request of it was sent before".to_string()
                        } else {
                            format!("every request of it was refused (ops {:?})", ids)
                        }
                    ),
                    ids,
                ));
                continue;
            }
            // Released for sure before the INFO, and asked again only
            // before that release began; and not undone since: a failover
            // or an everysec crash between the release and the INFO may
            // have lost it (asynchronous replication, a known limit:
            // docs/safety.md#what-dlock-does-not-guarantee).
            let group = p.resources[r as usize].group;
            let released = releases.get(&(h.token.as_str(), r)).and_then(|l| {
                l.iter().copied().find(|&x| {
                    let rel = &p.ops[x];
                    rel.complete.is_some_and(|c| c < o.invoke)
                        && may.iter().all(|&a| effect_end(&p.ops[a]) < rel.invoke)
                        && !p.lossy_fault(group, rel.invoke, o.invoke)
                })
            });
            if let Some(x) = released {
                let rel = &p.ops[x];
                out.push(v(
                    format!(
                        "token {} holding (fence {}) after its {} (op {}) answered {} at {}",
                        h.token,
                        h.fence,
                        super::command_name(rel.op.command),
                        rel.id,
                        rel.int().unwrap_or(0),
                        rel.complete.unwrap_or(0)
                    ),
                    vec![rel.id],
                ));
                continue;
            }
            // The last request's fence.
            let last = &p.ops[*asked.last().expect("may is not empty")];
            if let (Some(g), Some(c)) = (last.granted(), last.complete) {
                if c < o.invoke && g != h.fence {
                    out.push(v(
                        format!(
                            "token {} with fence {}, but its last request (op {}) was answered fence {} at {}",
                            h.token, h.fence, last.id, g, c
                        ),
                        vec![last.id],
                    ));
                }
            }
        }
    }
    out
}

/// Whether a request may have been granted: not answered nil or a plain
/// error reply.
fn may_grant(o: &OpRec) -> bool {
    match o.outcome {
        None | Some(Outcome::Info { .. }) => true,
        Some(Outcome::Ok { value }) => !matches!(value, Value::Nil | Value::Int(_)),
        // A reply the workload could not decode is no answer.
        Some(Outcome::Fail { error }) => error.starts_with("unexpected reply"),
    }
}

/// The latest a request may have taken effect: its completion, or never
/// for a waiter that left or a request still pending.
fn effect_end(o: &OpRec) -> u64 {
    match (o.complete, o.info_reason()) {
        (_, Some("left")) | (None, _) => u64::MAX,
        (Some(c), _) => c,
    }
}

/// Two holds shown at once that no state allows.
fn conflict(kind: Kind, view: &crate::history::InfoView) -> Option<String> {
    let holds = &view.holds;
    if let Kind::Semaphore { limit } = kind {
        if holds.len() > limit as usize {
            return Some(format!("{} permits, limit {limit}", holds.len()));
        }
        return None;
    }
    for a in holds {
        for b in holds {
            if a.owner != b.owner && (a.mode == Mode::Exclusive || b.mode == Mode::Exclusive) {
                return Some(format!(
                    "token {} ({}, owner {}) beside token {} ({}, owner {})",
                    a.token,
                    super::mode_name(a.mode),
                    a.owner,
                    b.token,
                    super::mode_name(b.mode),
                    b.owner
                ));
            }
        }
    }
    None
}
