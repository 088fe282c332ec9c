//! The Redlock acquire loop without I/O: after each attempt that missed
//! its quorum, whether to try again (after a jittered pause, with a fresh
//! token) or to stop, and what a final miss means for the caller. Time is
//! passed in; `RedlockRequest::acquire` carries out the attempts.

use super::math::{attempt_wait, Miss, Tally};
use crate::error::Error;
use crate::limits::after;
use std::time::{Duration, Instant};

/// An attempt that did not produce a lock.
pub(crate) struct Missed {
    pub tally: Tally,
    /// Error replies (not connection failures), and the first of them.
    pub errors: usize,
    pub first_error: Option<Error>,
}

impl Missed {
    /// The servers' own refusals alone rule out a quorum (a refused TLS
    /// handshake, a denied login, the module missing).
    fn refused(&self) -> bool {
        self.errors > self.tally.nodes - self.tally.quorum()
    }
}

/// The attempts of one Redlock acquire.
pub(crate) struct Attempts {
    ttl: Duration,
    node_timeout: Duration,
    retry_for: Duration,
    /// When the request's wait ends; None: one attempt.
    deadline: Option<Instant>,
    tries: u32,
    /// Since when every attempt missed because servers were unreachable.
    unreachable_since: Option<Instant>,
}

impl Attempts {
    pub(crate) fn new(
        ttl: Duration,
        wait: Option<Duration>,
        node_timeout: Duration,
        retry_for: Duration,
        now: Instant,
    ) -> Attempts {
        Attempts {
            ttl,
            node_timeout,
            retry_for,
            deadline: wait.map(|w| after(now, w)),
            tries: 0,
            unreachable_since: None,
        }
    }

    /// How long the attempt starting at `now` waits in the servers' queues
    /// (None: no `WAIT`).
    pub(crate) fn wait(&self, now: Instant) -> Option<Duration> {
        self.deadline.map(|d| {
            let left = d.saturating_duration_since(now);
            attempt_wait(left, self.ttl, self.node_timeout)
        })
    }

    /// After `missed` at `now`: the pause before the next attempt, or None
    /// to stop (see [`Attempts::why`]). `random` jitters the pause, so that
    /// clients that failed together do not retry together.
    pub(crate) fn missed(
        &mut self,
        missed: &Missed,
        now: Instant,
        random: u64,
    ) -> Option<Duration> {
        let deadline = self.deadline?;
        if missed.refused() {
            return None;
        }
        if missed.tally.miss() == Miss::Unreachable {
            let since = *self.unreachable_since.get_or_insert(now);
            if now.saturating_duration_since(since) >= self.retry_for {
                return None;
            }
        } else {
            self.unreachable_since = None;
        }
        // The last attempt, at the deadline, does not wait at all.
        let left = deadline.saturating_duration_since(now);
        if left.is_zero() {
            return None;
        }
        let pause = backoff(self.tries, random).min(left);
        self.tries += 1;
        Some(pause)
    }

    /// Why the last miss gave no lock; None: busy.
    pub(crate) fn why(&self, missed: Missed) -> Option<Error> {
        let t = missed.tally;
        let no_quorum = || Error::NoQuorum {
            granted: t.yes,
            reached: t.answered(),
            nodes: t.nodes,
        };
        match t.miss() {
            Miss::Busy => None,
            // The servers' own answer, when it alone rules out a quorum.
            Miss::Unreachable if missed.refused() => {
                Some(missed.first_error.unwrap_or_else(no_quorum))
            }
            Miss::Unreachable => Some(no_quorum()),
            Miss::TooSlow => Some(Error::Unavailable(format!(
                "{} of {} servers granted, but only after the validity of the {:?} ttl had \
                 run out: raise the ttl or lower the node timeout",
                t.yes, t.nodes, self.ttl
            ))),
        }
    }
}

