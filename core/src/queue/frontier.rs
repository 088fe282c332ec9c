//! The part of a component one step decides. A step changes the holds or
//! the queues of a few resources (its starts); in a component left as the
//! last step found it, every request that could be granted was granted,
//! so only requests whose view of their members changed can be decided
//! differently: the head of a changed queue, the requests of owners there
//! (an owner that holds passes a queue), and, as requests ahead leave
//! (granted or refused), the ones behind them. Deciding that part alone,
//! with the requests left out counted as reserving their members from
//! where they wait on, gives every request in it the outcome the whole
//! component would, at a cost that grows with the part, not with the
//! component's queues.
//!
//! A step decides a part, asks `widen` whether the requests it granted or
//! refused uncovered more, and decides the grown part again until they do
//! not. Each queue's depth doubles as it is uncovered, so a step that
//! grants k requests of one queue decides O(k log k) requests in all; but
//! a chain (each request granted uncovers the next one in another queue)
//! grows the part by one request per round, O(k^2) in all. A step may
//! therefore stop growing before the part is closed: its decision is then
//! the whole component's with the requests `widen` uncovered kept waiting
//! (frozen), which grants nobody out of turn, and a later step that starts
//! from the queues where they wait (`Frontier::grown`) goes on from there.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::hash::Hash;

use crate::resource::holds::Holds;

use super::wait_queue::{owner_hash, Ids, WaitQueue};
use super::{Component, Rank, Request, WaitQueues};

/// Which requests of a component one step decides.
#[derive(Debug, Clone)]
pub struct Frontier<K> {
    /// Every resource the step touches, its starts first, then in the order
    /// found: indexes stay valid as the frontier grows.
    resources: Vec<K>,
    position: HashMap<K, usize>,
    /// Per resource, how many entries from the head of its queue are
    /// decided, with the requests of owners that hold it; 0: its queue is
    /// left as it is (it is only a member of requests decided elsewhere).
    depth: Vec<usize>,
    /// Requests decided besides: those of owners granted in the step.
    extra: BTreeSet<u64>,
    /// Per resource, how many requests of owners that hold it (or of an
    /// owner granted there) a part takes at most; it doubles while some
    /// are left out, so that many requests of one owner are decided in
    /// growing parts rather than all in one.
    owners: Vec<usize>,
    /// Resources where the last part left such requests out.
    capped: BTreeSet<usize>,
    /// Per resource whose queue a part decided: the requests of owners
    /// that hold it, found once per step (neither its holds nor its queue
    /// change while the step decides; a request that left is skipped).
    found: HashMap<usize, Vec<u64>>,
    /// Owners looked at to find them: work a step counts as deciding.
    scanned: usize,
    /// Resources whose queues the last `widen` found more to decide on.
    grown: Vec<usize>,
}

/// Requests of owners a part first takes on a resource (see
/// `Frontier::owners`); one in tests, so that random queues exercise it.
const OWNERS_FIRST: usize = if cfg!(test) { 1 } else { 64 };

impl<K: Hash + Eq + Clone> Frontier<K> {
    /// The frontier of a step that changed `starts` (distinct): the head of
    /// each of their queues and the requests of owners that hold there.
    pub fn around(starts: &[K]) -> Self {
        let mut frontier = Frontier {
            resources: Vec::new(),
            position: HashMap::new(),
            depth: Vec::new(),
            extra: BTreeSet::new(),
            owners: Vec::new(),
            capped: BTreeSet::new(),
            found: HashMap::new(),
            scanned: 0,
            grown: Vec::new(),
        };
        for k in starts {
            let i = frontier.add(k);
            if let Some(d) = frontier.depth.get_mut(i) {
                *d = 1;
            }
        }
        frontier
    }

    /// The frontier also decides the requests `ids`, however deep they
    /// wait (the target of a handover, `RELEASE ... TO`, and its token's
    /// other entries).
    pub fn with(mut self, ids: &[u64]) -> Self {
        self.extra.extend(ids.iter().copied());
        self
    }

    /// The resources found so far, the starts first.
    pub fn resources(&self) -> &[K] {
        &self.resources
    }

    /// The resources whose queues the last `widen` found more requests to
    /// decide on: a step that stops before deciding them leaves them to a
    /// step that starts there (each is then at the head of that queue, or
    /// of an owner that holds there).
    pub fn grown(&self) -> impl Iterator<Item = &K> {
        self.grown.iter().filter_map(|i| self.resources.get(*i))
    }

