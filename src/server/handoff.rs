//! Direct handoff: when a lock with waiters becomes free, the head waiter
//! gets it at once, inside the command or callback that freed it.
//!
//! The rule this file keeps: no command can see or obtain a resource as free
//! while it has live waiters. RELEASE hands over in place. Expiry, DEL,
//! eviction and FLUSHALL/SWAPDB free the key where we cannot write (inside
//! the server's delete path), so the handoff is deferred to a timer, and any
//! ACQUIRE or INFO that arrives first completes it before answering.

use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::Mutex;

use redis_module::raw;

use super::api::{self, now_us, rm, Ctx};
use super::blocking::{self, Resource};
use super::effects;
use super::ffi::guard;
use super::keys::LockKey;
use super::{quarantine, state, stats};
use crate::lock::lease::LeaseRef;
use crate::lock::Error;

/// When the server must not produce writes (`CLIENT PAUSE WRITE`, a manual
/// failover in progress), deferred handoffs retry after this long.
pub const PAUSED_RETRY_MS: i64 = 10;

/// A context for arming timers from callbacks that have none (the type's
/// unlink callback). Timers only use it to know which module they belong to.
static TIMER_CTX: AtomicPtr<raw::RedisModuleCtx> = AtomicPtr::new(std::ptr::null_mut());

/// Resources freed where we could not write; settled by the next timer tick.
static DEFERRED: Mutex<Vec<Resource>> = Mutex::new(Vec::new());
static DEFERRED_ARMED: AtomicBool = AtomicBool::new(false);

pub fn init(ctx: Ctx) -> Result<(), Error> {
    let detached = unsafe { rm!(RedisModule_GetDetachedThreadSafeContext)(ctx.0) };
    TIMER_CTX.store(detached, Ordering::Relaxed);
    Ok(())
}

/// The detached context timers are armed with.
pub fn timer_ctx() -> *mut raw::RedisModuleCtx {
    TIMER_CTX.load(Ordering::Relaxed)
}

/// The resource behind `name` in the caller's database, if anyone waits on it.
pub fn waiting_resource(
    ctx: Ctx,
    name: *mut raw::RedisModuleString,
) -> Result<Option<Resource>, Error> {
    if !blocking::anyone_waiting() {
        return Ok(None);
    }
    let res = resource(ctx, name)?;
    Ok((blocking::waiters_on(&res) > 0).then_some(res))
}

pub fn resource(ctx: Ctx, name: *mut raw::RedisModuleString) -> Result<Resource, Error> {
    let db = unsafe { rm!(RedisModule_GetSelectedDb)(ctx.0) };
    Ok(Resource {
        db,
        key: api::bytes(name)?.into(),
    })
}

/// Whether the server must hold back writes that replicas would see.
pub fn writes_paused() -> bool {
    unsafe { raw::RedisModule_AvoidReplicaTraffic }.is_some_and(|f| unsafe { f() } != 0)
}

/// Grants `res` to its head waiter (and every queued entry with the same
/// token), storing the lease in `key`, which is free or holds the lease being
/// released. Returns whether anyone got it.
pub fn grant_next(
    ctx: Ctx,
    key: &mut LockKey,
    name: *mut raw::RedisModuleString,
    res: &Resource,
) -> Result<bool, Error> {
    if key.is_multi()? || !blocking::queue_is_plain(res) {
        // Shared runs, permits, owners: the holds model decides.
        return super::holds::settle(ctx, key, name, res);
    }
    match prepare_grant(ctx, res)? {
        Some(next) => commit_grant(ctx, key, name, res, next),
        None => Ok(false),
    }
}

/// A handoff that may go ahead: its fence is already drawn.
pub struct NextGrant {
    fence: u64,
    now_us: u64,
}

/// Whether `res` may be handed to a waiter now, and under which fence. The
/// only thing it changes on success is the fence clock, so a caller that
/// fails before `commit_grant` has changed nothing a client can see; on
/// `Err` nothing at all has changed.
pub fn prepare_grant(ctx: Ctx, res: &Resource) -> Result<Option<NextGrant>, Error> {
    let now = now_us();
    if !grant_due(ctx, res, now)? {
        return Ok(None);
    }
    let fence = state::with_clock(|clock| clock.next(now))?;
    Ok(Some(NextGrant { fence, now_us: now }))
}

