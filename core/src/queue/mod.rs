//! Wait queues, one per resource, for `DLOCK.ACQUIRE ... WAIT`: served in
//! rank order (`rank.rs`: priorities with aging; FIFO within a priority).
//!
//! Kept outside the lock value on purpose: the value is freed by `DEL` and
//! `FLUSHALL`, carried away by `RENAME`/`MOVE` and serialized by `DUMP`,
//! while waiters belong to the resource name on this server.
//!
//! Generic over the resource key `K` and the waiter's handle `H` (a blocked
//! client in the server), so the bookkeeping is testable without Redis.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;

use wait_queue::WaitQueue;

/// Where a request waits: one resource, or every member of its set.
#[derive(Debug, Clone)]
enum Place<K> {
    One(K),
    Set(Box<[K]>),
}

impl<K> Place<K> {
    fn keys(&self) -> &[K] {
        match self {
            Place::One(k) => std::slice::from_ref(k),
            Place::Set(keys) => keys,
        }
    }
}

#[derive(Debug)]
pub struct WaitQueues<K, H> {
    queues: HashMap<K, WaitQueue<H>>,
    /// waiter id -> its resource (or a set's members), so timeouts and
    /// disconnects find their queues.
    index: HashMap<u64, Place<K>>,
    next_id: u64,
    /// Timers of queues that emptied, for the server to stop.
    stale_timers: Vec<u64>,
    /// Queues that lost a waiter (timeout, disconnect) while requests that
    /// are not plain stay queued: the ones behind it may fit now (readers
    /// behind a writer that gave up), for the server to re-check.
    to_settle: Vec<K>,
    /// Queues that emptied because their waiters left or were sent away,
    /// not by a grant: a resource nobody holds stops being reserved then,
    /// with no write to tell of it, for the server to tell its observers.
    emptied: Vec<K>,
}

