//! A guard per multi-hold key: one timer that makes sure the key goes with
//! its last hold even when it has no expiry to remove it.
//!
//! The module keeps a multi-hold key's expiry at its latest hold deadline,
//! so normally the server's own expiry ends it. An admin's `PERSIST` (or a
//! longer `PEXPIRE`), a `RESTORE` with TTL 0, or a load of such a key leaves
//! it without that expiry, and no keyspace event tells us about the first
//! two without making every core `DEL`/`EXPIRE` call into the module. So
//! every write of a multi-hold value (`put_holds`, a replica's in-place hold
//! effect) and every load of one makes sure a timer is armed
//! by the key's latest finite hold deadline + 1 ms. O(1) per write: an
//! armed timer at or before that time stays (it re-arms when it fires);
//! only a latest deadline that moved earlier re-arms. The guard goes when
//! the key's value leaves (the type's unlink callback), so a key that ends
//! by its expiry or a release costs one timer set and stopped.
//!
//! When the timer fires on the master it opens the key (which expires a due
//! key). A key that still has its expiry at or before its latest hold
//! deadline ends by itself: the guard waits for that deadline. Otherwise the
//! holds past their deadline are dropped with their effects, through the
//! queue if someone waits (`DLOCK.DROPHOLD` or `DEL`); the change gives the
//! key its latest hold deadline as expiry again, so from then on it goes
//! with its last hold as any other. A hold without a deadline (a persisted
//! plain lock that gained holds) keeps the key persistent, and the guard
//! goes on to the next finite deadline. A replica keeps its guards but never
//! writes (its master sends the drops), so once promoted it does the
//! master's work.
//!
//! Cost: plain locks pay nothing (no entry, no timer). A multi-hold key
//! with a finite hold deadline holds one map entry (its name, about 40 B of
//! table and bookkeeping) and one server timer (a radix-tree entry and a
//! boxed copy of the name) while its value is in the keyspace; a write
//! hashes the name once.

use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use redis_module::raw;

use super::api::{self, now_us, rm, Ctx};
use super::blocking;
use super::ffi::guard;
use super::holds::{self, Work};
use super::keys::LockKey;
use super::value::Stored;
use super::{handoff, sets};
use crate::lock::holds::{Holds, NEVER};
use crate::lock::Error;

/// How often a replica looks again at a key whose dead holds its master has
/// not dropped yet.
const REPLICA_RECHECK_MS: u64 = 1000;

/// The armed guard of each key, by database and name (looked up by a
/// borrowed name: a write allocates nothing unless it arms).
type Guards = HashMap<i32, HashMap<Box<[u8]>, Armed>>;
static ARMED: Mutex<Option<Guards>> = Mutex::new(None);

struct Armed {
    id: u64,
    at: u64,
    /// The timer's data, owned by the timer until it fires or is stopped.
    target: *mut Target,
}

// SAFETY: `target` is only dereferenced on the server's main thread.
unsafe impl Send for Armed {}

/// Decoded multi-hold values whose guards are not armed yet.
static LOADED: Mutex<Vec<Loaded>> = Mutex::new(Vec::new());
static LOADED_ARMED: AtomicBool = AtomicBool::new(false);

struct Loaded {
    db: i32,
    key: Box<[u8]>,
    at: u64,
}

/// A guard timer's data: which key.
struct Target {
    db: i32,
    key: Box<[u8]>,
}

/// `key.put_holds(holds)`, guarding the key when the holds stay a
/// multi-hold value (a plain lock ends by its expiry alone).
pub fn put_holds(
    ctx: Ctx,
    key: &mut LockKey,
    name: *mut raw::RedisModuleString,
    holds: Holds,
) -> Result<(), Error> {
    let at = latest_finite(&holds);
    key.put_holds(holds)?;
    if let Some(at) = at {
        watch(ctx, name, at);
    }
    Ok(())
}

/// Multi-hold holds were just changed in place under `name`; `at` is their
/// `latest_finite` deadline.
pub fn watch(ctx: Ctx, name: *mut raw::RedisModuleString, at: u64) {
    let Ok(key) = api::bytes(name) else {
        return;
    };
    let Some(db_of) = (unsafe { raw::RedisModule_GetSelectedDb }) else {
        return;
    };
    arm(unsafe { db_of(ctx.0) }, key, at);
}

