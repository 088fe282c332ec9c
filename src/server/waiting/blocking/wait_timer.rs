//! The one timer that ends every `WAIT` (not the server's own timeouts, see
//! `blocking.rs`), and the waiters whose `WAIT` ran out.

use std::ffi::c_void;
use std::sync::{Mutex, MutexGuard};

use redis_module::raw;

use super::answers::{answers_ready, hand_over};
use super::parked::{wait_clock_ms, wait_clock_us, with_parking};
use crate::server::edge::ffi::guard;
use crate::server::jobs;
use crate::server::notify::stats;
use crate::server::resource::Resource;

/// The one timer that ends `WAIT`s: its id and the end (on the wait clock,
/// µs) it was armed for, never later than any running `WAIT`'s end.
static WAIT_TIMER: Mutex<Option<(u64, u64)>> = Mutex::new(None);

fn wait_timer() -> MutexGuard<'static, Option<(u64, u64)>> {
    WAIT_TIMER.lock().unwrap_or_else(|p| p.into_inner())
}

/// Makes the `WAIT` timer fire at `at_us` at the latest.
pub(super) fn arm_wait_timer(at_us: u64) {
    let mut armed = wait_timer();
    match *armed {
        Some((_, at)) if at <= at_us => return,
        Some((id, _)) => {
            jobs::stop_timer(id);
        }
        None => {}
    }
    // The server fires a timer once its delay has passed, in ms: rounded
    // up, never before the end.
    let delay = at_us.saturating_sub(wait_clock_us()).div_ceil(1000);
    *armed = jobs::arm_timer(i64::try_from(delay).unwrap_or(i64::MAX), on_wait_timer)
        .map(|id| (id, at_us));
}

/// Fires the `WAIT` timer at once if it is overdue on the wait clock: a
/// module timer armed before the wall clock stepped back fires that much
/// late (see `jobs::rearm_late`, called from the same cron).
pub fn rearm_late() {
    let mut armed = wait_timer();
    if let Some((id, at)) = *armed {
        if at < wait_clock_us() {
            jobs::stop_timer(id);
            *armed = jobs::arm_timer(0, on_wait_timer).map(|id| (id, at));
        }
    }
}

extern "C" fn on_wait_timer(_ctx: *mut raw::RedisModuleCtx, _data: *mut c_void) {
    guard("wait timeout", (), || {
        *wait_timer() = None;
        let (n, next) = with_parking(|p| (p.time_out_ended(wait_clock_us()), p.next_wait_end()));
        for _ in 0..n {
            stats::WAIT_TIMEOUTS.add();
        }
        if let Some(at) = next {
            arm_wait_timer(at);
        }
        hand_over();
    })
}

/// Answers nil to the waiters of `res` whose `WAIT` has run out, so they
/// are never chosen for a grant.
pub fn time_out_given_up(res: &Resource) {
    let now_ms = wait_clock_ms();
    let n = with_parking(|p| p.time_out_given_up(res, now_ms));
    for _ in 0..n {
        stats::WAIT_TIMEOUTS.add();
    }
    answers_ready();
}
