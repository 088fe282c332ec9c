//! An order-statistics index: a queue's entries by their ordering key,
//! with the rank of any entry and the entries from any rank, each in
//! O(log n) in the queue's length (`DLOCK.POSITION`, `DLOCK.WAITERS`).
//!
//! A treap in a slab: a binary search tree by key that is also a heap by a
//! random priority, each node counting the nodes below it. The priorities
//! come from a generator seeded from the process's random hash keys, so no
//! client can choose keys that unbalance the tree: its depth is O(log n)
//! with overwhelming probability, as a `HashMap`'s chains are short.
//!
//! Generic over the ordering key: today a waiter's id (arrival order);
//! any key that does not change while the entry is in the index works, so
//! an order by class with aging can be kept as (arrival time minus the
//! class's head start, id).

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

/// No node: an empty subtree.
const NIL: u32 = u32::MAX;

#[derive(Debug, Clone, Copy)]
struct Node<K> {
    key: K,
    priority: u32,
    /// Nodes in the subtree rooted here, this one included.
    size: u32,
    left: u32,
    right: u32,
}

/// Distinct keys, each with its rank among them.
#[derive(Debug)]
pub(super) struct Ranks<K> {
    nodes: Vec<Node<K>>,
    /// Vacant slots of `nodes`, reused before the slab grows.
    vacant: Vec<u32>,
    root: u32,
    /// The priority generator's state (splitmix64).
    seed: u64,
}

impl<K> Default for Ranks<K> {
    fn default() -> Self {
        Ranks {
            nodes: Vec::new(),
            vacant: Vec::new(),
            root: NIL,
            seed: RandomState::new().hash_one(0x6a09_e667_f3bc_c908u64),
        }
    }
}

