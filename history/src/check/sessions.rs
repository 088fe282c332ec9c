//! `sessions` (docs/history.md, the `sessions` rule): no hold outlives its
//! session, a `DEADLOCK` refusal only with a hold of the refused session in
//! the cycle it names, no cycle of two bound waits left standing. The
//! bound holds themselves are believed holds (`session_bounds.rs`), judged
//! by `mutex` with the rest.
use super::prep::Prepared;
use super::{Violation, ASYNC_REPLICATION};
use crate::history::{Command, FaultKind, Kind, Mode, Outcome, Value};
use std::collections::{BTreeMap, HashMap};

/// After a session's end is decided, how long past its lock-delay a probe
/// waits before the hold must be gone: the server's clock is the wall
/// clock in ms, the recorder's a monotonic one.
const PROBE_SLACK_US: u64 = 50_000;
/// A `WAIT`'s timer may fire this much early (timer granularity).
const WAIT_SLACK_US: u64 = 2_000;

/// What the sessions' rules looked at.
#[derive(Debug, Default)]
pub struct Stats {
    pub sessions: u64,
    pub bound_holds: u64,
    /// Bound holds believed past their session's end by its lock-delay.
    pub delayed_holds: u64,
    /// Grants to another owner asked for inside such a lock-delay (after
    /// the session's end) and made after it.
    pub delay_waiters: u64,
    pub probes_judged: u64,
    pub deadlocks_judged: u64,
    /// Pairs of bound waits of two sessions surely queued at once.
    pub wait_pairs_judged: u64,
    /// Holds whose belief a failover or everysec crash cut short.
    pub cut_by_faults: u64,
}

pub fn check(p: &Prepared, limits: &mut BTreeMap<&'static str, u64>) -> (Vec<Violation>, Stats) {
    let mut out = Vec::new();
    let mut stats = Stats {
        sessions: p.session_recs.len() as u64,
        ..Stats::default()
    };
    let mut delayed = Vec::new();
    for h in &p.holds {
        let o = &p.ops[h.op];
        let Some(&n) = o.op.session.as_deref().and_then(|id| p.session_of.get(id)) else {
            continue;
        };
        let s = &p.session_recs[n];
        stats.bound_holds += 1;
        if s.lossy == Some(h.end) {
            stats.cut_by_faults += 1;
        }
        if s.lock_delay_us > 0 && h.end > s.end_lower_bound() && h.start < h.end {
            stats.delayed_holds += 1;
            delayed.push(h);
        }
    }
    // Grants to another owner asked for while a lock-delay held the
    // resource and made after it: the waiters the delay kept out.
    if !delayed.is_empty() {
        let mut grants: HashMap<u32, Vec<&super::prep::Grant>> = HashMap::new();
        for g in &p.grants {
            if delayed.iter().any(|h| h.res == g.res) {
                grants.entry(g.res).or_default().push(g);
            }
        }
        for h in &delayed {
            let s = p.session_recs[p.session_of[p.ops[h.op].op.session.as_deref().unwrap_or("")]]
                .end_lower_bound();
            stats.delay_waiters += grants
                .get(&h.res)
                .into_iter()
                .flatten()
                .filter(|g| {
                    g.owner != h.owner && g.invoke < h.end && g.invoke >= s && g.complete >= h.end
                })
                .count() as u64;
        }
    }
    probes(p, limits, &mut stats, &mut out);
    deadlocks(p, &mut stats, &mut out);
    cycles(p, &mut stats, &mut out);
    (out, stats)
}

