//! Resources with several holds whose key an admin made persistent
//! (`PERSIST`). Such a key keeps every hold's own deadline in force, but has
//! no expiry to remove it: the master drops its holds from a timer, one per
//! key, armed at the earliest hold deadline. The first change gives the
//! key its latest hold deadline as expiry again (`LockKey::put_holds`, and
//! replicas applying the drop do the same), so from then on the key goes
//! with its last hold as any other; a hold without a deadline (a persisted
//! plain lock that gained holds) keeps the key persistent, and the timer
//! goes on to the next finite deadline.
//!
//! The `persist` event arrives where no key may be written, so it only
//! notes the key; a zero-delay timer looks at it.

use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use redis_module::raw;

use super::api::{now_us, rm, Ctx};
use super::blocking::{self, Resource};
use super::ffi::guard;
use super::holds::{self, Work};
use super::keys::LockKey;
use super::value::Stored;
use super::{handoff, sets};
use crate::lock::holds::NEVER;
use crate::lock::Error;

/// How often a replica looks again at a persisted key whose hold its
/// master has not dropped yet.
const REPLICA_RECHECK_MS: u64 = 1000;

/// Keys that were made persistent, not looked at yet.
static NOTED: Mutex<Vec<Resource>> = Mutex::new(Vec::new());
static NOTED_ARMED: AtomicBool = AtomicBool::new(false);

/// The armed wake-up of each key: its timer id and when it fires.
static ARMED: Mutex<Option<HashMap<Resource, Armed>>> = Mutex::new(None);

#[derive(Clone, Copy)]
struct Armed {
    id: u64,
    at: u64,
}

/// A wake-up timer's data.
struct WakeUp {
    res: Resource,
    at: u64,
}

/// The `persist` keyspace event on `key` in database `db`.
pub fn on_persist(db: i32, key: &[u8]) {
    NOTED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(Resource {
            db,
            key: key.into(),
        });
    arm_noted(0);
}

fn arm_noted(delay_ms: i64) {
    if NOTED_ARMED.swap(true, Ordering::Relaxed) {
        return;
    }
    if !handoff::arm_timer(delay_ms, on_noted_timer) {
        NOTED_ARMED.store(false, Ordering::Relaxed);
    }
}

extern "C" fn on_noted_timer(ctx: *mut raw::RedisModuleCtx, _data: *mut c_void) {
    guard("persisted keys", (), || {
        NOTED_ARMED.store(false, Ordering::Relaxed);
        let mut list = std::mem::take(&mut *NOTED.lock().unwrap_or_else(|p| p.into_inner()));
        list.sort_by(|a, b| (a.db, &a.key).cmp(&(b.db, &b.key)));
        list.dedup();
        for res in list {
            look_logged(Ctx(ctx), &res);
        }
    })
}

extern "C" fn on_wake_timer(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    guard("persisted key timer", (), || {
        if data.is_null() {
            return;
        }
        let wake = *unsafe { Box::from_raw(data.cast::<WakeUp>()) };
        let mut armed = ARMED.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(map) = armed.as_mut() {
            if map.get(&wake.res).is_some_and(|a| a.at == wake.at) {
                map.remove(&wake.res);
            }
        }
        drop(armed);
        look_logged(Ctx(ctx), &wake.res);
    })
}

fn look_logged(ctx: Ctx, res: &Resource) {
    if let Err(e) = look(ctx, res) {
        ctx.log_warning(&format!("persisted key: {e}"));
    }
}

/// Drops the holds of `res` past their deadline if its key has no expiry,
/// and wakes it again at the next deadline while it still has none. A
/// replica keeps the wake-up, so that once promoted it does the master's
/// work.
fn look(ctx: Ctx, res: &Resource) -> Result<(), Error> {
    let name = unsafe {
        rm!(RedisModule_CreateString)(ctx.0, res.key.as_ptr().cast::<c_char>(), res.key.len())
    };
    let result = look_key(ctx, res, name);
    unsafe { rm!(RedisModule_FreeString)(ctx.0, name) };
    result
}

fn look_key(ctx: Ctx, res: &Resource, name: *mut raw::RedisModuleString) -> Result<(), Error> {
    unsafe { rm!(RedisModule_SelectDb)(ctx.0, res.db) };
    let Some(earliest) = persisted_until(&LockKey::open_read(ctx, name)?)? else {
        return Ok(());
    };
    let now_ms = now_us() / 1000;
    if earliest >= now_ms {
        return arm(ctx, res, earliest);
    }
    if ctx.flags()?.is_replica() {
        // Its master drops the hold, and the drop gives the key its expiry
        // back; until then look again now and then, in case this replica
        // is promoted first.
        return arm(ctx, res, now_ms + REPLICA_RECHECK_MS);
    }
    if handoff::writes_paused() {
        return arm(ctx, res, now_ms + handoff::PAUSED_RETRY_MS as u64);
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
    match persisted_until(&LockKey::open_read(ctx, name)?)? {
        Some(next) => arm(ctx, res, next),
        None => Ok(()),
    }
}

/// The earliest finite hold deadline of a multi-hold key without expiry;
/// `None` for anything else (the key's expiry removes it).
fn persisted_until(key: &LockKey) -> Result<Option<u64>, Error> {
    let holds = match key.stored() {
        Ok(Some(Stored::Multi(h))) => h,
        Ok(_) | Err(Error::WrongType) => return Ok(None),
        Err(e) => return Err(e),
    };
    if key.deadline()?.is_some() {
        return Ok(None);
    }
    Ok(holds
        .holds
        .iter()
        .map(|h| h.deadline_ms)
        .filter(|d| *d < NEVER)
        .min())
}

/// Wakes `res` just after `at` (a hold is live up to its deadline), unless
/// a wake-up at or before then is already armed: that one re-arms.
fn arm(ctx: Ctx, res: &Resource, at: u64) -> Result<(), Error> {
    let mut armed = ARMED.lock().unwrap_or_else(|p| p.into_inner());
    let map = armed.get_or_insert_with(HashMap::new);
    if let Some(old) = map.get(res).copied() {
        if old.at <= at {
            return Ok(());
        }
        if let Some(data) = handoff::stop_timer(old.id).filter(|d| !d.is_null()) {
            drop(unsafe { Box::from_raw(data.cast::<WakeUp>()) });
        }
        map.remove(res);
    }
    let delay = at.saturating_sub(now_us() / 1000) + 1;
    let data = Box::into_raw(Box::new(WakeUp {
        res: res.clone(),
        at,
    }));
    let id = unsafe {
        rm!(RedisModule_CreateTimer)(
            ctx.0,
            i64::try_from(delay).unwrap_or(i64::MAX),
            Some(on_wake_timer),
            data.cast::<c_void>(),
        )
    };
    map.insert(res.clone(), Armed { id, at });
    Ok(())
}
