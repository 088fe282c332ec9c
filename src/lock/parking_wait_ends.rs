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
use std::hash::Hash;

use super::{Parking, State};

/// Entries a heap may hold beyond twice the number of waiters before the
/// departed ones are dropped.
const SLACK: usize = 64;

#[derive(Debug, Default)]
pub(super) struct WaitEnds {
    /// (end in µs on the server's wait clock, waiter id), earliest first.
    heap: BinaryHeap<Reverse<(u64, u64)>>,
}

impl<K: Hash + Eq + Clone, H: Hash + Eq + Copy> Parking<K, H> {
    /// The queued `handle`'s `WAIT` ends at `at_us` (µs, on the clock the
    /// server reckons `WAIT`s on: monotonic, see `server::blocking`); the server
    /// makes sure its timer fires by then.
    pub fn ends_wait_at(&mut self, handle: H, at_us: u64) {
        let Some(State::Queued(id)) = self.slots.get(&handle).map(|s| &s.state) else {
            return;
        };
        let id = *id;
        let waiters = self.queues.total();
        if self.wait_ends.heap.len() > 2 * waiters + SLACK {
            let queues = &self.queues;
            self.wait_ends
                .heap
                .retain(|Reverse((_, id))| queues.is_queued(*id));
        }
        self.wait_ends.heap.push(Reverse((at_us, id)));
    }

    /// The earliest end (µs) of a `WAIT` still running; forgets the
    /// entries of departed waiters on the way.
    pub fn next_wait_end(&mut self) -> Option<u64> {
        while let Some(&Reverse((at, id))) = self.wait_ends.heap.peek() {
            if self.queues.is_queued(id) {
                return Some(at);
            }
            self.wait_ends.heap.pop();
        }
        None
    }

    /// Answers nil to every queued waiter whose `WAIT` has ended by
    /// `now_us` (as its own timer did); returns how many.
    pub fn time_out_ended(&mut self, now_us: u64) -> usize {
        let mut n = 0;
        while let Some(&Reverse((at, id))) = self.wait_ends.heap.peek() {
            if at > now_us {
                break;
            }
            self.wait_ends.heap.pop();
            if let Some(handle) = self.queues.handle(id).copied() {
                n += usize::from(self.time_out(handle));
            }
        }
        n
    }

    /// Entries in the heap, departed waiters' included.
    #[cfg(test)]
    pub fn wait_ends(&self) -> usize {
        self.wait_ends.heap.len()
    }
}
