//! The keyspace events dlock listens to, and only those: `expired` and
//! `evicted` (a lock may have ended that way) and the generic class, for
//! `restore` (a lock may have arrived by RESTORE or MIGRATE). String, list,
//! hash ... writes never call us.

use std::ffi::{c_char, c_int, CStr};

use redis_module::raw;

use super::api::{self, rm, Ctx};
use super::ffi::guard;
use super::{eviction, persistence, stats};
use crate::lock::Error;

pub fn subscribe(ctx: Ctx) -> Result<(), Error> {
    let subscribe = rm!(RedisModule_SubscribeToKeyspaceEvents);
    let types = raw::REDISMODULE_NOTIFY_EVICTED
        | raw::REDISMODULE_NOTIFY_EXPIRED
        | raw::REDISMODULE_NOTIFY_GENERIC;
    if unsafe { subscribe(ctx.0, types, Some(on_event)) } != api::OK {
        return Err(Error::Internal("keyspace event subscription failed"));
    }
    Ok(())
}

extern "C" fn on_event(
    ctx: *mut raw::RedisModuleCtx,
    kind: c_int,
    event: *const c_char,
    key: *mut raw::RedisModuleString,
) -> c_int {
    guard("keyspace event", api::OK, || {
        let c = Ctx(ctx);
        let result = if kind & raw::REDISMODULE_NOTIFY_EVICTED != 0 {
            eviction::on_evicted(c, key)
        } else if kind & raw::REDISMODULE_NOTIFY_EXPIRED != 0 {
            on_expired(c, key)
        } else if !event.is_null() && unsafe { CStr::from_ptr(event) } == c"restore" {
            persistence::on_restored(c, key)
        } else {
            Ok(())
        };
        if let Err(e) = result {
            c.log_warning(&format!("keyspace event: {e}"));
        }
        api::OK
    })
}

fn on_expired(c: Ctx, key: *mut raw::RedisModuleString) -> Result<(), Error> {
    if eviction::was_lock(c, key)? {
        stats::EXPIRED.add();
        stats::notify(c, c"dlock.expired", key);
    }
    Ok(())
}
