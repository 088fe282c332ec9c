//! The keyspace events dlock listens to: `expired` and `evicted` (a lock
//! may have ended that way), and `persist` (a resource with several holds
//! then needs the master to drop its holds: `persisted`). `persist` comes
//! only with the generic class (`del`, `expire`, `rename` ...), so every
//! generic event calls us: the server builds a context for each (measured
//! on 7.0: about 75 ns per `EXPIRE`), and we compare the event name. Other
//! classes (`set`, list, hash ... events) never call us.

use std::ffi::{c_char, c_int, CStr};

use redis_module::raw;

use super::api::{self, rm, Ctx};
use super::ffi::guard;
use super::{eviction, persisted, stats};
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
        let result = if kind & raw::REDISMODULE_NOTIFY_GENERIC != 0 {
            if !event.is_null() && unsafe { CStr::from_ptr(event) } == c"persist" {
                on_persist(c, key)
            } else {
                Ok(())
            }
        } else if kind & raw::REDISMODULE_NOTIFY_EVICTED != 0 {
            eviction::on_evicted(c, key)
        } else if kind & raw::REDISMODULE_NOTIFY_EXPIRED != 0 {
            on_expired(c, key)
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

/// Any key may have been made persistent: `persisted` looks at it from a
/// timer (no writes here).
fn on_persist(c: Ctx, key: *mut raw::RedisModuleString) -> Result<(), Error> {
    let db = unsafe { rm!(RedisModule_GetSelectedDb)(c.0) };
    persisted::on_persist(db, api::bytes(key)?);
    Ok(())
}