impl<K: Ord + Copy> Ranks<K> {
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.size(self.root) as usize
    }

    fn node(&self, at: u32) -> Option<&Node<K>> {
        self.nodes.get(at as usize)
    }

    fn size(&self, at: u32) -> u32 {
        self.node(at).map_or(0, |n| n.size)
    }

    /// Recounts node `at` from its children.
    fn update(&mut self, at: u32) {
        let Some(&Node { left, right, .. }) = self.node(at) else {
            return;
        };
        let size = 1 + self.size(left) + self.size(right);
        if let Some(n) = self.nodes.get_mut(at as usize) {
            n.size = size;
        }
    }

    fn set_children(&mut self, at: u32, left: u32, right: u32) {
        if let Some(n) = self.nodes.get_mut(at as usize) {
            n.left = left;
            n.right = right;
        }
        self.update(at);
    }

    fn next_priority(&mut self) -> u32 {
        self.seed = self.seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) as u32
    }

    /// The 0-based rank of `key` (how many keys are smaller), if present.
    pub fn rank(&self, key: &K) -> Option<usize> {
        let mut at = self.root;
        let mut before = 0usize;
        while let Some(n) = self.node(at) {
            match key.cmp(&n.key) {
                std::cmp::Ordering::Less => at = n.left,
                std::cmp::Ordering::Equal => return Some(before + self.size(n.left) as usize),
                std::cmp::Ordering::Greater => {
                    before += self.size(n.left) as usize + 1;
                    at = n.right;
                }
            }
        }
        None
    }

    /// How many keys are below `key`, present or not: the rank `key` has
    /// or would have once inserted.
    pub fn count_below(&self, key: &K) -> usize {
        let mut at = self.root;
        let mut before = 0usize;
        while let Some(n) = self.node(at) {
            if *key <= n.key {
                at = n.left;
            } else {
                before += self.size(n.left) as usize + 1;
                at = n.right;
            }
        }
        before
    }

    /// Adds `key`; a key already present is left as it is (false).
    pub fn insert(&mut self, key: K) -> bool {
        if self.rank(&key).is_some() || self.nodes.len() >= NIL as usize && self.vacant.is_empty() {
            return false;
        }
        let node = Node {
            key,
            priority: self.next_priority(),
            size: 1,
            left: NIL,
            right: NIL,
        };
        let at = match self.vacant.pop() {
            Some(at) => {
                if let Some(n) = self.nodes.get_mut(at as usize) {
                    *n = node;
                }
                at
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        };
        self.root = self.insert_at(self.root, at);
        true
    }

    /// Inserts node `new` into the subtree at `at`; returns its new root.
    fn insert_at(&mut self, at: u32, new: u32) -> u32 {
        let (Some(&t), Some(&n)) = (self.node(at), self.node(new)) else {
            return new;
        };
        if n.priority > t.priority {
            let (left, right) = self.split(at, &n.key);
            self.set_children(new, left, right);
            return new;
        }
        if n.key < t.key {
            let left = self.insert_at(t.left, new);
            self.set_children(at, left, t.right);
        } else {
            let right = self.insert_at(t.right, new);
            self.set_children(at, t.left, right);
        }
        at
    }

    /// Splits the subtree at `at` into the keys below `key` and the rest.
    fn split(&mut self, at: u32, key: &K) -> (u32, u32) {
        let Some(&t) = self.node(at) else {
            return (NIL, NIL);
        };
        if t.key < *key {
            let (left, right) = self.split(t.right, key);
            self.set_children(at, t.left, left);
            (at, right)
        } else {
            let (left, right) = self.split(t.left, key);
            self.set_children(at, right, t.right);
            (left, at)
        }
    }

    /// Joins two subtrees, every key of `a` below every key of `b`.
    fn merge(&mut self, a: u32, b: u32) -> u32 {
        let (Some(&x), Some(&y)) = (self.node(a), self.node(b)) else {
            return if a == NIL { b } else { a };
        };
        if x.priority > y.priority {
            let right = self.merge(x.right, b);
            self.set_children(a, x.left, right);
            a
        } else {
            let left = self.merge(a, y.left);
            self.set_children(b, left, y.right);
            b
        }
    }

    /// Takes `key` out; whether it was present. One descent: the nodes on
    /// the way are recounted only when the key was found below them.
    pub fn remove(&mut self, key: &K) -> bool {
        let (root, found) = self.remove_at(self.root, key);
        if !found {
            return false;
        }
        self.root = root;
        if self.root == NIL {
            // Nothing left: the slab starts over.
            self.nodes.clear();
            self.vacant.clear();
        }
        true
    }

    /// Removes `key` from the subtree at `at`: its new root, and whether
    /// the key was there (if not, nothing changed).
    fn remove_at(&mut self, at: u32, key: &K) -> (u32, bool) {
        let Some(&t) = self.node(at) else {
            return (NIL, false);
        };
        match key.cmp(&t.key) {
            std::cmp::Ordering::Equal => {
                self.vacant.push(at);
                (self.merge(t.left, t.right), true)
            }
            std::cmp::Ordering::Less => {
                let (left, found) = self.remove_at(t.left, key);
                if found {
                    self.set_children(at, left, t.right);
                }
                (at, found)
            }
            std::cmp::Ordering::Greater => {
                let (right, found) = self.remove_at(t.right, key);
                if found {
                    self.set_children(at, t.left, right);
                }
                (at, found)
            }
        }
    }

    /// The keys in order from rank `from` (0-based) on.
    pub fn iter_from(&self, from: usize) -> IterFrom<'_, K> {
        let mut path = Vec::new();
        let mut at = self.root;
        let mut skip = from;
        while let Some(n) = self.node(at) {
            let left = self.size(n.left) as usize;
            if skip < left {
                path.push(at);
                at = n.left;
            } else if skip == left {
                path.push(at);
                break;
            } else {
                skip -= left + 1;
                at = n.right;
            }
        }
        IterFrom { ranks: self, path }
    }
}

/// `Ranks::iter_from`: the path from the root to the next node, kept to
/// the nodes still to visit, so each step costs O(1) amortized.
pub(super) struct IterFrom<'a, K> {
    ranks: &'a Ranks<K>,
    path: Vec<u32>,
}

