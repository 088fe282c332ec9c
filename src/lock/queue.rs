//! FIFO wait queues, one per resource, for `DLOCK.ACQUIRE ... WAIT`.
//!
//! Kept outside the lock value on purpose: the value is freed by `DEL` and
//! `FLUSHALL`, carried away by `RENAME`/`MOVE` and serialized by `DUMP`,
//! while waiters belong to the resource name on this server.
//!
//! Generic over the resource key `K` and the waiter's handle `H` (a blocked
//! client in the server), so the bookkeeping is testable without Redis.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

use super::holds::{Ask, Mode};

/// What a queued request asks for besides its token: `SHARED`, `LIMIT`,
/// `OWNER` (issue 11). The default is the plain lock.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Wants {
    pub mode: Mode,
    pub limit: Option<u32>,
    pub owner: Option<Box<[u8]>>,
}

impl Wants {
    pub fn of(ask: &Ask<'_>) -> Self {
        Wants {
            mode: ask.mode,
            limit: ask.limit,
            owner: ask.owner.map(Into::into),
        }
    }

    pub fn is_plain(&self) -> bool {
        *self == Wants::default()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter<H> {
    pub id: u64,
    pub token: Box<[u8]>,
    pub wants: Wants,
    pub ttl_ms: u64,
    /// Unix ms after which the waiter has given up (its `WAIT` timeout);
    /// `None` waits forever.
    pub gives_up_at: Option<u64>,
    pub handle: H,
}

impl<H> Waiter<H> {
    /// The request as the holds model decides it.
    pub fn ask(&self) -> Ask<'_> {
        Ask {
            token: &self.token,
            owner: self.wants.owner.as_deref(),
            mode: self.wants.mode,
            limit: self.wants.limit,
            ttl_ms: self.ttl_ms,
        }
    }

    /// A waiter whose deadline has passed is never granted: its timeout
    /// is already due, and a grant racing it could not be delivered.
    /// Like Redis's own blocking timeouts, the deadline itself still counts.
    pub fn has_given_up(&self, now_ms: u64) -> bool {
        self.gives_up_at.is_some_and(|at| at < now_ms)
    }
}

/// Who gets the lock next: the head waiter, plus every other queued entry
/// with the same token (a client that reconnected and retried). One grant
/// answers them all with the same fence.
#[derive(Debug, PartialEq, Eq)]
pub struct Grantee<H> {
    pub token: Box<[u8]>,
    pub ttl_ms: u64,
    pub handles: Vec<H>,
    /// Ids of the entries granted, in queue order.
    pub ids: Vec<u64>,
}

#[derive(Debug)]
struct WaitQueue<H> {
    entries: VecDeque<Waiter<H>>,
    /// Entries that are not plain requests: while there are none, the
    /// plain handoff (head waiter and its token's duplicates) is exact.
    not_plain: usize,
    /// Earliest deadline (unix ms) a wake-up timer is already armed for.
    timer_at: Option<u64>,
    /// The wake-up timers armed for this queue and not fired yet: stopped
    /// when the queue empties, so a long lease whose waiters keep leaving
    /// does not pile up timers until its deadline.
    timers: Vec<u64>,
    /// The current lease's deadline as last seen by the module.
    lease_deadline: Option<u64>,
    /// No grant before this time: the lease was evicted, and its holder still
    /// believes it holds the lock until its deadline.
    held_until: Option<u64>,
}

impl<H> WaitQueue<H> {
    /// Counts the entries that are not plain again after a removal: only
    /// when there were some, so plain queues pay nothing.
    fn recount(&mut self) {
        if self.not_plain > 0 {
            self.not_plain = self.entries.iter().filter(|w| !w.wants.is_plain()).count();
        }
    }
}

#[derive(Debug)]
pub struct WaitQueues<K, H> {
    queues: HashMap<K, WaitQueue<H>>,
    /// waiter id -> resource, so timeouts and disconnects find their queue.
    index: HashMap<u64, K>,
    next_id: u64,
    /// Timers of queues that emptied, for the server to stop.
    stale_timers: Vec<u64>,
    /// Queues that lost a waiter (timeout, disconnect) while requests that
    /// are not plain stay queued: the ones behind it may fit now (readers
    /// behind a writer that gave up), for the server to re-check.
    thinned: Vec<K>,
}

impl<K: Hash + Eq + Clone, H> Default for WaitQueues<K, H> {
    fn default() -> Self {
        WaitQueues {
            queues: HashMap::new(),
            index: HashMap::new(),
            next_id: 1,
            stale_timers: Vec::new(),
            thinned: Vec::new(),
        }
    }
}

impl<K: Hash + Eq + Clone, H> WaitQueues<K, H> {
    /// Total waiters on all resources; zero means nothing to look up.
    pub fn total(&self) -> usize {
        self.index.len()
    }

    pub fn waiting(&self, resource: &K) -> usize {
        self.queues.get(resource).map_or(0, |q| q.entries.len())
    }

    /// Whether every request queued on `resource` is a plain one.
    pub fn is_plain(&self, resource: &K) -> bool {
        self.queues.get(resource).is_none_or(|q| q.not_plain == 0)
    }

    /// The waiters of `resource`, head first.
    pub fn waiters(&self, resource: &K) -> impl Iterator<Item = &Waiter<H>> + '_ {
        self.queues
            .get(resource)
            .into_iter()
            .flat_map(|q| q.entries.iter())
    }

