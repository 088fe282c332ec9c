//! When the entries of one queue give up (their `WAIT` ends): the earliest
//! (who has given up by now) and the latest (whether anyone still can be
//! granted).
//!
//! Two heaps whose entries are not removed when their waiter leaves: a
//! waiter leaving from the middle of a long queue would otherwise pay a
//! search of an ordered tree, a cache miss per level. A departed waiter's
//! entry is skipped when its time comes, dropped at once only from the top
//! of the latest (which must be a waiter that waits), and dropped in bulk
//! once they outnumber the waiters: the heaps are then rebuilt from the
//! waiters, read in the order they lie in memory rather than looked up one
//! by one, so each costs O(1) amortized besides its push. Serving the head of the queue, usually the earliest entry,
//! then pops nothing: a pop walks the heap's depth, a cache miss per
//! level.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Entries a heap may hold beyond twice the number of waiters before the
/// departed ones are dropped.
const SLACK: usize = 64;

#[derive(Debug, Default)]
pub(super) struct GiveUps {
    /// (give-up time, id), earliest first.
    earliest: BinaryHeap<Reverse<(u64, u64)>>,
    /// (give-up time, id), latest first.
    latest: BinaryHeap<(u64, u64)>,
    /// Entries of the heaps whose waiter still waits.
    live: usize,
}

impl GiveUps {
    /// Waiters that give up at some time.
    pub fn len(&self) -> usize {
        self.live
    }

    /// Waiter `id` gives up at `at`.
    pub fn insert(&mut self, at: u64, id: u64) {
        self.earliest.push(Reverse((at, id)));
        self.latest.push((at, id));
        self.live += 1;
    }

    /// A waiter that gives up left; `waits(id)` says whether waiter `id`
    /// still waits (the one that left no longer does), and `all()` gives
    /// the (give-up time, id) of every waiter that waits and gives up.
    pub fn remove<I: Iterator<Item = (u64, u64)>>(
        &mut self,
        waits: impl Fn(u64) -> bool,
        all: impl FnOnce() -> I,
    ) {
        self.live = self.live.saturating_sub(1);
        while let Some(&(_, id)) = self.latest.peek() {
            if waits(id) {
                break;
            }
            self.latest.pop();
        }
        let most = 2 * self.live + SLACK;
        if self.earliest.len() > most || self.latest.len() > most {
            // Into the heaps' own buffers: fresh ones would be written
            // cold, page by page.
            let mut latest = std::mem::take(&mut self.latest).into_vec();
            latest.clear();
            latest.extend(all());
            let mut earliest = std::mem::take(&mut self.earliest).into_vec();
            earliest.clear();
            earliest.extend(latest.iter().copied().map(Reverse));
            self.live = latest.len();
            self.earliest = earliest.into();
            self.latest = latest.into();
        }
    }

    /// The latest give-up time of a waiter that waits.
    pub fn latest(&self) -> Option<u64> {
        self.latest.peek().map(|(at, _)| *at)
    }

    /// The waiters that give up before `now`, earliest first; the caller
    /// removes each of them (`remove`).
    pub fn due(&mut self, now: u64, waits: impl Fn(u64) -> bool) -> Vec<u64> {
        let mut due = Vec::new();
        while let Some(&Reverse((at, id))) = self.earliest.peek() {
            if at >= now {
                break;
            }
            self.earliest.pop();
            if waits(id) {
                due.push(id);
            }
        }
        due
    }

    /// Entries in the heaps, departed waiters' included.
    #[cfg(test)]
    pub fn entries(&self) -> usize {
        self.earliest.len() + self.latest.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeSet, HashSet};

    /// Every waiter of `waiting` gives up at 50, 10 or 90 by its id.
    fn all(waiting: &HashSet<u64>) -> std::vec::IntoIter<(u64, u64)> {
        let at = |id: u64| [0, 50, 10, 90][id as usize % 4];
        let v: Vec<(u64, u64)> = waiting.iter().map(|&id| (at(id), id)).collect();
        v.into_iter()
    }

    #[test]
    fn the_tops_are_waiters_that_wait() {
        let mut g = GiveUps::default();
        let mut waiting: HashSet<u64> = HashSet::new();
        for (at, id) in [(50, 1), (10, 2), (90, 3)] {
            g.insert(at, id);
            waiting.insert(id);
        }
        assert_eq!(g.latest(), Some(90));
        waiting.remove(&3);
        g.remove(|id| waiting.contains(&id), || all(&waiting));
        assert_eq!((g.latest(), g.len()), (Some(50), 2));
        let due = g.due(51, |id| waiting.contains(&id));
        assert_eq!(due, [2, 1], "earliest first");
        for id in due {
            waiting.remove(&id);
            g.remove(|id| waiting.contains(&id), || all(&waiting));
        }
        assert_eq!((g.latest(), g.len()), (None, 0));
    }

    #[test]
    fn departed_entries_do_not_pile_up() {
        let mut g = GiveUps::default();
        let mut waiting: HashSet<u64> = HashSet::new();
        for id in 0..10_000u64 {
            g.insert(1_000_000 - id, id);
            waiting.insert(id);
            if id >= 10 {
                // Leaves from the middle: never at a top.
                let gone = id - 5;
                waiting.remove(&gone);
                g.remove(
                    |id| waiting.contains(&id),
                    || {
                        waiting
                            .iter()
                            .map(|&id| (1_000_000 - id, id))
                            .collect::<Vec<_>>()
                            .into_iter()
                    },
                );
            }
        }
        assert_eq!(g.len(), waiting.len());
        assert!(g.entries() <= 2 * (2 * waiting.len() + SLACK));
    }

    /// Random inserts and departures against an ordered set.
    #[test]
    fn matches_an_ordered_set() {
        let mut g = GiveUps::default();
        let mut set: BTreeSet<(u64, u64)> = BTreeSet::new();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next_id = 0u64;
        for _ in 0..20_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let now = next_id;
            match seed % 4 {
                0 | 1 => {
                    g.insert(now + seed % 1000, next_id);
                    set.insert((now + seed % 1000, next_id));
                    next_id += 1;
                }
                2 => {
                    if let Some(&e) = set.iter().nth((seed / 4) as usize % set.len().max(1)) {
                        set.remove(&e);
                        let ids: HashSet<u64> = set.iter().map(|(_, id)| *id).collect();
                        g.remove(|id| ids.contains(&id), || set.iter().copied());
                    }
                }
                _ => {
                    let ids: HashSet<u64> = set.iter().map(|(_, id)| *id).collect();
                    let due = g.due(now, |id| ids.contains(&id));
                    let want: Vec<u64> = set
                        .iter()
                        .take_while(|(at, _)| *at < now)
                        .map(|(_, id)| *id)
                        .collect();
                    let mut sorted = due.clone();
                    sorted.sort_unstable();
                    let mut want_sorted = want.clone();
                    want_sorted.sort_unstable();
                    assert_eq!(sorted, want_sorted);
                    // One at a time, as the queue removes them.
                    for gone in &due {
                        set.retain(|(_, id)| id != gone);
                        let ids: HashSet<u64> = set.iter().map(|(_, id)| *id).collect();
                        g.remove(|id| ids.contains(&id), || set.iter().copied());
                    }
                }
            }
            assert_eq!(g.len(), set.len());
            assert_eq!(g.latest(), set.last().map(|(at, _)| *at));
        }
    }
}
