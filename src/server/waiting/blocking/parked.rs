//! The parking lot of `WAIT` clients behind its mutex, the atomic mirrors
//! that make "nobody waits" cheap, and the clock `WAIT`s are reckoned on.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};

use redis_module::raw;

use crate::server::edge::api::monotonic_us;
use crate::server::jobs::{self, Job};
use crate::server::notify::{figures, watchers};
use crate::server::resource::Resource;
use dlock_core::parking::Parking;
use dlock_core::queue::WaitQueues;

/// A blocked client. Only ever used on the server's main thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Blocked(pub(super) *mut raw::RedisModuleBlockedClient);

// SAFETY: handles are created, used and released on the main thread only; the
// mutex around them exists for soundness, not for sharing across threads.
unsafe impl Send for Blocked {}

static PARKING: LazyLock<Mutex<Parking<Resource, Blocked>>> = LazyLock::new(Default::default);

/// Mirrors of the number of waiters and of grants in flight, so the common
/// case (nobody waits) costs one atomic load and no hashing.
static TOTAL: AtomicUsize = AtomicUsize::new(0);
pub(super) static GRANTS_IN_FLIGHT: AtomicBool = AtomicBool::new(false);
/// Never held across a call that could re-enter us (key deletion runs the
/// type's unlink callback, which defers its work instead of locking).
pub(super) fn parking() -> MutexGuard<'static, Parking<Resource, Blocked>> {
    PARKING.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `f` on the parking lot and refreshes the mirrors.
pub(super) fn with_parking<R>(f: impl FnOnce(&mut Parking<Resource, Blocked>) -> R) -> R {
    let mut p = parking();
    let r = f(&mut p);
    TOTAL.store(p.queues().total(), Ordering::Relaxed);
    GRANTS_IN_FLIGHT.store(p.has_grants_in_flight(), Ordering::Relaxed);
    let stale = p.queues_mut().take_stale_timers();
    let to_settle = p.queues_mut().take_to_settle();
    let emptied = p.queues_mut().take_emptied();
    let left = p.take_left();
    drop(p);
    figures::left_queues(left, wait_clock_ms());
    if !stale.is_empty() {
        jobs::stop_wake_ups(&stale);
    }
    // A free resource whose last waiter left is no longer reserved.
    for res in &emptied {
        watchers::changed(res);
    }
    // Who is behind a waiter that left may fit now: look again from a
    // timer (we may be inside a callback that cannot write).
    for res in to_settle {
        jobs::push(Job::Settle(res));
    }
    r
}

pub(super) fn with_queues<R>(f: impl FnOnce(&mut WaitQueues<Resource, Blocked>) -> R) -> R {
    with_parking(|p| f(p.queues_mut()))
}

pub fn total_waiters() -> usize {
    TOTAL.load(Ordering::Relaxed)
}

pub fn anyone_waiting() -> bool {
    TOTAL.load(Ordering::Relaxed) > 0
}

pub fn waiters_on(res: &Resource) -> usize {
    if !anyone_waiting() {
        return 0;
    }
    parking().queues().waiting(res)
}

/// The clock `WAIT`s are reckoned on: monotonic, as the timer that ends
/// them. A `WAIT 5000` ends 5 s after it began whatever the wall clock
/// does meanwhile; the give-up times stored in the queues are on it too,
/// and never leave the process.
pub(super) fn wait_clock_us() -> u64 {
    monotonic_us()
}

pub(super) fn wait_clock_ms() -> u64 {
    wait_clock_us() / 1000
}
