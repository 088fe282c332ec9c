//! What the server's locks did, in a fixed memory bound: counters and
//! wait/hold distributions per kind of lock, and the hottest resources.
//! Pure: the server reports each change it carried out (a grant with how
//! long it waited, a hold's end with how long it lasted), durations already
//! measured; nothing here reads a clock.

pub mod args;
pub mod histogram;
pub mod hot;
pub mod slowlog;
#[cfg(test)]
mod tests;

use crate::ask::Mode;
use histogram::{Histogram, Summary};
pub use hot::Resource;
use hot::{HotEntry, HotTable};

/// Entries of each hot table.
pub const HOT_ENTRIES: usize = 32;

/// The kinds figures are kept for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Exclusive holds of a resource with limit 1 (owners' holds included).
    Lock,
    Shared,
    /// Holds of a resource with a limit above 1.
    Semaphore,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Lock, Kind::Shared, Kind::Semaphore];

    pub fn of(mode: Mode, limit: u32) -> Kind {
        match (mode, limit) {
            (Mode::Shared, _) => Kind::Shared,
            (_, 0 | 1) => Kind::Lock,
            _ => Kind::Semaphore,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Lock => "lock",
            Kind::Shared => "shared",
            Kind::Semaphore => "semaphore",
        }
    }

    /// Its place in `ALL` (0, 1, 2): an index for per-kind arrays.
    pub fn slot(self) -> usize {
        match self {
            Kind::Lock => 0,
            Kind::Shared => 1,
            Kind::Semaphore => 2,
        }
    }
}

/// How a hold ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Released,
    Expired,
    Revoked,
}

/// The orderings of the hot tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HotBy {
    /// Requests that found the resource taken.
    Contended,
    /// Microseconds requests waited for it.
    Wait,
    /// Leases on it that ran out.
    Expired,
}

impl HotBy {
    fn slot(self) -> usize {
        match self {
            HotBy::Contended => 0,
            HotBy::Wait => 1,
            HotBy::Expired => 2,
        }
    }
}

/// The figures of one kind (or, summed, of all).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Figures {
    pub grants: u64,
    pub waited: u64,
    pub handovers: u64,
    pub contended: u64,
    pub wait_timeouts: u64,
    pub releases: u64,
    pub expired: u64,
    pub revoked: u64,
    pub wait: Histogram,
    pub hold: Histogram,
}

impl Figures {
    fn new() -> Self {
        Figures {
            grants: 0,
            waited: 0,
            handovers: 0,
            contended: 0,
            wait_timeouts: 0,
            releases: 0,
            expired: 0,
            revoked: 0,
            // Percentiles within 1/16.
            wait: Histogram::new(3),
            hold: Histogram::new(3),
        }
    }

    fn add(&mut self, o: &Figures) {
        self.grants += o.grants;
        self.waited += o.waited;
        self.handovers += o.handovers;
        self.contended += o.contended;
        self.wait_timeouts += o.wait_timeouts;
        self.releases += o.releases;
        self.expired += o.expired;
        self.revoked += o.revoked;
        self.wait.merge(&o.wait);
        self.hold.merge(&o.hold);
    }

    /// The counters and distributions, read once.
    pub fn report(&self) -> FiguresReport {
        FiguresReport {
            counters: [
                ("grants", self.grants),
                ("waited", self.waited),
                ("handovers", self.handovers),
                ("contended", self.contended),
                ("wait_timeouts", self.wait_timeouts),
                ("releases", self.releases),
                ("expired", self.expired),
                ("revoked", self.revoked),
            ],
            wait: self.wait.summary(),
            hold: self.hold.summary(),
        }
    }
}

/// One kind's figures as the command shows them, in reply order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FiguresReport {
    pub counters: [(&'static str, u64); 8],
    pub wait: Summary,
    pub hold: Summary,
}

impl FiguresReport {
    pub fn get(&self, name: &str) -> Option<u64> {
        self.counters
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
    }
}

/// Everything counted since `since_ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stats {
    since_ms: u64,
    kinds: [Figures; 3],
    hot: [HotTable; 3],
}

impl Stats {
    pub fn new(now_ms: u64) -> Self {
        Stats {
            since_ms: now_ms,
            kinds: [Figures::new(), Figures::new(), Figures::new()],
            hot: [
                HotTable::new(HOT_ENTRIES),
                HotTable::new(HOT_ENTRIES),
                HotTable::new(HOT_ENTRIES),
            ],
        }
    }

    /// Starts every figure again from zero at `now_ms`.
    pub fn reset(&mut self, now_ms: u64) {
        *self = Stats::new(now_ms);
    }

    pub fn since_ms(&self) -> u64 {
        self.since_ms
    }

    fn kind(&mut self, kind: Kind) -> &mut Figures {
        // `slot` is always below 3.
        let [lock, shared, semaphore] = &mut self.kinds;
        match kind.slot() {
            0 => lock,
            1 => shared,
            _ => semaphore,
        }
    }

