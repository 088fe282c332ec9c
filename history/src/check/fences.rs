//! `fences`: a new owner's fence exceeds every fence granted on the
//! resource before it asked; no two owners share a fence on one resource;
//! an owner's further holds reuse its fence.
use super::prep::Prepared;
use super::Violation;
use crate::history::{Command, FaultKind, Kind, Value};
use std::collections::HashMap;

/// Every grant (acknowledged or not), member by member. A grant whose owner
/// had an earlier grant (by invocation) of the same fence on the resource
/// is its owner's fence again (a retry, a reentrant, upgraded or downgraded
/// hold). Any other grant must be above every fence whose grant completed
/// before this one was invoked (for a retry: before the first try was
/// invoked). Separately, a fence given to two owners on one resource is
/// reported once per later owner's grant.
pub fn check(p: &Prepared) -> Vec<Violation> {
    let g = &p.grants;
    let mut out = Vec::new();
    // The first grant (by invocation) of each (resource, owner, fence).
    let mut first: HashMap<(u32, u32, u64), (u64, usize)> = HashMap::new();
    // The first owner of each (resource, fence).
    let mut fence_owner: HashMap<(u32, u64), (u32, usize)> = HashMap::new();
    let mut by_invoke: Vec<usize> = (0..g.len()).collect();
    by_invoke.sort_by_key(|&i| (g[i].invoke, i));
    for &i in &by_invoke {
        first
            .entry((g[i].res, g[i].owner, g[i].fence))
            .or_insert((g[i].invoke, i));
        let (owner, j) = *fence_owner
            .entry((g[i].res, g[i].fence))
            .or_insert((g[i].owner, i));
        if owner != g[i].owner {
            out.push(Violation {
                checker: "fences",
                what: format!(
                    "{}: fence {} granted to owner {} (op {}) and to owner {} (op {})",
                    p.resources[g[i].res as usize].name,
                    g[i].fence,
                    p.names[owner as usize],
                    p.ops[g[j].op].id,
                    p.names[g[i].owner as usize],
                    p.ops[g[i].op].id
                ),
                ops: ids(p, g[j].op, g[i].op),
            });
        }
    }
    let mut by_complete: Vec<usize> = (0..g.len()).collect();
    by_complete.sort_by_key(|&i| (g[i].complete, i));
    // Per resource: the highest fence (and its grant) completed so far.
    let mut high: Vec<Option<(u64, usize)>> = vec![None; p.resources.len()];
    let mut next = 0;
    for &i in &by_invoke {
        while next < by_complete.len() && g[by_complete[next]].complete < g[i].invoke {
            let c = by_complete[next];
            let h = &mut high[g[c].res as usize];
            if h.is_none_or(|(f, _)| g[c].fence > f) {
                *h = Some((g[c].fence, c));
            }
            next += 1;
        }
        if first[&(g[i].res, g[i].owner, g[i].fence)].1 != i {
            continue; // the owner's fence again
        }
        let Some((f, j)) = high[g[i].res as usize] else {
            continue;
        };
        if g[i].fence <= f {
            let fault = p
                .faults
                .iter()
                .rev()
                .find(|x| x.start <= g[i].invoke && x.start >= g[j].complete.min(g[i].invoke));
            out.push(Violation {
                checker: "fences",
                what: format!(
                    "{}: fence {} granted to new owner {} (op {}) is not above fence {} of op {}, completed at {} before it was invoked at {}{}",
                    p.resources[g[i].res as usize].name,
                    g[i].fence,
                    p.names[g[i].owner as usize],
                    p.ops[g[i].op].id,
                    f,
                    p.ops[g[j].op].id,
                    g[j].complete,
                    g[i].invoke,
                    fault.map_or(String::new(), |x| format!(
                        " (after a {} at {})",
                        super::fault_name(x.kind),
                        x.start
                    ))
                ),
                ops: ids(p, g[j].op, g[i].op),
            });
        }
    }
    out.extend(owner_fence(p));
    out.extend(handovers(p));
    out
}

