//! Where a request stands in every queue it waits in: priorities with
//! aging, kept as one static key.
//!
//! A request of priority `p` (0..=`MAX_PRIORITY`, higher goes first) that
//! arrives at `arrival_ms` (a monotonic clock) is ranked by
//! `key = arrival_ms + (MAX_PRIORITY - p) * aging_ms` (shifted by a
//! constant, `Rank::key`), ties broken by its
//! id (arrival). Its standing at time `t` is `p + (t - arrival) / aging`:
//! every waiter gains one level per `aging_ms` waited, all at the same
//! rate, so ordering by standing at any instant is ordering by `key`. The
//! order of two waiters never changes while they wait, which is what lets
//! every queue of a set request agree on one total order
//! (`crate::plan::component`).
//!
//! The bound that follows: B is served before A only if
//! `arrival_B - arrival_A < (p_B - p_A) * aging_ms`. Equal priorities are
//! FIFO, and a request is passed only by requests that arrive within
//! `(MAX_PRIORITY - p) * aging_ms` of it.

pub use crate::limits::MAX_PRIORITY;

/// The most ms of waiting one level of priority may be worth
/// (`dlock.priority-aging-ms`'s maximum).
pub const MAX_AGING_MS: u64 = 3_600_000;

/// A queued request's place in every queue it waits in: by `key`, then by
/// `id` (the order of arrival).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Rank {
    pub key: u64,
    pub id: u64,
}

impl Rank {
    /// The key of a request of `priority` (capped at `MAX_PRIORITY`) that
    /// arrives at `arrival_ms`, with one level per `aging_ms` waited (at
    /// most `MAX_AGING_MS`). The arithmetic saturates: a key at
    /// `u64::MAX` ranks after everything.
    ///
    /// `(MAX_PRIORITY - p) * aging_ms` shifted by a constant, so that for
    /// one aging the order is the same, while a priority 0 adds the same
    /// whatever the aging: `dlock.priority-aging-ms` is read at each
    /// enqueue, and a change must not let later requests without
    /// `PRIORITY` pass the ones already waiting.
    pub fn key(arrival_ms: u64, priority: u16, aging_ms: u64) -> u64 {
        if cfg!(feature = "planted-priority-no-aging") {
            // Strict priority, then arrival: nobody ages, so a low
            // priority starves while higher ones keep coming.
            let level = u64::from(priority.min(MAX_PRIORITY));
            return ((u64::from(MAX_PRIORITY) - level) << 42) | (arrival_ms & ((1 << 42) - 1));
        }
        let level = u64::from(priority.min(MAX_PRIORITY));
        let ahead = level * aging_ms.min(MAX_AGING_MS);
        let base = u64::from(MAX_PRIORITY) * MAX_AGING_MS;
        arrival_ms.saturating_add(base - ahead)
    }

    /// The rank of a request arriving now, before it has an id: after
    /// every queued request of the same key (they arrived earlier).
    pub fn arriving(key: u64) -> Rank {
        Rank { key, id: u64::MAX }
    }

    /// Whether this request is served before `other`.
    pub fn passes(&self, other: &Rank) -> bool {
        self < other
    }
}

/// What a request brings to the queue besides what it asks for: its
/// priority and the key it ranks by (`Rank::key`, computed once when its
/// command runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Priority {
    pub level: u16,
    pub key: u64,
}

impl Priority {
    /// Every request at key 0: ranked by arrival alone (FIFO), for callers
    /// that have no priorities.
    pub const FIFO: Priority = Priority { level: 0, key: 0 };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(arrival_ms: u64, p: u16, aging: u64, id: u64) -> Rank {
        Rank {
            key: Rank::key(arrival_ms, p, aging),
            id,
        }
    }

    /// For random arrivals, priorities and agings: B (later id) passes A
    /// exactly when it arrived less than `(pB - pA) * aging` after A.
    #[test]
    fn passing_is_the_documented_bound() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut rng = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for _ in 0..100_000 {
            let aging = 1 + rng(5000);
            let a_at = rng(1 << 40);
            let b_at = a_at + rng(3_000_000);
            let (pa, pb) = (rng(1001) as u16, rng(1001) as u16);
            let (a, b) = (rank(a_at, pa, aging, 1), rank(b_at, pb, aging, 2));
            let window = (i128::from(pb) - i128::from(pa)) * i128::from(aging);
            let bound = i128::from(b_at - a_at) < window;
            assert_eq!(
                b.passes(&a),
                bound,
                "{a_at} {pa} / {b_at} {pb} aging {aging}"
            );
            assert_eq!(a.passes(&b), !bound);
        }
    }

    #[test]
    fn the_exact_boundary_does_not_pass() {
        // B arrives 10 ms after A with 10 levels more at 1 ms each: a tie
        // in key, broken by arrival.
        let (a, b) = (rank(100, 0, 1, 1), rank(110, 10, 1, 2));
        assert_eq!(a.key, b.key);
        assert!(a.passes(&b) && !b.passes(&a));
        // One ms earlier, B passes.
        assert!(rank(109, 10, 1, 2).passes(&a));
    }

    #[test]
    fn equal_priorities_are_fifo() {
        for p in [0, 1, 500, 1000] {
            assert!(rank(5, p, 1000, 1).passes(&rank(5, p, 1000, 2)));
            assert!(rank(5, p, 1000, 9).passes(&rank(6, p, 1000, 2)));
        }
        // A request arriving now ranks after every queued one of its key.
        assert!(rank(5, 3, 10, 7).passes(&Rank::arriving(Rank::key(5, 3, 10))));
    }

    #[test]
    fn saturates_rather_than_wraps() {
        assert_eq!(Rank::key(u64::MAX - 1, 0, u64::MAX), u64::MAX);
        assert_eq!(Rank::key(u64::MAX, 1000, 1), u64::MAX);
        // A priority above the cap counts as the cap.
        assert_eq!(Rank::key(7, u16::MAX, 100), Rank::key(7, 1000, 100));
    }

    /// `dlock.priority-aging-ms` is read at each enqueue: lowering it must
    /// not let later requests of priority 0 pass the ones already waiting
    /// (nor raising it put later ones behind earlier ones of a higher
    /// aging forever): requests without `PRIORITY` stay FIFO whatever
    /// the aging was when each queued.
    #[test]
    fn an_aging_change_keeps_requests_without_priority_fifo() {
        for (before, after) in [(1000, 1), (1, 3_600_000), (1000, 999)] {
            let a = rank(100, 0, before, 1);
            let b = rank(200, 0, after, 2);
            assert!(a.passes(&b), "aging {before} then {after}");
        }
    }
}
