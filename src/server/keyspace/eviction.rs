//! Evicted locks. A `maxmemory-policy` other than `noeviction` can remove a
//! held lock; its holder never hears of it and still believes it holds the
//! lock until the lease's deadline. dlock counts and logs such evictions,
//! and keeps the resource's waiters from being granted before that deadline.
//!
//! The type's unlink callback sees every lock leave the keyspace but not
//! why; the `evicted` (or `expired`) keyspace event comes right after it for
//! the same key, without the value. The unlink callback leaves a mark of the
//! key for the event to match (`was_lock`), which also decides whether an
//! expiry ended a lock.

use std::ffi::c_void;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use redis_module::raw;

use crate::server::edge::api::{self, now_us, rm, Ctx};
use crate::server::edge::ffi::guard;
use crate::server::jobs::{self, Job};
use crate::server::notify::{figures, watchers};
use crate::server::waiting::blocking::{self, Resource};
use crate::server::{keyspace::hold_guards, keyspace::value, sessions, state};
use dlock_core::stats::Kind;
use dlock_core::Error;

static LAST_UNLINKED: AtomicU64 = AtomicU64::new(0);
/// The key object of the last lock unlinked, with a reference held on it.
static LAST_UNLINKED_KEY: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(std::ptr::null_mut());
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

/// The type's unlink callback (DEL, UNLINK, expiry, eviction, overwrite,
/// RENAME/MOVE away): marks the key object for `was_lock`, then leaves the
/// fingerprint and queues the handoff (`unlinked`).
pub extern "C" fn on_unlink(optctx: *mut raw::RedisModuleKeyOptCtx, value: *const c_void) {
    guard("unlink mark", (), || hold_unlinked(optctx));
    guard("unlink", (), || unlinked(optctx, value));
}

/// The lock value is leaving its key. No writes are allowed here, so the
/// handoff to its waiters is deferred.
fn unlinked(optctx: *mut raw::RedisModuleKeyOptCtx, value: *const c_void) {
    // A restored lock may leave before its fence was confirmed.
    let stored = unsafe { value::view(value) };
    if let Some(stored) = &stored {
        state::observe_fence(stored.max_fence());
        match stored {
            value::Stored::Plain(lease) => figures::unlinked_plain(lease.fence()),
            value::Stored::Multi(holds) => figures::unlinked_holds(
                holds
                    .iter()
                    .map(|h| (Kind::of(h.mode, holds.limit), h.fence, h.deadline_ms)),
            ),
        }
    }
    let (Some(db_of), Some(name_of)) = (unsafe { raw::RedisModule_GetDbIdFromOptCtx }, unsafe {
        raw::RedisModule_GetKeyNameFromOptCtx
    }) else {
        return;
    };
    let db = unsafe { db_of(optctx) };
    let Ok(key) = api::bytes(unsafe { name_of(optctx) }) else {
        return;
    };
    note_unlinked(db, key);
    watchers::changed_key(db, key);
    if let Some(value::Stored::Multi(holds)) = stored {
        hold_guards::forget(db, key);
        sessions::value_gone(db, key, holds);
    }
    if !blocking::anyone_waiting() {
        return;
    }
    let res = Resource {
        db,
        key: key.into(),
    };
    if blocking::waiters_on(&res) > 0 {
        jobs::push(Job::Settle(res));
    }
}

/// Keeps a reference to the key object the lock leaves under, dropping the
/// one kept for the previous lock. Costs a reference-count increment and
/// decrement per lock deletion, no allocation (unless the server hands over
/// a static key object, which is copied and so never matches: a lock not
/// counted, never a wrong count).
fn hold_unlinked(optctx: *mut raw::RedisModuleKeyOptCtx) {
    let (Some(name_of), Some(hold)) = (unsafe { raw::RedisModule_GetKeyNameFromOptCtx }, unsafe {
        raw::RedisModule_HoldString
    }) else {
        return;
    };
    let key = unsafe { name_of(optctx) }.cast_mut();
    let held = if key.is_null() {
        std::ptr::null_mut()
    } else {
        unsafe { hold(std::ptr::null_mut(), key) }
    };
    release_held(LAST_UNLINKED_KEY.swap(held, Ordering::Relaxed));
}

fn release_held(key: *mut raw::RedisModuleString) {
    if key.is_null() {
        return;
    }
    if let Some(free) = unsafe { raw::RedisModule_FreeString } {
        unsafe { free(std::ptr::null_mut(), key) };
    }
}

/// Called by the unlink callback for every lock leaving the keyspace.
pub fn note_unlinked(db: i32, key: &[u8]) {
    LAST_UNLINKED.store(fingerprint(db, key), Ordering::Relaxed);
}

/// Whether the key an `expired`/`evicted` event names (in the context's
/// database) is the lock the unlink callback just saw leave. Every such event
/// consumes the mark.
///
/// Why a key that was not a lock is not counted: the unlink callback runs
/// for every deletion of a lock (DEL, RELEASE, overwrite ... included), but
/// only an expiry or an eviction is followed by one of these events, and it
/// follows synchronously, with the same key object: `dbGenericDelete` calls
/// the unlink callback and `deleteExpiredKeyAndPropagate` (or the eviction
/// loop) then notifies with the very object it passed there (Redis 7.0 to 8
/// and Valkey 8 alike). So the event must carry the object the last unlink
/// received, not merely its name: after `DEL lock; SET lock v PX 20`, the
/// string's expiry comes with another object (the expiry cycle's own, or the
/// argument of whatever command found it expired) and matches nothing. We
/// hold a reference on the marked object, so its memory cannot be freed and
/// reused for another key object while the mark lasts. The one way to bring
/// the same object to a later deletion is for whoever made it to keep it
/// across commands (a module reusing one `RedisModuleString`); the server's
/// own key objects (client and script arguments, the expiry and eviction
/// loops' objects) live for one command. Between a lock's unlink and its own
/// event only the value's free runs, so real expiries and evictions are
/// counted (another module deleting a lock from its own handler of the same
/// event could replace the mark first: a lock then goes uncounted, never a
/// wrong one counted). No per-command hook is needed: subscribing to `del`
/// or `set` events instead would put a callback on every core write.
pub fn was_lock(c: Ctx, key: *mut raw::RedisModuleString) -> Result<bool, Error> {
    let held = LAST_UNLINKED_KEY.swap(std::ptr::null_mut(), Ordering::Relaxed);
    let same_object = !held.is_null() && held == key;
    release_held(held);
    let fingerprint_was = LAST_UNLINKED.swap(0, Ordering::Relaxed);
    if !same_object {
        return Ok(false);
    }
    let db = unsafe { rm!(RedisModule_GetSelectedDb)(c.0) };
    let name = api::bytes(key)?;
    Ok(fingerprint(db, name) == fingerprint_was)
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
