//! Renewal: what one `EXTEND` (or a Redlock round of them) came back with,
//! and the schedule of the thread or task behind a guard, which renews a
//! third of the ttl after each grant or renewal was sent (a watchdog) and
//! in any case reports the lease lost when its budget passes.
//!
//! The schedule is read from the budget on every wake-up, so renewal and
//! loss follow the current deadline whatever moved it (a manual `extend`,
//! shorter or longer). A failed attempt (no answer, too few replicas) is
//! retried after a pause while the budget lasts; an `EXTEND` answered 0,
//! or the budget passing, ends renewal for good.

use super::budget::Budget;
use crate::error::Error;
use std::time::{Duration, Instant};

/// The outcome of one renewal attempt.
pub(crate) enum Renewal {
    /// Extended; the lease lasts at least until this instant (the send time
    /// of the extend plus its ttl, less the clock drift for Redlock).
    Extended(Instant),
    /// The server answered 0 (or Redlock lost its quorum): the lease is gone.
    Lost,
    /// No answer, or too few replicas acknowledged: the budget stays as it
    /// was, and the attempt may be retried while it lasts.
    Failed(Error),
}

/// What the thread or task behind a guard does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wake {
    /// Nothing until this instant, or until the budget changes.
    Sleep(Instant),
    /// Renew now with `ttl`. `under`: the deadline the renewal is made
    /// under, for [`Schedule::failed`].
    Renew { ttl: Duration, under: Instant },
    /// The budget has passed: mark the lease lost, and stop.
    Lost,
    /// Released, or already lost: stop.
    Stop,
}

/// A failed renewal: retried at `at`, unless the deadline it was made
/// under (`under`) has changed meanwhile.
#[derive(Clone, Copy, Debug)]
struct Retry {
    under: Instant,
    at: Instant,
}

/// The schedule of the thread or task behind one guard.
#[derive(Debug)]
pub(crate) struct Schedule {
    /// A watchdog renews; without one, only the budget's end is watched.
    renew: bool,
    retry: Option<Retry>,
    /// The server refused a renewal at the hold's cap (`MAXHOLD`, as it
    /// sent it): renewal ended, and the loss at the budget's end says so.
    refused: Option<String>,
}

impl Schedule {
    pub(crate) fn new(renew: bool) -> Schedule {
        Schedule {
            renew,
            retry: None,
            refused: None,
        }
    }

    /// What to do at `now`, with the lease's budget as it is now.
    pub(crate) fn next(&self, b: &Budget, released: bool, now: Instant) -> Wake {
        if released || b.is_lost() {
            return Wake::Stop;
        }
        if b.has_passed(now) {
            return Wake::Lost;
        }
        if !self.renew {
            return Wake::Sleep(b.valid_until());
        }
        let due = match self.retry {
            Some(r) if r.under == b.valid_until() => r.at,
            _ => b.renewal_due(),
        };
        // A capped hold at its cap's floor is renewed no further: it ends
        // with its budget.
        let ttl = match b.at_cap() {
            true => None,
            false => b.renewal_ttl(now),
        };
        match ttl {
            Some(ttl) if now >= due => Wake::Renew {
                ttl,
                under: b.valid_until(),
            },
            Some(_) => Wake::Sleep(due.min(b.valid_until())),
            None => Wake::Sleep(b.valid_until()),
        }
    }

    /// The server refused a renewal at the hold's cap (a race the cap's
    /// margin lost): a refusal changes nothing, so the lease lasts its
    /// budget; renewal ends, and the loss comes at the budget's end.
    pub(crate) fn refused_at_cap(&mut self, why: String) {
        self.renew = false;
        self.refused = Some(why);
    }

    /// Why renewal ended at the cap, if the server said.
    pub(crate) fn refusal(&self) -> Option<&str> {
        self.refused.as_deref()
    }

    /// The renewal was applied: back to a third of the ttl.
    pub(crate) fn renewed(&mut self) {
        self.retry = None;
    }

    /// The renewal made under the deadline `under` failed at `now`: try
    /// again after a pause (unless the deadline moves meanwhile).
    pub(crate) fn failed(&mut self, under: Instant, ttl: Duration, now: Instant) {
        self.retry = Some(Retry {
            under,
            at: now + retry_pause(ttl),
        });
    }
}