impl<K: Ord + Copy> Iterator for IterFrom<'_, K> {
    type Item = K;

    fn next(&mut self) -> Option<K> {
        let at = self.path.pop()?;
        let n = self.ranks.node(at)?;
        let mut below = n.right;
        while let Some(b) = self.ranks.node(below) {
            self.path.push(below);
            below = b.left;
        }
        Some(n.key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tree's own invariants: keys in order, priorities a heap, sizes
    /// right; returns the keys in order.
    fn check(r: &Ranks<u64>) -> Vec<u64> {
        fn walk(r: &Ranks<u64>, at: u32, out: &mut Vec<u64>) -> u32 {
            let Some(n) = r.node(at) else { return 0 };
            for c in [n.left, n.right] {
                if let Some(child) = r.node(c) {
                    assert!(child.priority <= n.priority, "heap order");
                }
            }
            let left = walk(r, n.left, out);
            out.push(n.key);
            let right = walk(r, n.right, out);
            assert_eq!(n.size, 1 + left + right, "subtree size");
            n.size
        }
        let mut out = Vec::new();
        walk(r, r.root, &mut out);
        assert!(out.windows(2).all(|w| w[0] < w[1]), "search order");
        out
    }

    #[test]
    fn ranks_and_walks_from_any_rank() {
        let mut r = Ranks::default();
        for k in [5u64, 1, 9, 3, 7] {
            assert!(r.insert(k));
        }
        assert!(!r.insert(3), "a key is kept once");
        assert_eq!(check(&r), [1, 3, 5, 7, 9]);
        assert_eq!(
            [1, 3, 5, 7, 9, 4].map(|k| r.rank(&k)),
            [Some(0), Some(1), Some(2), Some(3), Some(4), None]
        );
        assert_eq!(r.iter_from(0).collect::<Vec<_>>(), [1, 3, 5, 7, 9]);
        assert_eq!(r.iter_from(2).collect::<Vec<_>>(), [5, 7, 9]);
        assert_eq!(r.iter_from(4).collect::<Vec<_>>(), [9]);
        assert_eq!(r.iter_from(5).count(), 0);
        assert_eq!(r.iter_from(usize::MAX).count(), 0);
        assert!(r.remove(&5) && !r.remove(&5));
        assert_eq!((r.rank(&7), r.len()), (Some(2), 4));
        for k in [1, 3, 7, 9] {
            assert!(r.remove(&k));
        }
        assert_eq!((r.len(), r.nodes.len(), r.root), (0, 0, NIL));
        assert_eq!(r.iter_from(0).count(), 0);
    }

    /// Random insertions and removals against a sorted vector: every rank
    /// and every walk agree, and the tree stays shallow.
    #[test]
    fn matches_a_sorted_vector() {
        let mut r = Ranks::default();
        let mut model: Vec<u64> = Vec::new();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut rng = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for step in 0..20_000u32 {
            let x = rng();
            let key = x % 4096;
            if x % 5 < 3 {
                let fresh = model.binary_search(&key).err();
                assert_eq!(r.insert(key), fresh.is_some());
                if let Some(at) = fresh {
                    model.insert(at, key);
                }
            } else {
                let found = model.binary_search(&key).ok();
                assert_eq!(r.remove(&key), found.is_some());
                if let Some(at) = found {
                    model.remove(at);
                }
            }
            assert_eq!(r.len(), model.len());
            let probe = rng() % 4096;
            assert_eq!(r.rank(&probe), model.binary_search(&probe).ok());
            assert_eq!(r.count_below(&probe), model.partition_point(|k| *k < probe));
            let from = (rng() % (model.len() as u64 + 2)) as usize;
            let walked: Vec<u64> = r.iter_from(from).take(8).collect();
            let expected: Vec<u64> = model.iter().skip(from).take(8).copied().collect();
            assert_eq!(walked, expected);
            if step % 1000 == 0 {
                assert_eq!(check(&r), model);
            }
        }
        assert_eq!(check(&r), model);
    }

    #[test]
    fn stays_shallow_in_arrival_order() {
        // Keys arriving in order (waiter ids) would make a plain search
        // tree a list; the random priorities keep it about 2 log2 n deep.
        fn depth(r: &Ranks<u64>, at: u32) -> usize {
            r.node(at)
                .map_or(0, |n| 1 + depth(r, n.left).max(depth(r, n.right)))
        }
        let mut r = Ranks::default();
        for k in 0..100_000u64 {
            r.insert(k);
        }
        for k in 0..50_000u64 {
            r.remove(&(k * 2));
        }
        assert!(depth(&r, r.root) < 80, "depth {}", depth(&r, r.root));
        assert_eq!(r.rank(&99_999), Some(49_999));
    }
}
