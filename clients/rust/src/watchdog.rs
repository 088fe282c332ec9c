//! The thread behind a blocking guard: carries out the lease core's
//! [`Schedule`] (renew a third of the ttl after the last grant or renewal
//! was sent, when a watchdog is asked for; in any case mark the guard lost
//! when its budget passes, so that `on_lost` and `lost_signal` fire
//! without a watchdog too). Every change of deadline wakes the thread;
//! release stops it before the `RELEASE` is sent.

use crate::error::Error;
use crate::held::Held;
use crate::lease::{Renewal, Schedule, Wake};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Instant;

/// Starts the thread; `renew`: a watchdog, else it only watches the budget.
pub(crate) fn start(held: Arc<Held>, renew: bool) -> JoinHandle<()> {
    thread::Builder::new()
        .name("dlock-watchdog".into())
        .spawn(move || run(&held, Schedule::new(renew)))
        .expect("spawning the watchdog thread")
}

/// What the schedule says now, sleeping through `Sleep`s (woken early by
/// any change of the budget).
fn next(held: &Held, schedule: &Schedule) -> Wake {
    let mut s = held.state();
    loop {
        let now = Instant::now();
        match schedule.next(&s.budget, s.released, now) {
            Wake::Sleep(until) => {
                s = held
                    .changed
                    .wait_timeout(s, until - now)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            wake => return wake,
        }
    }
}

fn run(held: &Held, mut schedule: Schedule) {
    loop {
        match next(held, &schedule) {
            Wake::Stop => return,
            Wake::Lost => return held.mark_lost_because(schedule.refusal()),
            Wake::Sleep(_) | Wake::Renew { .. } => {}
        }
        // One renewal at a time: a manual extend may be under way; once it
        // is done, look again (it may have lost the lease, or moved the
        // deadline and so the schedule).
        let _one = held.renewing();
        let (ttl, under) = {
            let s = held.state();
            match schedule.next(&s.budget, s.released, Instant::now()) {
                Wake::Renew { ttl, under } => (ttl, under),
                Wake::Sleep(_) => continue,
                Wake::Stop => return,
                Wake::Lost => {
                    drop(s);
                    return held.mark_lost_because(schedule.refusal());
                }
            }
        };
        let renewal = match held.lease.extend(ttl) {
            Renewal::Failed(Error::MaxHold(why)) => {
                schedule.refused_at_cap(why);
                continue;
            }
            r => r,
        };
        match held.apply(renewal, ttl) {
            Ok(true) => schedule.renewed(),
            // Lost, or the budget ran out before the renewal came back:
            // the guard is marked lost, and renewal ends for good.
            Ok(false) => return,
            Err(_) => schedule.failed(under, ttl, Instant::now()),
        }
    }
}
