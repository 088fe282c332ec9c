//! When each `WAIT` ends. One heap of (end, waiter id) serves every queue,
//! so the server arms one timer, for the earliest end, instead of one per
//! waiter: a module timer per waiter costs an insertion and a removal in the
//! server's timer tree, whose depth grows with the number of waiters.
//!
//! A waiter that stops waiting otherwise (granted, failed, gone) is not
//! looked for in the heap: its entry is skipped when it comes up, and the
//! entries of departed waiters are dropped in bulk once they outnumber the
//! waiters, so each waiter costs O(1) amortized besides its push.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Entries a heap may hold beyond twice the number of waiters before the
/// departed ones are dropped.
const SLACK: usize = 64;

/// The ends of the running `WAIT`s, by waiter id. Which waiters are still
/// queued is the caller's to say (`is_queued`): this heap keeps no other
/// record of them.
#[derive(Debug, Default)]
pub(super) struct WaitEnds {
    /// (end in µs on the server's wait clock, waiter id), earliest first.
    heap: BinaryHeap<Reverse<(u64, u64)>>,
}

impl WaitEnds {
    /// Waiter `id`'s `WAIT` ends at `at_us`; `waiters` are queued now.
    pub(super) fn push(
        &mut self,
        at_us: u64,
        id: u64,
        waiters: usize,
        is_queued: impl Fn(u64) -> bool,
    ) {
        if self.heap.len() > 2 * waiters + SLACK {
            self.heap.retain(|Reverse((_, id))| is_queued(*id));
        }
        self.heap.push(Reverse((at_us, id)));
    }

    /// The earliest end of a `WAIT` still running; forgets the entries of
    /// departed waiters on the way.
    pub(super) fn next(&mut self, is_queued: impl Fn(u64) -> bool) -> Option<u64> {
        while let Some(&Reverse((at, id))) = self.heap.peek() {
            if is_queued(id) {
                return Some(at);
            }
            self.heap.pop();
        }
        None
    }

    /// Takes the id of a waiter whose `WAIT` has ended by `now_us` (departed
    /// or not: the caller skips those no longer queued).
    pub(super) fn pop_ended(&mut self, now_us: u64) -> Option<u64> {
        match self.heap.peek() {
            Some(&Reverse((at, id))) if at <= now_us => {
                self.heap.pop();
                Some(id)
            }
            _ => None,
        }
    }

    /// Entries in the heap, departed waiters' included.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.heap.len()
    }
}