    /// How many owners the parts so far looked at to find the requests
    /// of owners that hold (a step counts them as requests decided).
    pub fn scanned(&self) -> usize {
        self.scanned
    }

    fn add(&mut self, k: &K) -> usize {
        if let Some(i) = self.position.get(k) {
            return *i;
        }
        let i = self.resources.len();
        self.position.insert(k.clone(), i);
        self.resources.push(k.clone());
        self.depth.push(0);
        self.owners.push(OWNERS_FIRST);
        i
    }
}

/// The requests on `q` of owners that hold `holds`, the first of each
/// owner first, found from whichever side is shorter, the holds' owners
/// or the queue's; and how many owners that looked at.
fn owners_waiting<H>(q: &WaitQueue<H>, holds: &Holds) -> (Vec<u64>, usize) {
    let mut out = Vec::new();
    let scanned = if holds.owner_name_count() <= q.by_owner.len() {
        for name in holds.owner_names() {
            if let Some(ids) = q.by_owner.get(&owner_hash(name)) {
                out.extend_from_slice(ids.as_slice());
            }
        }
        holds.owner_name_count()
    } else {
        for ids in q.by_owner.values().map(Ids::as_slice) {
            let owner = ids.first().and_then(|id| q.entries.get(*id));
            if owner.is_some_and(|w| holds.owner(w.ask().owner()).is_some()) {
                out.extend_from_slice(ids);
            }
        }
        q.by_owner.len()
    };
    (out, scanned)
}