/// No hold outlives its session: a probe `RELEASE` of a token granted under
/// a session, sent after a `CLOSE` or `KILL` of it was answered and its
/// lock-delay passed, answers 0.
fn probes(
    p: &Prepared,
    limits: &mut BTreeMap<&'static str, u64>,
    stats: &mut Stats,
    out: &mut Vec<Violation>,
) {
    for o in &p.ops {
        if !o.op.probe || !matches!(o.op.command, Command::Release | Command::Mrelease) {
            continue;
        }
        let Some(&n) = o.op.session.as_deref().and_then(|id| p.session_of.get(id)) else {
            continue;
        };
        let s = &p.session_recs[n];
        let Some(d) = s.decided else { continue };
        let decided = &p.ops[d];
        let Some(at) = decided.complete else { continue };
        if o.invoke < at + s.lock_delay_us + PROBE_SLACK_US {
            continue;
        }
        let Some(found) = o.int() else { continue };
        stats.probes_judged += 1;
        if found == 0 {
            continue;
        }
        if p.lossy_fault("main", s.opened, o.complete.unwrap_or(u64::MAX)) {
            *limits.entry(ASYNC_REPLICATION).or_default() += 1;
            continue;
        }
        out.push(Violation {
            checker: "sessions",
            what: format!(
                "{}: probe {} of token {} answered {found}: the hold outlived session {} (ended for sure by op {} at {at}, lock-delay {} ms)",
                o.op.resources.join(","),
                o.id,
                o.op.token,
                s.id,
                decided.id,
                s.lock_delay_us / 1000
            ),
            ops: vec![decided.id, o.id],
        });
    }
}

fn is_deadlock<'a>(o: &super::prep::OpRec<'a>) -> Option<&'a str> {
    match o.outcome {
        Some(Outcome::Fail { error }) if error.starts_with("DEADLOCK") => Some(error),
        _ => None,
    }
}

/// The resources a `DEADLOCK` error names (`through 'a' 'b'`).
fn named(error: &str) -> Vec<&str> {
    let Some((_, list)) = error.split_once(" through") else {
        return Vec::new();
    };
    list.split('\'').skip(1).step_by(2).collect()
}

/// A `DEADLOCK` refusal names a cycle from one of the request's resources
/// to one the refused session may have held then: granted (or maybe) to a
/// request of the session sent before the refusal's reply, not surely
/// released before the refusal was sent.
fn deadlocks(p: &Prepared, stats: &mut Stats, out: &mut Vec<Violation>) {
    let mut by_session: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, o) in p.ops.iter().enumerate() {
        if matches!(o.op.command, Command::Acquire | Command::Macquire) {
            if let Some(s) = o.op.session.as_deref() {
                by_session.entry(s).or_default().push(i);
            }
        }
    }
    let released_by = |client: u32, token: u32, members: usize| -> Option<u64> {
        p.ops
            .iter()
            .filter(|r| r.client == client && r.token == token)
            .filter(|r| matches!(r.op.command, Command::Release | Command::Mrelease))
            .filter(|r| r.int().is_some_and(|n| n >= members as i64))
            .filter_map(|r| r.complete)
            .min()
    };
    for (i, o) in p.ops.iter().enumerate() {
        let Some(error) = is_deadlock(o) else {
            continue;
        };
        let Some(session) = o.op.session.as_deref() else {
            continue;
        };
        stats.deadlocks_judged += 1;
        let names = named(error);
        let (Some(first), Some(last)) = (names.first(), names.last()) else {
            out.push(violation(
                o,
                format!("a DEADLOCK refusal names no cycle: {error}"),
            ));
            continue;
        };
        if !o.op.resources.iter().any(|r| r == first) {
            out.push(violation(
                o,
                format!("a DEADLOCK refusal's cycle does not start at what it asked for: {error}"),
            ));
            continue;
        }
        let refused_at = o.complete.unwrap_or(u64::MAX);
        let held = by_session.get(session).into_iter().flatten().any(|&j| {
            let a = &p.ops[j];
            let maybe = match a.outcome {
                None | Some(Outcome::Info { .. }) => true,
                Some(Outcome::Ok { value }) => matches!(value, Value::Fence(_)),
                Some(Outcome::Fail { .. }) => false,
            };
            j != i
                && maybe
                && a.root_invoke < refused_at
                && a.op.resources.iter().any(|r| r == last)
                && released_by(a.client, a.token, a.res.len()).is_none_or(|t| t >= o.invoke)
        });
        if !held {
            out.push(violation(
                o,
                format!(
                    "session {session} was refused DEADLOCK through {last}, which it did not hold: {error}"
                ),
            ));
        }
    }
}

fn violation(o: &super::prep::OpRec, what: String) -> Violation {
    Violation {
        checker: "sessions",
        what,
        ops: vec![o.id],
    }
}

