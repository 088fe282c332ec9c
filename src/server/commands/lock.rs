//! `DLOCK.ACQUIRE`, `DLOCK.RELEASE` and `DLOCK.EXTEND`: parse, open the
//! key, and let `dlock_core::plan::plain::route` say which path decides: a
//! plain request on a plain lock with a plain queue (or none) is the plain
//! path's (`execute::plain`: decided on the value read in place, carried
//! out); everything else is one step (`execute::step`: planned whole,
//! carried out). Errors returned here become the error reply.

use redis_module::raw;

use crate::server::commands::wanted;
use crate::server::edge::api::{now_us, Ctx};
use crate::server::edge::ffi::Argv;
use crate::server::execute::inputs;
use crate::server::execute::plain::{self, Routed};
use crate::server::execute::revoke;
use crate::server::execute::step;
use crate::server::keyspace::keys::LockKey;
use crate::server::waiting::blocking::{self, Resource};
use crate::server::{sessions, state};
use dlock_core::plan::{Command, Outcome};
use dlock_core::{request::args, Error};

/// `DLOCK.ACQUIRE resource token ttl_ms [WAIT timeout_ms]` -> fence, or nil
/// when held by another (after `timeout_ms` with WAIT).
pub fn acquire(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    let req = args::acquire(argv.bytes(), &state::limits())?;
    refuse_on_replica(ctx)?;
    sessions::require_live(req.session, now_us() / 1000)?;
    let name = argv.key()?;
    revoke::before_command(ctx, [name])?;
    acquire_key(ctx, name, &req)
}

fn acquire_key(
    ctx: Ctx,
    name: *mut raw::RedisModuleString,
    req: &args::Acquire<'_>,
) -> Result<(), Error> {
    let key = LockKey::open_write(ctx, name)?;
    let waiting = blocking::waiting_resource(ctx, name)?;
    // Once per command: the plain path and a step rank it alike.
    let priority = blocking::arriving(req.priority);
    if let Routed::Plain(()) = plain::acquire(ctx, key, name, req, waiting, priority)? {
        return Ok(());
    }
    let wait_ms = match req.wait_ms {
        Some(t) if inputs::can_block(ctx.flags()?) => Some(t),
        _ => None,
    };
    let acquire = Command::Acquire {
        ask: req.ask(),
        priority,
        members: 1,
        blocks: wait_ms.is_some(),
        new_token: req.check_new_token(),
    };
    match run_step(ctx, name, &acquire, wait_ms, now_us())? {
        Outcome::Granted { fence, .. } => ctx.reply_integer(fence as i64),
        // Blocked: the parking lot answers.
        Outcome::Wait => Ok(()),
        _ => ctx.reply_null(),
    }
}

/// `DLOCK.RELEASE resource token [TO waiter_token]` -> 1 if the owner
/// released it, else 0. With waiters queued the lock passes straight to
/// the head waiter; with `TO`, to the queued `waiter_token` out of turn.
/// A RELEASE that fails (no fence left for the handoff, a `TO` that cannot
/// be granted now) changes nothing.
pub fn release(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    let req = args::release(argv.bytes(), &state::limits())?;
    refuse_on_replica(ctx)?;
    let name = argv.key()?;
    revoke::before_command(ctx, [name])?;
    let released = match req.to {
        Some(to) => hand_over(ctx, name, req.token, to)?,
        None => release_key(ctx, name, req.token)?,
    };
    ctx.reply_integer(i64::from(released))
}

/// Releases `token`'s hold of `name` and grants it, in the same step, to
/// the request of `to` queued there; whether `token` held it. Never the
/// plain path: a handover is rare, and the plain path serves only the head.
fn hand_over(
    ctx: Ctx,
    name: *mut raw::RedisModuleString,
    token: &[u8],
    to: &[u8],
) -> Result<bool, Error> {
    let release = Command::Release {
        token,
        members: 1,
        to: Some(to),
    };
    let released = run_step(ctx, name, &release, None, now_us())?;
    Ok(released != Outcome::Count(0))
}

/// Releases `token`'s hold of `name`; whether it held one.
pub fn release_key(
    ctx: Ctx,
    name: *mut raw::RedisModuleString,
    token: &[u8],
) -> Result<bool, Error> {
    let key = LockKey::open_write(ctx, name)?;
    let waiting = blocking::waiting_resource(ctx, name)?;
    if let Routed::Plain(released) = plain::release(ctx, key, name, token, waiting)? {
        return Ok(released);
    }
    let release = Command::Release {
        token,
        members: 1,
        to: None,
    };
    let released = run_step(ctx, name, &release, None, now_us())?;
    Ok(released != Outcome::Count(0))
}

/// `DLOCK.EXTEND resource token ttl_ms [WANTED]` -> 1 if the owner's
/// lease now ends `ttl_ms` from now, else 0; with `WANTED` a map that also
/// counts the requests waiting and their highest priority (`wanted`).
pub fn extend(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    let req = args::extend(argv.bytes(), &state::limits())?;
    refuse_on_replica(ctx)?;
    let name = argv.key()?;
    revoke::before_command(ctx, [name])?;
    let now = now_us();
    let held = extend_key(ctx, name, req.token, req.ttl_ms, now)?;
    if req.wanted {
        return wanted::reply(ctx, held, wanted::wanted_of(ctx, name)?);
    }
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
    let key = LockKey::open_write(ctx, name)?;
    let waiting = blocking::waiting_resource(ctx, name)?;
    if let Routed::Plain(held) = plain::extend(ctx, key, name, token, ttl_ms, now_us, waiting)? {
        return Ok(held);
    }
    let extend = Command::Extend {
        token,
        ttl_ms,
        members: 1,
    };
    Ok(run_step(ctx, name, &extend, None, now_us)? != Outcome::Count(0))
}

/// `DLOCK.RESIZE resource n` -> the previous limit of a held semaphore,
/// now `n`, or nil when nothing holds it. Growing it grants the queued
/// requests that fit now, in this command.
pub fn resize(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    let limit = args::resize(argv.bytes())?;
    refuse_on_replica(ctx)?;
    let name = argv.key()?;
    revoke::before_command(ctx, [name])?;
    // WRONGTYPE before anything is decided.
    LockKey::open_write(ctx, name)?.stored()?;
    let resize = Command::Resize { limit, members: 1 };
    match run_step(ctx, name, &resize, None, now_us())? {
        Outcome::Count(previous) if previous > 0 => ctx.reply_integer(previous as i64),
        _ => ctx.reply_null(),
    }
}

/// One step of `command` on `name` (see `step`).
fn run_step(
    ctx: Ctx,
    name: *mut raw::RedisModuleString,
    command: &Command<'_>,
    wait_ms: Option<u64>,
    now_us: u64,
) -> Result<Outcome, Error> {
    step::run(ctx, &[Resource::of(ctx, name)?], command, wait_ms, now_us)
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
