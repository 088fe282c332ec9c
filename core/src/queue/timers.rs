//! The wake-up timers and lease deadlines each wait queue remembers, and
//! what the `WAIT` timeouts (`parking`) look up.

use std::hash::Hash;

use super::{Rank, WaitQueues, Waiter};

impl<K: Hash + Eq + Clone, H> WaitQueues<K, H> {
    /// Whether a wake-up at `deadline_ms` needs a new timer: only when none
    /// is armed for this resource at or before that time.
    pub fn needs_timer(&mut self, resource: &K, deadline_ms: u64) -> bool {
        let Some(queue) = self.queues.get_mut(resource) else {
            return false;
        };
        match queue.timer_at {
            Some(at) if at <= deadline_ms => false,
            _ => {
                queue.timer_at = Some(deadline_ms);
                true
            }
        }
    }

    /// The server armed wake-up timer `id` (after `needs_timer` said so).
    pub fn add_timer(&mut self, resource: &K, id: u64) {
        match self.queues.get_mut(resource) {
            Some(queue) => queue.timers.push(id),
            None => self.stale_timers.push(id),
        }
    }

    /// Remembers the deadline of the lease the waiters are waiting for.
    pub fn note_deadline(&mut self, resource: &K, deadline_ms: u64) {
        if let Some(queue) = self.queues.get_mut(resource) {
            queue.lease_deadline = Some(deadline_ms);
        }
    }

    /// The lease was evicted: hold the waiters until its known deadline.
    /// Returns that time, if one is known.
    pub fn hold_after_eviction(&mut self, resource: &K) -> Option<u64> {
        let queue = self.queues.get_mut(resource)?;
        queue.held_until = queue.lease_deadline;
        queue.held_until
    }

    /// Until when grants on this resource must wait, if at all.
    pub fn held_until(&self, resource: &K) -> Option<u64> {
        self.queues.get(resource)?.held_until
    }

    /// Timer `id`, armed for `deadline_ms`, fired.
    pub fn timer_fired(&mut self, resource: &K, deadline_ms: u64, id: u64) {
        if let Some(queue) = self.queues.get_mut(resource) {
            queue.timers.retain(|t| *t != id);
            if queue.timer_at == Some(deadline_ms) {
                queue.timer_at = None;
            }
        }
    }
}

impl<K: Hash + Eq + Clone, H> WaitQueues<K, H> {
    /// Whether request `id` still waits.
    pub fn is_queued(&self, id: u64) -> bool {
        self.index.contains_key(&id)
    }

    /// The handle of request `id`, if it still waits.
    pub fn handle(&self, id: u64) -> Option<&H> {
        Some(&self.waiter(id)?.handle)
    }

    /// Request `id` (its entry in its first queue), if it still waits.
    pub fn waiter(&self, id: u64) -> Option<&Waiter<H>> {
        let key = self.index.get(&id)?.keys().first()?;
        self.queues.get(key)?.entries.get(id)
    }
}

impl<K: Hash + Eq + Clone, H> WaitQueues<K, H> {
    /// Request `id` joined its queues at `at_ms` (the clock of
    /// `gives_up_at`): what `DLOCK.WAITERS` counts its wait from.
    pub fn joined_at(&mut self, id: u64, at_ms: u64) {
        let Some(place) = self.index.get(&id) else {
            return;
        };
        for key in place.keys() {
            if let Some(w) = self.queues.get_mut(key).and_then(|q| q.entries.get_mut(id)) {
                w.queued_at = at_ms;
            }
        }
    }

    /// The 1-based position of `token` in `resource`'s queue (1: the
    /// head, served next), if it waits there; a token queued more than once
    /// stands where its first entry does. O(log n).
    pub fn position(&self, resource: &K, token: &[u8]) -> Option<usize> {
        self.queues.get(resource)?.position(token)
    }

    /// The waiters of `resource` from position `from` (1-based) on, in the
    /// order they are served, each with its position: O(log n) to the
    /// first, O(1) amortized to each next.
    pub fn waiters_from(
        &self,
        resource: &K,
        from: usize,
    ) -> impl Iterator<Item = (usize, &Waiter<H>)> + '_ {
        self.queues
            .get(resource)
            .into_iter()
            .flat_map(move |q| q.entries_from(from))
    }
}

impl<K: Hash + Eq + Clone, H> WaitQueues<K, H> {
    /// Whether anyone queued on `resource` can still be granted at `now_ms`.
    pub fn has_live_waiter(&self, resource: &K, now_ms: u64) -> bool {
        self.queues.get(resource).is_some_and(|q| {
            q.giving_up.len() < q.entries.len()
                || q.giving_up.latest().is_some_and(|at| at >= now_ms)
        })
    }

    /// Removes the waiters of `resource` whose deadline has passed (a set
    /// request leaves every member's queue).
    pub fn take_given_up(&mut self, resource: &K, now_ms: u64) -> Vec<Waiter<H>> {
        let Some(queue) = self.queues.get_mut(resource) else {
            return Vec::new();
        };
        let entries = &queue.entries;
        let gone = queue.giving_up.due(now_ms, |id| entries.contains(id));
        // In queue order, as they waited.
        let mut gone: Vec<(Rank, u64)> = gone
            .into_iter()
            .filter_map(|id| Some((entries.get(id)?.rank, id)))
            .collect();
        gone.sort_unstable();
        let gone = gone.into_iter().map(|(_, id)| id);
        gone.into_iter().filter_map(|id| self.remove(id)).collect()
    }
}