/// A multi-hold value was decoded (dataset load, `RESTORE`). The guard is
/// armed from a zero-delay timer: `RESTORE REPLACE` deletes the old value
/// (whose unlink forgets its guard) after decoding the new one. A value the
/// server refuses leaves a guard that finds nothing and goes.
pub fn watch_loaded(rdb: *mut raw::RedisModuleIO, holds: &Holds) {
    let Some(at) = latest_finite(holds) else {
        return;
    };
    let (Some(name_of), Some(db_of)) = (unsafe { raw::RedisModule_GetKeyNameFromIO }, unsafe {
        raw::RedisModule_GetDbIdFromIO
    }) else {
        return;
    };
    let name = unsafe { name_of(rdb) };
    if name.is_null() {
        return;
    }
    let Ok(key) = api::bytes(name) else {
        return;
    };
    LOADED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(Loaded {
            db: unsafe { db_of(rdb) },
            key: key.into(),
            at,
        });
    if !LOADED_ARMED.swap(true, Ordering::Relaxed) && !handoff::arm_timer(0, on_loaded_timer) {
        LOADED_ARMED.store(false, Ordering::Relaxed);
    }
}

extern "C" fn on_loaded_timer(_ctx: *mut raw::RedisModuleCtx, _data: *mut c_void) {
    guard("loaded hold guards", (), || {
        LOADED_ARMED.store(false, Ordering::Relaxed);
        let list = std::mem::take(&mut *LOADED.lock().unwrap_or_else(|p| p.into_inner()));
        for l in list {
            arm(l.db, &l.key, l.at);
        }
    })
}

/// The multi-hold value of `key` in `db` is leaving the keyspace.
pub fn forget(db: i32, key: &[u8]) {
    let armed = {
        let mut map = ARMED.lock().unwrap_or_else(|p| p.into_inner());
        map.as_mut()
            .and_then(|m| m.get_mut(&db))
            .and_then(|keys| keys.remove(key))
    };
    if let Some(old) = armed {
        stop(&old);
    }
}

/// FLUSHDB/FLUSHALL emptied `db` (`None`: every database).
pub fn after_flush(db: Option<i32>) {
    let gone: Vec<Armed> = {
        let mut map = ARMED.lock().unwrap_or_else(|p| p.into_inner());
        let Some(map) = map.as_mut() else {
            return;
        };
        let dbs: Vec<i32> = map
            .keys()
            .copied()
            .filter(|d| db.is_none_or(|x| x == *d))
            .collect();
        dbs.into_iter()
            .filter_map(|d| map.remove(&d))
            .flat_map(|keys| keys.into_values())
            .collect()
    };
    gone.iter().for_each(stop);
}

/// SWAPDB exchanged databases `a` and `b`: the guards follow their keys.
pub fn after_swap(a: i32, b: i32) {
    let mut map = ARMED.lock().unwrap_or_else(|p| p.into_inner());
    let Some(map) = map.as_mut() else {
        return;
    };
    let (from_a, from_b) = (map.remove(&a), map.remove(&b));
    for (db, keys) in [(b, from_a), (a, from_b)] {
        let Some(keys) = keys else {
            continue;
        };
        for armed in keys.values() {
            // SAFETY: an armed timer's data, alive until it fires (which
            // takes it out of this map first) or is stopped.
            unsafe { (*armed.target).db = db };
        }
        map.insert(db, keys);
    }
}

/// The latest finite hold deadline; `None` for a plain lock, which the
/// key's expiry ends, for no holds (the key is deleted), or for holds
/// without any finite deadline.
pub fn latest_finite(holds: &Holds) -> Option<u64> {
    if holds.as_plain().is_some() {
        return None;
    }
    match holds.deadline_ms()? {
        NEVER => holds
            .holds
            .iter()
            .map(|h| h.deadline_ms)
            .filter(|d| *d < NEVER)
            .max(),
        latest => Some(latest),
    }
}

/// Makes sure a guard fires for `key` in `db` by `at` + 1 ms: a hold is
/// live up to its deadline, and a key expires strictly after its expiry.
fn arm(db: i32, key: &[u8], at: u64) {
    let mut map = ARMED.lock().unwrap_or_else(|p| p.into_inner());
    let keys = map.get_or_insert_with(HashMap::new).entry(db).or_default();
    let old = match keys.get(key) {
        Some(armed) if armed.at <= at => return,
        Some(_) => keys.remove(key),
        None => None,
    };
    let ctx = handoff::timer_ctx();
    let Some(create) = (unsafe { raw::RedisModule_CreateTimer }).filter(|_| !ctx.is_null()) else {
        return;
    };
    let delay = at.saturating_sub(now_us() / 1000) + 1;
    let target = Box::into_raw(Box::new(Target {
        db,
        key: key.into(),
    }));
    let id = unsafe {
        create(
            ctx,
            i64::try_from(delay).unwrap_or(i64::MAX),
            Some(on_timer),
            target.cast::<c_void>(),
        )
    };
    keys.insert(key.into(), Armed { id, at, target });
    drop(map);
    if let Some(old) = old {
        stop(&old);
    }
}