    /// Appends a waiter at the tail; returns its id.
    pub fn push(
        &mut self,
        resource: K,
        token: &[u8],
        wants: Wants,
        ttl_ms: u64,
        gives_up_at: Option<u64>,
        handle: H,
    ) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.index.insert(id, resource.clone());
        let queue = self.queues.entry(resource).or_insert_with(|| WaitQueue {
            entries: VecDeque::new(),
            not_plain: 0,
            timer_at: None,
            timers: Vec::new(),
            lease_deadline: None,
            held_until: None,
        });
        queue.not_plain += usize::from(!wants.is_plain());
        queue.entries.push_back(Waiter {
            id,
            token: token.into(),
            wants,
            ttl_ms,
            gives_up_at,
            handle,
        });
        id
    }

    /// Takes the entries `ids` out of `resource`'s queue (granted or
    /// refused together), in queue order.
    pub fn take(&mut self, resource: &K, ids: &[u64]) -> Vec<Waiter<H>> {
        if ids.is_empty() {
            return Vec::new();
        }
        let Some(queue) = self.queues.get_mut(resource) else {
            return Vec::new();
        };
        let ids: std::collections::HashSet<u64> = ids.iter().copied().collect();
        let (taken, kept): (VecDeque<_>, VecDeque<_>) =
            queue.entries.drain(..).partition(|w| ids.contains(&w.id));
        queue.entries = kept;
        queue.recount();
        for w in &taken {
            self.index.remove(&w.id);
        }
        if queue.entries.is_empty() {
            self.retire(resource);
        }
        taken.into_iter().collect()
    }

    /// Whether anyone queued on `resource` can still be granted at `now_ms`.
    pub fn has_live_waiter(&self, resource: &K, now_ms: u64) -> bool {
        self.queues
            .get(resource)
            .is_some_and(|q| q.entries.iter().any(|w| !w.has_given_up(now_ms)))
    }

    /// Removes the waiters of `resource` whose deadline has passed.
    pub fn take_given_up(&mut self, resource: &K, now_ms: u64) -> Vec<Waiter<H>> {
        let Some(queue) = self.queues.get_mut(resource) else {
            return Vec::new();
        };
        if !queue.entries.iter().any(|w| w.has_given_up(now_ms)) {
            return Vec::new();
        }
        let (gone, kept): (VecDeque<_>, VecDeque<_>) = queue
            .entries
            .drain(..)
            .partition(|w| w.has_given_up(now_ms));
        queue.entries = kept;
        queue.recount();
        for w in &gone {
            self.index.remove(&w.id);
        }
        if queue.entries.is_empty() {
            self.retire(resource);
        }
        gone.into_iter().collect()
    }

    /// Drops an empty queue; its timers are stale now.
    fn retire(&mut self, resource: &K) {
        if let Some(q) = self.queues.remove(resource) {
            self.stale_timers.extend(q.timers);
        }
    }

    /// Timers of queues that emptied since the last call.
    pub fn take_stale_timers(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.stale_timers)
    }

    /// Removes one waiter (timeout, disconnect, unblock). `None` if it was
    /// already gone: removal is idempotent, so a handle is released once.
    pub fn remove(&mut self, id: u64) -> Option<Waiter<H>> {
        let resource = self.index.remove(&id)?;
        let Entry::Occupied(mut slot) = self.queues.entry(resource) else {
            return None;
        };
        let queue = slot.get_mut();
        let pos = queue.entries.iter().position(|w| w.id == id)?;
        let waiter = queue.entries.remove(pos);
        queue.recount();
        if queue.entries.is_empty() {
            self.stale_timers.extend(slot.remove().timers);
        } else if queue.not_plain > 0 {
            self.thinned.push(slot.key().clone());
        }
        waiter
    }

    /// Queues `remove` thinned since the last call.
    pub fn take_thinned(&mut self) -> Vec<K> {
        std::mem::take(&mut self.thinned)
    }

    /// Takes the head waiter and every entry sharing its token.
    pub fn pop_grantee(&mut self, resource: &K) -> Option<Grantee<H>> {
        let queue = self.queues.get_mut(resource)?;
        let head = queue.entries.pop_front()?;
        self.index.remove(&head.id);
        let mut handles = vec![head.handle];
        let mut ids = vec![head.id];
        let mut rest = VecDeque::with_capacity(queue.entries.len());
        for w in queue.entries.drain(..) {
            if w.token == head.token {
                self.index.remove(&w.id);
                handles.push(w.handle);
                ids.push(w.id);
            } else {
                rest.push_back(w);
            }
        }
        queue.entries = rest;
        queue.recount();
        if queue.entries.is_empty() {
            self.retire(resource);
        }
        Some(Grantee {
            token: head.token,
            ttl_ms: head.ttl_ms,
            handles,
            ids,
        })
    }

    /// Removes every waiter of one resource (they get an error instead).
    pub fn drain(&mut self, resource: &K) -> Vec<Waiter<H>> {
        let Some(queue) = self.queues.remove(resource) else {
            return Vec::new();
        };
        self.stale_timers.extend(queue.timers);
        for w in &queue.entries {
            self.index.remove(&w.id);
        }
        queue.entries.into_iter().collect()
    }

    /// Removes every waiter everywhere (e.g. the server became a replica).
    pub fn drain_all(&mut self) -> Vec<Waiter<H>> {
        self.index.clear();
        let mut all = Vec::new();
        for (_, q) in self.queues.drain() {
            self.stale_timers.extend(q.timers);
            all.extend(q.entries);
        }
        all
    }

    /// Resources that have waiters, optionally filtered.
    pub fn resources(&self, mut keep: impl FnMut(&K) -> bool) -> Vec<K> {
        self.queues.keys().filter(|k| keep(k)).cloned().collect()
    }

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

#[cfg(test)]
#[path = "queue_tests.rs"]
mod tests;
