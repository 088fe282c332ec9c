//! One resource's queue with its indexes (tokens, give-up times, owners)
//! and the counts that keep the plain handoff exact.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;

use super::fifo::Fifo;
use super::give_ups::GiveUps;
use super::rank::Rank;
use super::ranks::Ranks;
use super::waiter::Waiter;

/// One resource's queue, indexed so that joining, leaving, timing out and
/// the plain handoff cost O(log n) in its length.
#[derive(Debug)]
pub(super) struct WaitQueue<H> {
    /// The entries in the order they are served (by rank), found by id.
    pub(super) entries: Fifo<Waiter<H>>,
    /// The entries' ranks, ordered: a waiter's position without walking
    /// the ones ahead of it, and where a request that outranks some of
    /// them goes.
    pub(super) order: Ranks<Rank>,
    /// How many entries wait at each priority above 0 (usually none): the
    /// highest priority waiting in O(log P).
    pub(super) priorities: BTreeMap<u16, u32>,
    /// Ids of the entries per token, by the token's hash under this map's
    /// own random keys: a token queued more than once (a client that
    /// reconnected and retried) is granted once for all of them, and a
    /// token's position is found without a walk. Keying by hashes rather
    /// than tokens spares a copy of the token per entry; a hash shared by
    /// two tokens only makes a lookup compare the tokens themselves.
    pub(super) tokens: HashMap<u64, Ids>,
    /// When the entries whose `WAIT` ends give up.
    pub(super) giving_up: GiveUps,
    /// Ids of the entries by a hash of their owner (the token when no
    /// owner is named): an owner that holds passes the queue, so a step
    /// decides its requests wherever they wait. A collision only adds
    /// requests to a step, which decides them as they are.
    pub(super) by_owner: HashMap<u64, Ids>,
    /// Entries that are not plain requests: while there are none, the
    /// plain handoff (head waiter and its token's duplicates) is exact.
    pub(super) not_plain: usize,
    /// Entries of set requests: while there are any, the queue is decided
    /// together with its members' queues (`crate::plan::component`).
    pub(super) in_sets: usize,
    /// Earliest deadline (unix ms) a wake-up timer is already armed for.
    pub(super) timer_at: Option<u64>,
    /// The wake-up timers armed for this queue and not fired yet: stopped
    /// when the queue empties, so a long lease whose waiters keep leaving
    /// does not pile up timers until its deadline.
    pub(super) timers: Vec<u64>,
    /// The current lease's deadline as last seen by the module.
    pub(super) lease_deadline: Option<u64>,
    /// No grant before this time: the lease was evicted, and its holder still
    /// believes it holds the lock until its deadline.
    pub(super) held_until: Option<u64>,
}

impl<H> WaitQueue<H> {
    pub(super) fn new() -> Self {
        WaitQueue {
            entries: Fifo::default(),
            order: Ranks::default(),
            priorities: BTreeMap::new(),
            tokens: HashMap::new(),
            giving_up: GiveUps::default(),
            by_owner: HashMap::new(),
            not_plain: 0,
            in_sets: 0,
            timer_at: None,
            timers: Vec::new(),
            lease_deadline: None,
            held_until: None,
        }
    }

    pub(super) fn token_key(&self, token: &[u8]) -> u64 {
        self.tokens.hasher().hash_one(token)
    }

    /// Queues `waiter` at its rank: at the tail (O(1)) unless it outranks
    /// the tail, before the first entry it outranks otherwise (O(log n)).
    pub(super) fn insert(&mut self, waiter: Waiter<H>) {
        let id = waiter.id;
        let rank = waiter.rank;
        let priority = waiter.priority;
        let not_plain = !waiter.is_plain();
        let in_set = waiter.in_set;
        let key = self.token_key(&waiter.token);
        let gives_up_at = waiter.gives_up_at;
        let owner = owner_hash(waiter.ask().owner());
        // Ids are never reused, so this is never refused; if it were, the
        // counts below would stay as they are.
        let outranks_tail = self.entries.last().is_some_and(|t| rank < t.rank);
        let next = outranks_tail
            .then(|| self.order.iter_from(self.order.count_below(&rank)).next())
            .flatten();
        let queued = match next {
            Some(next) => self.entries.insert_before(next.id, id, waiter),
            None => self.entries.push_back(id, waiter),
        };
        if queued.is_err() {
            return;
        }
        self.order.insert(rank);
        if priority > 0 {
            *self.priorities.entry(priority).or_default() += 1;
        }
        self.not_plain += usize::from(not_plain);
        self.in_sets += usize::from(in_set);
        match self.tokens.entry(key) {
            Entry::Occupied(mut ids) => ids.get_mut().push(id),
            Entry::Vacant(v) => {
                v.insert(Ids::One(id));
            }
        }
        if let Some(at) = gives_up_at {
            self.giving_up.insert(at, id);
        }
        match self.by_owner.entry(owner) {
            Entry::Occupied(mut ids) => ids.get_mut().push(id),
            Entry::Vacant(v) => {
                v.insert(Ids::One(id));
            }
        }
    }

