//! The wake-up timers and lease deadlines each wait queue remembers, and
//! what the `WAIT` timeouts (`parking`) look up.

use std::hash::Hash;

use super::WaitQueues;

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
        let key = self.index.get(&id)?.keys().first()?;
        Some(&self.queues.get(key)?.entries.get(id)?.handle)
    }
}
