//! One handler per command: parse, open the key, let `lock` decide, reply,
//! propagate the effect. Errors returned here become the error reply.
//!
//! A plain request on a plain lock with a plain queue (or none) is decided
//! here, on the value read in place; everything else is one step of
//! `step`, which plans and carries out the whole change.

use redis_module::raw;

use crate::server::edge::api::{now_us, Ctx, Flags, LazyNow};
use crate::server::edge::ffi::Argv;
use crate::server::execute::handoff;
use crate::server::execute::revoke;
use crate::server::execute::step::{self, Request};
use crate::server::keyspace::keys::LockKey;
use crate::server::keyspace::value::Stored;
use crate::server::persistence::effects;
use crate::server::waiting::blocking::{self, Resource};
use crate::server::{notify::stats, quarantine, state};
use dlock_core::plan::plain;
use dlock_core::plan::Outcome;
use dlock_core::queue::Wants;
use dlock_core::resource::lease::LeaseRef;
use dlock_core::{request::args, Error};

/// `DLOCK.ACQUIRE resource token ttl_ms [WAIT timeout_ms]` -> fence, or nil
/// when held by another (after `timeout_ms` with WAIT).
pub fn acquire(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    let req = args::acquire(argv.bytes(), &state::limits())?;
    refuse_on_replica(ctx)?;
    let name = argv.key()?;
    revoke::before_command(ctx, [name])?;
    acquire_key(ctx, name, &req)
}