impl<K: Hash + Eq + Clone, H> Default for WaitQueues<K, H> {
    fn default() -> Self {
        WaitQueues {
            queues: HashMap::new(),
            index: HashMap::new(),
            next_id: 1,
            stale_timers: Vec::new(),
            to_settle: Vec::new(),
            emptied: Vec::new(),
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

    /// The resources request `id` waits for, while it waits.
    pub fn resources_of(&self, id: u64) -> Option<&[K]> {
        self.index.get(&id).map(Place::keys)
    }

    /// The token of request `id`, while it waits.
    pub fn token_of(&self, id: u64) -> Option<&[u8]> {
        let first = self.index.get(&id)?.keys().first()?;
        let w = self.queues.get(first)?.entries.get(id)?;
        Some(&w.token)
    }

    /// The rank of request `id`, while it waits.
    pub fn rank_of(&self, id: u64) -> Option<Rank> {
        let first = self.index.get(&id)?.keys().first()?;
        Some(self.queues.get(first)?.entries.get(id)?.rank)
    }

    /// The ids of `token`'s requests queued on `resource`, in enqueue
    /// order: O(1) through the queue's token index (a hash shared with
    /// another token is told apart by comparing the tokens).
    pub fn ids_of_token(&self, resource: &K, token: &[u8]) -> Vec<u64> {
        self.queues
            .get(resource)
            .map_or_else(Vec::new, |q| q.ids_of(token).collect())
    }

    /// The rank of the head of `resource`'s queue, if anyone waits.
    pub fn head_rank(&self, resource: &K) -> Option<Rank> {
        Some(self.queues.get(resource)?.entries.first()?.rank)
    }

    /// The highest priority waiting on `resource` (0 when none asked for
    /// one, or nobody waits).
    pub fn top_priority(&self, resource: &K) -> u16 {
        self.queues.get(resource).map_or(0, WaitQueue::top_priority)
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
            .flat_map(|q| q.entries.values())
    }

    /// Queues a request in arrival order (`Priority::FIFO`); returns its id.
    pub fn push(
        &mut self,
        resource: K,
        token: &[u8],
        wants: Wants,
        ttl_ms: u64,
        gives_up_at: Option<u64>,
        handle: H,
    ) -> u64 {
        let fifo = Priority::FIFO;
        self.push_ranked(resource, token, wants, ttl_ms, gives_up_at, handle, fifo)
    }

    /// Queues a request at its rank (`priority.key`, then arrival); returns
    /// its id.
    #[allow(clippy::too_many_arguments)]
    pub fn push_ranked(
        &mut self,
        resource: K,
        token: &[u8],
        wants: Wants,
        ttl_ms: u64,
        gives_up_at: Option<u64>,
        handle: H,
        priority: Priority,
    ) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.index.insert(id, Place::One(resource.clone()));
        let queue = self.queues.entry(resource).or_insert_with(WaitQueue::new);
        queue.insert(Waiter {
            id,
            rank: Rank {
                key: priority.key,
                id,
            },
            priority: priority.level,
            token: token.into(),
            wants,
            ttl_ms,
            gives_up_at,
            queued_at: 0,
            handle,
            in_set: false,
        });
        id
    }

    /// Takes the requests `ids` out of every queue they wait in (granted
    /// or refused together): one waiter per id found, in the order of
    /// `ids`, with the resources it waited for.
    pub fn take(&mut self, ids: &[u64]) -> Vec<(Waiter<H>, Vec<K>)> {
        let places: Vec<(u64, Place<K>)> = ids
            .iter()
            .filter_map(|id| Some((*id, self.index.remove(id)?)))
            .collect();
        if places.is_empty() {
            return Vec::new();
        }
        let wanted: HashSet<u64> = places.iter().map(|(id, _)| *id).collect();
        let mut keys: Vec<&K> = places.iter().flat_map(|(_, p)| p.keys()).collect();
        let mut seen = HashSet::new();
        keys.retain(|k| seen.insert(*k));
        let mut taken: HashMap<u64, Waiter<H>> = HashMap::with_capacity(places.len());
        for key in keys {
            let Some(queue) = self.queues.get_mut(key) else {
                continue;
            };
            for id in &wanted {
                if let Some(w) = queue.remove(*id) {
                    taken.entry(w.id).or_insert(w);
                }
            }
            if queue.is_empty() {
                if let Some(q) = self.queues.remove(key) {
                    self.stale_timers.extend(q.timers);
                }
            }
        }
        places
            .into_iter()
            .filter_map(|(id, place)| Some((taken.remove(&id)?, place.keys().to_vec())))
            .collect()
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

    /// Removes one waiter (timeout, disconnect, unblock) from every queue
    /// it waits in. `None` if it was already gone: removal is idempotent,
    /// so a handle is released once.
    pub fn remove(&mut self, id: u64) -> Option<Waiter<H>> {
        self.remove_with_first(id).map(|(_, w)| w)
    }

    /// `remove`, with the first resource the request waited for, moved out
    /// of the index: what a request that leaves is counted under, found
    /// without a second look-up or a copy.
    pub fn remove_with_first(&mut self, id: u64) -> Option<(Option<K>, Waiter<H>)> {
        let place = self.index.remove(&id)?;
        let mut waiter = None;
        for key in place.keys() {
            if let Some(w) = self.remove_entry(key, id) {
                waiter.get_or_insert(w);
            }
        }
        let first = match place {
            Place::One(k) => Some(k),
            Place::Set(keys) => keys.into_vec().into_iter().next(),
        };
        Some((first, waiter?))
    }

    /// Removes entry `id` from `resource`'s queue only.
    fn remove_entry(&mut self, resource: &K, id: u64) -> Option<Waiter<H>> {
        // Looked up by reference (`entry` would take a copy of the key).
        let queue = self.queues.get_mut(resource)?;
        let waiter = queue.remove(id);
        if queue.is_empty() {
            self.retire(resource);
            self.emptied.push(resource.clone());
        } else if queue.not_plain > 0 || waiter.as_ref().is_some_and(|w| w.in_set) {
            // A set that leaves may have reserved a free resource: the
            // plain waiters behind it may be granted now.
            self.to_settle.push(resource.clone());
        }
        waiter
    }

    /// Queues a request that was not plain left since the last call: the
    /// plain waiters behind it may be granted now, so they are settled again.
    pub fn take_to_settle(&mut self) -> Vec<K> {
        std::mem::take(&mut self.to_settle)
    }

    /// Queues that emptied without a grant since the last call.
    pub fn take_emptied(&mut self) -> Vec<K> {
        std::mem::take(&mut self.emptied)
    }

    /// The head waiter's token: the one `pop_grantee` takes.
    pub fn head(&self, resource: &K) -> Option<&[u8]> {
        let queue = self.queues.get(resource)?;
        let head = if cfg!(feature = "planted-fifo-newest") {
            queue.entries.last()?
        } else {
            queue.entries.first()?
        };
        Some(&head.token)
    }

    /// Takes the head waiter and every entry sharing its token.
    pub fn pop_grantee(&mut self, resource: &K) -> Option<Grantee<H>> {
        let queue = self.queues.get_mut(resource)?;
        // The planted bug (test-only, docs/history.md): the newest waiter.
        let head_id = if cfg!(feature = "planted-fifo-newest") {
            queue.entries.last()?.id
        } else {
            queue.entries.first()?.id
        };
        let head = queue.remove(head_id)?;
        self.index.remove(&head.id);
        let mut handles = vec![head.handle];
        let mut ids = vec![head.id];
        if queue.tokens.contains_key(&queue.token_key(&head.token)) {
            // The same token queued again: rare.
            let same: Vec<u64> = queue.ids_of(&head.token).collect();
            for id in same {
                if let Some(w) = queue.remove(id) {
                    self.index.remove(&w.id);
                    handles.push(w.handle);
                    ids.push(w.id);
                }
            }
        }
        if queue.is_empty() {
            self.retire(resource);
        }
        Some(Grantee {
            queued_at: head.queued_at,
            token: head.token,
            ttl_ms: head.ttl_ms,
            handles,
            ids,
        })
    }

    /// Removes every waiter of one resource (they get an error instead); a
    /// set request leaves its other members' queues too.
    pub fn drain(&mut self, resource: &K) -> Vec<Waiter<H>> {
        let Some(queue) = self.queues.remove(resource) else {
            return Vec::new();
        };
        self.stale_timers.extend(queue.timers);
        self.emptied.push(resource.clone());
        let mut gone = Vec::with_capacity(queue.entries.len());
        for w in queue.entries.into_values() {
            if let Some(Place::Set(members)) = self.index.remove(&w.id) {
                for m in members.iter().filter(|m| *m != resource) {
                    self.remove_entry(m, w.id);
                }
            }
            gone.push(w);
        }
        gone
    }

    /// Removes every waiter everywhere (e.g. the server became a replica):
    /// one entry per request.
    pub fn drain_all(&mut self) -> Vec<Waiter<H>> {
        self.index.clear();
        let mut all = Vec::new();
        let mut seen = HashSet::new();
        for (k, q) in self.queues.drain() {
            self.emptied.push(k);
            self.stale_timers.extend(q.timers);
            all.extend(
                q.entries
                    .into_values()
                    .into_iter()
                    .filter(|w| seen.insert(w.id)),
            );
        }
        all
    }

    /// Resources that have waiters, optionally filtered.
    pub fn resources(&self, mut keep: impl FnMut(&K) -> bool) -> Vec<K> {
        self.queues.keys().filter(|k| keep(k)).cloned().collect()
    }
}

mod fifo;
mod frontier;
mod give_ups;
mod rank;
mod ranks;
mod sets;
mod timers;
mod wait_queue;
mod waiter;
pub use frontier::Frontier;
pub use rank::{Priority, Rank, MAX_AGING_MS, MAX_PRIORITY};
pub use sets::{Component, Request};
pub use waiter::{Grantee, Waiter, Wants};

#[cfg(test)]
mod position_tests;
#[cfg(test)]
mod rank_tests;
#[cfg(test)]
mod tests;
