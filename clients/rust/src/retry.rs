//! Same-token retries through connection errors: the jittered pause
//! between tries, and the run of failures (an outage) they may last.

use crate::limits::after;
use std::time::{Duration, Instant};

/// Backoff between same-token retries: 20..=200 ms, jittered.
pub(crate) fn backoff(attempt: u32) -> Duration {
    let base = 20u64 << attempt.min(3);
    let jitter = uuid::Uuid::new_v4().as_u128() as u64 % base;
    Duration::from_millis((base + jitter).min(200))
}

/// A run of connection failures, and how long it may last.
pub(crate) struct Outage {
    since: Option<Instant>,
    attempt: u32,
}

impl Outage {
    pub(crate) fn new() -> Outage {
        Outage {
            since: None,
            attempt: 0,
        }
    }

    /// After a failure at `now`: the pause before the next try, or None
    /// once the outage has lasted `retry_for` or the pause would end at or
    /// past `deadline`.
    pub(crate) fn next_pause(
        &mut self,
        retry_for: Duration,
        deadline: Instant,
        now: Instant,
    ) -> Option<Duration> {
        let since = *self.since.get_or_insert(now);
        let pause = backoff(self.attempt);
        self.attempt += 1;
        let resume = now + pause;
        (resume < deadline && resume < after(since, retry_for)).then_some(pause)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outage_ends_at_the_deadline_or_after_retry_for() {
        let now = Instant::now();
        let far = after(now, Duration::MAX);
        let mut o = Outage::new();
        assert!(o.next_pause(Duration::MAX, far, now).is_some());
        let mut o = Outage::new();
        assert!(o.next_pause(Duration::ZERO, far, now).is_none());
        let mut o = Outage::new();
        assert!(o.next_pause(Duration::MAX, now, now).is_none());
        // The outage counts from its first failure, not from each one.
        let mut o = Outage::new();
        assert!(o.next_pause(Duration::from_secs(1), far, now).is_some());
        let later = now + Duration::from_secs(1);
        assert!(o.next_pause(Duration::from_secs(1), far, later).is_none());
        for a in 0..10 {
            let p = backoff(a);
            assert!(p >= Duration::from_millis(20) && p <= Duration::from_millis(200));
        }
    }
}