    /// Takes entry `id` out, keeping the counts and indexes right.
    pub(super) fn remove(&mut self, id: u64) -> Option<Waiter<H>> {
        let waiter = self.entries.remove(id)?;
        self.order.remove(&waiter.rank);
        if let std::collections::btree_map::Entry::Occupied(mut n) =
            self.priorities.entry(waiter.priority)
        {
            *n.get_mut() -= 1;
            if *n.get() == 0 {
                n.remove();
            }
        }
        self.not_plain -= usize::from(!waiter.is_plain());
        self.in_sets -= usize::from(waiter.in_set);
        if let Entry::Occupied(mut ids) = self.tokens.entry(self.token_key(&waiter.token)) {
            if ids.get_mut().remove(id) {
                ids.remove();
            }
        }
        if waiter.gives_up_at.is_some() {
            let entries = &self.entries;
            self.giving_up.remove(
                |id| entries.contains(id),
                || {
                    entries
                        .values_unordered()
                        .filter_map(|w| Some((w.gives_up_at?, w.id)))
                },
            );
        }
        if let Entry::Occupied(mut ids) = self.by_owner.entry(owner_hash(waiter.ask().owner())) {
            if ids.get_mut().remove(id) {
                ids.remove();
            }
        }
        Some(waiter)
    }

    /// The highest priority of an entry, 0 when none asked for one.
    pub(super) fn top_priority(&self) -> u16 {
        self.priorities.keys().next_back().copied().unwrap_or(0)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The ids of the entries of `token`, in enqueue order.
    pub(super) fn ids_of<'a>(&'a self, token: &'a [u8]) -> impl Iterator<Item = u64> + 'a {
        self.tokens
            .get(&self.token_key(token))
            .map_or(&[][..], Ids::as_slice)
            .iter()
            .copied()
            .filter(move |id| self.entries.get(*id).is_some_and(|w| *w.token == *token))
    }

    /// The 1-based position of `token`'s first entry in the order the
    /// queue is served, if it waits here.
    pub(super) fn position(&self, token: &[u8]) -> Option<usize> {
        self.ids_of(token)
            .filter_map(|id| self.order.rank(&self.entries.get(id)?.rank))
            .min()
            .map(|rank| rank + 1)
    }

    /// The entries from position `from` (1-based) on, in the order the
    /// queue is served, each with its position.
    pub(super) fn entries_from(
        &self,
        from: usize,
    ) -> impl Iterator<Item = (usize, &Waiter<H>)> + '_ {
        let from = from.max(1);
        self.order
            .iter_from(from - 1)
            .filter_map(|rank| self.entries.get(rank.id))
            .zip(from..)
            .map(|(w, at)| (at, w))
    }
}

/// The ids of one owner's entries in a queue, in enqueue order: nearly
/// always one, held inline so that joining a queue allocates nothing here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Ids {
    One(u64),
    Many(Vec<u64>),
}

impl Ids {
    pub(super) fn push(&mut self, id: u64) {
        match self {
            Ids::One(first) => *self = Ids::Many(vec![*first, id]),
            Ids::Many(ids) => ids.push(id),
        }
    }

    /// Takes `id` out; whether none is left.
    pub(super) fn remove(&mut self, id: u64) -> bool {
        match self {
            Ids::One(only) => *only == id,
            Ids::Many(ids) => {
                ids.retain(|i| *i != id);
                ids.is_empty()
            }
        }
    }

    pub(super) fn as_slice(&self) -> &[u64] {
        match self {
            Ids::One(id) => std::slice::from_ref(id),
            Ids::Many(ids) => ids,
        }
    }
}

/// The key of `WaitQueue::by_owner`.
pub(super) fn owner_hash(owner: &[u8]) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    BuildHasherDefault::<DefaultHasher>::default().hash_one(owner)
}
