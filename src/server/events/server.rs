//! Server events: flushes and swaps empty or replace keys without calling
//! the type's unlink callback; shutdowns, the end of loading, configuration
//! changes, master-link changes and promotions feed the restart quarantine;
//! an AOF rewrite's fork gets the quarantine metadata into the new AOF;
//! the cron re-arms timers a step of the wall clock made late.
//!
//! A demotion to replica needs no handler: Redis 7.0 unblocks every blocked
//! client itself (`-UNBLOCKED ... master -> replica?`) before modules hear of
//! the role change, and the disconnect callback takes them out of the queues.

use std::ffi::c_void;

use redis_module::raw;

use crate::server::edge::api::{now_us, rm, Ctx};
use crate::server::edge::ffi::guard;
use crate::server::jobs::{self, Job};
use crate::server::waiting::blocking;
use crate::server::{
    execute::revoke, keyspace::hold_guards, keyspace::restored, notify::watchers,
    persistence::data_type, quarantine, sessions, state,
};
use dlock_core::Error;

pub fn subscribe(ctx: Ctx) -> Result<(), Error> {
    let subscribe = rm!(RedisModule_SubscribeToServerEvent);
    for id in [
        raw::REDISMODULE_EVENT_FLUSHDB,
        raw::REDISMODULE_EVENT_SWAPDB,
        raw::REDISMODULE_EVENT_SHUTDOWN,
        raw::REDISMODULE_EVENT_CONFIG,
        raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
        raw::REDISMODULE_EVENT_MASTER_LINK_CHANGE,
        raw::REDISMODULE_EVENT_LOADING,
        raw::REDISMODULE_EVENT_FORK_CHILD,
        raw::REDISMODULE_EVENT_CRON_LOOP,
    ] {
        let event = raw::RedisModuleEvent { id, dataver: 1 };
        if unsafe { subscribe(ctx.0, event, Some(on_event)) } != crate::server::edge::api::OK {
            return Err(Error::Internal("server event subscription failed"));
        }
    }
    Ok(())
}

extern "C" fn on_event(
    ctx: *mut raw::RedisModuleCtx,
    event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    guard("server event", (), || match event.id {
        raw::REDISMODULE_EVENT_FLUSHDB if subevent == raw::REDISMODULE_SUBEVENT_FLUSHDB_START => {
            let Some(info) = (unsafe { data.cast::<raw::RedisModuleFlushInfo>().as_ref() }) else {
                return;
            };
            restored::before_flush(Ctx(ctx), (info.dbnum >= 0).then_some(info.dbnum));
        }
        raw::REDISMODULE_EVENT_FLUSHDB if subevent == raw::REDISMODULE_SUBEVENT_FLUSHDB_END => {
            let Some(info) = (unsafe { data.cast::<raw::RedisModuleFlushInfo>().as_ref() }) else {
                return;
            };
            let db = (info.dbnum >= 0).then_some(info.dbnum);
            hold_guards::after_flush(db);
            sessions::flushed(db);
            watchers::changed_db(db);
            for res in blocking::resources(db) {
                jobs::push(Job::Settle(res));
            }
        }
        raw::REDISMODULE_EVENT_SWAPDB => {
            let Some(info) = (unsafe { data.cast::<raw::RedisModuleSwapDbInfo>().as_ref() }) else {
                return;
            };
            restored::after_swap(info.dbnum_first, info.dbnum_second);
            hold_guards::after_swap(info.dbnum_first, info.dbnum_second);
            sessions::swapped(info.dbnum_first, info.dbnum_second);
            revoke::after_swap(info.dbnum_first, info.dbnum_second);
            for db in [info.dbnum_first, info.dbnum_second] {
                watchers::changed_db(Some(db));
                for res in blocking::resources(Some(db)) {
                    jobs::push(Job::Settle(res));
                }
            }
        }
        raw::REDISMODULE_EVENT_SHUTDOWN => quarantine::on_shutdown(),
        raw::REDISMODULE_EVENT_LOADING if subevent == raw::REDISMODULE_SUBEVENT_LOADING_ENDED => {
            quarantine::on_loading_ended(Ctx(ctx));
            sessions::arm_expiry(now_us() / 1000);
            sessions::arm_ending();
        }
        // What is loaded (an RDB's aux data, an AOF's effects, a master's
        // data) replaces the sessions.
        raw::REDISMODULE_EVENT_LOADING => sessions::clear(),
        raw::REDISMODULE_EVENT_FORK_CHILD
            if subevent == raw::REDISMODULE_SUBEVENT_FORK_CHILD_BORN =>
        {
            data_type::on_fork_child_born()
        }
        raw::REDISMODULE_EVENT_CONFIG => quarantine::refresh_durability(Ctx(ctx)),
        raw::REDISMODULE_EVENT_MASTER_LINK_CHANGE => quarantine::on_master_link(
            Ctx(ctx),
            subevent == raw::REDISMODULE_SUBEVENT_MASTER_LINK_UP,
        ),
        // The server's cron runs on its monotonic clock, its module timers
        // on the wall clock: a timer late after a step back is fired here.
        raw::REDISMODULE_EVENT_CRON_LOOP => {
            jobs::rearm_late();
            blocking::rearm_late();
        }
        raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED => {
            let now_master = subevent == raw::REDISMODULE_EVENT_REPLROLECHANGED_NOW_MASTER;
            state::set_replica(!now_master);
            if now_master {
                quarantine::on_promotion(Ctx(ctx));
                sessions::arm_expiry(now_us() / 1000);
                sessions::arm_ending();
            }
        }
        _ => {}
    })
}