    fn table(&mut self, by: HotBy) -> &mut HotTable {
        let [contended, wait, expired] = &mut self.hot;
        match by.slot() {
            0 => contended,
            1 => wait,
            _ => expired,
        }
    }

    /// A grant to the command that asked, at once.
    pub fn granted(&mut self, kind: Kind) {
        let f = self.kind(kind);
        f.grants += 1;
        f.wait.record(0);
    }

    /// A grant to a request that waited `waited_us` in `r`'s queue.
    pub fn granted_after_wait(&mut self, r: &Resource<'_>, kind: Kind, waited_us: u64) {
        let f = self.kind(kind);
        f.grants += 1;
        f.waited += 1;
        f.wait.record(waited_us);
        let count = |h: &mut hot::HotFigures| {
            h.waited += 1;
            h.wait.record(waited_us);
        };
        let hash = r.hash();
        self.table(HotBy::Wait).bump(r, hash, waited_us, count);
        self.table(HotBy::Contended).touch(r, hash, count);
        self.table(HotBy::Expired).touch(r, hash, count);
    }

    /// A grant out of turn (`RELEASE ... TO`): also counted by
    /// `granted_after_wait` when its target waited.
    pub fn handed_over(&mut self, kind: Kind) {
        self.kind(kind).handovers += 1;
    }

    /// A request found `r` taken (answered nil, or queued).
    pub fn contended(&mut self, r: &Resource<'_>, kind: Kind) {
        self.kind(kind).contended += 1;
        self.contended_member(r);
    }

    /// The same contended request seen on another member of its set: the
    /// hot tables count it there too, the counters once.
    pub fn contended_member(&mut self, r: &Resource<'_>) {
        let count = |h: &mut hot::HotFigures| h.contended += 1;
        let hash = r.hash();
        self.table(HotBy::Contended).bump(r, hash, 1, count);
        self.table(HotBy::Wait).touch(r, hash, count);
        self.table(HotBy::Expired).touch(r, hash, count);
    }

    /// A queued request left `r`'s queue without a grant after `waited_us`.
    pub fn gave_up(&mut self, r: &Resource<'_>, kind: Kind, waited_us: u64) {
        self.kind(kind).wait_timeouts += 1;
        let count = |h: &mut hot::HotFigures| h.wait_timeouts += 1;
        let hash = r.hash();
        self.table(HotBy::Wait).bump(r, hash, waited_us, count);
        self.table(HotBy::Contended).touch(r, hash, count);
        self.table(HotBy::Expired).touch(r, hash, count);
    }

    /// A hold on `r` ended after `held_us`.
    pub fn hold_ended(&mut self, r: &Resource<'_>, kind: Kind, held_us: u64, end: End) {
        let f = self.kind(kind);
        f.hold.record(held_us);
        match end {
            End::Released => f.releases += 1,
            End::Revoked => f.revoked += 1,
            End::Expired => {
                f.expired += 1;
                let count = |h: &mut hot::HotFigures| h.expired += 1;
                let hash = r.hash();
                self.table(HotBy::Expired).bump(r, hash, 1, count);
                self.table(HotBy::Contended).touch(r, hash, count);
                self.table(HotBy::Wait).touch(r, hash, count);
            }
        }
    }

    /// `n` holds on `r` ran out whose lengths were not kept (a key of very
    /// many holds expiring at once): counted, not in the distribution.
    pub fn expired_unmeasured(&mut self, r: &Resource<'_>, kind: Kind, n: u64) {
        if n == 0 {
            return;
        }
        self.kind(kind).expired += n;
        let count = |h: &mut hot::HotFigures| h.expired += n;
        let hash = r.hash();
        self.table(HotBy::Expired).bump(r, hash, n, count);
        self.table(HotBy::Contended).touch(r, hash, count);
        self.table(HotBy::Wait).touch(r, hash, count);
    }

    /// One kind's figures.
    pub fn of(&self, kind: Kind) -> &Figures {
        let [lock, shared, semaphore] = &self.kinds;
        match kind.slot() {
            0 => lock,
            1 => shared,
            _ => semaphore,
        }
    }

    /// Every kind's figures summed.
    pub fn total(&self) -> Figures {
        let mut t = Figures::new();
        for f in &self.kinds {
            t.add(f);
        }
        t
    }

    /// The `count` hottest resources by `by`, hottest first.
    pub fn hot(&self, by: HotBy, count: usize) -> Vec<&HotEntry> {
        let [contended, wait, expired] = &self.hot;
        let table = match by.slot() {
            0 => contended,
            1 => wait,
            _ => expired,
        };
        table.top(count)
    }

    /// Bytes the statistics occupy: the same whatever they counted.
    pub fn memory(&self) -> usize {
        std::mem::size_of::<Self>()
            + self
                .kinds
                .iter()
                .map(|f| f.wait.memory() + f.hold.memory())
                .sum::<usize>()
            + self.hot.iter().map(HotTable::memory).sum::<usize>()
    }
}
