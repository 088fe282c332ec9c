//! The hottest resources by one figure, in a fixed number of entries: a
//! weighted Space-Saving sketch (Metwally, Agrawal and El Abbadi) with
//! randomized admission (Ben Basat et al., "Randomized Admission Policy
//! for Efficient Top-k and Frequency Estimation", 2017). While the table
//! has room every resource enters; once full, a resource not in it takes
//! the place of the lowest entry with probability w / (low + w), for its
//! weight w and the lowest score low, inheriting that score. A tracked
//! resource is counted exactly from then on, so a hot one enters early and
//! stays; the many cold ones of a uniform load mostly cost a scan of the
//! hashes and one random draw, not a replacement.
//!
//! An event costs a scan of the entries' hashes (one cache line per 8) and
//! no allocation: a replaced entry's buffers are reused.

use super::histogram::Histogram;

/// A resource as the hot tables know it.
#[derive(Debug, Clone, Copy)]
pub struct Resource<'a> {
    pub db: i32,
    pub name: &'a [u8],
}

impl Resource<'_> {
    /// A hash of the database and the part of the name kept, eight bytes
    /// at a time (the multiply-rotate step of rustc's FxHasher): a name of
    /// a few dozen bytes costs a few nanoseconds.
    pub fn hash(&self) -> u64 {
        const K: u64 = 0x517c_c1b7_2722_0a95;
        let step = |h: u64, w: u64| (h.rotate_left(5) ^ w).wrapping_mul(K);
        let name = kept(self.name);
        let mut h = step(name.len() as u64, self.db as u32 as u64);
        let mut words = name.chunks_exact(8);
        for w in words.by_ref() {
            let mut b = [0u8; 8];
            b.copy_from_slice(w);
            h = step(h, u64::from_le_bytes(b));
        }
        let mut tail = [0u8; 8];
        for (t, b) in tail.iter_mut().zip(words.remainder()) {
            *t = *b;
        }
        step(h, u64::from_le_bytes(tail))
    }
}

/// Names longer than this are kept cut (the table's memory is fixed).
pub const NAME_BYTES: usize = 256;

/// The part of a name the table keeps.
fn kept(name: &[u8]) -> &[u8] {
    name.get(..NAME_BYTES).unwrap_or(name)
}

/// A hot resource's own figures, counted from when it entered the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HotFigures {
    pub contended: u64,
    pub waited: u64,
    pub wait_timeouts: u64,
    pub expired: u64,
    pub wait: Histogram,
}

impl HotFigures {
    fn new() -> Self {
        HotFigures {
            contended: 0,
            waited: 0,
            wait_timeouts: 0,
            expired: 0,
            // A bucket spans 1/4 of its value: within 1/8 at its middle.
            wait: Histogram::new(2),
        }
    }

