//! Whether the link to the master was up: a lost link counts only once the
//! event loop has moved on, so a coordinated promotion is told from an
//! unplanned one.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use redis_module::raw;

use crate::server::edge::api::{self, Ctx};
use crate::server::edge::ffi::guard;

pub(super) static LINK_UP: AtomicBool = AtomicBool::new(false);
static LINK_GENERATION: AtomicU64 = AtomicU64::new(0);

/// A promotion with the link up (`REPLICAOF NO ONE`, `CLUSTER FAILOVER`)
/// also reports the link going down, just before the role change and in the
/// same call. So a lost link only counts once the event loop has moved on:
/// at the server's next before-sleep, which comes before it reads any
/// further command. (A zero-delay module timer is not enough: with other
/// module timers pending, the server may run them a millisecond later,
/// after a `REPLICAOF NO ONE` that a fast client sent on seeing the link
/// down, and the promotion would pass for a coordinated one.)
pub fn on_master_link(ctx: Ctx, up: bool) {
    let generation = LINK_GENERATION.fetch_add(1, Ordering::Relaxed) + 1;
    if up {
        LINK_UP.store(true, Ordering::Relaxed);
        return;
    }
    LOST_GENERATION.store(generation, Ordering::Relaxed);
    LOSS_PENDING.store(true, Ordering::Relaxed);
    if watch_before_sleep(ctx, Some(on_before_sleep)) {
        return;
    }
    // A server without the event-loop event: a zero-delay timer.
    LOSS_PENDING.store(false, Ordering::Relaxed);
    if let Some(create) = unsafe { raw::RedisModule_CreateTimer } {
        let data = generation as usize as *mut c_void;
        unsafe { create(ctx.0, 0, Some(on_link_lost), data) };
    }
}

/// The generation of the last link-down report, and whether it still waits
/// for a before-sleep.
static LOST_GENERATION: AtomicU64 = AtomicU64::new(0);
static LOSS_PENDING: AtomicBool = AtomicBool::new(false);

/// Subscribes `callback` to the server's event-loop event (`None`:
/// unsubscribes); whether the server has it.
fn watch_before_sleep(ctx: Ctx, callback: raw::RedisModuleEventCallback) -> bool {
    let Some(subscribe) = (unsafe { raw::RedisModule_SubscribeToServerEvent }) else {
        return false;
    };
    let event = raw::RedisModuleEvent {
        id: raw::REDISMODULE_EVENT_EVENTLOOP,
        dataver: 1,
    };
    unsafe { subscribe(ctx.0, event, callback) == api::OK }
}

extern "C" fn on_before_sleep(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    guard("master link", (), || {
        if subevent != raw::REDISMODULE_SUBEVENT_EVENTLOOP_BEFORE_SLEEP
            || !LOSS_PENDING.swap(false, Ordering::Relaxed)
        {
            return;
        }
        lost(LOST_GENERATION.load(Ordering::Relaxed));
        // Every event-loop turn calls us while subscribed. The server is
        // walking its listeners now, so the unsubscription waits for a
        // timer.
        if let Some(create) = unsafe { raw::RedisModule_CreateTimer } {
            unsafe { create(ctx, 0, Some(on_unwatch), std::ptr::null_mut()) };
        }
    })
}

extern "C" fn on_unwatch(ctx: *mut raw::RedisModuleCtx, _data: *mut c_void) {
    guard("master link", (), || {
        // A newer loss waiting for its before-sleep keeps the subscription.
        if !LOSS_PENDING.load(Ordering::Relaxed) {
            watch_before_sleep(Ctx(ctx), None);
        }
    })
}

/// The link loss of `generation` counts, unless the link changed since.
fn lost(generation: u64) {
    if LINK_GENERATION.load(Ordering::Relaxed) == generation {
        LINK_UP.store(false, Ordering::Relaxed);
    }
}

extern "C" fn on_link_lost(_ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    guard("master link", (), || lost(data as usize as u64))
}
