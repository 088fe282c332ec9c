//! One queue's entries in the order they are served, found by id: a doubly linked list
//! in a slab, with a hash index from id to slot.
//!
//! A queue is joined at its tail, served from its head and left from
//! anywhere (a timeout, `CLIENT UNBLOCK`, a closed connection). An ordered
//! map keyed by id does each in O(log n), but with thousands of waiters
//! every level of its tree is a cache miss and a removal shifts the large
//! entries of a node; here joining, leaving and serving the head touch the
//! entry, its two neighbours and one hash slot, whatever the length.

use std::collections::HashMap;

/// No slot: the end of the list.
const NIL: usize = usize::MAX;

#[derive(Debug)]
struct Node<V> {
    id: u64,
    prev: usize,
    next: usize,
    /// `None` while the slot is vacant.
    value: Option<V>,
}

/// Entries keyed by a `u64` id, kept in the order they were pushed.
#[derive(Debug)]
pub(super) struct Fifo<V> {
    nodes: Vec<Node<V>>,
    /// Vacant slots of `nodes`, reused before the slab grows.
    vacant: Vec<usize>,
    slot: HashMap<u64, usize>,
    head: usize,
    tail: usize,
}

impl<V> Default for Fifo<V> {
    fn default() -> Self {
        Fifo {
            nodes: Vec::new(),
            vacant: Vec::new(),
            slot: HashMap::new(),
            head: NIL,
            tail: NIL,
        }
    }
}

impl<V> Fifo<V> {
    pub fn len(&self) -> usize {
        self.slot.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slot.is_empty()
    }

    pub fn contains(&self, id: u64) -> bool {
        self.slot.contains_key(&id)
    }

    fn value(&self, at: usize) -> Option<&V> {
        self.nodes.get(at)?.value.as_ref()
    }

    pub fn get(&self, id: u64) -> Option<&V> {
        self.value(*self.slot.get(&id)?)
    }

    pub fn get_mut(&mut self, id: u64) -> Option<&mut V> {
        let at = *self.slot.get(&id)?;
        self.nodes.get_mut(at)?.value.as_mut()
    }

    /// The entry pushed first.
    pub fn first(&self) -> Option<&V> {
        self.value(self.head)
    }

    /// The entry pushed last.
    pub fn last(&self) -> Option<&V> {
        self.value(self.tail)
    }

    /// Appends `value` under `id` at the tail. An id already present
    /// replaces nothing: the call is ignored and `value` handed back.
    pub fn push_back(&mut self, id: u64, value: V) -> Result<(), V> {
        if self.slot.contains_key(&id) {
            return Err(value);
        }
        let node = Node {
            id,
            prev: self.tail,
            next: NIL,
            value: Some(value),
        };
        let at = match self.vacant.pop() {
            Some(at) => {
                if let Some(n) = self.nodes.get_mut(at) {
                    *n = node;
                }
                at
            }
            None => {
                self.nodes.push(node);
                self.nodes.len() - 1
            }
        };
        match self.nodes.get_mut(self.tail) {
            Some(t) => t.next = at,
            None => self.head = at,
        }
        self.tail = at;
        self.slot.insert(id, at);
        Ok(())
    }

    /// Inserts `value` under `id` just before entry `next` (a request that
    /// ranks ahead of some waiting ones); at the tail when `next` is not
    /// queued. An id already present is refused as by `push_back`.
    pub fn insert_before(&mut self, next: u64, id: u64, value: V) -> Result<(), V> {
        let Some(&after) = self.slot.get(&next) else {
            return self.push_back(id, value);
        };
        if self.slot.contains_key(&id) {
            return Err(value);
        }
        let prev = self.nodes.get(after).map_or(NIL, |n| n.prev);
        let node = Node {
            id,
            prev,
            next: after,
            value: Some(value),
        };
        let at = match self.vacant.pop() {
            Some(at) => {
                if let Some(n) = self.nodes.get_mut(at) {
                    *n = node;
                }
                at
            }
            None => {
                self.nodes.push(node);
                self.nodes.len() - 1
            }
        };
        match self.nodes.get_mut(prev) {
            Some(p) => p.next = at,
            None => self.head = at,
        }
        if let Some(n) = self.nodes.get_mut(after) {
            n.prev = at;
        }
        self.slot.insert(id, at);
        Ok(())
    }