    fn clear(&mut self) {
        self.contended = 0;
        self.waited = 0;
        self.wait_timeouts = 0;
        self.expired = 0;
        self.wait.clear();
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HotEntry {
    pub db: i32,
    /// At most `NAME_BYTES` of the name.
    pub name: Vec<u8>,
    /// Whether the name was longer and is cut.
    pub cut: bool,
    pub score: u64,
    /// How much `score` may overstate the resource's true figure.
    pub error: u64,
    pub figures: HotFigures,
}

impl HotEntry {
    fn is(&self, r: &Resource<'_>) -> bool {
        self.db == r.db && self.name == kept(r.name)
    }

    fn become_(&mut self, r: &Resource<'_>, score: u64, error: u64) {
        self.db = r.db;
        self.name.clear();
        self.name.extend_from_slice(kept(r.name));
        self.cut = r.name.len() > NAME_BYTES;
        self.score = score;
        self.error = error;
        self.figures.clear();
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HotTable {
    capacity: usize,
    entries: Vec<HotEntry>,
    /// `Resource::hash` and score of each entry, at the same index: what
    /// an event scans, contiguous.
    hashes: Vec<u64>,
    scores: Vec<u64>,
    /// A lower bound of the lowest score (scores only grow between two
    /// admissions), for the admission's odds.
    floor: u64,
    /// The admissions' random draws (xorshift64*: deterministic, so a
    /// table's behaviour repeats for the same events).
    rng: u64,
}

impl HotTable {
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        HotTable {
            capacity,
            entries: Vec::with_capacity(capacity),
            hashes: Vec::with_capacity(capacity),
            scores: Vec::with_capacity(capacity),
            floor: 0,
            rng: 0x9e37_79b9_7f4a_7c15,
        }
    }

    fn find(&self, r: &Resource<'_>, hash: u64) -> Option<usize> {
        self.hashes
            .iter()
            .enumerate()
            .filter(|(_, h)| **h == hash)
            .map(|(i, _)| i)
            .find(|i| self.entries.get(*i).is_some_and(|e| e.is(r)))
    }

    fn draw(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Adds `weight` to `r`'s score (`hash` its `Resource::hash`) if it is
    /// tracked; else it enters (see the module's comment) with that
    /// weight. Then `update` counts the event in its figures. A weight of 0
    /// only counts in a tracked entry.
    pub fn bump(
        &mut self,
        r: &Resource<'_>,
        hash: u64,
        weight: u64,
        update: impl FnOnce(&mut HotFigures),
    ) {
        if let Some(i) = self.find(r, hash) {
            if let (Some(e), Some(s)) = (self.entries.get_mut(i), self.scores.get_mut(i)) {
                e.score = e.score.saturating_add(weight);
                *s = e.score;
                update(&mut e.figures);
            }
            return;
        }
        if weight == 0 {
            return;
        }
        if self.entries.len() < self.capacity {
            let mut e = HotEntry {
                db: r.db,
                name: Vec::with_capacity(NAME_BYTES),
                cut: false,
                score: 0,
                error: 0,
                figures: HotFigures::new(),
            };
            e.become_(r, weight, 0);
            update(&mut e.figures);
            self.entries.push(e);
            self.hashes.push(hash);
            self.scores.push(weight);
            return;
        }
        let odds = self.floor.saturating_add(weight);
        if self.draw() % odds >= weight {
            return;
        }
        let Some((at, floor)) = self.lowest() else {
            return;
        };
        self.floor = floor;
        let score = floor.saturating_add(weight);
        if let (Some(e), Some(h), Some(s)) = (
            self.entries.get_mut(at),
            self.hashes.get_mut(at),
            self.scores.get_mut(at),
        ) {
            e.become_(r, score, floor);
            update(&mut e.figures);
            *h = hash;
            *s = score;
        }
    }

    /// The index of the lowest score, and that score.
    fn lowest(&self) -> Option<(usize, u64)> {
        let mut best: Option<(usize, u64)> = None;
        for (i, &s) in self.scores.iter().enumerate() {
            if best.is_none_or(|(_, b)| s < b) {
                best = Some((i, s));
            }
        }
        best
    }

    /// Counts an event in `r`'s figures if it is tracked; its score stays.
    pub fn touch(&mut self, r: &Resource<'_>, hash: u64, update: impl FnOnce(&mut HotFigures)) {
        if let Some(e) = self.find(r, hash).and_then(|i| self.entries.get_mut(i)) {
            update(&mut e.figures);
        }
    }

    /// The `count` highest entries, highest first (ties by name).
    pub fn top(&self, count: usize) -> Vec<&HotEntry> {
        let mut all: Vec<&HotEntry> = self.entries.iter().collect();
        all.sort_by(|a, b| {
            b.score
                .cmp(&a.score)
                .then_with(|| (a.db, &a.name).cmp(&(b.db, &b.name)))
        });
        all.truncate(count);
        all
    }

    pub fn clear(&mut self) {
        self.entries.clear();
        self.hashes.clear();
        self.scores.clear();
        self.floor = 0;
    }

    /// Bytes it occupies when full.
    pub fn memory(&self) -> usize {
        let entry = std::mem::size_of::<HotEntry>() + NAME_BYTES + HotFigures::new().wait.memory();
        std::mem::size_of::<Self>() + self.capacity * (entry + 2 * std::mem::size_of::<u64>())
    }
}
