//! `liveness` (FIFO within a priority, bounded passing across): among
//! exclusive waiters of a plain lock, one that surely ranks first is not
//! passed. With priorities (docs/waiting.md#priorities) B may pass an
//! earlier A only when `arrival_B - arrival_A < (p_B - p_A) * aging`: a
//! pair is judged only when B was sent so much later that it surely
//! ranks behind A, and the passes the bound allows (B of a higher
//! priority, surely sent after A, granted first) are counted, as
//! coverage.
use super::prep::{FaultRec, OpRec, Prepared};
use super::Violation;
use crate::history::{Command, FaultKind, Kind, Mode, Value};
use std::collections::{BTreeMap, HashSet};

/// How much earlier A's request must have been sent than B's (µs): more
/// than a client thread is ever kept from sending on a loaded 2-core box
/// (delays of 100+ ms happen) and than a server without a stall takes to
/// read both requests.
pub const AHEAD_US: u64 = 500_000;
/// A fault that disturbs the pair may not come this close before A's
/// request (µs).
pub const FAULT_MARGIN_US: u64 = 1_000_000;
/// B's grant must come this long before A's timeout (µs).
pub const TIMEOUT_SLACK_US: u64 = 100_000;

/// The servers' `dlock.priority-aging-ms` when the history does not say
/// (the module's default).
pub const DEFAULT_AGING_MS: u64 = 1000;

/// What the FIFO rule found: its violations and, per resource, how many
/// pairs it judged (a run that judges none is a coverage gap) and how many
/// passes the priorities' bound allowed.
pub struct Fifo {
    pub violations: Vec<Violation>,
    pub judged: BTreeMap<String, u64>,
    /// Pairs where B, of a higher priority and sent at least `AHEAD_US`
    /// after A (so surely queued after it), was granted first while still
    /// inside its window: passes the bound allows, seen happening. Only
    /// resources where some request named a priority above 0.
    pub passes: BTreeMap<String, u64>,
}

/// A request's priority: `PRIORITY p`, or 0 when it named none.
pub fn priority(o: &OpRec) -> u16 {
    o.op.priority.unwrap_or(0)
}

/// How much later than A (µs) B must be sent to surely rank behind A:
/// `AHEAD_US` for arrival, plus B's head start `(p_B - p_A) * aging`
/// when B's priority is higher.
pub fn behind_after(p: &Prepared, a: &OpRec, b: &OpRec) -> u64 {
    let aging_us = p.priority_aging_ms.unwrap_or(DEFAULT_AGING_MS) * 1000;
    AHEAD_US + u64::from(priority(b).saturating_sub(priority(a))) * aging_us
}

/// Candidates: single-resource exclusive `ACQUIRE ... WAIT` without `OWNER`
/// on a plain resource, from a client not behind the lost-reply proxy, not
/// a retry and not a token's later acquire (those may be renewals of a hold
/// granted long before). For A and B with A invoked at least 500 ms before
/// B, A not completed before B's invocation, and B granted fence fb, the
/// pair is judged when A's outcome tells whether it was passed and no
/// fault that could disturb the pair (`disturbs`) overlaps it: A was passed
/// if it was granted a fence above fb, or it was told nil although B was
/// granted more than 100 ms before A's timeout.
pub fn check(p: &Prepared) -> Fifo {
    let mut seen: HashSet<(u32, u32)> = HashSet::new();
    let mut per_res: Vec<Vec<usize>> = vec![Vec::new(); p.resources.len()];
    // A waiter a holder handed over to (`RELEASE ... TO`) is granted out
    // of turn: it is judged in no pair.
    let handed: HashSet<(u32, &str)> = p
        .ops
        .iter()
        .filter_map(|o| Some((*o.res.first()?, o.op.to.as_deref()?)))
        .collect();
    for (i, o) in p.ops.iter().enumerate() {
        if o.op.command != Command::Acquire
            || handed.contains(&(o.res[0], p.names[o.token as usize]))
        {
            continue;
        }
        let first = seen.insert((o.client, o.token));
        let r = o.res[0];
        if first
            && o.res.len() == 1
            && p.resources[r as usize].kind == Kind::Plain
            && o.op.mode == Mode::Exclusive
            && o.op.owner.is_none()
            && o.op.limit.is_none()
            && o.op.wait_ms.is_some()
            && o.op.retry_of.is_none()
            && !p.proxied(o.client)
            && o.complete.is_some()
        {
            per_res[r as usize].push(i);
        }
    }
    let mut out = Fifo {
        violations: Vec::new(),
        judged: BTreeMap::new(),
        passes: BTreeMap::new(),
    };
    for (r, list) in per_res.into_iter().enumerate() {
        let res = &p.resources[r];
        if res.kind != Kind::Plain {
            continue;
        }
        let mut judged = 0;
        let mut passes = 0;
        let prioritized = list.iter().any(|&i| priority(&p.ops[i]) > 0);
        // `list` is in invocation order; `waiting` holds the As sent at
        // least 500 ms before the current B and not completed before it.
        let mut waiting: Vec<usize> = Vec::new();
        let mut next = 0;
        for &b in &list {
            let ob = &p.ops[b];
            let Some(Value::Fence(fb)) = ob.value() else {
                continue;
            };
            while next < list.len() && p.ops[list[next]].invoke + AHEAD_US <= ob.invoke {
                waiting.push(list[next]);
                next += 1;
            }
            waiting.retain(|&a| p.ops[a].complete.is_some_and(|c| c > ob.invoke));
            for &a in &waiting {
                let oa = &p.ops[a];
                // Sent within B's head start: B may rank either side.
                let surely_behind = ob.invoke >= oa.invoke + behind_after(p, oa, ob);
                match judge(p, res.group, oa, ob, *fb) {
                    Judged::Not => {}
                    Judged::Kept if surely_behind => judged += 1,
                    Judged::Passed(v) if surely_behind => {
                        judged += 1;
                        out.violations.push(v);
                    }
                    Judged::Kept => {}
                    // A higher B inside its window: allowed.
                    Judged::Passed(_) => passes += 1,
                }
            }
        }
        out.judged.insert(res.name.to_string(), judged);
        if prioritized {
            out.passes.insert(res.name.to_string(), passes);
        }
    }
    out
}

