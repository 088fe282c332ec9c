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

use crate::server::edge::api::{now_us, rm, Ctx};
use crate::server::execute::step;
use crate::server::jobs::{self, Job, PAUSED_RETRY_MS};
use crate::server::keyspace::keys::LockKey;
use crate::server::persistence::effects;
use crate::server::waiting::blocking::{self, Resource};
use crate::server::{notify::stats, quarantine, state};
use dlock_core::plan::plain::{self, Handoff};
use dlock_core::resource::lease::LeaseRef;
use dlock_core::Error;

/// Grants `res`, a plain lock with a plain queue, to its head waiter (and
/// every queued entry with the same token), storing the lease in `key`,
/// which is free or holds the lease being released. Returns whether anyone
/// got it. Any other resource is served by `step`.
pub fn grant_next(
    ctx: Ctx,
    key: &mut LockKey,
    name: *mut raw::RedisModuleString,
    res: &Resource,
) -> Result<bool, Error> {
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
    let now_ms = now / 1000;
    let due = plain::handoff(
        quarantine::ms_left(),
        || blocking::held_until(res),
        || blocking::has_live_waiter(res),
        now_ms,
    );
    match due {
        Handoff::Now => {}
        Handoff::Quarantined => return Ok(false),
        Handoff::HeldUntil(until) => {
            blocking::arm_expiry(res, until)?;
            return Ok(false);
        }
        Handoff::GivenUp => {
            blocking::time_out_given_up(res);
            return Ok(false);
        }
    }
    if !crate::server::edge::cluster::may_grant(ctx, &res.key)? {
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
    blocking::time_out_given_up(res);
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
    if step::decides(&key, Some(res)).unwrap_or(false) {
        drop(key);
        return step::settle(ctx, res);
    }
    match key.lease() {
        Ok(Some(_)) => match key.deadline()? {
            Some(deadline) => blocking::arm_expiry(res, deadline),
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
