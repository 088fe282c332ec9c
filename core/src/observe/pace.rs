//! Pacing the answers to a resource's observers, so that followers of a
//! resource that changes thousands of times a second cannot crowd out the
//! clients that change it.
//!
//! An observer that follows a hot resource observes again as soon as it is
//! answered, finds the resource changed already, and would be answered at
//! once again: unpaced, N followers poll the resource at their round-trip
//! rate, and every answer costs the server about as much as a lock
//! command. So the answers to one resource's waiting observers are paced
//! together, like a rate limiter's cells (the generic cell rate algorithm):
//! each answer costs `1 / rate` seconds of a budget that refills in real
//! time and holds at most `BURST_US` of answers. While the budget lasts,
//! answers go out at once; past it, an observer whose version is out of
//! date waits until the budget allows the next batch, and then hears the
//! latest state (state, not a log: the states in between are skipped, the
//! latest never). A batch is never split: every observer of the resource
//! that is out of date is answered together, so the budget may be
//! overdrawn by one batch, and the next waits for it to be paid back.
//!
//! Resources whose observers stay within the budget (a leader's lease, a
//! lock that changes now and then) are never delayed, and a record exists
//! only while its budget is not full again: nothing when idle.

use std::collections::HashMap;
use std::hash::Hash;

/// How much of the budget may be spent at once, in time: a burst of
/// `rate * BURST_US / 1e6` answers.
pub const BURST_US: u64 = 500_000;

/// The pace of each resource's answers: when its budget is full again
/// (the cell rate algorithm's "theoretical arrival time"), µs on a monotonic clock.
#[derive(Debug)]
pub struct Paces<K> {
    full_at: HashMap<K, u64>,
}

impl<K> Default for Paces<K> {
    fn default() -> Self {
        Paces {
            full_at: HashMap::new(),
        }
    }
}

/// What one answer costs of the budget at `rate` answers per second.
fn cost_us(rate: u64) -> u64 {
    1_000_000 / rate.max(1)
}

impl<K: Hash + Eq + Clone> Paces<K> {
    /// How many resources have a record.
    pub fn len(&self) -> usize {
        self.full_at.len()
    }

    pub fn is_empty(&self) -> bool {
        self.full_at.is_empty()
    }

    /// When `key`'s observers may next be answered, if not at `now_us`
    /// (`rate` 0: never paced).
    pub fn held_until(&self, key: &K, now_us: u64, rate: u64) -> Option<u64> {
        if rate == 0 {
            return None;
        }
        let full_at = *self.full_at.get(key)?;
        let ready_at = full_at.saturating_sub(BURST_US);
        (ready_at > now_us).then_some(ready_at)
    }

    /// `n` observers of `key` were answered at `now_us`: their cost is
    /// taken from the budget. Whether a record was kept (for the caller to
    /// make sure a sweep will forget it).
    pub fn answered(&mut self, key: &K, n: usize, now_us: u64, rate: u64) -> bool {
        if rate == 0 || n == 0 {
            return false;
        }
        let spent = cost_us(rate).saturating_mul(n as u64);
        let from = self.full_at.get(key).copied().unwrap_or(0).max(now_us);
        let full_at = from.saturating_add(spent);
        self.full_at.insert(key.clone(), full_at);
        true
    }

    /// Forgets every record whose budget is full by `now_us`; whether any
    /// is left (to sweep again later).
    pub fn sweep(&mut self, now_us: u64) -> bool {
        self.full_at.retain(|_, full_at| *full_at > now_us);
        if self.full_at.is_empty() {
            self.full_at = HashMap::new();
        }
        !self.full_at.is_empty()
    }

    /// Forgets every record: a budget reckoned at another rate means
    /// nothing at this one, so every resource starts full.
    pub fn clear(&mut self) {
        self.full_at = HashMap::new();
    }

