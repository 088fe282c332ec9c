//! The hottest resources by one figure, in a fixed number of entries: a
//! weighted Space-Saving sketch (Metwally, Agrawal and El Abbadi). A
//! resource not in the table takes the place of the one with the lowest
//! score, inheriting that score as its possible overcount, so any resource
//! whose true figure exceeds 1/capacity of the total is always in it.

use super::histogram::Histogram;
use super::Resource;

/// Names longer than this are kept cut (the table's memory is fixed).
pub const NAME_BYTES: usize = 256;

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
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HotEntry {
    pub db: i32,
    /// At most `NAME_BYTES` of the name.
    pub name: Box<[u8]>,
    /// Whether the name was longer and is cut.
    pub cut: bool,
    pub score: u64,
    /// How much `score` may overstate the resource's true figure.
    pub error: u64,
    pub figures: HotFigures,
}

impl HotEntry {
    fn is(&self, r: &Resource<'_>) -> bool {
        self.db == r.db && *self.name == r.name[..r.name.len().min(NAME_BYTES)]
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HotTable {
    capacity: usize,
    entries: Vec<HotEntry>,
}

impl HotTable {
    pub fn new(capacity: usize) -> Self {
        HotTable {
            capacity: capacity.max(1),
            entries: Vec::with_capacity(capacity.max(1)),
        }
    }

    /// Adds `weight` to `r`'s score (taking the lowest entry's place if it
    /// is not tracked and the table is full), then lets `update` count the
    /// event in its figures. A weight of 0 only counts in a tracked entry.
    pub fn bump(&mut self, r: &Resource<'_>, weight: u64, update: impl FnOnce(&mut HotFigures)) {
        if let Some(e) = self.entries.iter_mut().find(|e| e.is(r)) {
            e.score = e.score.saturating_add(weight);
            update(&mut e.figures);
            return;
        }
        if weight == 0 {
            return;
        }
        let cut = r.name.len() > NAME_BYTES;
        let fresh = |score: u64, error: u64| HotEntry {
            db: r.db,
            name: r.name[..r.name.len().min(NAME_BYTES)].into(),
            cut,
            score,
            error,
            figures: HotFigures::new(),
        };
        if self.entries.len() < self.capacity {
            let mut e = fresh(weight, 0);
            update(&mut e.figures);
            self.entries.push(e);
            return;
        }
        let Some(lowest) = self.entries.iter_mut().min_by_key(|e| e.score) else {
            return;
        };
        let floor = lowest.score;
        *lowest = fresh(floor.saturating_add(weight), floor);
        update(&mut lowest.figures);
    }

    /// Counts an event in `r`'s figures if it is tracked; its score stays.
    pub fn touch(&mut self, r: &Resource<'_>, update: impl FnOnce(&mut HotFigures)) {
        if let Some(e) = self.entries.iter_mut().find(|e| e.is(r)) {
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
    }

    /// Bytes it occupies when full.
    pub fn memory(&self) -> usize {
        let entry = std::mem::size_of::<HotEntry>() + NAME_BYTES + HotFigures::new().wait.memory();
        std::mem::size_of::<Self>() + self.capacity * entry
    }
}
