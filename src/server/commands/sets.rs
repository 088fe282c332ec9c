//! The set commands: `DLOCK.MACQUIRE`, `DLOCK.MRELEASE` and
//! `DLOCK.MEXTEND`. A set's members are ordinary holds. With someone
//! waiting anywhere, each command is one step (`step`) on every member and
//! the queues it touches, planned whole before anything changes, so a
//! failed command (a handoff with no fence left) changes no member. With
//! nobody waiting nothing is handed over and nothing can fail once the
//! first member changed: the members go one by one through the
//! single-resource paths, inside one command (one transaction for replicas
//! and the AOF).

use redis_module::raw;

use crate::server::commands::lock::{extend_key, refuse_on_replica, release_key};
use crate::server::commands::wanted;
use crate::server::edge::api::{now_us, rm, Ctx};
use crate::server::edge::ffi::Argv;
use crate::server::execute::inputs::can_block;
use crate::server::execute::revoke;
use crate::server::execute::sets_plain;
use crate::server::execute::step;
use crate::server::keyspace::keys::LockKey;
use crate::server::keyspace::value::Stored;
use crate::server::waiting::blocking::{self, Resource};
use crate::server::{sessions, state};
use dlock_core::plan::{Command, Outcome};
use dlock_core::request::set_args::{self, Members};
use dlock_core::Error;

/// `DLOCK.MACQUIRE numkeys resource [resource ...] token ttl_ms [SHARED]
/// [WAIT timeout_ms]` -> one fence for every member, or nil.
pub fn macquire(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    if keys_request(ctx, argv) {
        return Ok(());
    }
    let req = set_args::acquire(argv.bytes(), &state::limits())?;
    refuse_on_replica(ctx)?;
    sessions::require_live(req.session, now_us() / 1000)?;
    let wait_ms = match req.wait_ms {
        Some(t) if can_block(ctx.flags()?) => Some(t),
        _ => None,
    };
    let names = req
        .members
        .indexes()
        .map(|i| argv.raw(i))
        .collect::<Result<Vec<_>, _>>()?;
    revoke::before_command(ctx, names.iter().copied())?;
    if let Some(reply) = sets_plain::try_acquire(ctx, &names, &req)? {
        return match reply {
            Some(fence) => ctx.reply_integer(fence as i64),
            None => ctx.reply_null(),
        };
    }
    let members = resources(ctx, argv, &req.members)?;
    let acquire = Command::Acquire {
        ask: req.ask(),
        priority: blocking::arriving(req.priority),
        members: members.len(),
        blocks: wait_ms.is_some(),
        new_token: req.check_new_token(),
    };
    match step::run(ctx, &members, &acquire, wait_ms, now_us())? {
        Outcome::Granted { fence, .. } => ctx.reply_integer(fence as i64),
        // Blocked: the parking lot answers.
        Outcome::Wait => Ok(()),
        _ => ctx.reply_null(),
    }
}

/// `DLOCK.MRELEASE numkeys resource [resource ...] token` -> how many of
/// the members `token` held (and released).
pub fn mrelease(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    if keys_request(ctx, argv) {
        return Ok(());
    }
    let req = set_args::release(argv.bytes())?;
    refuse_on_replica(ctx)?;
    revoke::before_command(ctx, names(argv, &req.members)?)?;
    // Every member is read first: a member of another type refuses the
    // whole command before anything is released.
    for i in req.members.indexes() {
        LockKey::open_read(ctx, argv.raw(i)?)?.stored()?;
    }
    if blocking::anyone_waiting() {
        // Every handoff the releases cause is planned with them: the
        // command fails before any member changes, or releases them all.
        let members = resources(ctx, argv, &req.members)?;
        let release = Command::Release {
            token: req.token,
            members: members.len(),
            to: None,
        };
        let released = match step::run(ctx, &members, &release, None, now_us())? {
            Outcome::Count(n) => n,
            _ => 0,
        };
        return ctx.reply_integer(released as i64);
    }
    let mut released = 0;
    for i in req.members.indexes() {
        if release_key(ctx, argv.raw(i)?, req.token)? {
            released += 1;
        }
    }
    ctx.reply_integer(released)
}

/// `DLOCK.MEXTEND numkeys resource [resource ...] token ttl_ms [WANTED]`
/// -> 1 when `token` held every member (now all ending `ttl_ms` from now),
/// else 0 and nothing changed: a set with a lost member is no longer a
/// lock. With `WANTED` a map that also counts each member's waiters and
/// their highest priority (`wanted`).
pub fn mextend(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    if keys_request(ctx, argv) {
        return Ok(());
    }
    let req = set_args::extend(argv.bytes(), &state::limits())?;
    refuse_on_replica(ctx)?;
    revoke::before_command(ctx, names(argv, &req.members)?)?;
    let extended = extend_members(ctx, argv, &req)?;
    if req.wanted {
        let wanted = req
            .members
            .indexes()
            .map(|i| wanted::wanted_of(ctx, argv.raw(i)?))
            .collect::<Result<Vec<_>, _>>()?;
        return wanted::reply_set(ctx, extended, &wanted);
    }
    ctx.reply_integer(i64::from(extended))
}

