//! Who observes which resource (`DLOCK.OBSERVE ... WAIT`), and the hooks
//! every change of a lock calls: they only queue a check of the resource
//! (`Job::Observed`), which `observe` runs from the jobs' timer, so a hook
//! costs one atomic load while nobody observes and never writes or
//! replies from inside another command or callback.
//!
//! Kept apart from `observe` (the command and the checks) so that the
//! lowest layers (events, eviction, effects) can call the hooks without
//! depending on the code that reads locks.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};

use redis_module::raw;

use super::api::{now_us, Ctx};
use super::jobs::{self, Job};
use super::resource::Resource;
use super::state;
use crate::lock::observe::Observers;

/// A blocked observer. Only ever used on the server's main thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Watcher(pub *mut raw::RedisModuleBlockedClient);

// SAFETY: handles are created, used and released on the main thread only; the
// mutex around them exists for soundness, not for sharing across threads.
unsafe impl Send for Watcher {}

static WATCHERS: LazyLock<Mutex<Observers<Resource, Watcher>>> = LazyLock::new(Default::default);
/// Mirrors how many observers wait: the hooks' one load while none do.
static WATCHING: AtomicUsize = AtomicUsize::new(0);

/// Runs `f` on the registry and refreshes the mirror.
pub fn with<R>(f: impl FnOnce(&mut Observers<Resource, Watcher>) -> R) -> R {
    let mut w: MutexGuard<'_, _> = WATCHERS.lock().unwrap_or_else(|p| p.into_inner());
    let r = f(&mut w);
    WATCHING.store(w.total(), Ordering::Relaxed);
    r
}

/// How many observers wait.
pub fn count() -> usize {
    WATCHING.load(Ordering::Relaxed)
}

/// The holders of `res` may have changed. While the pace holds its
/// observers back, the check that answers them is queued already (for
/// when the pace allows it): nothing to do.
pub fn changed(res: &Resource) {
    if count() == 0 {
        return;
    }
    let rate = state::observe_rate();
    let wanted = with(|w| w.is_watched(res) && w.paces.held_until(res, now_us(), rate).is_none());
    if wanted {
        jobs::push(Job::Observed(res.clone()));
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
