//! Wake-up timers at the end of a lease that has waiters queued, so the
//! handoff does not wait for the server's own expiry.

use super::parked::{waiters_on, with_queues};
use crate::server::edge::api::now_us;
use crate::server::jobs;
use crate::server::resource::Resource;
use dlock_core::Error;

/// Wakes `res` just after `deadline_ms` so a lease that ends with waiters
/// queued is handed over within milliseconds, without waiting for Redis's
/// lazy or sampled active expiry. (A key expires strictly after its deadline.)
pub fn arm_expiry(res: &Resource, deadline_ms: u64) -> Result<(), Error> {
    if waiters_on(res) == 0 {
        return Ok(());
    }
    note_deadline(res, deadline_ms);
    if !needs_timer(res, deadline_ms) {
        return Ok(());
    }
    let delay = deadline_ms.saturating_sub(now_us() / 1000) + 1;
    if let Some(id) = jobs::arm_wake_up(res, deadline_ms, delay) {
        add_timer(res, id);
    }
    Ok(())
}

/// Whether a wake-up timer for `res` at `at_ms` still has to be armed.
pub fn needs_timer(res: &Resource, at_ms: u64) -> bool {
    with_queues(|q| q.needs_timer(res, at_ms))
}

pub fn note_deadline(res: &Resource, at_ms: u64) {
    with_queues(|q| q.note_deadline(res, at_ms));
}

pub fn hold_after_eviction(res: &Resource) -> Option<u64> {
    with_queues(|q| q.hold_after_eviction(res))
}

pub fn timer_fired(res: &Resource, at_ms: u64, id: u64) {
    with_queues(|q| q.timer_fired(res, at_ms, id));
}

/// The server armed wake-up timer `id` for `res`.
pub fn add_timer(res: &Resource, id: u64) {
    with_queues(|q| q.add_timer(res, id));
}
