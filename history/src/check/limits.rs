//! A semaphore's limit over time: the one its requests name, and each one
//! `DLOCK.RESIZE` set while it was held (docs/history.md, `mutex`).
//!
//! A resize answered with the previous limit took effect before its reply;
//! one whose outcome is unknown may have, up to its completion; one
//! answered nil (nothing held) or an error changed nothing. A limit set by
//! a resize is over once a later resize surely took its place, unless a
//! fault that loses acknowledged writes (a failover, an everysec crash)
//! came soon after that later one and may have undone it. The limit the
//! requests name comes back whenever the last permit ends: it counts
//! unless the resource was surely held without a break since a resize
//! that surely took effect.
use super::prep::Prepared;
use crate::history::{Command, Outcome, Value};

/// How long after a resize's reply a lossy fault may still undo it: the
/// replica's lag behind a master that goes on alone (`failover_stale`, up
/// to 600 ms), the detection of the dropped link, and `appendfsync
/// everysec`'s second, with room to spare.
const UNDONE_WITHIN_US: u64 = 3_000_000;

struct Resize {
    invoke: u64,
    /// `u64::MAX` while pending.
    complete: u64,
    limit: u32,
    /// It surely took effect (answered with the previous limit) and no
    /// lossy fault soon after may have undone it.
    stays: bool,
    /// From when its limit is surely no longer in force (`u64::MAX`: it
    /// may be as long as the resource is held).
    superseded: u64,
}

pub struct Limits {
    /// Per resource, by invocation.
    per_res: Vec<Vec<Resize>>,
    /// Per resource, the spans its believed holds cover without a gap
    /// (merged, in time order): the server held it throughout each.
    covered: Vec<Vec<(u64, u64)>>,
}

impl Limits {
    pub fn new(p: &Prepared) -> Limits {
        let mut per_res: Vec<Vec<Resize>> = (0..p.resources.len()).map(|_| Vec::new()).collect();
        for o in &p.ops {
            if o.op.command != Command::Resize {
                continue;
            }
            let (maybe, surely) = match (o.outcome, o.value()) {
                (Some(Outcome::Info { .. }) | None, _) => (true, false),
                (_, Some(Value::Int(_))) => (true, true),
                _ => (false, false),
            };
            let Some(limit) = o.op.limit.filter(|_| maybe) else {
                continue;
            };
            let r = o.res[0] as usize;
            let complete = o.complete.unwrap_or(u64::MAX);
            let undone = p.lossy_fault(
                p.resources[r].group,
                complete,
                complete.saturating_add(UNDONE_WITHIN_US),
            );
            per_res[r].push(Resize {
                invoke: o.invoke,
                complete,
                limit,
                stays: surely && !undone,
                superseded: u64::MAX,
            });
        }
        for list in &mut per_res {
            for i in 0..list.len() {
                let done = list[i].complete;
                list[i].superseded = list[i + 1..]
                    .iter()
                    .filter(|y| y.stays && y.invoke > done)
                    .map(|y| y.complete)
                    .min()
                    .unwrap_or(u64::MAX);
            }
        }
        let mut spans: Vec<Vec<(u64, u64)>> = vec![Vec::new(); p.resources.len()];
        for h in p.holds.iter().filter(|h| h.start < h.end) {
            spans[h.res as usize].push((h.start, h.end));
        }
        let covered = spans
            .into_iter()
            .map(|mut v| {
                v.sort_unstable();
                // Touching spans join: the one ending was released after
                // its end, the one starting granted before its start.
                let mut merged: Vec<(u64, u64)> = Vec::new();
                for (s, e) in v {
                    match merged.last_mut() {
                        Some(last) if s <= last.1 => last.1 = last.1.max(e),
                        _ => merged.push((s, e)),
                    }
                }
                merged
            })
            .collect();
        Limits { per_res, covered }
    }

    /// Whether the limit the requests name may be in force at some time in
    /// `[from, to]`: unless a resize surely took effect (and stays) before
    /// `from` and the resource was held without a gap from that resize's
    /// invocation to `to`, no fault that loses writes coming between, so
    /// its last permit never ended and no request named the limit again.
    fn named_may_return(&self, p: &Prepared, r: u32, from: u64, to: u64) -> bool {
        let group = p.resources[r as usize].group;
        let covered = &self.covered[r as usize];
        let held_throughout = |a: u64, b: u64| {
            let i = covered.partition_point(|&(s, _)| s <= a);
            i > 0 && covered[i - 1].1 >= b
        };
        !self.per_res[r as usize]
            .iter()
            .filter(|x| x.stays && x.complete <= from)
            .any(|x| held_throughout(x.invoke, to) && !p.lossy_fault(group, x.invoke, to))
    }

    /// The largest limit that may have been in force on resource `r` at
    /// some time in `[from, to]`; `named` is the one its requests name.
    pub fn largest(&self, p: &Prepared, r: u32, named: u32, from: u64, to: u64) -> u32 {
        let base = if self.named_may_return(p, r, from, to) {
            named
        } else {
            0
        };
        self.per_res[r as usize]
            .iter()
            .take_while(|x| x.invoke < to)
            .filter(|x| x.superseded >= from)
            .map(|x| x.limit)
            .fold(base, u32::max)
    }

    /// The largest limit resource `r` may ever have had.
    pub fn ever(&self, r: u32, named: u32) -> u32 {
        self.per_res[r as usize]
            .iter()
            .map(|x| x.limit)
            .fold(named, u32::max)
    }
}
