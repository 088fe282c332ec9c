//! `mutex`: no two believed holds conflict at the same time on a resource.
use super::limits::Limits;
use super::prep::Prepared;
use super::Violation;
use crate::history::{Kind, Mode};
use std::collections::HashMap;

/// Sweeps each resource's believed intervals `[start, end)` in time order
/// (an end before a start at the same instant: touching intervals do not
/// overlap) and reports each hold that began beside a conflicting one: an
/// exclusive hold beside any hold of another owner, a shared hold beside
/// another owner's exclusive one, permits beyond a semaphore's limit.
///
/// A semaphore's holds count their permits. The limit may change while it
/// is held (`DLOCK.RESIZE`; a limit lowered keeps the holds beyond it), so
/// the permits believed at once are judged against the largest limit in
/// force at some time from the latest invocation of their grants to now:
/// the last of them to be granted was granted then (after every other
/// grant, each after its own invocation), beside all the others.
pub fn check(p: &Prepared) -> Vec<Violation> {
    let limits = Limits::new(p);
    let mut per_res: Vec<Vec<(u64, bool, usize)>> = vec![Vec::new(); p.resources.len()];
    for (i, h) in p.holds.iter().enumerate() {
        if h.start < h.end {
            per_res[h.res as usize].push((h.start, true, i));
            per_res[h.res as usize].push((h.end, false, i));
        }
    }
    let mut out = Vec::new();
    for (r, mut evs) in per_res.into_iter().enumerate() {
        // (t, is_start): ends (false) sort before starts at one instant.
        evs.sort_unstable();
        let kind = p.resources[r].kind;
        let mut sweep = Sweep::default();
        for (_, start, i) in evs {
            let h = &p.holds[i];
            if !start {
                sweep.remove(i, h.owner, h.mode);
                continue;
            }
            let conflict = match kind {
                Kind::Semaphore { limit } => {
                    let active = || sweep.active.keys().map(|&j| &p.holds[j]);
                    let used: u64 = active().map(|x| u64::from(x.permits)).sum();
                    let since = active()
                        .map(|x| x.grant_invoke)
                        .fold(h.grant_invoke, u64::max);
                    let most = limits.largest(p, r as u32, limit, since, h.start);
                    let n = used + u64::from(h.permits);
                    (n > u64::from(most)).then(|| {
                        (
                            sweep.active.keys().copied().min().unwrap_or(i),
                            Some((n, most)),
                        )
                    })
                }
                _ => sweep.conflict(h.owner, h.mode).map(|j| (j, None)),
            };
            if let Some((j, permits)) = conflict {
                out.push(violation(p, r, j, i, permits));
            }
            sweep.add(i, h.owner, h.mode);
        }
    }
    out
}

fn violation(p: &Prepared, r: usize, a: usize, b: usize, permits: Option<(u64, u32)>) -> Violation {
    let (ha, hb) = (&p.holds[a], &p.holds[b]);
    let show = |h: &super::prep::Hold| {
        let weight = if h.permits > 1 {
            format!(", {} permits", h.permits)
        } else {
            String::new()
        };
        format!(
            "{} {} hold of owner {} (token {}, fence {}{weight}, believed {}..{})",
            p.ops[h.op].id,
            super::mode_name(h.mode),
            p.names[h.owner as usize],
            p.names[h.token as usize],
            h.fence,
            h.start,
            h.end
        )
    };
    let what = match permits {
        Some((n, most)) => format!(
            "{}: {n} permits held at once, limit {most} at most: op {} began beside op {}",
            p.resources[r].name,
            show(hb),
            show(ha)
        ),
        None => format!(
            "{}: op {} began beside op {}",
            p.resources[r].name,
            show(hb),
            show(ha)
        ),
    };
    let mut ops = vec![p.ops[ha.op].id, p.ops[hb.op].id];
    ops.sort_unstable();
    Violation {
        checker: "mutex",
        what,
        ops,
    }
}

/// The holds active at one instant of the sweep.
#[derive(Default)]
struct Sweep {
    /// Hold index -> (owner, mode).
    active: HashMap<usize, (u32, Mode)>,
    /// Owner -> (exclusive holds, shared holds).
    owners: HashMap<u32, (u32, u32)>,
    /// Owners with at least one exclusive hold.
    exclusive_owners: usize,
}

impl Sweep {
    fn add(&mut self, i: usize, owner: u32, mode: Mode) {
        self.active.insert(i, (owner, mode));
        let c = self.owners.entry(owner).or_default();
        if mode == Mode::Exclusive {
            c.0 += 1;
            if c.0 == 1 {
                self.exclusive_owners += 1;
            }
        } else {
            c.1 += 1;
        }
    }

    fn remove(&mut self, i: usize, owner: u32, mode: Mode) {
        if self.active.remove(&i).is_none() {
            return;
        }
        let c = self.owners.get_mut(&owner).expect("an active owner");
        if mode == Mode::Exclusive {
            c.0 -= 1;
            if c.0 == 0 {
                self.exclusive_owners -= 1;
            }
        } else {
            c.1 -= 1;
        }
        if *c == (0, 0) {
            self.owners.remove(&owner);
        }
    }

    /// An active hold that conflicts with a new hold of `owner` in `mode`.
    fn conflict(&self, owner: u32, mode: Mode) -> Option<usize> {
        let mine = self.owners.get(&owner).copied().unwrap_or((0, 0));
        let clash = match mode {
            Mode::Exclusive => self.owners.len() > usize::from(mine != (0, 0)),
            Mode::Shared => self.exclusive_owners > usize::from(mine.0 > 0),
        };
        if !clash {
            return None;
        }
        self.active
            .iter()
            .filter(|(_, &(o, m))| o != owner && (mode == Mode::Exclusive || m == Mode::Exclusive))
            .map(|(&j, _)| j)
            .min()
    }
}
