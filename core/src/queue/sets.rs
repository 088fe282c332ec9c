//! Set requests in the wait queues: one `DLOCK.MACQUIRE ...
//! WAIT` waits, under one id, in the queue of every member, and the queues
//! that share set requests are decided together (`crate::plan::component`).

use std::collections::{HashMap, HashSet};
use std::hash::Hash;

use super::rank::{Priority, Rank};
use super::wait_queue::WaitQueue;
use super::{Place, WaitQueues, Waiter, Wants};

/// A queued request as the component sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub id: u64,
    /// Its place in every queue it waits in.
    pub rank: Rank,
    pub token: Box<[u8]>,
    pub wants: Wants,
    pub ttl_ms: u64,
    /// Its resources, as indexes into `Component::resources`.
    pub members: Vec<usize>,
}

/// Resources whose queues share set requests, and the requests queued on
/// them that one step decides, in rank order (the order of every queue).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Component<K> {
    pub resources: Vec<K>,
    pub requests: Vec<Request>,
    /// Per resource: where the first request left out of `requests` that
    /// waits on it is queued, as the index of the first request in
    /// `requests` after it (`requests.len()`: after all); `None` when none
    /// is left out there.
    pub reserved_from: Vec<Option<usize>>,
    /// Per resource: the rank of that first request left out (a command's
    /// own request goes before or after it by rank).
    pub reserved_rank: Vec<Option<Rank>>,
}

impl<K: Hash + Eq + Clone, H: Clone> WaitQueues<K, H> {
    /// Queues one request on every resource of `members` (distinct) in
    /// arrival order (`Priority::FIFO`); returns its id.
    pub fn push_set(
        &mut self,
        members: Vec<K>,
        token: &[u8],
        wants: Wants,
        ttl_ms: u64,
        gives_up_at: Option<u64>,
        handle: H,
    ) -> u64 {
        let fifo = Priority::FIFO;
        self.push_set_ranked(members, token, wants, ttl_ms, gives_up_at, handle, fifo)
    }

    /// Queues one request on every resource of `members` (distinct), at one
    /// rank in every queue (the one global order the component decides
    /// in); returns its id.
    #[allow(clippy::too_many_arguments)]
    pub fn push_set_ranked(
        &mut self,
        members: Vec<K>,
        token: &[u8],
        wants: Wants,
        ttl_ms: u64,
        gives_up_at: Option<u64>,
        handle: H,
        priority: Priority,
    ) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let rank = Rank {
            key: priority.key,
            id,
        };
        for key in &members {
            let queue = self
                .queues
                .entry(key.clone())
                .or_insert_with(WaitQueue::new);
            queue.insert(Waiter {
                id,
                rank,
                priority: priority.level,
                token: token.into(),
                wants: wants.clone(),
                ttl_ms,
                gives_up_at,
                queued_at: 0,
                handle: handle.clone(),
                in_set: true,
            });
        }
        self.index.insert(id, Place::Set(members.into()));
        id
    }
}

impl<K: Hash + Eq + Clone, H> WaitQueues<K, H> {
    /// Whether a set request waits on `resource`: then its queue is decided
    /// only together with its component.
    pub fn has_sets(&self, resource: &K) -> bool {
        self.queues.get(resource).is_some_and(|q| q.in_sets > 0)
    }

    /// The component of `starts`: those resources, every resource reachable
    /// through the set requests queued on them, and every request queued on
    /// any of these, in rank order.
    pub fn component(&self, starts: &[K]) -> Component<K> {
        let mut resources: Vec<K> = Vec::new();
        let mut position: HashMap<K, usize> = HashMap::new();
        let mut visit = |k: &K, resources: &mut Vec<K>| {
            if !position.contains_key(k) {
                position.insert(k.clone(), resources.len());
                resources.push(k.clone());
            }
        };
        for k in starts {
            visit(k, &mut resources);
        }
        let mut seen: HashSet<u64> = HashSet::new();
        let mut found: Vec<&Waiter<H>> = Vec::new();
        let mut next = 0;
        while let Some(key) = resources.get(next).cloned() {
            next += 1;
            for w in self
                .queues
                .get(&key)
                .into_iter()
                .flat_map(|q| q.entries.values())
            {
                if !seen.insert(w.id) {
                    continue;
                }
                found.push(w);
                if let Some(place) = self.index.get(&w.id) {
                    for m in place.keys() {
                        visit(m, &mut resources);
                    }
                }
            }
        }
        found.sort_by_key(|w| w.rank);
        let requests = found
            .into_iter()
            .map(|w| Request {
                id: w.id,
                rank: w.rank,
                token: w.token.clone(),
                wants: w.wants.clone(),
                ttl_ms: w.ttl_ms,
                members: self
                    .index
                    .get(&w.id)
                    .into_iter()
                    .flat_map(|p| p.keys())
                    .filter_map(|k| position.get(k).copied())
                    .collect(),
            })
            .collect();
        let reserved_from = vec![None; resources.len()];
        Component {
            reserved_rank: vec![None; resources.len()],
            resources,
            requests,
            reserved_from,
        }
    }
}
