//! The Wing & Gong linearizability search with Lowe's memoization, as
//! Porcupine does it (`checker.go`): the call and return entries of every
//! operation in one doubly linked list sorted by time; an operation is
//! linearized by *lifting* its call and return out of the list, undone by
//! *unlifting* them; a cache of (linearized set, state) pairs already
//! explored cuts every repeated configuration; an explicit stack of the
//! lifted calls backtracks. Iterative: no recursion, so a partition of any
//! length cannot overflow the stack.
//!
//! Models are nondeterministic (Porcupine's `NondeterministicModel`): `step`
//! returns every state the operation may lead to. The search runs on the
//! powerset: its state is the sorted set of model states still possible,
//! interned to a number, so the cache key is (hash of the linearized set,
//! state number) and a step of one operation from one state is computed once.
//!
//! The linearized set is hashed, not stored: a Zobrist hash of 128 bits (a
//! random value per operation, XORed in and out), so a cache entry is 20
//! bytes whatever the partition's length. Two different sets share a hash
//! with probability about 2^-128 per pair of entries.
use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::hash::Hash;

/// A sequential specification, possibly nondeterministic.
pub trait Model {
    type State: Clone + Eq + Hash + Ord + Debug;
    type Input;
    type Output;
    fn init(&self) -> Self::State;
    /// Every state `input` answered by `output` can lead to from `state`;
    /// empty: that answer is impossible there.
    fn step(
        &self,
        state: &Self::State,
        input: &Self::Input,
        output: &Self::Output,
    ) -> Vec<Self::State>;
}

/// One operation: it took effect at one instant of [`call`, `ret`].
#[derive(Clone, Debug)]
pub struct Operation<I, O> {
    pub id: u64,
    pub call: u64,
    pub ret: u64,
    pub input: I,
    pub output: O,
}

/// What the search found.
#[derive(Debug)]
pub struct Search<S> {
    pub linearizable: bool,
    /// The budget of steps ran out first: undecided.
    pub gave_up: bool,
    /// The longest linearizable prefix found: how many operations.
    pub prefix: usize,
    /// Its last operations, in linearization order (at most 4).
    pub prefix_tail: Vec<u64>,
    /// Where that prefix got stuck: the operation whose return came before
    /// it could be linearized.
    pub blocked: Option<u64>,
    /// The operations pending there (called before `blocked` returned, not
    /// linearized), none of which could take effect next.
    pub pending: Vec<u64>,
    /// The model states possible after the prefix.
    pub states: Vec<S>,
    /// Search steps (an entry visited).
    pub steps: u64,
    /// Configurations cached.
    pub cache: usize,
    /// The most model states one search state held.
    pub max_states: usize,
}

const NIL: u32 = u32::MAX;

/// splitmix64: the per-operation Zobrist values (fixed seed: reproducible).
pub fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

struct Interner<S> {
    sets: Vec<Vec<S>>,
    ids: HashMap<Vec<S>, u32>,
}

impl<S: Clone + Eq + Hash> Interner<S> {
    fn id(&mut self, set: Vec<S>) -> u32 {
        if let Some(&id) = self.ids.get(&set) {
            return id;
        }
        let id = self.sets.len() as u32;
        self.sets.push(set.clone());
        self.ids.insert(set, id);
        id
    }
}