/// Extends every member of `req`, or none; whether it did.
fn extend_members(ctx: Ctx, argv: &Argv, req: &set_args::SetExtend<'_>) -> Result<bool, Error> {
    // One instant: what is checked live is extended, and every member gets
    // the same deadline.
    let now = now_us();
    for i in req.members.indexes() {
        if !holds_live(ctx, argv.raw(i)?, req.token, now / 1000)? {
            return Ok(false);
        }
    }
    // A member whose cap the new deadline would pass refuses the command
    // before any member moves.
    for i in req.members.indexes() {
        within_cap(ctx, argv.raw(i)?, req.token, req.ttl_ms, now / 1000)?;
    }
    if blocking::anyone_waiting() {
        // Dead holds of others, pruned on the way, may let a queue in: the
        // handoffs are planned with the extensions, so the command fails
        // before any member changes, or extends them all.
        let members = resources(ctx, argv, &req.members)?;
        let extend = Command::Extend {
            token: req.token,
            ttl_ms: req.ttl_ms,
            members: members.len(),
        };
        step::run(ctx, &members, &extend, None, now)?;
        return Ok(true);
    }
    // Nobody waits: nothing is handed over, no extension can fail.
    for i in req.members.indexes() {
        extend_key(ctx, argv.raw(i)?, req.token, req.ttl_ms, now)?;
    }
    Ok(true)
}

/// The server asking for the keys of a call (registered `getkeys-api`):
/// cluster routing (`getKeysFromCommand`; Redis 7.0 to 8.0, Valkey 8) reads
/// a module command's legacy key range or asks this, never its key spec,
/// so without it a set skipped every slot check (`CROSSSLOT`, `MOVED`,
/// `ASK`, `TRYAGAIN`) and was granted on any node.
/// Answers the resources and nothing else: the context has no client.
/// `COMMAND GETKEYS` and ACL key checks read the key spec instead.
fn keys_request(ctx: Ctx, argv: &Argv) -> bool {
    let asked =
        unsafe { raw::RedisModule_IsKeysPositionRequest }.is_some_and(|f| unsafe { f(ctx.0) } != 0);
    if !asked {
        return false;
    }
    if let (Some(members), Some(key_at)) = (set_args::key_positions(argv.bytes()), unsafe {
        raw::RedisModule_KeyAtPos
    }) {
        for i in members.indexes() {
            if let Ok(pos) = i32::try_from(i) {
                unsafe { key_at(ctx.0, pos) };
            }
        }
    }
    true
}

/// Whether `token` has a live hold on `name` (read only: a refused
/// `MEXTEND` changes nothing).
fn holds_live(
    ctx: Ctx,
    name: *mut raw::RedisModuleString,
    token: &[u8],
    now_ms: u64,
) -> Result<bool, Error> {
    let key = LockKey::open_read(ctx, name)?;
    Ok(match key.stored()? {
        None => false,
        Some(Stored::Plain(lease)) => {
            lease.is_owned_by(token) && key.deadline()?.is_none_or(|d| d >= now_ms)
        }
        Some(Stored::Multi(h)) => h.live(now_ms).any(|hold| *hold.token == *token),
    })
}

/// `Error::MaxHold` when `token`'s hold on `name` has a cap (`MAXHOLD`)
/// that a deadline `ttl_ms` after `now_ms` would pass (read only).
fn within_cap(
    ctx: Ctx,
    name: *mut raw::RedisModuleString,
    token: &[u8],
    ttl_ms: u64,
    now_ms: u64,
) -> Result<(), Error> {
    let key = LockKey::open_read(ctx, name)?;
    if let Some(Stored::Multi(h)) = key.stored()? {
        if let Some(cap) = h.hold_of(token).and_then(|hold| hold.cap) {
            cap.allows(now_ms.saturating_add(ttl_ms), now_ms)?;
        }
    }
    Ok(())
}

/// The set's key names.
fn names(argv: &Argv, members: &Members) -> Result<Vec<*mut raw::RedisModuleString>, Error> {
    members.indexes().map(|i| argv.raw(i)).collect()
}

/// The set's resources in the caller's database.
fn resources(ctx: Ctx, argv: &Argv, members: &Members) -> Result<Vec<Resource>, Error> {
    let db = unsafe { rm!(RedisModule_GetSelectedDb)(ctx.0) };
    members
        .indexes()
        .map(|i| {
            Ok(Resource {
                db,
                key: argv
                    .bytes()
                    .get(i)
                    .ok_or(Error::WrongArity)?
                    .to_vec()
                    .into(),
            })
        })
        .collect()
}
