//! The longest time any lock on this node still has: what lowering the
//! restart quarantine's longest TTL must keep (`quarantine::lower_longest_ttl`).
//! A scan of every database, so O(keys): run by an operator, never by a
//! command that clients send in the course of locking.

use std::ffi::{c_int, c_void};

use redis_module::raw;

use crate::server::edge::api::{self, now_us, rm};
use crate::server::keyspace::value::{self, Stored};
use crate::server::state;
use dlock_core::Error;

/// Milliseconds left on the lock that ends last (0: no lock key). A lock
/// key's expiry is its lease's end (a plain lock) or its latest hold's (any
/// other kind). A lock that never ends (a plain lock an operator made
/// `PERSIST`ent) counts for nothing: no quarantine bounds it.
pub fn longest_left_ms(ctx: *mut raw::RedisModuleCtx) -> u64 {
    let (Some(selected), Some(select), Some(create), Some(scan), Some(destroy)) = (unsafe {
        (
            raw::RedisModule_GetSelectedDb,
            raw::RedisModule_SelectDb,
            raw::RedisModule_ScanCursorCreate,
            raw::RedisModule_Scan,
            raw::RedisModule_ScanCursorDestroy,
        )
    }) else {
        return 0;
    };
    let before = unsafe { selected(ctx) };
    let mut longest = 0u64;
    let data = std::ptr::addr_of_mut!(longest).cast::<c_void>();
    // Every database there is: selecting one past the last fails.
    let mut db = 0;
    while unsafe { select(ctx, db) } == api::OK {
        let cursor = unsafe { create() };
        while unsafe { scan(ctx, cursor, Some(on_key), data) } != 0 {}
        unsafe { destroy(cursor) };
        db += 1;
    }
    unsafe { select(ctx, before) };
    longest
}

extern "C" fn on_key(
    ctx: *mut raw::RedisModuleCtx,
    name: *mut raw::RedisModuleString,
    key: *mut raw::RedisModuleKey,
    data: *mut c_void,
) {
    crate::server::edge::ffi::guard("live ttl scan", (), || {
        // A key that cannot be read counts for nothing.
        let _ = visit(ctx, name, key, unsafe { &mut *data.cast::<u64>() });
    })
}

fn visit(
    ctx: *mut raw::RedisModuleCtx,
    name: *mut raw::RedisModuleString,
    key: *mut raw::RedisModuleKey,
    longest: &mut u64,
) -> Result<(), Error> {
    // The server may hand over no open key; then it is opened here.
    let opened = if key.is_null() {
        unsafe { rm!(RedisModule_OpenKey)(ctx, name, raw::REDISMODULE_READ as c_int) }
    } else {
        key
    };
    if opened.is_null() {
        return Ok(());
    }
    let left = left_ms(opened);
    if key.is_null() {
        unsafe { rm!(RedisModule_CloseKey)(opened) };
    }
    *longest = (*longest).max(left?);
    Ok(())
}

/// The time a lock key still has: its expiry, or for holds with their own
/// deadlines the latest of them if that is later (a key an operator made
/// `PERSIST`ent, or restored without a TTL, keeps its holds' deadlines).
fn left_ms(key: *mut raw::RedisModuleKey) -> Result<u64, Error> {
    if unsafe { rm!(RedisModule_ModuleTypeGetType)(key) } != state::lock_type() {
        return Ok(0);
    }
    let expiry = u64::try_from(unsafe { rm!(RedisModule_GetExpire)(key) }).unwrap_or(0);
    let value = unsafe { rm!(RedisModule_ModuleTypeGetValue)(key) };
    let holds_end = match unsafe { value::view(value) } {
        Some(Stored::Multi(holds)) => holds.latest_finite_ms().unwrap_or(0),
        _ => 0,
    };
    Ok(expiry.max(holds_end.saturating_sub(now_us() / 1000)))
}