/// No cycle left standing: two bound single-resource exclusive waits of two
/// sessions, each for a lock (plain or read-write) the other session surely held
/// (exclusive, bound) all the while, both told nil after their `WAIT`,
/// and surely queued at once. Whichever the server queued second closed
/// the cycle and had to be refused.
fn cycles(p: &Prepared, stats: &mut Stats, out: &mut Vec<Violation>) {
    // Bound exclusive holds by resource.
    let mut bound: HashMap<u32, Vec<usize>> = HashMap::new();
    for (i, h) in p.holds.iter().enumerate() {
        let o = &p.ops[h.op];
        if o.op.session.is_some() && h.mode == Mode::Exclusive && h.start < h.end {
            bound.entry(h.res).or_default().push(i);
        }
    }
    // Waits told nil after their timeout: (op, earliest and latest queueing).
    let mut waits = Vec::new();
    for (i, o) in p.ops.iter().enumerate() {
        let (Some(w), Some(_), Some(done)) = (o.op.wait_ms, o.op.session.as_ref(), o.complete)
        else {
            continue;
        };
        let single = o.op.command == Command::Acquire && o.op.mode == Mode::Exclusive;
        let lock = o
            .res
            .first()
            .is_some_and(|&r| !matches!(p.resources[r as usize].kind, Kind::Semaphore { .. }));
        if !single || !lock || !matches!(o.value(), Some(Value::Nil)) {
            continue;
        }
        let unblocked = p.fault_overlaps(o.invoke, done, |f| {
            f.kind == FaultKind::ClientUnblock && f.client == Some(o.client)
        });
        let w = (w * 1000).saturating_sub(WAIT_SLACK_US);
        if unblocked || done < w {
            continue;
        }
        // Queued at some T in [invoke, done - w], waiting until T + w.
        waits.push((i, o.invoke, done - w, w));
    }
    let holds_over = |session: &str, res: u32, from: u64, to: u64| {
        bound.get(&res).into_iter().flatten().any(|&h| {
            let h = &p.holds[h];
            p.ops[h.op].op.session.as_deref() == Some(session) && h.start <= from && to < h.end
        })
    };
    for (x, &(i, inv_i, late_i, w_i)) in waits.iter().enumerate() {
        for &(j, inv_j, late_j, w_j) in &waits[x + 1..] {
            if inv_j > inv_i + w_i {
                break; // in invocation order: no later one overlaps
            }
            let (a, b) = (&p.ops[i], &p.ops[j]);
            let (sa, sb) = (a.op.session.as_deref(), b.op.session.as_deref());
            let (Some(sa), Some(sb)) = (sa, sb) else {
                continue;
            };
            if sa == sb || a.res[0] == b.res[0] {
                continue;
            }
            // Both surely queued at the later one's queueing time.
            let from = inv_i.max(inv_j);
            let to = late_i.max(late_j);
            if to > (inv_i + w_i).min(inv_j + w_j) || from > to {
                continue;
            }
            stats.wait_pairs_judged += 1;
            // a waits for what b's session holds, and the other way round.
            if !holds_over(sb, a.res[0], from, to) || !holds_over(sa, b.res[0], from, to) {
                continue;
            }
            out.push(Violation {
                checker: "sessions",
                what: format!(
                    "a cycle left standing: session {sa} waited for {} held by session {sb}, which waited for {} held by {sa}, both until their WAIT ran out",
                    p.resources[a.res[0] as usize].name,
                    p.resources[b.res[0] as usize].name
                ),
                ops: vec![a.id, b.id],
            });
        }
    }
}

/// What a sessions workload must have exercised.
pub fn gaps(s: &Stats) -> Vec<String> {
    let mut out = Vec::new();
    let mut gap = |none: bool, what: &str| {
        if none {
            out.push(what.to_string());
        }
    };
    gap(s.bound_holds == 0, "no hold was bound to a session");
    gap(
        s.delayed_holds == 0,
        "no bound hold was believed through a lock-delay",
    );
    gap(
        s.probes_judged == 0,
        "no probe after a session's end was judged",
    );
    gap(
        s.deadlocks_judged == 0,
        "no bound wait was refused DEADLOCK",
    );
    out
}