fn acquire_key(
    ctx: Ctx,
    name: *mut raw::RedisModuleString,
    req: &args::Acquire<'_>,
) -> Result<(), Error> {
    let mut key = LockKey::open_write(ctx, name)?;
    let waiting = blocking::waiting_resource(ctx, name)?;
    // The value is read once: it decides the path, and (unless a handoff
    // changes it first) the request.
    let stored = key.stored()?;
    if !req.is_plain() || step::decides_on(stored, waiting.as_ref()) {
        drop(key);
        let wait_ms = match req.wait_ms {
            Some(t) if can_block(ctx.flags()?) => Some(t),
            _ => None,
        };
        let acquire = Request::Acquire {
            ask: req.ask(),
            wait_ms,
            new_token: req.check_new_token(),
        };
        return match run_step(ctx, name, &acquire, now_us())? {
            Outcome::Granted { fence, .. } => ctx.reply_integer(fence as i64),
            // Blocked: the parking lot answers.
            Outcome::Wait => Ok(()),
            _ => ctx.reply_null(),
        };
    }
    let mut lease = plain_lease(stored);
    if let (Some(res), None) = (&waiting, lease) {
        // Freed where no handoff could run yet (expiry, DEL, FLUSHALL): the
        // queue goes first, so a newcomer never barges ahead of it.
        // This request will queue behind it: refuse it before anything
        // changes if it may not (a failed command changes nothing).
        if req.wait_ms.is_some() && can_block(ctx.flags()?) {
            req.check_new_token()?;
        }
        handoff::grant_next(ctx, &mut key, name, res)?;
        lease = key.lease()?;
    }
    let view = plain::View {
        lease,
        queued: waiting
            .as_ref()
            .is_some_and(|r| blocking::waiters_on(r) > 0),
    };
    // Inside MULTI, Lua or a replayed command, WAIT degrades to a try.
    let blocks = || req.wait_ms.is_some() && ctx.flags().is_ok_and(can_block);
    let now = LazyNow::default();
    // The clock is read only for a grant, the quarantine only for a free
    // lock.
    let decision = state::with_clock(|clock| {
        plain::acquire(
            &view,
            &req.ask(),
            blocks,
            || req.check_new_token(),
            quarantine::ms_left,
            clock,
            || now.us(),
        )
    })?;
    let deadline = || now.us() / 1000 + req.ttl_ms;
    let (fence, deadline) = match decision {
        plain::Acquire::Busy => {
            stats::CONTENDED.add();
            return ctx.reply_null();
        }
        plain::Acquire::Wait => return wait(ctx, &key, name, req, waiting),
        plain::Acquire::Grant { fence } => {
            let deadline = deadline();
            key.store(LeaseRef::new(req.token, fence))?;
            key.set_deadline(deadline)?;
            quarantine::note_ttl(req.ttl_ms);
            effects::granted(ctx, name, req.token, fence, deadline)?;
            stats::GRANTS.add();
            (fence, deadline)
        }
        plain::Acquire::Refresh { fence } => {
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
    if let Some(res) = &waiting {
        // A refresh may shorten the lease: wake the queue at the new end.
        blocking::arm_expiry(res, deadline)?;
    }
    ctx.reply_integer(fence as i64)
}

/// Parks the client (its `WAIT` decided by `plain::acquire`), and wakes the
/// queue when the current lease ends.
fn wait(
    ctx: Ctx,
    key: &LockKey,
    name: *mut raw::RedisModuleString,
    req: &args::Acquire,
    waiting: Option<blocking::Resource>,
) -> Result<(), Error> {
    stats::CONTENDED.add();
    let res = match waiting {
        Some(res) => res,
        None => Resource::of(ctx, name)?,
    };
    let timeout = req.wait_ms.unwrap_or(0);
    let wants = Wants::of(&req.ask());
    blocking::block(ctx, res.clone(), req.token, wants, req.ttl_ms, timeout)?;
    match key.deadline()? {
        Some(at) => blocking::arm_expiry(&res, at),
        None => Ok(()),
    }
}

/// `DLOCK.RELEASE resource token` -> 1 if the owner released it, else 0.
/// With waiters queued the lock passes straight to the head waiter.
/// A RELEASE that fails (no fence left for the handoff) changes nothing.
pub fn release(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    let req = args::release(argv.bytes(), &state::limits())?;
    refuse_on_replica(ctx)?;
    let name = argv.key()?;
    revoke::before_command(ctx, [name])?;
    let released = release_key(ctx, name, req.token)?;
    ctx.reply_integer(i64::from(released))
}

/// Releases `token`'s hold of `name`; whether it held one.
pub fn release_key(
    ctx: Ctx,
    name: *mut raw::RedisModuleString,
    token: &[u8],
) -> Result<bool, Error> {
    let mut key = LockKey::open_write(ctx, name)?;
    let waiting = blocking::waiting_resource(ctx, name)?;
    let stored = key.stored()?;
    if step::decides_on(stored, waiting.as_ref()) {
        drop(key);
        let released = run_step(ctx, name, &Request::Release { token }, now_us())?;
        return Ok(released != Outcome::Count(0));
    }
    if !plain::releases(plain_lease(stored), token) {
        return Ok(false);
    }
    let next = match &waiting {
        Some(res) => handoff::prepare_grant(ctx, res)?,
        None => None,
    };
    // Subscribers see the release before the handoff it causes.
    stats::RELEASES.add();
    stats::notify(ctx, c"dlock.released", name);
    let handed_over = match (&waiting, next) {
        (Some(res), Some(next)) => handoff::commit_grant(ctx, &mut key, name, res, next)?,
        _ => false,
    };
    if !handed_over {
        key.delete()?;
        effects::released(ctx, name)?;
        key.signal_modified()?;
    }
    Ok(true)
}

/// `DLOCK.EXTEND resource token ttl_ms` -> 1 if the owner's lease now ends
/// `ttl_ms` from now, else 0.
pub fn extend(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    let req = args::extend(argv.bytes(), &state::limits())?;
    refuse_on_replica(ctx)?;
    let name = argv.key()?;
    revoke::before_command(ctx, [name])?;
    let now = now_us();
    let held = extend_key(ctx, name, req.token, req.ttl_ms, now)?;
    ctx.reply_integer(i64::from(held))
}

/// Moves the end of `token`'s live hold of `name` to `ttl_ms` after
/// `now_us`; whether it held one.
pub fn extend_key(
    ctx: Ctx,
    name: *mut raw::RedisModuleString,
    token: &[u8],
    ttl_ms: u64,
    now_us: u64,
) -> Result<bool, Error> {
    let mut key = LockKey::open_write(ctx, name)?;
    let waiting = blocking::waiting_resource(ctx, name)?;
    let stored = key.stored()?;
    if step::decides_on(stored, waiting.as_ref()) {
        drop(key);
        let extend = Request::Extend { token, ttl_ms };
        return Ok(run_step(ctx, name, &extend, now_us)? != Outcome::Count(0));
    }
    if !plain::held_by(plain_lease(stored), token) {
        return Ok(false);
    }
    let deadline = now_us / 1000 + ttl_ms;
    key.set_deadline(deadline)?;
    quarantine::note_ttl(ttl_ms);
    effects::deadline_moved(ctx, name, deadline)?;
    key.signal_modified()?;
    stats::EXTENDS.add();
    stats::notify(ctx, c"dlock.extended", name);
    if let Some(res) = waiting {
        // A shorter lease must still be handed over on time.
        blocking::arm_expiry(&res, deadline)?;
    }
    Ok(true)
}

/// The plain lease of a value read once (`None`: free).
fn plain_lease(stored: Option<Stored<'_>>) -> Option<LeaseRef<'_>> {
    match stored {
        Some(Stored::Plain(l)) => Some(l),
        _ => None,
    }
}

/// One step of `req` on `name` (see `step`).
fn run_step(
    ctx: Ctx,
    name: *mut raw::RedisModuleString,
    req: &Request<'_>,
    now_us: u64,
) -> Result<Outcome, Error> {
    step::run(ctx, &[Resource::of(ctx, name)?], req, now_us)
}

/// With `replica-read-only no` a replica accepts writes; a grant there would
/// be invisible to the master and lost on the next sync.
/// The role is cached from replication events, so the common case (a
/// master) reads no context flags.
pub fn refuse_on_replica(ctx: Ctx) -> Result<(), Error> {
    if !state::is_replica() {
        return Ok(());
    }
    let flags = ctx.flags()?;
    if flags.is_replica() && !flags.is_replicated() {
        return Err(Error::ReadOnlyReplica);
    }
    Ok(())
}

/// Inside MULTI, Lua, or a replayed command, WAIT degrades to a plain try.
pub fn can_block(flags: Flags) -> bool {
    !(flags.in_transaction_or_script() || flags.is_replicated() || flags.is_loading())
}
