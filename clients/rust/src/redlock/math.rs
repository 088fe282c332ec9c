//! Redlock's arithmetic, free of I/O: the quorum, the clock-drift
//! allowance, the validity of a grant, how long one attempt waits, and how
//! the replies of the servers are counted.

use std::time::{Duration, Instant};

/// A majority of `n` servers: any two majorities share a server.
pub(crate) fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// Allowance for the servers' clocks running faster than ours (a lease may
/// end early on a server whose clock runs fast): 1 % of the ttl plus 2 ms.
pub(crate) fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// The instant until which a grant (or renewal) whose commands were first
/// sent at `sent` surely lasts on every server that granted it:
/// `sent + ttl - drift`. `None` when that is not after `now` (validity ≤ 0:
/// the quorum came too late to be of use).
pub(crate) fn valid_until(sent: Instant, ttl: Duration, now: Instant) -> Option<Instant> {
    // The servers got whole milliseconds.
    let ttl = crate::limits::lease(ttl);
    let lasts = ttl.checked_sub(drift(ttl))?;
    let until = sent + lasts;
    (until > now).then_some(until)
}

/// How long one attempt waits in the servers' queues (`WAIT`), given what is
/// left of the caller's wait: a tenth of the ttl, at least the node timeout
/// (an attempt shorter than a round trip is all overhead), at most a third
/// of the ttl (a grant handed over late in the attempt keeps most of its
/// validity, and nobody holds one server while waiting on another for long).
pub(crate) fn attempt_wait(remaining: Duration, ttl: Duration, node_timeout: Duration) -> Duration {
    (ttl / 10).max(node_timeout).min(ttl / 3).min(remaining)
}

/// Replies to one round of commands, one per server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    pub nodes: usize,
    /// `ACQUIRE` granted (a fence), `EXTEND`/`RELEASE` answered 1.
    pub yes: usize,
    /// A definite no: `ACQUIRE` answered nil (busy), `EXTEND`/`RELEASE`
    /// answered 0 (not held).
    pub no: usize,
    /// No usable answer: unreachable, timed out, or an error reply.
    pub failed: usize,
}

/// Why an acquire round did not produce a lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Miss {
    /// Others hold (or wait for) too many servers.
    Busy,
    /// Too many servers failed to answer for a quorum to be possible.
    Unreachable,
    /// A quorum granted, but only after the validity had run out.
    TooSlow,
}

/// How a renewal round ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RenewalKind {
    Extended,
    /// So many servers answered 0 that no quorum can hold the token any more.
    Lost,
    /// Undecided: too few servers answered to tell.
    Failed,
}

impl Tally {
    pub(crate) fn new(nodes: usize) -> Tally {
        Tally {
            nodes,
            ..Tally::default()
        }
    }

    pub(crate) fn quorum(&self) -> usize {
        quorum(self.nodes)
    }

    pub(crate) fn answered(&self) -> usize {
        self.yes + self.no
    }

    /// Servers that have not answered yet.
    pub(crate) fn pending(&self) -> usize {
        self.nodes - self.yes - self.no - self.failed
    }

    /// Too many servers said no or failed for a quorum of yes.
    pub(crate) fn hopeless(&self) -> bool {
        self.no + self.failed > self.nodes - self.quorum()
    }

    /// Why an acquire round without a (valid) quorum failed. Unreachable
    /// only when the failures alone rule a quorum out: if the busy servers
    /// share the blame, the caller is told "busy".
    pub(crate) fn miss(&self) -> Miss {
        if self.yes >= self.quorum() {
            Miss::TooSlow
        } else if self.failed > self.nodes - self.quorum() {
            Miss::Unreachable
        } else {
            Miss::Busy
        }
    }