    /// Takes entry `id` out.
    pub fn remove(&mut self, id: u64) -> Option<V> {
        let at = self.slot.remove(&id)?;
        let node = self.nodes.get_mut(at)?;
        let (prev, next) = (node.prev, node.next);
        let value = node.value.take();
        node.prev = NIL;
        node.next = NIL;
        match self.nodes.get_mut(prev) {
            Some(p) => p.next = next,
            None => self.head = next,
        }
        match self.nodes.get_mut(next) {
            Some(n) => n.prev = prev,
            None => self.tail = prev,
        }
        if self.slot.is_empty() {
            // Nothing left to link to: the slab starts over.
            self.nodes.clear();
            self.vacant.clear();
            self.head = NIL;
            self.tail = NIL;
        } else {
            self.vacant.push(at);
        }
        value
    }

    /// The entries with their ids, head first.
    pub fn iter(&self) -> Iter<'_, V> {
        Iter {
            fifo: self,
            at: self.head,
            left: self.len(),
        }
    }

    /// The ids, head first.
    pub fn ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.iter().map(|(id, _)| id)
    }

    /// The entries, head first.
    pub fn values(&self) -> impl Iterator<Item = &V> + '_ {
        self.iter().map(|(_, v)| v)
    }

    /// Every entry, in no particular order: for reading them all, in the
    /// order they lie in memory (no cache miss per entry, as a walk along
    /// the links has), unless most of the slab is vacant (a queue that was
    /// much longer), where following the links reads less.
    pub fn values_unordered(&self) -> Box<dyn Iterator<Item = &V> + '_> {
        if self.nodes.len() > 2 * self.len() + 64 {
            return Box::new(self.values());
        }
        Box::new(self.nodes.iter().filter_map(|n| n.value.as_ref()))
    }

    /// Every entry, head first, leaving the queue empty.
    pub fn into_values(mut self) -> Vec<V> {
        let mut out = Vec::with_capacity(self.len());
        let mut at = self.head;
        while let Some(node) = self.nodes.get_mut(at) {
            at = node.next;
            out.extend(node.value.take());
        }
        out
    }
}

/// `Fifo::iter`.
pub(super) struct Iter<'a, V> {
    fifo: &'a Fifo<V>,
    at: usize,
    /// Entries not yet visited: bounds the walk even if the links were
    /// ever wrong.
    left: usize,
}