enum Judged {
    /// A's outcome cannot tell, or a fault may have disturbed the pair.
    Not,
    /// A kept its place.
    Kept,
    Passed(Violation),
}

/// Whether fault `f` on the resource's `group` may reorder or disturb the
/// pair A, B. A server stall (`client_pause`, `debug_sleep`,
/// `slow_script`) leaves requests sent meanwhile in the sockets, read in
/// any order when it ends; a kill -9 or a failover of the master closes
/// every connection and loses or rebuilds the queues. `client_kill` and
/// `client_unblock` take one waiter out of the queue: only A's or B's
/// changes the pair (an unblocked A is told nil early); another client's
/// leaves the order of the rest as it was. `lost_reply` only drops a
/// proxied client's reply, and neither is proxied.
pub fn disturbs(f: &FaultRec, group: &str, a: &OpRec, b: &OpRec) -> bool {
    if f.group != group {
        return false;
    }
    match f.kind {
        FaultKind::ClientPause
        | FaultKind::DebugSleep
        | FaultKind::SlowScript
        | FaultKind::Kill9Always
        | FaultKind::Kill9Everysec
        | FaultKind::Failover
        | FaultKind::FailoverStale => true,
        // A fault that names no client may have hit either.
        FaultKind::ClientKill | FaultKind::ClientUnblock => {
            f.client.is_none_or(|c| c == a.client || c == b.client)
        }
        FaultKind::LostReply => false,
    }
}

/// A `client_kill` or `client_unblock` that (may have) hit A's client.
pub fn hits(f: &FaultRec, group: &str, a: &OpRec) -> bool {
    f.group == group
        && matches!(f.kind, FaultKind::ClientKill | FaultKind::ClientUnblock)
        && f.client.is_none_or(|c| c == a.client)
}

fn judge(p: &Prepared, group: &str, a: &OpRec, b: &OpRec, fb: u64) -> Judged {
    let (Some(b_done), Some(a_done)) = (b.complete, a.complete) else {
        return Judged::Not;
    };
    let how = match a.value() {
        Some(Value::Fence(fa)) if *fa > fb => {
            Some(format!("was granted fence {fa} after B's {fb}"))
        }
        Some(Value::Fence(_)) => None,
        Some(Value::Nil) => {
            let Some(wait) = a.op.wait_ms.map(|w| w * 1000) else {
                return Judged::Not;
            };
            if wait == 0 || b_done + TIMEOUT_SLACK_US >= a.invoke + wait {
                return Judged::Not;
            }
            Some(format!(
                "was told nil, while B was granted at {b_done}, before A's timeout at {}",
                a.invoke + wait
            ))
        }
        _ => return Judged::Not,
    };
    // Once B is granted the order is decided; a fault that hit A's client
    // is looked for up to A's completion too (more than needed: one that
    // took A out after B's grant does not excuse B's grant).
    let from = a.invoke.saturating_sub(FAULT_MARGIN_US);
    if p.fault_overlaps(from, b_done, |f| disturbs(f, group, a, b))
        || p.fault_overlaps(from, a_done, |f| hits(f, group, a))
    {
        return Judged::Not;
    }
    let Some(how) = how else {
        return Judged::Kept;
    };
    let ranks = if a.op.priority.is_some() || b.op.priority.is_some() {
        format!(
            " (priority {} and {}: B may pass only if sent less than {} ms after A, with the 500 ms allowance for arrival)",
            priority(a),
            priority(b),
            behind_after(p, a, b) / 1000
        )
    } else {
        String::new()
    };
    Judged::Passed(Violation {
        checker: "liveness",
        what: format!(
            "{}: FIFO: waiter A (client {}, sent at {}) was passed by B (client {}, sent at {}, granted fence {fb}): A {how}{ranks}",
            p.resources[a.res[0] as usize].name,
            a.client,
            a.invoke,
            b.client,
            b.invoke
        ),
        ops: vec![a.id, b.id],
    })
}
