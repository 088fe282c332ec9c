//! Renews a guard's lease in the background: `EXTEND` every ttl/3, each
//! renewal budgeted from its own send time. A failed attempt (no answer,
//! too few replicas) is retried while the budget lasts; an `EXTEND`
//! answered 0, or the budget running out, ends renewal for good and marks
//! the guard lost. Release stops it before the `RELEASE` is sent.

use crate::guard::{Renewal, Shared};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// Pause between attempts after a failed renewal.
fn retry_pause(ttl: Duration) -> Duration {
    (ttl / 20).clamp(Duration::from_millis(10), Duration::from_millis(250))
}

pub(crate) fn start(shared: Arc<Shared>) -> JoinHandle<()> {
    thread::Builder::new()
        .name("dlock-watchdog".into())
        .spawn(move || run(&shared))
        .expect("spawning the watchdog thread")
}

fn run(shared: &Shared) {
    let mut next = {
        let s = shared.state();
        Instant::now() + s.ttl / 3
    };
    loop {
        // Sleep until the next renewal, the release, or the budget's end.
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
                if now >= next {
                    break;
                }
                let until = next.min(s.valid_until) - now;
                s = shared
                    .changed
                    .wait_timeout(s, until)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
        }
        // One renewal at a time: a manual extend may be under way; once it
        // is done, look again (it may have lost the lease, or set the ttl).
        let _one = shared.renewing();
        let ttl = {
            let s = shared.state();
            if s.released || s.lost {
                return;
            }
            if Instant::now() >= s.valid_until {
                drop(s);
                shared.mark_lost();
                return;
            }
            s.ttl
        };
        let sent = Instant::now();
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
                next = sent + s.ttl / 3;
            }
            Renewal::Lost => {
                shared.mark_lost();
                return;
            }
            Renewal::Failed(_) => next = Instant::now() + retry_pause(ttl),
        }
    }
}