/// A hold handed over (`RELEASE r x TO y` answered 1) goes to `y`: the
/// request `y` had queued then is granted (never told nil), with a fence
/// above `x`'s, the next one the server draws, as for any grant to a new
/// owner, even when `y` asked before `x` was granted.
fn handovers(p: &Prepared) -> Vec<Violation> {
    // The first grant of each (resource, token): tokens are fresh per
    // acquisition, so its retries are granted the same fence.
    let mut grant_of: HashMap<(u32, &str), (u64, usize)> = HashMap::new();
    for g in &p.grants {
        let token = p.names[p.ops[g.op].token as usize];
        grant_of.entry((g.res, token)).or_insert((g.fence, g.op));
    }
    // Each (resource, token)'s acquires, by invocation.
    let mut asked: HashMap<(u32, &str), Vec<usize>> = HashMap::new();
    for (i, a) in p.ops.iter().enumerate() {
        if a.op.command == Command::Acquire {
            asked
                .entry((a.res[0], p.names[a.token as usize]))
                .or_default()
                .push(i);
        }
    }
    let mut out = Vec::new();
    for o in &p.ops {
        let (Some(to), Some(1)) = (&o.op.to, o.int()) else {
            continue;
        };
        let r = o.res[0];
        // The target's request queued when the handover was sent was
        // granted by it: told nil is a handover that did not happen.
        let pending = asked.get(&(r, to.as_str())).and_then(|list| {
            list.iter()
                .map(|&i| &p.ops[i])
                .find(|a| a.invoke < o.invoke && a.complete.is_none_or(|c| c > o.invoke))
        });
        // `CLIENT UNBLOCK` of the target before its reply was sent revokes
        // the grant and answers nil.
        let unblocked = |a: &super::prep::OpRec| {
            let end = a.complete.unwrap_or(u64::MAX);
            p.fault_overlaps(a.invoke, end, |f| {
                f.kind == FaultKind::ClientUnblock && f.client == Some(a.client)
            })
        };
        let told_nil = pending.filter(|a| matches!(a.value(), Some(Value::Nil)) && !unblocked(a));
        if let Some(a) = told_nil {
            out.push(Violation {
                checker: "fences",
                what: format!(
                    "{}: op {} handed the hold of token {} over to token {to}, whose request (op {}) was told nil",
                    p.resources[r as usize].name,
                    o.id,
                    p.names[o.token as usize],
                    a.id
                ),
                ops: vec![a.id.min(o.id), a.id.max(o.id)],
            });
        }
        let from = grant_of.get(&(r, p.names[o.token as usize]));
        let (Some(&(fx, gx)), Some(&(fy, gy))) = (from, grant_of.get(&(r, to.as_str()))) else {
            continue;
        };
        if fy > fx {
            continue;
        }
        let mut ops = vec![p.ops[gx].id, o.id, p.ops[gy].id];
        ops.sort_unstable();
        out.push(Violation {
            checker: "fences",
            what: format!(
                "{}: op {} handed the hold of token {} (fence {fx}, op {}) over to token {to}, granted fence {fy} (op {}), not above it",
                p.resources[r as usize].name,
                o.id,
                p.names[o.token as usize],
                p.ops[gx].id,
                p.ops[gy].id
            ),
            ops,
        });
    }
    out
}

/// A grant under `OWNER` while that owner surely held the resource under
/// another token (a believed hold spanning the whole grant): the owner's
/// fence again (reentrant, upgrade, downgrade), unless the believed hold
/// may have been lost (a non-durable hold on `main` with a failover or an
/// everysec crash since its grant).
fn owner_fence(p: &Prepared) -> Vec<Violation> {
    let mut holds: HashMap<(u32, u32), Vec<usize>> = HashMap::new();
    for (i, h) in p.holds.iter().enumerate() {
        holds.entry((h.res, h.owner)).or_default().push(i);
    }
    let mut out = Vec::new();
    for g in &p.grants {
        let o = &p.ops[g.op];
        if o.op.owner.is_none()
            || matches!(p.resources[g.res as usize].kind, Kind::Semaphore { .. })
        {
            continue;
        }
        let Some(list) = holds.get(&(g.res, g.owner)) else {
            continue;
        };
        for &i in list {
            let h = &p.holds[i];
            if h.token == o.token || h.start > g.invoke || g.complete >= h.end || h.fence == g.fence
            {
                continue;
            }
            let res = &p.resources[g.res as usize];
            let durable = h.durable_bound.is_some_and(|b| g.complete < b);
            let maybe_lost = !durable
                && res.group == "main"
                && p.lossy_fault("main", h.grant_invoke, g.complete);
            if maybe_lost {
                continue;
            }
            out.push(Violation {
                checker: "fences",
                what: format!(
                    "{}: owner {} was granted fence {} (op {}) while it held fence {} (op {}, token {}, believed {}..{})",
                    res.name,
                    p.names[g.owner as usize],
                    g.fence,
                    o.id,
                    h.fence,
                    p.ops[h.op].id,
                    p.names[h.token as usize],
                    h.start,
                    h.end
                ),
                ops: ids(p, h.op, g.op),
            });
            break;
        }
    }
    out
}

fn ids(p: &Prepared, a: usize, b: usize) -> Vec<u64> {
    let mut v = vec![p.ops[a].id, p.ops[b].id];
    v.sort_unstable();
    v.dedup();
    v
}