/// Pause between attempts: full jitter, 1 ms up to 10, 20, 40, 80, then
/// 160 ms, so that clients that failed together do not retry together.
fn backoff(tries: u32, random: u64) -> Duration {
    let cap = 10u64 << tries.min(4);
    Duration::from_millis(1 + random % cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);
    const MS: Duration = Duration::from_millis(1);

    fn miss(yes: usize, no: usize, failed: usize, errors: usize) -> Missed {
        let mut tally = Tally::new(yes + no + failed);
        (tally.yes, tally.no, tally.failed) = (yes, no, failed);
        Missed {
            tally,
            errors,
            first_error: (errors > 0).then(|| Error::Server("ERR denied".into())),
        }
    }

    /// A miss `at` this long after the start, and whether to try again.
    type Row = (Duration, Missed, bool);

    #[test]
    fn table_of_misses() {
        let t0 = Instant::now();
        let busy = || miss(1, 2, 0, 0);
        let unreachable = || miss(0, 0, 3, 0);
        let refused = || miss(0, 0, 3, 2);
        // (wait, [(at, miss, pause or stop)])
        let rows: Vec<(Option<Duration>, Vec<Row>)> = vec![
            // No wait: one attempt.
            (None, vec![(MS, busy(), false)]),
            // Busy within the wait: again, until the deadline.
            (
                Some(S),
                vec![
                    (MS, busy(), true),
                    (500 * MS, busy(), true),
                    (S, busy(), false),
                ],
            ),
            // The servers' own refusals: at once, wait or not.
            (Some(S), vec![(MS, refused(), false)]),
            // Unreachable for retry_for (2 s) in a row: stop, though the
            // wait goes on.
            (
                Some(10 * S),
                vec![
                    (MS, unreachable(), true),
                    (S, unreachable(), true),
                    (2 * S + MS, unreachable(), false),
                ],
            ),
            // A busy miss in between starts the count again.
            (
                Some(10 * S),
                vec![
                    (MS, unreachable(), true),
                    (S, busy(), true),
                    (2 * S + MS, unreachable(), true),
                    (4 * S, unreachable(), true),
                ],
            ),
        ];
        for (i, (wait, misses)) in rows.into_iter().enumerate() {
            let mut a = Attempts::new(10 * S, wait, 100 * MS, 2 * S, t0);
            for (j, (at, m, again)) in misses.into_iter().enumerate() {
                let pause = a.missed(&m, t0 + at, 7);
                assert_eq!(pause.is_some(), again, "row {i}, miss {j}");
                if let (Some(p), Some(w)) = (pause, wait) {
                    assert!(
                        t0 + at + p <= t0 + w,
                        "row {i}: the pause ends by the deadline"
                    );
                }
            }
        }
    }

    #[test]
    fn each_attempt_waits_a_tenth_of_the_ttl_at_most_what_is_left() {
        let t0 = Instant::now();
        let a = Attempts::new(10 * S, Some(5 * S), 100 * MS, 2 * S, t0);
        assert_eq!(a.wait(t0), Some(S));
        assert_eq!(a.wait(t0 + 4500 * MS), Some(500 * MS));
        assert_eq!(
            Attempts::new(10 * S, None, 100 * MS, 2 * S, t0).wait(t0),
            None
        );
    }

    #[test]
    fn a_final_miss_is_busy_or_says_why_no_quorum() {
        let a = Attempts::new(10 * S, None, 100 * MS, 2 * S, Instant::now());
        assert!(a.why(miss(1, 2, 0, 0)).is_none(), "busy");
        assert!(matches!(
            a.why(miss(0, 1, 2, 0)),
            Some(Error::NoQuorum {
                reached: 1,
                nodes: 3,
                ..
            })
        ));
        assert!(matches!(a.why(miss(0, 0, 3, 2)), Some(Error::Server(_))));
        assert!(
            matches!(a.why(miss(2, 1, 0, 0)), Some(Error::Unavailable(_))),
            "too slow"
        );
    }

    #[test]
    fn pauses_grow_to_160_ms_with_full_jitter() {
        assert_eq!(backoff(0, 0), MS);
        assert_eq!(backoff(0, 9), 10 * MS);
        assert_eq!(backoff(0, 10), MS);
        assert_eq!(backoff(9, 159), 160 * MS);
        assert!(backoff(2, u64::MAX) <= 40 * MS);
    }
}
