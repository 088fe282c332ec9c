//! A semaphore's limit over time: the one its requests name, and each one
//! `DLOCK.RESIZE` set while it was held (docs/history.md, `mutex`).
//!
//! A resize answered with the previous limit took effect before its reply;
//! one whose outcome is unknown may have, up to its completion; one
//! answered nil (nothing held) or an error changed nothing. A limit set by
//! a resize is over once a later resize surely took its place, unless a
//! fault that loses acknowledged writes (a failover, an everysec crash)
//! came soon after that later one and may have undone it. The limit the
//! requests name comes back whenever the last permit ends, so it is always
//! possible.
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
    /// From when its limit is surely no longer in force (`u64::MAX`: it
    /// may be as long as the resource is held).
    superseded: u64,
}

pub struct Limits {
    /// Per resource, by invocation.
    per_res: Vec<Vec<Resize>>,
}

impl Limits {
    pub fn new(p: &Prepared) -> Limits {
        let mut per_res: Vec<Vec<Resize>> = (0..p.resources.len()).map(|_| Vec::new()).collect();
        let mut took: Vec<Vec<bool>> = per_res.iter().map(|_| Vec::new()).collect();
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
            per_res[r].push(Resize {
                invoke: o.invoke,
                complete: o.complete.unwrap_or(u64::MAX),
                limit,
                superseded: u64::MAX,
            });
            took[r].push(surely);
        }
        for (r, list) in per_res.iter_mut().enumerate() {
            let group = p.resources[r].group;
            // When each surely applied resize surely stays: its reply,
            // unless a lossy fault came soon after.
            let stays: Vec<Option<u64>> = list
                .iter()
                .zip(&took[r])
                .map(|(x, &t)| {
                    let undone = p.lossy_fault(
                        group,
                        x.complete,
                        x.complete.saturating_add(UNDONE_WITHIN_US),
                    );
                    (t && !undone).then_some(x.complete)
                })
                .collect();
            for i in 0..list.len() {
                let done = list[i].complete;
                list[i].superseded = (i + 1..list.len())
                    .filter(|&j| list[j].invoke > done)
                    .filter_map(|j| stays[j])
                    .min()
                    .unwrap_or(u64::MAX);
            }
        }
        Limits { per_res }
    }

    /// The largest limit that may have been in force on resource `r` at
    /// some time in `[from, to]`; `named` is the one its requests name.
    pub fn largest(&self, r: u32, named: u32, from: u64, to: u64) -> u32 {
        self.per_res[r as usize]
            .iter()
            .take_while(|x| x.invoke < to)
            .filter(|x| x.superseded >= from)
            .map(|x| x.limit)
            .fold(named, u32::max)
    }

    /// The largest limit resource `r` may ever have had.
    pub fn ever(&self, r: u32, named: u32) -> u32 {
        self.largest(r, named, 0, u64::MAX)
    }
}
