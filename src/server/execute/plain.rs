//! The plain lock's fast path carried out: each entry point opens the key
//! and its queue, lets `dlock_core::plan::plain` decide on the value read in
//! place, and carries the plan out (the handoff first, then the command's
//! own outcome).

use redis_module::raw;

use crate::server::edge::api::Ctx;
use crate::server::execute::handoff;
use crate::server::execute::inputs::{route, Inputs};
use crate::server::keyspace::keys::LockKey;
use crate::server::keyspace::value::Stored;
use crate::server::notify::{figures, stats};
use crate::server::persistence::effects;
use crate::server::waiting::blocking::{self, Resource};
use crate::server::{quarantine, state};
use dlock_core::plan::plain::{self, Acquire, Reads, Release, Route, View};
use dlock_core::queue::Wants;
use dlock_core::queue::{Priority, Rank};
use dlock_core::resource::lease::LeaseRef;
use dlock_core::stats::{End, Kind};
use dlock_core::{request::args, Error};

/// Which path took a command: the plain one (with its answer), or a step's
/// (the key as the caller found it, nothing changed).
pub enum Routed<T> {
    Plain(T),
    Step,
}

/// `DLOCK.ACQUIRE` on the plain path, if it is the plain path's
/// (`inputs::route`): `key` open for writing, `res` the
/// resource if anyone waits on it. Replies.
pub fn acquire(
    ctx: Ctx,
    mut key: LockKey,
    name: *mut raw::RedisModuleString,
    req: &args::Acquire<'_>,
    res: Option<Resource>,
    priority: Priority,
) -> Result<Routed<()>, Error> {
    let inputs = Inputs::of(ctx, res.as_ref(), req);
    let plan = {
        let stored = key.stored()?;
        if route(stored, res.as_ref(), req.is_plain()) == Route::Step {
            return Ok(Routed::Step);
        }
        let lease = plain_lease(stored);
        // Only a free lock looks at its queue: a held one is not handed over.
        let head = match (lease, &res) {
            (None, Some(res)) => blocking::plain_head(res),
            _ => None,
        };
        let head_rank = match (&head, &res) {
            (Some(_), Some(res)) => blocking::head_rank(res),
            _ => None,
        };
        let view = View {
            lease,
            head: head.as_deref(),
            head_rank,
        };
        let rank = Rank::arriving(priority.key);
        let own_wait = || {
            res.as_ref()
                .is_some_and(|r| blocking::position(r, req.token).is_some())
        };
        if plain::outranks_own_wait(&view, rank, own_wait) {
            return Ok(Routed::Step);
        }
        state::with_clock(|clock| plain::acquire(&view, &req.ask(), rank, &inputs, clock))?
    };
    if let (Some(h), Some(res)) = (plan.handoff, &res) {
        handoff::carry_out(ctx, &mut key, name, res, h, inputs.now_us())?;
    }
    let deadline = || inputs.now_us() / 1000 + req.ttl_ms;
    let (fence, deadline) = match plan.outcome {
        Acquire::Busy => {
            stats::CONTENDED.add();
            figures::contended(ctx, name, Kind::Lock);
            return ctx.reply_null().map(Routed::Plain);
        }
        Acquire::Wait => return wait(ctx, &key, name, req, res, priority).map(Routed::Plain),
        Acquire::Grant { fence } => {
            let deadline = deadline();
            key.store(LeaseRef::new(req.token, fence))?;
            key.set_deadline(deadline)?;
            quarantine::note_ttl(req.ttl_ms);
            effects::granted(ctx, name, req.token, fence, deadline)?;
            stats::GRANTS.add();
            figures::granted(Kind::Lock);
            (fence, deadline)
        }
        Acquire::Refresh { fence } => {
            // The owner now knows its fence even if the waiter it queued
            // as has left: that grant is no longer revoked.
            blocking::confirm(|| Resource::of(ctx, name), req.token)?;
            let deadline = deadline();
            key.set_deadline(deadline)?;
            quarantine::note_ttl(req.ttl_ms);
            effects::deadline_moved(ctx, name, deadline)?;
            stats::REFRESHES.add();
            (fence, deadline)
        }
    };
    key.signal_modified()?;
    stats::notify(ctx, c"dlock.acquired", name);
    if let Some(res) = &res {
        // A refresh may shorten the lease: wake the queue at the new end.
        blocking::arm_expiry(res, deadline)?;
    }
    ctx.reply_integer(fence as i64).map(Routed::Plain)
}