impl<'a, V> Iterator for Iter<'a, V> {
    type Item = (u64, &'a V);

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        let node = self.fifo.nodes.get(self.at)?;
        self.at = node.next;
        self.left -= 1;
        Some((node.id, node.value.as_ref()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(f: &Fifo<u32>) -> Vec<u64> {
        f.ids().collect()
    }

    #[test]
    fn keeps_arrival_order_through_removals_anywhere() {
        let mut f = Fifo::default();
        for id in 1..=5 {
            assert!(f.push_back(id, id as u32 * 10).is_ok());
        }
        assert_eq!(f.remove(3), Some(30));
        assert_eq!(f.remove(1), Some(10));
        assert_eq!(f.remove(5), Some(50));
        assert_eq!(f.remove(5), None, "removal is idempotent");
        assert_eq!(ids(&f), [2, 4]);
        assert_eq!((f.first(), f.last(), f.len()), (Some(&20), Some(&40), 2));
        // Vacant slots are reused; order stays the order of pushes.
        assert!(f.push_back(6, 60).is_ok());
        assert!(f.push_back(7, 70).is_ok());
        assert_eq!(ids(&f), [2, 4, 6, 7]);
        assert_eq!(f.get(6), Some(&60));
        assert_eq!(f.get(3), None);
        assert!(f.contains(7) && !f.contains(1));
        assert_eq!(f.values().copied().collect::<Vec<_>>(), [20, 40, 60, 70]);
        let mut unordered: Vec<u32> = f.values_unordered().copied().collect();
        unordered.sort_unstable();
        assert_eq!(unordered, [20, 40, 60, 70]);
        // A slab left mostly vacant by a longer queue is read along the links.
        let mut long = Fifo::default();
        for id in 1..=1000u64 {
            assert!(long.push_back(id, id as u32).is_ok());
        }
        for id in 1..=990u64 {
            long.remove(id);
        }
        let mut rest: Vec<u32> = long.values_unordered().copied().collect();
        rest.sort_unstable();
        assert_eq!(rest, (991..=1000).collect::<Vec<u32>>());
        assert_eq!(f.into_values(), [20, 40, 60, 70]);
    }

    #[test]
    fn an_id_is_pushed_once() {
        let mut f = Fifo::default();
        assert!(f.push_back(1, 1).is_ok());
        assert_eq!(f.push_back(1, 2), Err(2));
        assert_eq!(ids(&f), [1]);
        assert_eq!(f.get(1), Some(&1));
    }

    #[test]
    fn emptied_starts_over() {
        let mut f = Fifo::default();
        assert!(f.push_back(1, 1).is_ok());
        assert!(f.push_back(2, 2).is_ok());
        assert_eq!(f.remove(1), Some(1));
        assert_eq!(f.remove(2), Some(2));
        assert!(f.is_empty() && f.first().is_none() && f.last().is_none());
        assert_eq!((f.nodes.len(), f.vacant.len()), (0, 0));
        assert!(f.push_back(3, 3).is_ok());
        assert_eq!(ids(&f), [3]);
    }

    /// Random pushes and removals against a sorted map.
    #[test]
    fn matches_an_ordered_map() {
        use std::collections::BTreeMap;
        let mut f = Fifo::default();
        let mut m = BTreeMap::new();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next_id = 1u64;
        for _ in 0..20_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            if !seed.is_multiple_of(3) || m.is_empty() {
                assert!(f.push_back(next_id, next_id as u32).is_ok());
                m.insert(next_id, next_id as u32);
                next_id += 1;
            } else {
                let id = seed % next_id;
                assert_eq!(f.remove(id), m.remove(&id));
            }
            assert_eq!(f.len(), m.len());
            assert_eq!(f.first(), m.values().next());
            assert_eq!(f.last(), m.values().next_back());
        }
        assert!(f.ids().eq(m.keys().copied()));
    }

    /// Random insertions anywhere (before the entry of the next larger
    /// key) and removals against a map ordered by key: the list keeps the
    /// map's order, its first and last entries, and its length.
    #[test]
    fn insert_before_matches_an_ordered_map() {
        use std::collections::BTreeMap;
        let mut f = Fifo::default();
        let mut m: BTreeMap<u64, u32> = BTreeMap::new();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rng = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for _ in 0..20_000 {
            let key = rng(2048);
            if rng(3) != 0 {
                let next = m.range(key..).next().map(|(k, _)| *k);
                let pushed = match next {
                    Some(n) => f.insert_before(n, key, key as u32),
                    None => f.push_back(key, key as u32),
                };
                assert_eq!(pushed.is_ok(), !m.contains_key(&key));
                m.entry(key).or_insert(key as u32);
            } else {
                assert_eq!(f.remove(key), m.remove(&key));
            }
            assert_eq!(f.len(), m.len());
            assert_eq!(f.first(), m.values().next());
            assert_eq!(f.last(), m.values().next_back());
        }
        assert!(f.ids().eq(m.keys().copied()));
        // Before an id not queued: at the tail.
        let mut g = Fifo::default();
        assert!(g.push_back(1, 1).is_ok() && g.insert_before(9, 2, 2).is_ok());
        assert!(g.insert_before(1, 0, 0).is_ok());
        assert_eq!(ids(&g), [0, 1, 2]);
    }
}
