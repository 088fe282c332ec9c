//! `liveness` (FIFO): among exclusive waiters of a plain lock, one that
//! surely queued first is not passed.
use super::prep::{OpRec, Prepared};
use super::Violation;
use crate::history::{Command, FaultKind, Kind, Mode, Value};
use std::collections::HashSet;

/// How much earlier A's request must have been sent than B's (µs).
pub const AHEAD_US: u64 = 500_000;
/// No fault may come this close before A's request (µs).
pub const FAULT_MARGIN_US: u64 = 1_000_000;
/// B's grant must come this long before A's timeout (µs).
pub const TIMEOUT_SLACK_US: u64 = 100_000;

/// Candidates: single-resource exclusive `ACQUIRE ... WAIT` without `OWNER`
/// on a plain resource, from a client not behind the lost-reply proxy, not
/// a retry and not a token's later acquire (those may be renewals of a hold
/// granted long before). For A and B with A invoked at least 500 ms before
/// B, B granted fence fb, and no fault (but `lost_reply`, which only drops a
/// proxied client's reply) overlapping [A.invoke - 1 s, B.complete]: A was
/// passed if it was granted a fence above fb, or it was told nil although
/// B was granted more than 100 ms before A's timeout.
pub fn check(p: &Prepared) -> Vec<Violation> {
    let mut seen: HashSet<(u32, u32)> = HashSet::new();
    let mut per_res: Vec<Vec<usize>> = vec![Vec::new(); p.resources.len()];
    for (i, o) in p.ops.iter().enumerate() {
        if o.op.command != Command::Acquire {
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
            && !Prepared::proxied(o.client)
            && o.complete.is_some()
        {
            per_res[r as usize].push(i);
        }
    }
    let mut out = Vec::new();
    for list in per_res {
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
                if let Some(v) = passed(p, &p.ops[a], ob, *fb) {
                    out.push(v);
                }
            }
        }
    }
    out
}

fn passed(p: &Prepared, a: &OpRec, b: &OpRec, fb: u64) -> Option<Violation> {
    let b_done = b.complete?;
    let how = match a.value()? {
        Value::Fence(fa) if *fa > fb => format!("was granted fence {fa} after B's {fb}"),
        Value::Nil => {
            let wait = a.op.wait_ms? * 1000;
            if wait != 0 && b_done + TIMEOUT_SLACK_US >= a.invoke + wait {
                return None;
            }
            format!(
                "was told nil, while B was granted at {b_done}, before A's timeout at {}",
                a.invoke + wait
            )
        }
        _ => return None,
    };
    let from = a.invoke.saturating_sub(FAULT_MARGIN_US);
    if p.fault_overlaps(from, b_done, |f| f.kind != FaultKind::LostReply) {
        return None;
    }
    Some(Violation {
        checker: "liveness",
        what: format!(
            "{}: FIFO: waiter A (client {}, sent at {}) was passed by B (client {}, sent at {}, granted fence {fb}): A {how}",
            p.resources[a.res[0] as usize].name,
            a.client,
            a.invoke,
            b.client,
            b.invoke
        ),
        ops: vec![a.id, b.id],
    })
}