/// Whether `res`, free, is to be handed to a waiter at `now` (then with a
/// fresh fence). Draws nothing.
pub fn grant_due(ctx: Ctx, res: &Resource, now: u64) -> Result<bool, Error> {
    if quarantine::ms_left() > 0 {
        // Waiters stay queued; the quarantine's end grants them in order.
        return Ok(false);
    }
    let now_ms = now / 1000;
    if let Some(until) = blocking::held_until(res).filter(|u| *u >= now_ms) {
        // An evicted lease is still believed held by its owner.
        arm_expiry(ctx, res, until)?;
        return Ok(false);
    }
    if !blocking::has_live_waiter(res, now_ms) {
        blocking::time_out_given_up(res, now_ms);
        return Ok(false);
    }
    if !super::cluster::may_grant(ctx, &res.key)? {
        // The slot is moving or gone: a grant here would split ownership.
        // The waiters retry and follow the redirect.
        blocking::fail(Some(res), Error::SlotMoved);
        return Ok(false);
    }
    Ok(true)
}

/// Hands `res` to its head waiter under the fence `prepare_grant` drew.
pub fn commit_grant(
    ctx: Ctx,
    key: &mut LockKey,
    name: *mut raw::RedisModuleString,
    res: &Resource,
    next: NextGrant,
) -> Result<bool, Error> {
    // A waiter whose WAIT ran out is never chosen: its reply could not be
    // told apart from its timeout.
    blocking::time_out_given_up(res, next.now_us / 1000);
    let Some((token, ttl_ms)) = blocking::grant_head(res, next.fence) else {
        return Ok(false);
    };
    let fence = next.fence;
    let deadline = next.now_us / 1000 + ttl_ms;
    let lease = LeaseRef::new(&token, fence);
    match key.lease()? {
        Some(_) => key.replace(lease)?,
        None => key.store(lease)?,
    }
    key.set_deadline(deadline)?;
    quarantine::note_ttl(ttl_ms);
    effects::granted(ctx, name, &token, fence, deadline)?;
    key.signal_modified()?;
    stats::GRANTS.add();
    stats::HANDOFFS.add();
    stats::notify(ctx, c"dlock.handoff", name);
    arm_expiry(ctx, res, deadline)?;
    Ok(true)
}

/// Wakes `res` just after `deadline_ms` so a lease that ends with waiters
/// queued is handed over within milliseconds, without waiting for Redis's
/// lazy or sampled active expiry. (A key expires strictly after its deadline.)
pub fn arm_expiry(ctx: Ctx, res: &Resource, deadline_ms: u64) -> Result<(), Error> {
    if blocking::waiters_on(res) == 0 {
        return Ok(());
    }
    blocking::note_deadline(res, deadline_ms);
    if !blocking::needs_timer(res, deadline_ms) {
        return Ok(());
    }
    let delay = deadline_ms.saturating_sub(now_us() / 1000) + 1;
    let data = Box::into_raw(Box::new(WakeUp {
        res: res.clone(),
        at: deadline_ms,
        id: 0,
    }));
    let create = rm!(RedisModule_CreateTimer);
    let id = unsafe {
        create(
            ctx.0,
            i64::try_from(delay).unwrap_or(i64::MAX),
            Some(on_expiry_timer),
            data.cast::<c_void>(),
        )
    };
    // SAFETY: the timer cannot fire before we return to the event loop.
    unsafe { (*data).id = id };
    blocking::add_timer(res, id);
    Ok(())
}

/// A wake-up timer's data: which resource, for which deadline, and its id.
struct WakeUp {
    res: Resource,
    at: u64,
    id: u64,
}

extern "C" fn on_expiry_timer(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    guard("expiry timer", (), || {
        if data.is_null() {
            return;
        }
        let wake = *unsafe { Box::from_raw(data.cast::<WakeUp>()) };
        blocking::timer_fired(&wake.res, wake.at, wake.id);
        settle_logged(Ctx(ctx), &wake.res);
        blocking::hand_over();
    })
}

/// Stops wake-up timers whose queue emptied, freeing their data.
pub fn stop_wake_timers(ids: &[u64]) {
    for id in ids {
        if let Some(data) = stop_timer(*id).filter(|d| !d.is_null()) {
            drop(unsafe { Box::from_raw(data.cast::<WakeUp>()) });
        }
    }
}

/// Stops a timer that has not fired; returns its data for the caller to
/// free. `None` if it already fired (or was stopped).
pub fn stop_timer(id: u64) -> Option<*mut c_void> {
    let ctx = timer_ctx();
    let stop = unsafe { raw::RedisModule_StopTimer }?;
    if ctx.is_null() {
        return None;
    }
    let mut data: *mut c_void = std::ptr::null_mut();
    (unsafe { stop(ctx, id, &mut data) } == api::OK).then_some(data)
}

/// Schedules a settle of `res` from a place that cannot write.
pub fn defer(res: Resource) {
    DEFERRED.lock().unwrap_or_else(|p| p.into_inner()).push(res);
    arm_deferred(0);
}