impl<K: Hash + Eq + Clone, H> WaitQueues<K, H> {
    /// The requests `frontier` decides, in rank order, with every
    /// resource they wait on (added to `frontier`) and where the requests
    /// left out reserve each of them. `holds(i)`: the holds of resource `i`
    /// of the frontier, where the step has them open (every resource whose
    /// queue it decides).
    pub fn part<'h>(
        &self,
        frontier: &mut Frontier<K>,
        holds: impl Fn(usize) -> Option<&'h Holds>,
    ) -> Component<K> {
        // By rank: the order every queue is served in.
        let mut chosen: BTreeSet<Rank> = frontier
            .extra
            .iter()
            .filter_map(|id| self.rank_of(*id))
            .collect();
        frontier.capped.clear();
        for (i, (k, depth)) in frontier.resources.iter().zip(&frontier.depth).enumerate() {
            if *depth == 0 {
                continue;
            }
            if let Some(q) = self.queues.get(k) {
                chosen.extend(q.entries.values().take(*depth).map(|w| w.rank));
                let Some(h) = holds(i) else {
                    continue;
                };
                let found = frontier.found.entry(i).or_insert_with(|| {
                    let (ids, scanned) = owners_waiting(q, h);
                    frontier.scanned += scanned;
                    ids
                });
                // At most the resource's batch of them that the part does
                // not have yet.
                let mut room = frontier.owners.get(i).copied().unwrap_or(OWNERS_FIRST);
                for id in found.iter() {
                    if room == 0 {
                        frontier.capped.insert(i);
                        break;
                    }
                    let rank = q.entries.get(*id).map(|w| w.rank);
                    if rank.is_some_and(|r| chosen.insert(r)) {
                        room -= 1;
                    }
                }
            }
        }
        let mut requests = Vec::with_capacity(chosen.len());
        for id in chosen.iter().map(|r| &r.id) {
            let Some(place) = self.index.get(id) else {
                continue;
            };
            let waiter = place
                .keys()
                .iter()
                .find_map(|k| self.queues.get(k)?.entries.get(*id));
            let Some(w) = waiter else {
                continue;
            };
            let members = place.keys().iter().map(|k| frontier.add(k)).collect();
            requests.push(Request {
                id: w.id,
                rank: w.rank,
                token: w.token.clone(),
                wants: w.wants.clone(),
                ttl_ms: w.ttl_ms,
                members,
            });
        }
        let ids: HashSet<u64> = requests.iter().map(|r| r.id).collect();
        let first_left_out: Vec<Option<Rank>> = frontier
            .resources
            .iter()
            .map(|k| {
                let q = self.queues.get(k)?;
                let w = q.entries.values().find(|w| !ids.contains(&w.id))?;
                Some(w.rank)
            })
            .collect();
        let reserved_from = first_left_out
            .iter()
            .map(|left| left.map(|left| requests.partition_point(|r| r.rank < left)))
            .collect();
        Component {
            resources: frontier.resources.clone(),
            requests,
            reserved_from,
            reserved_rank: first_left_out,
        }
    }

    /// Grows `frontier` after `part` was decided and its requests at
    /// `decided` (indexes into `part.requests`) were granted or refused:
    /// they leave their queues, so whoever waited behind them there (and,
    /// where a grant adds holds, the requests of that owner) may be
    /// decided now. False when nothing left out can be decided
    /// differently: the decision on `part` is the step's.
    pub fn widen(
        &self,
        frontier: &mut Frontier<K>,
        part: &Component<K>,
        decided: &[usize],
    ) -> bool {
        let chosen: HashSet<u64> = part.requests.iter().map(|r| r.id).collect();
        let is_chosen = |id: &u64| chosen.contains(id);
        let leaving: BTreeSet<u64> = decided
            .iter()
            .filter_map(|i| Some(part.requests.get(*i)?.id))
            .collect();
        let mut grown: BTreeSet<usize> = BTreeSet::new();
        let mut touched: BTreeSet<usize> = BTreeSet::new();
        // An owner's requests on a queue are looked at once, however many
        // of its requests the step decided there (10,000 requests of one
        // owner, each scanning all the others, cost 1.2 s).
        let mut owners: HashSet<(usize, u64)> = HashSet::new();
        for r in decided.iter().filter_map(|i| part.requests.get(*i)) {
            let owner = owner_hash(r.wants.owner.as_deref().unwrap_or(&r.token));
            for m in &r.members {
                touched.insert(*m);
                if !owners.insert((*m, owner)) {
                    continue;
                }
                let q = frontier.resources.get(*m).and_then(|k| self.queues.get(k));
                let mut room = frontier.owners.get(*m).copied().unwrap_or(OWNERS_FIRST);
                // In the order the queue is served: the requests a part
                // takes of an owner are ahead of the ones it leaves out.
                // A queue where nobody named a priority is served in id
                // (arrival) order: its ids are taken as they are, with no
                // sort of all of an owner's requests at every step.
                let ids: Cow<'_, [u64]> = match q.and_then(|q| Some((q, q.by_owner.get(&owner)?))) {
                    None => Cow::Borrowed(&[]),
                    Some((q, ids)) if q.priorities.is_empty() => Cow::Borrowed(ids.as_slice()),
                    Some((q, ids)) => {
                        let rank = |id: &u64| q.entries.get(*id).map(|w| w.rank);
                        let mut ranked: Vec<(Rank, u64)> = ids
                            .as_slice()
                            .iter()
                            .filter_map(|id| Some((rank(id)?, *id)))
                            .collect();
                        ranked.sort_unstable();
                        Cow::Owned(ranked.into_iter().map(|(_, id)| id).collect())
                    }
                };
                for id in ids.iter() {
                    if is_chosen(id) || frontier.extra.contains(id) {
                        continue;
                    }
                    grown.insert(*m);
                    if room == 0 {
                        frontier.capped.insert(*m);
                        break;
                    }
                    frontier.extra.insert(*id);
                    room -= 1;
                }
            }
        }
        // Requests of owners left out of the part: the next takes twice as
        // many there.
        for m in std::mem::take(&mut frontier.capped) {
            if let Some(cap) = frontier.owners.get_mut(m) {
                *cap = cap.saturating_mul(2);
            }
            grown.insert(m);
        }
        for m in touched {
            let (Some(k), Some(depth)) = (frontier.resources.get(m), frontier.depth.get(m)) else {
                continue;
            };
            let Some(q) = self.queues.get(k) else {
                continue;
            };
            // Ahead of the first request left out, every request decided
            // here leaves: that one is at the head now.
            let (mut ahead, mut all_leave) = (0, true);
            let mut want = *depth;
            for id in q.entries.ids() {
                if !is_chosen(&id) {
                    if all_leave {
                        want = want.max(ahead + 1).max(depth * 2);
                    }
                    break;
                }
                all_leave &= leaving.contains(&id);
                ahead += 1;
            }
            if want > *depth {
                if let Some(d) = frontier.depth.get_mut(m) {
                    *d = want;
                }
                grown.insert(m);
            }
        }
        frontier.grown = grown.into_iter().collect();
        !frontier.grown.is_empty()
    }
}

#[cfg(test)]
mod tests;
