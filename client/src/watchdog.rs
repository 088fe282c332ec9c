//! The thread behind a guard: renews its lease in the background (a
//! watchdog: `EXTEND` a third of the ttl after the last grant or renewal
//! was sent, each renewal budgeted from its own send time), and in any case
//! marks the guard lost when its budget passes, so that `on_lost` and
//! `lost_signal` fire without a watchdog too.
//!
//! The schedule is read from the guard's state on every wake-up, and every
//! change of deadline (a manual `extend`, shorter or longer) wakes the
//! thread: renewal and loss always follow the current deadline. A failed
//! attempt (no answer, too few replicas) is retried while the budget
//! lasts; an `EXTEND` answered 0, or the budget running out, ends renewal
//! for good and marks the guard lost. Release stops the thread before the
//! `RELEASE` is sent.

use crate::guard::{Renewal, Shared, State};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// Pause between attempts after a failed renewal.
fn retry_pause(ttl: Duration) -> Duration {
    (ttl / 20).clamp(Duration::from_millis(10), Duration::from_millis(250))
}

/// Starts the thread; `renew`: a watchdog, else it only watches the budget.
pub(crate) fn start(shared: Arc<Shared>, renew: bool) -> JoinHandle<()> {
    thread::Builder::new()
        .name("dlock-watchdog".into())
        .spawn(move || run(&shared, renew))
        .expect("spawning the watchdog thread")
}

/// A failed renewal: retried at `at`, unless the deadline it was made
/// under (`under`) has changed meanwhile.
struct Retry {
    under: Instant,
    at: Instant,
}

/// When the next renewal is due: a failed one's retry, or a third of the
/// ttl after the last grant or renewal.
fn due(s: &State, retry: &Option<Retry>) -> Instant {
    match retry {
        Some(r) if r.under == s.valid_until => r.at,
        _ => s.renewal_due(),
    }
}

fn run(shared: &Shared, renew: bool) {
    let mut retry: Option<Retry> = None;
    loop {
        // Sleep until the renewal is due, the release, or the budget's end.
        {
            let mut s = shared.state();
            loop {
                if s.released || s.lost {
                    return;
                }
                let now = Instant::now();
                if now >= s.valid_until {
                    drop(s);
                    shared.mark_lost();
                    return;
                }
                let wake = if renew {
                    let due = due(&s, &retry);
                    if now >= due {
                        break;
                    }
                    due.min(s.valid_until)
                } else {
                    s.valid_until
                };
                s = shared
                    .changed
                    .wait_timeout(s, wake - now)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
        }
        // One renewal at a time: a manual extend may be under way; once it
        // is done, look again (it may have lost the lease, or moved the
        // deadline and so the schedule).
        let _one = shared.renewing();
        let (ttl, under) = {
            let s = shared.state();
            if s.released || s.lost {
                return;
            }
            let now = Instant::now();
            if now >= s.valid_until {
                drop(s);
                shared.mark_lost();
                return;
            }
            if now < due(&s, &retry) {
                continue;
            }
            (s.ttl, s.valid_until)
        };
        match shared.lease.extend(ttl) {
            Renewal::Extended(until) => {
                let mut s = shared.state();
                if Instant::now() >= s.valid_until {
                    // The budget ran out before the renewal came back: the
                    // guard has already been reported lost (is_lost), and
                    // a budget passing ends renewal for good.
                    drop(s);
                    shared.mark_lost();
                    return;
                }
                s.valid_until = until;
                retry = None;
                drop(s);
                shared.changed.notify_all();
            }
            Renewal::Lost => {
                shared.mark_lost();
                return;
            }
            Renewal::Failed(_) => {
                retry = Some(Retry {
                    under,
                    at: Instant::now() + retry_pause(ttl),
                })
            }
        }
    }
}