/// Parks the client (its `WAIT` decided by `plain::acquire`), and wakes the
/// queue when the current lease ends.
fn wait(
    ctx: Ctx,
    key: &LockKey,
    name: *mut raw::RedisModuleString,
    req: &args::Acquire,
    res: Option<Resource>,
    priority: Priority,
) -> Result<(), Error> {
    stats::CONTENDED.add();
    figures::contended(ctx, name, Kind::Lock);
    let res = match res {
        Some(res) => res,
        None => Resource::of(ctx, name)?,
    };
    let timeout = req.wait_ms.unwrap_or(0);
    let wants = Wants::of(&req.ask());
    let ttl_ms = req.ttl_ms;
    blocking::block(
        ctx,
        res.clone(),
        req.token,
        wants,
        ttl_ms,
        timeout,
        priority,
    )?;
    match key.deadline()? {
        Some(at) => blocking::arm_expiry(&res, at),
        None => Ok(()),
    }
}

/// `DLOCK.RELEASE` by `token` on the plain path, if it is the plain
/// path's; whether it held the lock.
pub fn release(
    ctx: Ctx,
    mut key: LockKey,
    name: *mut raw::RedisModuleString,
    token: &[u8],
    res: Option<Resource>,
) -> Result<Routed<bool>, Error> {
    let plan = {
        let stored = key.stored()?;
        if route(stored, res.as_ref(), true) == Route::Step {
            return Ok(Routed::Step);
        }
        let lease = plain_lease(stored);
        // Only a release that frees the lock looks at its queue.
        let head = match &res {
            Some(res) if plain::releases(lease, token) => blocking::plain_head(res),
            _ => None,
        };
        let view = View {
            lease,
            head: head.as_deref(),
            head_rank: None,
        };
        let inputs = Inputs::serving(ctx, res.as_ref());
        let plan = state::with_clock(|clock| plain::release(&view, token, &inputs, clock))?;
        (plan, lease.map_or(0, |l| l.fence()), inputs.now_us())
    };
    let (Release::Freed { handoff }, fence, now_us) = plan else {
        return Ok(Routed::Plain(false));
    };
    figures::hold_of_name_ended(ctx, name, Kind::Lock, fence, now_us, End::Released);
    // Subscribers see the release before the handoff it causes.
    stats::RELEASES.add();
    stats::notify(ctx, c"dlock.released", name);
    let handed_over = match (handoff, &res) {
        (Some(h), Some(res)) => handoff::carry_out(ctx, &mut key, name, res, h, now_us)?,
        _ => false,
    };
    if !handed_over {
        key.delete()?;
        effects::released(ctx, name)?;
        key.signal_modified()?;
    }
    Ok(Routed::Plain(true))
}

/// `DLOCK.EXTEND` by `token` on the plain path, if it is the plain
/// path's: its lease now ends `ttl_ms` after `now_us`; whether it held the
/// lock.
pub fn extend(
    ctx: Ctx,
    mut key: LockKey,
    name: *mut raw::RedisModuleString,
    token: &[u8],
    ttl_ms: u64,
    now_us: u64,
    res: Option<Resource>,
) -> Result<Routed<bool>, Error> {
    let stored = key.stored()?;
    if route(stored, res.as_ref(), true) == Route::Step {
        return Ok(Routed::Step);
    }
    if !plain::held_by(plain_lease(stored), token) {
        return Ok(Routed::Plain(false));
    }
    let deadline = now_us / 1000 + ttl_ms;
    key.set_deadline(deadline)?;
    quarantine::note_ttl(ttl_ms);
    effects::deadline_moved(ctx, name, deadline)?;
    key.signal_modified()?;
    stats::EXTENDS.add();
    stats::notify(ctx, c"dlock.extended", name);
    if let Some(res) = res {
        // A shorter lease must still be handed over on time.
        blocking::arm_expiry(&res, deadline)?;
    }
    Ok(Routed::Plain(true))
}

/// The plain lease of a value read once (`None`: free).
fn plain_lease(stored: Option<Stored<'_>>) -> Option<LeaseRef<'_>> {
    match stored {
        Some(Stored::Plain(l)) => Some(l),
        _ => None,
    }
}