    /// Forgets `key`'s record if its budget is full by `now_us` (a full
    /// budget and no record read the same); else returns when it will be.
    pub fn expire(&mut self, key: &K, now_us: u64) -> Option<u64> {
        let full_at = *self.full_at.get(key)?;
        if full_at <= now_us {
            self.full_at.remove(key);
            return None;
        }
        Some(full_at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RATE: u64 = 1000; // 1 ms per answer, a burst of 500

    #[test]
    fn answers_within_the_burst_are_never_held() {
        let mut p: Paces<&str> = Paces::default();
        assert_eq!(p.held_until(&"r", 0, RATE), None, "no record");
        // 499 answers at t=10s: 499 ms spent of the 500 ms burst.
        let t = 10_000_000;
        assert!(p.answered(&"r", 499, t, RATE));
        assert_eq!(p.expire(&"r", t), Some(t + 499_000), "full then");
        assert_eq!(p.held_until(&"r", t, RATE), None);
        // One more batch of 100 overdraws the budget by 99 ms.
        assert!(p.answered(&"r", 100, t, RATE));
        assert_eq!(p.expire(&"r", t), Some(t + 599_000));
        assert_eq!(p.held_until(&"r", t, RATE), Some(t + 99_000));
        assert_eq!(p.held_until(&"r", t + 98_999, RATE), Some(t + 99_000));
        assert_eq!(p.held_until(&"r", t + 99_000, RATE), None);
        // Another resource has its own budget.
        assert_eq!(p.held_until(&"s", t, RATE), None);
    }

    #[test]
    fn a_steady_follower_load_gets_the_rate_and_no_more() {
        // 100 observers answered as soon as the pace allows, for 10 s.
        let mut p: Paces<&str> = Paces::default();
        let (mut now, mut answers) = (1_000_000u64, 0u64);
        let end = now + 10_000_000;
        while now < end {
            match p.held_until(&"r", now, RATE) {
                Some(at) => now = at,
                None => {
                    p.answered(&"r", 100, now, RATE);
                    answers += 100;
                }
            }
        }
        // The burst, then RATE a second.
        let expected = RATE * 10 + RATE * BURST_US / 1_000_000;
        assert!(
            answers.abs_diff(expected) <= 100,
            "{answers} answers, expected about {expected}"
        );
    }

    #[test]
    fn a_record_lasts_until_the_budget_is_full_again() {
        let mut p: Paces<&str> = Paces::default();
        assert_eq!(p.expire(&"r", 0), None);
        let t = 5_000_000;
        assert!(p.answered(&"r", 3, t, RATE));
        let full = t + 3_000;
        assert_eq!(p.expire(&"r", full - 1), Some(full));
        assert_eq!(p.len(), 1);
        assert_eq!(p.expire(&"r", full), None);
        assert!(p.is_empty());
        // Spending again later starts from then, not from the old record.
        assert!(p.answered(&"r", 1, t + 60_000_000, RATE));
        assert_eq!(p.expire(&"r", t), Some(t + 60_001_000));
    }

    #[test]
    fn rate_zero_never_paces_and_keeps_nothing() {
        let mut p: Paces<&str> = Paces::default();
        assert!(!p.answered(&"r", 1_000_000, 0, 0));
        assert!(!p.answered(&"r", 0, 0, RATE));
        assert!(p.is_empty());
        assert_eq!(p.held_until(&"r", 0, 0), None);
    }

    #[test]
    fn huge_batches_and_times_saturate_instead_of_wrapping() {
        let mut p: Paces<&str> = Paces::default();
        assert!(p.answered(&"r", usize::MAX, 1_000_000, 1));
        let held = p.held_until(&"r", 0, 1);
        assert_eq!(held, Some(u64::MAX - BURST_US), "held until paid back");
        assert_eq!(p.expire(&"r", u64::MAX - 1), Some(u64::MAX));
        assert!(p.answered(&"s", 3, u64::MAX - 5, 1));
        assert_eq!(p.expire(&"s", 0), Some(u64::MAX), "at the end of time");
    }

    #[test]
    fn a_sweep_forgets_full_budgets_only_and_clear_forgets_all() {
        let mut p: Paces<&str> = Paces::default();
        let t = 1_000_000;
        p.answered(&"a", 1, t, RATE); // full at t + 1 ms
        p.answered(&"b", 10, t, RATE); // full at t + 10 ms
        assert!(p.sweep(t + 1_000), "b is left");
        assert_eq!(p.len(), 1);
        assert_eq!(p.expire(&"b", t), Some(t + 10_000));
        assert!(!p.sweep(t + 10_000));
        assert!(p.is_empty());
        p.answered(&"c", 1_000, t, RATE);
        assert!(p.held_until(&"c", t, RATE).is_some());
        p.clear();
        assert_eq!(p.held_until(&"c", t, RATE), None);
    }
}
