//! Evicted locks. A `maxmemory-policy` other than `noeviction` can remove a
//! held lock; its holder never hears of it and still believes it holds the
//! lock until the lease's deadline. dlock counts and logs such evictions,
//! and keeps the resource's waiters from being granted before that deadline.
//!
//! The type's unlink callback sees every lock leave the keyspace but not
//! why; the `evicted` keyspace event comes right after it for the same key,
//! without the value. The unlink callback leaves a fingerprint of the key for
//! the event to match.

use std::sync::atomic::{AtomicU64, Ordering};

use redis_module::raw;

use super::api::{self, now_us, rm, Ctx};
use super::blocking::{self, Resource};
use crate::lock::Error;

static LAST_UNLINKED: AtomicU64 = AtomicU64::new(0);
static EVICTED: AtomicU64 = AtomicU64::new(0);
/// Evictions not yet reported in the log (reported at most once a second).
static UNLOGGED: AtomicU64 = AtomicU64::new(0);
static LOGGED_AT_MS: AtomicU64 = AtomicU64::new(0);

pub fn evicted_locks() -> u64 {
    EVICTED.load(Ordering::Relaxed)
}

/// FNV-1a of database and key: cheap enough for every lock deletion.
fn fingerprint(db: i32, key: &[u8]) -> u64 {
    db.to_le_bytes()
        .iter()
        .chain(key)
        .fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
}

/// Called by the unlink callback for every lock leaving the keyspace.
pub fn note_unlinked(db: i32, key: &[u8]) {
    LAST_UNLINKED.store(fingerprint(db, key), Ordering::Relaxed);
}

/// Whether the key an `expired`/`evicted` event names (in the context's
/// database) is the lock the unlink callback just saw leave.
pub fn was_lock(c: Ctx, key: *mut raw::RedisModuleString) -> Result<bool, Error> {
    let db = unsafe { rm!(RedisModule_GetSelectedDb)(c.0) };
    let name = api::bytes(key)?;
    Ok(fingerprint(db, name) == LAST_UNLINKED.swap(0, Ordering::Relaxed))
}

/// The `evicted` keyspace event for `key` in the context's database.
pub fn on_evicted(c: Ctx, key: *mut raw::RedisModuleString) -> Result<(), Error> {
    if !was_lock(c, key)? {
        return Ok(());
    }
    let db = unsafe { rm!(RedisModule_GetSelectedDb)(c.0) };
    let name = api::bytes(key)?;
    EVICTED.fetch_add(1, Ordering::Relaxed);
    let res = Resource {
        db,
        key: name.into(),
    };
    let held_until = if blocking::waiters_on(&res) > 0 {
        blocking::hold_after_eviction(&res)
    } else {
        None
    };
    report(c, name, held_until);
    Ok(())
}

fn report(ctx: Ctx, name: &[u8], held_until: Option<u64>) {
    let now = now_us() / 1000;
    let pending = UNLOGGED.fetch_add(1, Ordering::Relaxed) + 1;
    if now.saturating_sub(LOGGED_AT_MS.load(Ordering::Relaxed)) < 1000 && held_until.is_none() {
        return;
    }
    LOGGED_AT_MS.store(now, Ordering::Relaxed);
    UNLOGGED.store(0, Ordering::Relaxed);
    let key = String::from_utf8_lossy(name);
    let waiters = match held_until {
        Some(at) => format!(
            "; its waiters wait until the lease's deadline ({} ms)",
            at.saturating_sub(now)
        ),
        None => String::new(),
    };
    ctx.log_warning(&format!(
        "held lock '{key}' evicted by maxmemory-policy ({pending} lock eviction(s) since the \
         last report): its holder still believes it holds it{waiters}. Use noeviction."
    ));
}