/// Arms a timer from a place without a context of its own.
pub fn arm_timer(
    delay_ms: i64,
    callback: extern "C" fn(*mut raw::RedisModuleCtx, *mut c_void),
) -> bool {
    let ctx = TIMER_CTX.load(Ordering::Relaxed);
    match unsafe { raw::RedisModule_CreateTimer } {
        Some(create) if !ctx.is_null() => {
            unsafe { create(ctx, delay_ms, Some(callback), std::ptr::null_mut()) };
            true
        }
        _ => false,
    }
}

fn arm_deferred(delay_ms: i64) {
    if DEFERRED_ARMED.swap(true, Ordering::Relaxed) {
        return;
    }
    if !arm_timer(delay_ms, on_deferred_timer) {
        DEFERRED_ARMED.store(false, Ordering::Relaxed);
    }
}

extern "C" fn on_deferred_timer(ctx: *mut raw::RedisModuleCtx, _data: *mut c_void) {
    guard("deferred handoff", (), || {
        DEFERRED_ARMED.store(false, Ordering::Relaxed);
        let mut list = std::mem::take(&mut *DEFERRED.lock().unwrap_or_else(|p| p.into_inner()));
        list.sort_by(|a, b| (a.db, &a.key).cmp(&(b.db, &b.key)));
        list.dedup();
        for res in list {
            settle_logged(Ctx(ctx), &res);
        }
        blocking::hand_over();
    })
}

fn settle_logged(ctx: Ctx, res: &Resource) {
    if let Err(e) = settle(ctx, res) {
        ctx.log_warning(&format!("handoff failed: {e}"));
    }
}

/// Re-evaluates a resource with waiters from a timer: hand it over if free,
/// wait for the current lease otherwise, and fail the waiters if the key now
/// holds something that is not a lock.
fn settle(ctx: Ctx, res: &Resource) -> Result<(), Error> {
    if blocking::waiters_on(res) == 0 {
        return Ok(());
    }
    if ctx.flags()?.is_replica() {
        blocking::fail(Some(res), Error::Demoted);
        return Ok(());
    }
    if writes_paused() {
        DEFERRED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(res.clone());
        arm_deferred(PAUSED_RETRY_MS);
        return Ok(());
    }
    unsafe { rm!(RedisModule_SelectDb)(ctx.0, res.db) };
    if blocking::has_sets(res) {
        return super::sets::settle(ctx, res);
    }
    let name = unsafe {
        rm!(RedisModule_CreateString)(ctx.0, res.key.as_ptr().cast::<c_char>(), res.key.len())
    };
    let result = settle_key(ctx, name, res);
    unsafe { rm!(RedisModule_FreeString)(ctx.0, name) };
    result
}

fn settle_key(ctx: Ctx, name: *mut raw::RedisModuleString, res: &Resource) -> Result<(), Error> {
    let mut key = LockKey::open_write(ctx, name)?;
    if key.is_multi().unwrap_or(false) {
        return super::holds::settle(ctx, &mut key, name, res).map(|_| ());
    }
    match key.lease() {
        Ok(Some(_)) => match key.deadline()? {
            Some(deadline) => arm_expiry(ctx, res, deadline),
            // No TTL (an admin's PERSIST): wait for a release or a DEL.
            None => Ok(()),
        },
        // A MIGRATE may have taken the key: `grant_next` refuses a slot this
        // node no longer serves stably, and the waiters follow the redirect.
        Ok(None) => grant_next(ctx, &mut key, name, res).map(|_| ()),
        Err(Error::WrongType) => {
            blocking::fail(Some(res), Error::WrongType);
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// The type's unlink callback: the lock value is leaving its key (DEL,
/// UNLINK, expiry, eviction, overwrite, RENAME away). No writes are allowed
/// here, so the handoff is deferred.
pub extern "C" fn on_unlink(optctx: *mut raw::RedisModuleKeyOptCtx, value: *const c_void) {
    guard("unlink", (), || {
        // A restored lock may leave before its fence was confirmed.
        let stored = unsafe { super::value::view(value) };
        if let Some(stored) = &stored {
            state::observe_fence(stored.max_fence());
        }
        let (Some(db_of), Some(name_of)) =
            (unsafe { raw::RedisModule_GetDbIdFromOptCtx }, unsafe {
                raw::RedisModule_GetKeyNameFromOptCtx
            })
        else {
            return;
        };
        let db = unsafe { db_of(optctx) };
        let Ok(key) = api::bytes(unsafe { name_of(optctx) }) else {
            return;
        };
        super::eviction::note_unlinked(db, key);
        if matches!(stored, Some(super::value::Stored::Multi(_))) {
            super::hold_guards::forget(db, key);
        }
        if !blocking::anyone_waiting() {
            return;
        }
        let res = Resource {
            db,
            key: key.into(),
        };
        if blocking::waiters_on(&res) > 0 {
            defer(res);
        }
    })
}