/// Pause between attempts after a failed renewal.
fn retry_pause(ttl: Duration) -> Duration {
    (ttl / 20).clamp(Duration::from_millis(10), Duration::from_millis(250))
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);
    const MS: Duration = Duration::from_millis(1);

    /// One row: the budget (ttl, deadline from t0), released, lost, the
    /// time from t0, and what the schedule says.
    #[test]
    fn the_schedule_follows_the_budget() {
        let t0 = Instant::now();
        let renew = Schedule::new(true);
        let watch = Schedule::new(false);
        let budget = |ttl, until, lost| {
            let mut b = Budget::new(ttl, t0 + until);
            if lost {
                let _ = b.lose();
            }
            b
        };
        let rows: [(&Schedule, Budget, bool, Duration, Wake); 8] = [
            // Renewal due a third of the ttl after the send (3 s lease).
            (
                &renew,
                budget(3 * S, 3 * S, false),
                false,
                Duration::ZERO,
                Wake::Sleep(t0 + S),
            ),
            (
                &renew,
                budget(3 * S, 3 * S, false),
                false,
                S,
                Wake::Renew {
                    ttl: 3 * S,
                    under: t0 + 3 * S,
                },
            ),
            (
                &renew,
                budget(3 * S, 3 * S, false),
                false,
                2 * S,
                Wake::Renew {
                    ttl: 3 * S,
                    under: t0 + 3 * S,
                },
            ),
            // The budget passed: lost, renewing or not.
            (
                &renew,
                budget(3 * S, 3 * S, false),
                false,
                3 * S,
                Wake::Lost,
            ),
            (
                &watch,
                budget(3 * S, 3 * S, false),
                false,
                3 * S,
                Wake::Lost,
            ),
            // Without a watchdog, only the budget's end is watched.
            (
                &watch,
                budget(3 * S, 3 * S, false),
                false,
                2 * S,
                Wake::Sleep(t0 + 3 * S),
            ),
            // Released or lost: stop, even past the deadline.
            (&renew, budget(3 * S, 3 * S, false), true, 4 * S, Wake::Stop),
            (
                &watch,
                budget(3 * S, 3 * S, true),
                false,
                Duration::ZERO,
                Wake::Stop,
            ),
        ];
        for (i, (schedule, b, released, at, want)) in rows.into_iter().enumerate() {
            assert_eq!(schedule.next(&b, released, t0 + at), want, "row {i}");
        }
    }

    #[test]
    fn a_failed_renewal_is_retried_after_a_pause_unless_the_deadline_moved() {
        let t0 = Instant::now();
        let mut s = Schedule::new(true);
        let mut b = Budget::new(3 * S, t0 + 3 * S);
        s.failed(t0 + 3 * S, 3 * S, t0 + S);
        // ttl/20 = 150 ms.
        assert_eq!(s.next(&b, false, t0 + S), Wake::Sleep(t0 + S + 150 * MS));
        assert!(matches!(
            s.next(&b, false, t0 + S + 150 * MS),
            Wake::Renew { .. }
        ));
        // The pause never passes the deadline.
        s.failed(t0 + 3 * S, 3 * S, t0 + 3 * S - MS);
        assert_eq!(s.next(&b, false, t0 + 3 * S - MS), Wake::Sleep(t0 + 3 * S));
        // A manual extend moved the deadline: the retry is forgotten.
        assert!(b.renewed(t0 + 10 * S, 9 * S, t0 + 2 * S));
        assert_eq!(s.next(&b, false, t0 + 2 * S), Wake::Sleep(t0 + 4 * S));
        s.renewed();
        assert_eq!(s.next(&b, false, t0 + 2 * S), Wake::Sleep(t0 + 4 * S));
    }

    #[test]
    fn the_retry_pause_is_a_twentieth_of_the_ttl_within_10_to_250_ms() {
        assert_eq!(retry_pause(MS), 10 * MS);
        assert_eq!(retry_pause(S), 50 * MS);
        assert_eq!(retry_pause(60 * S), 250 * MS);
    }

    #[test]
    fn a_capped_hold_is_renewed_short_of_its_floor_then_ends_with_its_budget() {
        let t0 = Instant::now();
        let s = Schedule::new(true);
        // max_hold 3 s: the floor t0 + 3 s, the margin 60 ms; a 2 s ttl.
        let cap = Some(super::super::Cap::new(t0, 3 * S));
        let b = Budget::new(2 * S, t0 + 2 * S).capped(cap);
        assert_eq!(
            s.next(&b, false, t0 + S),
            Wake::Renew {
                ttl: 2 * S - 60 * MS,
                under: t0 + 2 * S
            }
        );
        // A lease granted as long as the cap (ttl = max_hold) is at the
        // floor from the start: never renewed.
        let full = Budget::new(3 * S, t0 + 3 * S).capped(cap);
        assert_eq!(s.next(&full, false, t0 + S), Wake::Sleep(t0 + 3 * S));
        // Renewed up to the floor: no more renewals, the loss at the budget.
        let mut b2 = Budget::new(3 * S, t0 + 2 * S).capped(cap);
        assert!(b2.renewed(t0 + 3 * S - 59 * MS, 2 * S, t0 + S));
        assert!(b2.at_cap());
        assert_eq!(
            s.next(&b2, false, t0 + S),
            Wake::Sleep(t0 + 3 * S - 59 * MS)
        );
        assert_eq!(s.next(&b2, false, t0 + 3 * S), Wake::Lost);
    }

    #[test]
    fn a_renewal_refused_at_the_cap_ends_renewal_and_the_loss_waits_for_the_budget() {
        let t0 = Instant::now();
        let mut s = Schedule::new(true);
        let b = Budget::new(3 * S, t0 + 3 * S);
        assert!(matches!(s.next(&b, false, t0 + S), Wake::Renew { .. }));
        s.refused_at_cap("MAXHOLD the hold may live 5 ms more".into());
        assert_eq!(s.next(&b, false, t0 + S), Wake::Sleep(t0 + 3 * S));
        assert_eq!(s.next(&b, false, t0 + 3 * S), Wake::Lost);
        assert_eq!(s.refusal(), Some("MAXHOLD the hold may live 5 ms more"));
    }
}
