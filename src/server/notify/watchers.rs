//! Who observes which resource (`DLOCK.OBSERVE ... WAIT`), and the hooks
//! every change of a lock calls: they only queue a check of the resource
//! (`Job::Observed`), which `observe` runs from the jobs' timer, so a hook
//! costs one atomic load while nobody observes and never writes or
//! replies from inside another command or callback.
//!
//! Kept apart from `observe` (the command and the checks) so that the
//! lowest layers (events, eviction, effects) can call the hooks without
//! depending on the code that reads locks.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};

use redis_module::raw;

use crate::server::edge::api::{monotonic_us, Ctx};
use crate::server::jobs::{self, Job};
use crate::server::resource::Resource;
use crate::server::state;
use dlock_core::observe::Observers;

/// A blocked observer. Only ever used on the server's main thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Watcher(pub *mut raw::RedisModuleBlockedClient);

// SAFETY: handles are created, used and released on the main thread only; the
// mutex around them exists for soundness, not for sharing across threads.
unsafe impl Send for Watcher {}

static WATCHERS: LazyLock<Mutex<Observers<Resource, Watcher>>> = LazyLock::new(Default::default);
/// Mirrors how many observers wait: the hooks' one load while none do.
static WATCHING: AtomicUsize = AtomicUsize::new(0);

/// Runs `f` on the registry and refreshes the mirror; then drops the
/// jobs that observers who left no longer need, so that an observer leaves
/// nothing behind.
pub fn with<R>(f: impl FnOnce(&mut Observers<Resource, Watcher>) -> R) -> R {
    let mut w: MutexGuard<'_, _> = WATCHERS.lock().unwrap_or_else(|p| p.into_inner());
    let r = f(&mut w);
    WATCHING.store(w.total(), Ordering::Relaxed);
    let (unwatched, give_ups_ended) = w.take_idle();
    drop(w);
    for res in unwatched {
        jobs::cancel(&Job::Observed(res));
    }
    if give_ups_ended {
        jobs::cancel(&Job::ObserversGiveUp);
    }
    r
}

/// How many observers wait.
pub fn count() -> usize {
    WATCHING.load(Ordering::Relaxed)
}

/// The holders of `res` may have changed: a check of its observers is
/// queued, for now, or for when the pace allows their next answers (once:
/// the changes made until then cost nothing more).
pub fn changed(res: &Resource) {
    if count() == 0 {
        return;
    }
    let now = monotonic_us();
    let rate = state::observe_rate();
    let (watched, held) = with(|w| (w.is_watched(res), w.paces.held_until(res, now, rate)));
    match (watched, held) {
        (false, _) => {}
        (true, None) => jobs::push(Job::Observed(res.clone())),
        (true, Some(until)) => look_at(res, until, now),
    }
}

/// Schedules a check of `res`'s observers at `at_us` or just after,
/// unless one is due by then (or nobody observes it). Both times are read
/// on the monotonic clock, as the pace's and the jobs' are.
pub fn look_at(res: &Resource, at_us: u64, now_us: u64) {
    let at_ms = at_us.div_ceil(1000);
    if with(|w| w.needs_check(res, at_ms)) {
        let delay_ms = at_ms.saturating_sub(now_us / 1000);
        jobs::push_after(Job::Observed(res.clone()), delay_ms);
    }
}

/// How often pace records whose budget is full again are forgotten.
const SWEEP_MS: u64 = 1000;

/// Whether a sweep of the pace records is queued.
static SWEEP_QUEUED: AtomicBool = AtomicBool::new(false);

/// Makes sure a sweep of the pace records is queued (one for all
/// resources, so answering costs no job of its own).
pub fn sweep_later() {
    if !SWEEP_QUEUED.swap(true, Ordering::Relaxed) {
        jobs::push_after(Job::PaceSweep, SWEEP_MS);
    }
}

/// The sweep (`Job::PaceSweep`): forgets the records whose budget is full
/// again, and comes back while some are left.
pub fn sweep() {
    if with(|w| w.paces.sweep(monotonic_us())) {
        jobs::push_after(Job::PaceSweep, SWEEP_MS);
    } else {
        SWEEP_QUEUED.store(false, Ordering::Relaxed);
    }
}

/// `dlock.observe-rate` changed: budgets reckoned at the old rate mean
/// nothing at the new one, so every resource starts with a full budget,
/// and observers held back by the old pace are looked at again at once.
pub fn rate_changed() {
    let held: Vec<Resource> = with(|w| {
        w.paces.clear();
        w.keys()
    });
    for res in held {
        jobs::push(Job::Observed(res));
    }
}

/// As `changed`, for the key `name` of the caller's database.
pub fn changed_name(ctx: Ctx, name: *mut raw::RedisModuleString) {
    if count() == 0 {
        return;
    }
    if let Ok(res) = Resource::of(ctx, name) {
        changed(&res);
    }
}

/// As `changed`, for `key` of database `db`.
pub fn changed_key(db: i32, key: &[u8]) {
    if count() == 0 {
        return;
    }
    changed(&Resource {
        db,
        key: key.into(),
    });
}

/// Every resource of `db` (all databases: `None`) may have changed (a
/// flush, a swap).
pub fn changed_db(db: Option<i32>) {
    if count() == 0 {
        return;
    }
    for res in with(|w| w.keys()) {
        if db.is_none_or(|d| d == res.db) {
            jobs::push(Job::Observed(res));
        }
    }
}