fn stop(armed: &Armed) {
    if handoff::stop_timer(armed.id).is_some() {
        drop(unsafe { Box::from_raw(armed.target) });
    }
}

extern "C" fn on_timer(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    guard("hold guard", (), || {
        if data.is_null() {
            return;
        }
        let target = unsafe { Box::from_raw(data.cast::<Target>()) };
        {
            let mut map = ARMED.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(keys) = map.as_mut().and_then(|m| m.get_mut(&target.db)) {
                if keys
                    .get(&target.key)
                    .is_some_and(|a| std::ptr::eq(a.target, data.cast::<Target>()))
                {
                    keys.remove(&target.key);
                }
            }
        }
        // No map lock from here: opening the key may expire it, and its
        // unlink callback forgets the guard.
        let ctx = Ctx(ctx);
        if let Err(e) = look(ctx, &target) {
            ctx.log_warning(&format!("hold guard: {e}"));
        }
    })
}

fn look(ctx: Ctx, target: &Target) -> Result<(), Error> {
    unsafe { rm!(RedisModule_SelectDb)(ctx.0, target.db) };
    let name = unsafe {
        rm!(RedisModule_CreateString)(
            ctx.0,
            target.key.as_ptr().cast::<c_char>(),
            target.key.len(),
        )
    };
    let result = look_key(ctx, target, name);
    unsafe { rm!(RedisModule_FreeString)(ctx.0, name) };
    result
}

/// What the guard of a key found.
enum Found {
    /// Gone, or not a multi-hold value: nothing to guard.
    Nothing,
    /// Wake again just after this time.
    WakeAt(u64),
    /// Holds past their deadline stay in a key that no expiry removes.
    Dead,
}

fn look_key(ctx: Ctx, target: &Target, name: *mut raw::RedisModuleString) -> Result<(), Error> {
    let now_ms = now_us() / 1000;
    match find(&LockKey::open_read(ctx, name)?, now_ms)? {
        Found::Nothing => return Ok(()),
        Found::WakeAt(at) => {
            arm(target.db, &target.key, at);
            return Ok(());
        }
        Found::Dead => {}
    }
    if ctx.flags()?.is_replica() {
        // Its master drops the holds; until then look again now and then,
        // in case this replica is promoted first.
        arm(target.db, &target.key, now_ms + REPLICA_RECHECK_MS);
        return Ok(());
    }
    if handoff::writes_paused() {
        arm(
            target.db,
            &target.key,
            now_ms + handoff::PAUSED_RETRY_MS as u64,
        );
        return Ok(());
    }
    match handoff::waiting_resource(ctx, name)? {
        // The queue may fit now: the handoff paths prune and grant.
        Some(waiting) if blocking::has_sets(&waiting) => sets::settle(ctx, &waiting)?,
        Some(waiting) => {
            let mut key = LockKey::open_write(ctx, name)?;
            holds::settle(ctx, &mut key, name, &waiting)?;
        }
        None => {
            let mut key = LockKey::open_write(ctx, name)?;
            Work::load(&key)?.finish(ctx, &mut key, name)?;
        }
    }
    blocking::hand_over();
    // The write armed the guard at the latest deadline; a key that stays
    // persistent needs it at its next one.
    if let Found::WakeAt(at) = find(&LockKey::open_read(ctx, name)?, now_us() / 1000)? {
        arm(target.db, &target.key, at);
    }
    Ok(())
}

fn find(key: &LockKey, now_ms: u64) -> Result<Found, Error> {
    let holds = match key.stored() {
        Ok(Some(Stored::Multi(h))) => h,
        Ok(_) | Err(Error::WrongType) => return Ok(Found::Nothing),
        Err(e) => return Err(e),
    };
    let Some(latest) = latest_finite(holds) else {
        return Ok(Found::Nothing);
    };
    let ends_by_itself = match (key.deadline()?, holds.deadline_ms()) {
        (Some(expiry), Some(last)) => expiry <= last,
        _ => false,
    };
    if ends_by_itself {
        // Its expiry removes it (a replica waits for its master's delete).
        return Ok(if latest >= now_ms {
            Found::WakeAt(latest)
        } else {
            Found::Nothing
        });
    }
    if holds.holds.iter().any(|h| !h.is_live(now_ms)) {
        return Ok(Found::Dead);
    }
    Ok(holds
        .holds
        .iter()
        .map(|h| h.deadline_ms)
        .filter(|d| *d < NEVER)
        .min()
        .map_or(Found::Nothing, Found::WakeAt))
}