/// Checks `ops` against `model`; `budget` bounds the search steps.
pub fn check<M: Model>(
    model: &M,
    ops: &[Operation<M::Input, M::Output>],
    budget: u64,
) -> Search<M::State> {
    let n = ops.len();
    // Entries sorted by time; at equal times calls come first (the
    // operations are then concurrent, as in Porcupine).
    let mut order: Vec<(u64, u8, u32)> = Vec::with_capacity(2 * n);
    for (i, op) in ops.iter().enumerate() {
        order.push((op.call, 0, i as u32));
        order.push((op.ret.max(op.call), 1, i as u32));
    }
    order.sort_unstable();
    // Node 0 is the head; entry k is node k + 1.
    let nodes = 2 * n + 1;
    let mut next = vec![NIL; nodes];
    let mut prev = vec![NIL; nodes];
    let mut op_of = vec![NIL; nodes];
    let mut is_call = vec![false; nodes];
    let mut ret_node = vec![NIL; n];
    for (k, &(_, kind, op)) in order.iter().enumerate() {
        let node = k + 1;
        op_of[node] = op;
        is_call[node] = kind == 0;
        if kind == 1 {
            ret_node[op as usize] = node as u32;
        }
        prev[node] = k as u32;
        next[k] = node as u32;
    }
    let mut seed = 0x6c69_6e65_6172_697a_u64;
    let zobrist: Vec<u128> = (0..n)
        .map(|_| (u128::from(splitmix(&mut seed)) << 64) | u128::from(splitmix(&mut seed)))
        .collect();

    let mut interner = Interner {
        sets: Vec::new(),
        ids: HashMap::new(),
    };
    let mut state = interner.id(vec![model.init()]);
    let mut memo: HashMap<(u32, u32), u32> = HashMap::new();
    let mut cache: HashSet<(u128, u32)> = HashSet::new();
    let mut stack: Vec<(u32, u32)> = Vec::new();
    let mut lin: u128 = 0;
    let mut steps = 0u64;
    let mut max_states = 1usize;
    // The longest prefix seen: its length, tail, block, pending, state.
    type Best = (usize, Vec<u64>, u64, Vec<u64>, u32);
    let mut best: Option<Best> = None;

    let mut entry = next[0];
    let mut gave_up = false;
    while next[0] != NIL {
        steps += 1;
        if steps > budget {
            gave_up = true;
            break;
        }
        let e = entry as usize;
        if is_call[e] {
            let op = op_of[e];
            let after = *memo.entry((state, op)).or_insert_with(|| {
                let o = &ops[op as usize];
                let mut out: Vec<M::State> = Vec::new();
                for s in &interner.sets[state as usize] {
                    out.extend(model.step(s, &o.input, &o.output));
                }
                if out.is_empty() {
                    return NIL;
                }
                out.sort_unstable();
                out.dedup();
                max_states = max_states.max(out.len());
                interner.id(out)
            });
            if after != NIL {
                let h = lin ^ zobrist[op as usize];
                if cache.insert((h, after)) {
                    stack.push((entry, state));
                    state = after;
                    lin = h;
                    // lift: the call, then its return.
                    let r = ret_node[op as usize] as usize;
                    for x in [e, r] {
                        let (p, nx) = (prev[x], next[x]);
                        next[p as usize] = nx;
                        if nx != NIL {
                            prev[nx as usize] = p;
                        }
                    }
                    entry = next[0];
                    continue;
                }
            }
            entry = next[e];
        } else {
            // A return before its call was linearized: this branch is stuck.
            if best.as_ref().is_none_or(|b| stack.len() > b.0) {
                let tail = stack
                    .iter()
                    .rev()
                    .take(4)
                    .rev()
                    .map(|&(c, _)| ops[op_of[c as usize] as usize].id)
                    .collect();
                let mut pending = Vec::new();
                let mut x = next[0];
                while x != entry {
                    if is_call[x as usize] {
                        pending.push(ops[op_of[x as usize] as usize].id);
                    }
                    x = next[x as usize];
                }
                pending.sort_unstable();
                let blocked = ops[op_of[e] as usize].id;
                best = Some((stack.len(), tail, blocked, pending, state));
            }
            let Some((call, before)) = stack.pop() else {
                break;
            };
            let c = call as usize;
            let op = op_of[c];
            state = before;
            lin ^= zobrist[op as usize];
            // unlift: the return, then the call (the reverse of lift).
            let r = ret_node[op as usize] as usize;
            for x in [r, c] {
                let (p, nx) = (prev[x], next[x]);
                next[p as usize] = x as u32;
                if nx != NIL {
                    prev[nx as usize] = x as u32;
                }
            }
            entry = next[c];
        }
    }
    let linearizable = next[0] == NIL;
    let (prefix, prefix_tail, blocked, pending, at) = match best {
        Some((len, tail, blocked, pending, at)) if !linearizable => {
            (len, tail, Some(blocked), pending, at)
        }
        _ => (stack.len(), Vec::new(), None, Vec::new(), state),
    };
    Search {
        linearizable,
        gave_up,
        prefix,
        prefix_tail,
        blocked,
        pending,
        states: interner.sets[at as usize].clone(),
        steps,
        cache: cache.len(),
        max_states,
    }
}
