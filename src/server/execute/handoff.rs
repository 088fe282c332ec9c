//! Direct handoff: when a lock with waiters becomes free, the head waiter
//! gets it at once, inside the command or callback that freed it.
//!
//! The rule this file keeps: no command can see or obtain a resource as free
//! while it has live waiters. RELEASE hands over in place. Expiry, DEL,
//! eviction and FLUSHALL/SWAPDB free the key where we cannot write (inside
//! the server's delete path), so the handoff is deferred to a timer, and any
//! ACQUIRE or INFO that arrives first completes it before answering.

use std::ffi::c_char;

use redis_module::raw;

use crate::server::edge::api::{rm, Ctx};
use crate::server::execute::inputs::{self, Inputs};
use crate::server::execute::step;
use crate::server::jobs::{self, Job, PAUSED_RETRY_MS};
use crate::server::keyspace::keys::LockKey;
use crate::server::persistence::effects;
use crate::server::waiting::blocking::{self, Resource};
use crate::server::{notify::stats, quarantine, state};
use dlock_core::plan::plain::{Handoff, Reads, Route};
use dlock_core::resource::lease::LeaseRef;
use dlock_core::Error;

/// Serves the queue of `res`, a plain lock with a plain queue, whose `key`
/// is free or holds a lease being released: opens the queue, decides the
/// handoff (`dlock_core::plan::plain::handoff`) and carries it out. Returns
/// whether anyone got the lock. Any other resource is served by `step`.
pub fn serve_queue(
    ctx: Ctx,
    key: &mut LockKey,
    name: *mut raw::RedisModuleString,
    res: &Resource,
) -> Result<bool, Error> {
    if blocking::plain_head(res).is_none() {
        return Ok(false);
    }
    let inputs = Inputs::serving(ctx, Some(res));
    let handoff = state::with_clock(|clock| dlock_core::plan::plain::handoff(&inputs, clock))?;
    carry_out(ctx, key, name, res, handoff, inputs.now_us())
}

/// Carries out a decided handoff of `res` at `now_us`: the grant to its
/// head waiter (and every queued entry with the same token), stored in
/// `key`, which is free or holds the lease being released; or the wake-up
/// at an evicted lease's end; or the waiters sent away from a slot this
/// node may not grant. Returns whether anyone got the lock.
pub fn carry_out(
    ctx: Ctx,
    key: &mut LockKey,
    name: *mut raw::RedisModuleString,
    res: &Resource,
    handoff: Handoff,
    now_us: u64,
) -> Result<bool, Error> {
    let fence = match handoff {
        Handoff::Grant { fence } => fence,
        Handoff::Quarantined => return Ok(false),
        Handoff::HeldUntil(until) => {
            blocking::arm_expiry(res, until)?;
            return Ok(false);
        }
        Handoff::SlotMoved => {
            blocking::fail(Some(res), Error::SlotMoved);
            return Ok(false);
        }
    };
    let Some((token, ttl_ms)) = blocking::grant_head(res, fence) else {
        return Ok(false);
    };
    let deadline = now_us / 1000 + ttl_ms;
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
    blocking::arm_expiry(res, deadline)?;
    Ok(true)
}

/// Re-evaluates `res` from the deferred jobs, logging a failure.
pub fn settle_logged(ctx: Ctx, res: &Resource) {
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
    if jobs::writes_paused() {
        jobs::push_after(Job::Settle(res.clone()), PAUSED_RETRY_MS);
        return Ok(());
    }
    unsafe { rm!(RedisModule_SelectDb)(ctx.0, res.db) };
    let name = unsafe {
        rm!(RedisModule_CreateString)(ctx.0, res.key.as_ptr().cast::<c_char>(), res.key.len())
    };
    let result = settle_key(ctx, name, res);
    unsafe { rm!(RedisModule_FreeString)(ctx.0, name) };
    result
}

fn settle_key(ctx: Ctx, name: *mut raw::RedisModuleString, res: &Resource) -> Result<(), Error> {
    let mut key = LockKey::open_write(ctx, name)?;
    if inputs::route_key(&key, Some(res), true) == Route::Step {
        drop(key);
        return step::settle(ctx, res);
    }
    match key.lease() {
        Ok(Some(_)) => match key.deadline()? {
            Some(deadline) => blocking::arm_expiry(res, deadline),
            // No TTL (an admin's PERSIST): wait for a release or a DEL.
            None => Ok(()),
        },
        // A MIGRATE may have taken the key: the handoff refuses a slot this
        // node no longer serves stably, and the waiters follow the redirect.
        Ok(None) => serve_queue(ctx, &mut key, name, res).map(|_| ()),
        Err(Error::WrongType) => {
            blocking::fail(Some(res), Error::WrongType);
            Ok(())
        }
        Err(e) => Err(e),
    }
}
