//! The lease budget: the instant until which a held lease surely lasts,
//! the ttl it was last granted or renewed with, and whether it is known
//! lost. Time is passed in; nothing here reads a clock.

use super::cap::Cap;
use std::time::{Duration, Instant};

/// How long a held lease surely lasts. The deadline only moves through
/// [`Budget::renewed`], which holds the rule every guard follows: a
/// passed budget is never revived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Budget {
    /// The ttl of the grant or of the last renewal: a watchdog renews with
    /// it, a third of it after that renewal was sent.
    ttl: Duration,
    /// Counted from when the grant or the last renewal was sent, so never
    /// later than the server's own deadline.
    valid_until: Instant,
    /// An `EXTEND` or `RELEASE` was answered 0, or the budget was seen to
    /// pass: lost for good.
    lost: bool,
    /// A capped hold's floor (`max_hold`): renewals stop short of it.
    cap: Option<Cap>,
}

impl Budget {
    pub(crate) fn new(ttl: Duration, valid_until: Instant) -> Budget {
        Budget {
            ttl,
            valid_until,
            lost: false,
            cap: None,
        }
    }

    /// The budget of a capped hold (`max_hold`), when `cap` is given.
    pub(crate) fn capped(mut self, cap: Option<Cap>) -> Budget {
        self.cap = cap;
        self
    }

    /// The ttl a renewal sent at `now` asks for: the last one, or what is
    /// left to a capped hold's floor; None when a capped hold can be
    /// renewed no further.
    pub(crate) fn renewal_ttl(&self, now: Instant) -> Option<Duration> {
        super::cap::capped(self.cap, self.ttl, now)
    }

    /// The cap's reason, once a capped hold's budget that reached its
    /// floor has passed at `now` (whether or not anyone marked it lost).
    pub(crate) fn cap_reached(&self, now: Instant) -> Option<String> {
        (self.at_cap() && self.has_passed(now)).then(|| super::cap::REACHED.to_string())
    }

    /// True when the hold is capped and its budget already reaches the
    /// cap's floor: no renewal can move it, and its end is the loss at the
    /// cap.
    pub(crate) fn at_cap(&self) -> bool {
        self.cap.is_some_and(|c| c.reached_by(self.valid_until))
    }

    #[cfg(test)]
    pub(crate) fn ttl(&self) -> Duration {
        self.ttl
    }

    pub(crate) fn valid_until(&self) -> Instant {
        self.valid_until
    }

    /// Marked lost (not counting a deadline that passed unnoticed).
    pub(crate) fn is_lost(&self) -> bool {
        self.lost
    }

    /// True once `now` is at or past the deadline.
    pub(crate) fn has_passed(&self, now: Instant) -> bool {
        now >= self.valid_until
    }

    /// True once the lease is lost or its budget has passed.
    pub(crate) fn is_over(&self, now: Instant) -> bool {
        self.lost || self.has_passed(now)
    }

    /// Marks the lease lost for good; true the first time (whoever gets
    /// true tells the listeners).
    pub(crate) fn lose(&mut self) -> bool {
        !std::mem::replace(&mut self.lost, true)
    }

    /// A renewal came back at `now`: the lease lasts until `until`, renewed
    /// with `ttl`. False, and nothing changed, when the budget was already
    /// over: the guard has been reported lost (or could have been, by
    /// anyone who looked), and a passed budget is never revived. The
    /// caller then marks the lease lost.
    #[must_use]
    pub(crate) fn renewed(&mut self, until: Instant, ttl: Duration, now: Instant) -> bool {
        if self.is_over(now) {
            return false;
        }
        self.valid_until = until;
        self.ttl = ttl;
        true
    }

    /// When a watchdog renews next: a third of the ttl after the last grant
    /// or renewal was sent (the deadline less two thirds of the ttl).
    pub(crate) fn renewal_due(&self) -> Instant {
        let two_thirds = self.ttl - self.ttl / 3;
        self.valid_until
            .checked_sub(two_thirds)
            .unwrap_or(self.valid_until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn a_renewal_moves_the_deadline_while_the_budget_lasts() {
        let t0 = Instant::now();
        let mut b = Budget::new(3 * S, t0 + 3 * S);
        assert!(b.renewed(t0 + 10 * S, 9 * S, t0 + S));
        assert_eq!((b.valid_until(), b.ttl()), (t0 + 10 * S, 9 * S));
        // A shorter renewal moves the deadline back, too.
        assert!(b.renewed(t0 + 4 * S, S, t0 + 2 * S));
        assert_eq!(b.valid_until(), t0 + 4 * S);
    }

    #[test]
    fn a_passed_budget_is_never_revived() {
        let t0 = Instant::now();
        let mut b = Budget::new(S, t0 + S);
        // At the deadline itself the budget has passed.
        assert!(!b.renewed(t0 + 30 * S, S, t0 + S));
        assert!(!b.renewed(t0 + 30 * S, S, t0 + 2 * S));
        assert_eq!(b.valid_until(), t0 + S, "nothing changed");
        assert!(b.is_over(t0 + S));
    }

    #[test]
    fn a_lost_lease_is_never_renewed_and_is_lost_once() {
        let t0 = Instant::now();
        let mut b = Budget::new(S, t0 + 10 * S);
        assert!(!b.is_over(t0));
        assert!(b.lose());
        assert!(!b.lose(), "told once");
        assert!(b.is_over(t0));
        assert!(!b.renewed(t0 + 30 * S, S, t0));
        assert_eq!(b.valid_until(), t0 + 10 * S);
    }

    #[test]
    fn renewal_is_due_a_third_of_the_ttl_after_the_send() {
        let t0 = Instant::now();
        let b = Budget::new(3 * S, t0 + 3 * S);
        assert_eq!(b.renewal_due(), t0 + S);
    }
}
