//! Module-wide state. Commands and type callbacks run on the server's main
//! thread; BGSAVE's child reads a forked copy. Atomics keep access sound
//! without locks on the hot path.

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

use redis_module::raw;

use dlock_core::fence::MAX_FENCE;
use dlock_core::request::args::Limits;
use dlock_core::FenceClock;

/// The lock data type, registered once at load.
static LOCK_TYPE: AtomicPtr<raw::RedisModuleType> = AtomicPtr::new(std::ptr::null_mut());

/// The fence clock's high-water mark (see `dlock_core::fence`).
static LAST_FENCE: AtomicU64 = AtomicU64::new(0);

/// Whether this server is a replica (kept current by role-change events).
static IS_REPLICA: AtomicBool = AtomicBool::new(false);

pub fn is_replica() -> bool {
    IS_REPLICA.load(Ordering::Relaxed)
}

pub fn set_replica(replica: bool) {
    IS_REPLICA.store(replica, Ordering::Relaxed);
}

/// Longest token a command accepts (`dlock.max-token-length`).
static MAX_TOKEN: AtomicUsize = AtomicUsize::new(512);

/// Longest TTL a command accepts (`dlock.max-ttl`; 0 = unlimited).
static MAX_TTL: AtomicU64 = AtomicU64::new(0);

/// Answers per second to one resource's observers (`dlock.observe-rate`).
static OBSERVE_RATE: AtomicU64 = AtomicU64::new(dlock_core::rules::config::OBSERVE_RATE.default);

static PRIORITY_AGING_MS: AtomicU64 =
    AtomicU64::new(dlock_core::rules::config::PRIORITY_AGING_MS.default);

/// `dlock.priority-aging-ms`.
pub fn priority_aging_ms() -> u64 {
    PRIORITY_AGING_MS.load(Ordering::Relaxed)
}

pub fn set_priority_aging_ms(ms: u64) {
    PRIORITY_AGING_MS.store(ms, Ordering::Relaxed);
}

pub fn observe_rate() -> u64 {
    OBSERVE_RATE.load(Ordering::Relaxed)
}

pub fn set_observe_rate(per_sec: u64) {
    OBSERVE_RATE.store(per_sec, Ordering::Relaxed);
}

pub fn lock_type() -> *mut raw::RedisModuleType {
    LOCK_TYPE.load(Ordering::Relaxed)
}

pub fn set_lock_type(t: *mut raw::RedisModuleType) {
    LOCK_TYPE.store(t, Ordering::Relaxed);
}

pub fn limits() -> Limits {
    Limits {
        max_token: MAX_TOKEN.load(Ordering::Relaxed),
        max_ttl: MAX_TTL.load(Ordering::Relaxed),
    }
}

pub fn set_max_token(n: usize) {
    MAX_TOKEN.store(n, Ordering::Relaxed);
}

pub fn set_max_ttl(ms: u64) {
    MAX_TTL.store(ms, Ordering::Relaxed);
}

/// Runs `f` on the fence clock; whatever it leaves is the new high-water
/// mark (a refused grant leaves the clock as it was).
pub fn with_clock<R>(f: impl FnOnce(&mut FenceClock) -> R) -> R {
    let mut clock = FenceClock::starting_at(LAST_FENCE.load(Ordering::Relaxed));
    let result = f(&mut clock);
    LAST_FENCE.store(clock.last(), Ordering::Relaxed);
    result
}

/// A fence that exists elsewhere (RDB, AOF, master, DUMP payload) or that
/// a command just read: the clock rises to it (`FenceClock::observe`).
/// Every read of a lock value passes here, so the common case, a fence at or
/// below the mark, is one atomic load and a compare.
#[inline]
pub fn observe_fence(fence: u64) {
    if fence > LAST_FENCE.load(Ordering::Relaxed) {
        LAST_FENCE.fetch_max(fence.min(MAX_FENCE), Ordering::Relaxed);
    }
}

pub fn last_fence() -> u64 {
    LAST_FENCE.load(Ordering::Relaxed)
}
