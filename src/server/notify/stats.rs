//! Exact counters for `INFO dlock`, and the lock events published as
//! keyspace notifications (module class `d`: `dlock.acquired`,
//! `dlock.released`, `dlock.extended`, `dlock.handoff`, `dlock.revoked`,
//! `dlock.expired`).

use std::ffi::CStr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use redis_module::raw;

use crate::server::edge::api::Ctx;
use crate::server::notify::watchers;

pub struct Counter(AtomicU64);

impl Counter {
    const fn new() -> Self {
        Counter(AtomicU64::new(0))
    }
    pub fn add(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    pub fn add_n(&self, n: u64) {
        if n > 0 {
            self.0.fetch_add(n, Ordering::Relaxed);
        }
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Grants to a new owner (handoffs included).
pub static GRANTS: Counter = Counter::new();
/// Same-token re-acquisitions (retries).
pub static REFRESHES: Counter = Counter::new();
/// ACQUIREs that found the lock held (answered nil, or queued with WAIT).
pub static CONTENDED: Counter = Counter::new();
pub static RELEASES: Counter = Counter::new();
pub static EXTENDS: Counter = Counter::new();
/// Leases that ended by expiry while held.
pub static EXPIRED: Counter = Counter::new();
/// Grants made to a queued waiter.
pub static HANDOFFS: Counter = Counter::new();
/// Handoffs out of turn (`RELEASE ... TO`), counted in `HANDOFFS` too.
pub static HANDOVERS: Counter = Counter::new();
/// Waiters whose WAIT ran out, or who were `CLIENT UNBLOCK`ed (with or
/// without ERROR).
pub static WAIT_TIMEOUTS: Counter = Counter::new();
/// Grants whose reply never reached the waiter (it left in the same turn):
/// released again at once, as if by their owner.
pub static REVOKED: Counter = Counter::new();
/// Observers held back by the pace of their resource's answers
/// (`dlock.observe-rate`).
pub static OBSERVERS_PACED: Counter = Counter::new();

/// Sessions opened (a retry of a live one is not counted again), and
/// sessions ended, by how.
pub static SESSIONS_OPENED: Counter = Counter::new();
pub static SESSIONS_CLOSED: Counter = Counter::new();
pub static SESSIONS_EXPIRED: Counter = Counter::new();
pub static SESSIONS_KILLED: Counter = Counter::new();
pub static SESSIONS_DISCONNECTED: Counter = Counter::new();
pub static SESSIONS_LOST: Counter = Counter::new();

/// `DLOCK.GUARD`s whose commands ran (a batch undone included), refused
/// because the proof did not hold (`NOTHELD`: a stale holder stopped), and
/// batches undone after a command failed part-way.
pub static GUARDS_RUN: Counter = Counter::new();
pub static GUARDS_NOT_HELD: Counter = Counter::new();
pub static GUARD_BATCHES_UNDONE: Counter = Counter::new();

/// Lock values alive in the keyspace (created minus freed).
static LOCKS: AtomicI64 = AtomicI64::new(0);

pub fn lock_created() {
    LOCKS.fetch_add(1, Ordering::Relaxed);
}

/// Also called from the server's background free thread (`data_type::free`).
pub fn lock_freed() {
    LOCKS.fetch_sub(1, Ordering::Relaxed);
}

pub fn locks() -> u64 {
    u64::try_from(LOCKS.load(Ordering::Relaxed)).unwrap_or(0)
}

/// Publishes a lock event on `key`; Redis delivers it only to subscribers
/// of the module class, so it costs next to nothing otherwise.
pub fn notify(ctx: Ctx, event: &CStr, key: *mut raw::RedisModuleString) {
    if let Some(notify) = unsafe { raw::RedisModule_NotifyKeyspaceEvent } {
        unsafe { notify(ctx.0, raw::REDISMODULE_NOTIFY_MODULE, event.as_ptr(), key) };
    }
    // Every event but an extension changes who holds the resource.
    if event != c"dlock.extended" {
        watchers::changed_name(ctx, key);
    }
}

/// Publishes a session event (`dlock.session.*`) with the session's id as
/// the key name, in database 0 whichever database the caller has selected.
pub fn notify_session(ctx: Ctx, event: &CStr, id: &[u8]) {
    let (Some(notify), Some(create), Some(free), Some(get_db), Some(select)) = (
        unsafe { raw::RedisModule_NotifyKeyspaceEvent },
        unsafe { raw::RedisModule_CreateString },
        unsafe { raw::RedisModule_FreeString },
        unsafe { raw::RedisModule_GetSelectedDb },
        unsafe { raw::RedisModule_SelectDb },
    ) else {
        return;
    };
    unsafe {
        let db = get_db(ctx.0);
        let name = create(ctx.0, id.as_ptr().cast(), id.len());
        select(ctx.0, 0);
        notify(ctx.0, raw::REDISMODULE_NOTIFY_MODULE, event.as_ptr(), name);
        select(ctx.0, db);
        free(ctx.0, name);
    }
}
