//! A guard per multi-hold key: one timer that makes sure the key goes with
//! its last hold even when it has no expiry to remove it.
//!
//! The module keeps a multi-hold key's expiry at its latest hold deadline,
//! so normally the server's own expiry ends it. An admin's `PERSIST` (or a
//! longer `PEXPIRE`), a `RESTORE` with TTL 0, or a load of such a key leaves
//! it without that expiry, and no keyspace event tells us about the first
//! two without making every core `DEL`/`EXPIRE` call into the module. So
//! every write of a multi-hold value (`put_holds`, a replica's in-place hold
//! effect), every load of one and every `COPY` of one makes sure a timer is
//! armed by the key's latest finite hold deadline + 1 ms. O(1) per write: an
//! armed timer at or before that time stays (it re-arms when it fires);
//! only a latest deadline that moved earlier re-arms. The guard goes when
//! the key's value leaves (the type's unlink callback), so a key that ends
//! by its expiry or a release costs one timer set and stopped.
//!
//! When a guard's timer fires it queues a `Job::CheckHolds` for the key;
//! the job (`hold_checks`) runs in a turn of its own and opens the key
//! (which expires a due key). A key that still has its expiry at or before its latest hold
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
use std::ffi::c_void;
use std::sync::Mutex;

use redis_module::raw;

use crate::server::edge::api::{self, now_us, Ctx};
use crate::server::edge::ffi::guard;
use crate::server::jobs::{self, Job};
use crate::server::keyspace::keys::LockKey;
use crate::server::keyspace::value::Stored;
use crate::server::sessions;
use dlock_core::resource::holds::{Holds, NEVER};
use dlock_core::sessions::Fate;
use dlock_core::Error;

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

/// A multi-hold value was decoded (dataset load, `RESTORE`). The key is
/// looked at from a job: `RESTORE REPLACE` deletes the old value (whose
/// unlink forgets its guard) after decoding the new one, and a value the
/// server refuses leaves a job that finds nothing.
pub fn watch_loaded(rdb: *mut raw::RedisModuleIO, holds: &Holds) {
    if latest_finite(holds).is_none() {
        return;
    }
    if let Some((db, key)) = api::key_of_io(rdb) {
        jobs::push(Job::CheckHolds { db, key });
    }
}

/// A multi-hold value is being copied (`COPY`): its copy is looked at from
/// a job, once it is in the keyspace.
pub fn watch_copy(ctx: *mut raw::RedisModuleKeyOptCtx) {
    let (Some(name_of), Some(db_of)) =
        (unsafe { raw::RedisModule_GetToKeyNameFromOptCtx }, unsafe {
            raw::RedisModule_GetToDbIdFromOptCtx
        })
    else {
        return;
    };
    let Ok(key) = api::bytes(unsafe { name_of(ctx) }) else {
        return;
    };
    jobs::push(Job::CheckHolds {
        db: unsafe { db_of(ctx) },
        key: key.into(),
    });
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

/// SWAPDB exchanged databases `a` and `b`: the guards (and their queued
/// checks) follow their keys.
pub fn after_swap(a: i32, b: i32) {
    jobs::for_each_mut(|job| {
        if let Job::CheckHolds { db, .. } = job {
            if *db == a {
                *db = b;
            } else if *db == b {
                *db = a;
            }
        }
    });
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
        NEVER => holds.latest_finite_ms(),
        latest => Some(latest),
    }
}

/// Makes sure a guard fires for `key` in `db` by `at` + 1 ms: a hold is
/// live up to its deadline, and a key expires strictly after its expiry.
pub fn arm(db: i32, key: &[u8], at: u64) {
    let mut map = ARMED.lock().unwrap_or_else(|p| p.into_inner());
    let keys = map.get_or_insert_with(HashMap::new).entry(db).or_default();
    let old = match keys.get(key) {
        Some(armed) if armed.at <= at => return,
        Some(_) => keys.remove(key),
        None => None,
    };
    let delay = at.saturating_sub(now_us() / 1000) + 1;
    let target = Box::into_raw(Box::new(Target {
        db,
        key: key.into(),
    }));
    let delay = i64::try_from(delay).unwrap_or(i64::MAX);
    let Some(id) = jobs::arm_timer_with(delay, on_timer, target.cast::<c_void>()) else {
        drop(unsafe { Box::from_raw(target) });
        return;
    };
    keys.insert(key.into(), Armed { id, at, target });
    drop(map);
    if let Some(old) = old {
        stop(&old);
    }
}

fn stop(armed: &Armed) {
    if jobs::stop_timer(armed.id).is_some() {
        drop(unsafe { Box::from_raw(armed.target) });
    }
}

extern "C" fn on_timer(_ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    guard("hold guard", (), || {
        if data.is_null() {
            return;
        }
        let target = unsafe { Box::from_raw(data.cast::<Target>()) };
        let mut map = ARMED.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(keys) = map.as_mut().and_then(|m| m.get_mut(&target.db)) {
            if keys
                .get(&target.key)
                .is_some_and(|a| std::ptr::eq(a.target, data.cast::<Target>()))
            {
                keys.remove(&target.key);
            }
        }
        drop(map);
        let Target { db, key } = *target;
        jobs::push(Job::CheckHolds { db, key });
    })
}

/// What the guard of a key found.
pub enum Found {
    /// Gone, or not a multi-hold value: nothing to guard.
    Nothing,
    /// Wake again just after this time.
    WakeAt(u64),
    /// Holds past their deadline stay in a key that no expiry removes.
    Dead,
}

pub fn find(key: &LockKey, now_ms: u64) -> Result<Found, Error> {
    let holds = match key.stored() {
        Ok(Some(Stored::Multi(h))) => h,
        Ok(_) | Err(Error::WrongType) => return Ok(Found::Nothing),
        Err(e) => return Err(e),
    };
    // A hold of a session that ended: its release (or lock-delay) is due.
    if holds.bound().any(|(t, s)| {
        sessions::fate(s, now_ms) != Fate::Live
            && !(cfg!(feature = "planted-session-leaves-hold") && sessions::planted_leaked(t))
    }) {
        return Ok(Found::Dead);
    }
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
    if holds.any_dead(now_ms) {
        return Ok(Found::Dead);
    }
    Ok(holds
        .earliest_deadline_ms()
        .filter(|d| *d < NEVER)
        .map_or(Found::Nothing, Found::WakeAt))
}