    /// A renewal (`EXTEND` on every server) succeeds with a quorum of 1s. It
    /// is lost for good when more than `nodes - quorum` servers answered 0:
    /// the token then holds at most `nodes - no < quorum` servers, and no
    /// server grants it again (renewals never re-acquire). Anything in
    /// between is undecided: the unreachable servers may still hold it.
    pub(crate) fn renewal(&self) -> RenewalKind {
        if self.yes >= self.quorum() {
            RenewalKind::Extended
        } else if self.no > self.nodes - self.quorum() {
            RenewalKind::Lost
        } else {
            RenewalKind::Failed
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn tally(nodes: usize, yes: usize, no: usize, failed: usize) -> Tally {
        Tally {
            nodes,
            yes,
            no,
            failed,
        }
    }

    #[test]
    fn quorum_is_a_strict_majority() {
        let q: Vec<usize> = (1..=7).map(quorum).collect();
        assert_eq!(q, [1, 2, 2, 3, 3, 4, 4]);
        for n in 1..=20 {
            // Two quorums always share a server.
            assert!(2 * quorum(n) > n, "{n}");
            // And no smaller count does.
            assert!(2 * (quorum(n) - 1) <= n, "{n}");
        }
    }

    #[test]
    fn validity_counts_from_the_first_send_less_the_drift() {
        assert_eq!(drift(ms(10_000)), ms(102));
        assert_eq!(drift(ms(100)), ms(3));
        let t0 = Instant::now();
        let ttl = ms(10_000);
        assert_eq!(valid_until(t0, ttl, t0), Some(t0 + ms(9_898)));
        assert_eq!(
            valid_until(t0, ttl, t0 + ms(9_000)),
            Some(t0 + ms(9_898)),
            "the elapsed time is inside the same deadline"
        );
        assert_eq!(valid_until(t0, ttl, t0 + ms(9_898)), None, "validity 0");
        assert_eq!(valid_until(t0, ttl, t0 + ms(20_000)), None);
        // A ttl below the drift has no validity at all.
        assert_eq!(valid_until(t0, ms(1), t0), None);
        assert_eq!(valid_until(t0, ms(2), t0), None);
        assert_eq!(
            valid_until(t0, ms(3), t0),
            Some(t0 + Duration::from_micros(970))
        );
    }

    #[test]
    fn attempts_wait_far_less_than_the_ttl() {
        let nt = ms(100);
        assert_eq!(attempt_wait(ms(60_000), ms(30_000), nt), ms(3_000));
        assert_eq!(attempt_wait(ms(500), ms(30_000), nt), ms(500));
        // Never below the node timeout ...
        assert_eq!(attempt_wait(ms(60_000), ms(600), nt), ms(100));
        // ... unless the ttl is that short: a third of it at most.
        assert_eq!(attempt_wait(ms(60_000), ms(150), nt), ms(50));
        assert_eq!(attempt_wait(Duration::ZERO, ms(30_000), nt), Duration::ZERO);
    }

    #[test]
    fn a_round_is_hopeless_once_too_many_said_no_or_failed() {
        assert!(!tally(5, 2, 0, 0).hopeless());
        assert!(!tally(5, 2, 1, 1).hopeless(), "one more yes would do");
        assert_eq!(tally(5, 2, 1, 1).pending(), 1);
        assert!(tally(5, 2, 2, 1).hopeless());
        assert!(tally(5, 0, 1, 2).hopeless(), "at most 2 can say yes");
        assert!(tally(5, 0, 0, 3).hopeless());
        assert!(!tally(4, 2, 1, 0).hopeless(), "4 servers need 3");
        assert!(tally(4, 1, 1, 1).hopeless());
        assert!(!tally(1, 0, 0, 0).hopeless());
        assert!(tally(1, 0, 1, 0).hopeless());
    }

    #[test]
    fn a_miss_is_unreachable_only_when_failures_alone_rule_out_a_quorum() {
        assert_eq!(tally(5, 3, 0, 0).miss(), Miss::TooSlow);
        assert_eq!(tally(5, 0, 0, 3).miss(), Miss::Unreachable);
        assert_eq!(tally(5, 2, 0, 3).miss(), Miss::Unreachable);
        assert_eq!(tally(5, 0, 1, 2).miss(), Miss::Busy);
        assert_eq!(tally(5, 2, 3, 0).miss(), Miss::Busy);
        assert_eq!(tally(5, 1, 2, 2).miss(), Miss::Busy);
        assert_eq!(tally(1, 0, 0, 1).miss(), Miss::Unreachable);
        assert_eq!(tally(2, 1, 0, 1).miss(), Miss::Unreachable);
    }

    #[test]
    fn a_renewal_is_lost_only_when_no_quorum_can_hold_the_token() {
        assert_eq!(tally(5, 3, 2, 0).renewal(), RenewalKind::Extended);
        assert_eq!(tally(5, 3, 0, 2).renewal(), RenewalKind::Extended);
        assert_eq!(tally(5, 2, 3, 0).renewal(), RenewalKind::Lost);
        assert_eq!(tally(5, 0, 3, 2).renewal(), RenewalKind::Lost);
        // Two 0s and a failure: the failed server and the two 1s may still
        // be a quorum holding the token.
        assert_eq!(tally(5, 2, 2, 1).renewal(), RenewalKind::Failed);
        assert_eq!(tally(5, 0, 0, 5).renewal(), RenewalKind::Failed);
        // With 4 servers a quorum is 3: two 0s already leave only 2.
        assert_eq!(tally(4, 2, 2, 0).renewal(), RenewalKind::Lost);
        assert_eq!(tally(4, 2, 1, 1).renewal(), RenewalKind::Failed);
        assert_eq!(tally(1, 0, 1, 0).renewal(), RenewalKind::Lost);
    }
}
