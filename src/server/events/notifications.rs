//! The keyspace events dlock listens to, and only those: `expired` and
//! `evicted` (a lock may have ended that way). Other events (`del`, `set`,
//! `expire` ...) never call us, so plain commands pay nothing for dlock.

use std::ffi::{c_char, c_int};

use redis_module::raw;

use crate::server::edge::api::{self, rm, Ctx};
use crate::server::edge::ffi::guard;
use crate::server::keyspace::eviction;
use crate::server::notify::{figures, stats};
use dlock_core::Error;

pub fn subscribe(ctx: Ctx) -> Result<(), Error> {
    let subscribe = rm!(RedisModule_SubscribeToKeyspaceEvents);
    let types = raw::REDISMODULE_NOTIFY_EVICTED | raw::REDISMODULE_NOTIFY_EXPIRED;
    if unsafe { subscribe(ctx.0, types, Some(on_event)) } != api::OK {
        return Err(Error::Internal("keyspace event subscription failed"));
    }
    Ok(())
}

extern "C" fn on_event(
    ctx: *mut raw::RedisModuleCtx,
    kind: c_int,
    _event: *const c_char,
    key: *mut raw::RedisModuleString,
) -> c_int {
    guard("keyspace event", api::OK, || {
        let c = Ctx(ctx);
        let result = if kind & raw::REDISMODULE_NOTIFY_EVICTED != 0 {
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
        figures::expired(c, key);
        stats::EXPIRED.add();
        stats::notify(c, c"dlock.expired", key);
    }
    Ok(())
}
