//! The set commands: `DLOCK.MACQUIRE`, `DLOCK.MRELEASE` and
//! `DLOCK.MEXTEND`. A set's members are ordinary holds; `sets` decides a
//! new set with the queues it joins, and releases and extensions run the
//! single-resource paths on every member, inside one command (so replicas
//! and the AOF see one transaction). What can fail there (a handoff with
//! no fence left) is checked for every member before the first one
//! changes: a failed command changes no member.

use redis_module::raw;

use super::api::{now_us, rm, Ctx, OneInstant};
use super::blocking::{self, Resource};
use super::commands::{
    can_block, extend_fences, extend_key, refuse_on_replica, release_fences, release_key,
};
use super::ffi::Argv;
use super::job_runner;
use super::keys::LockKey;
use super::sets::{self, NewSet, Outcome};
use super::sets_plain;
use super::state;
use super::value::Stored;
use crate::lock::set_args::{self, Members};
use crate::lock::Error;

/// `DLOCK.MACQUIRE numkeys resource [resource ...] token ttl_ms [SHARED]
/// [WAIT timeout_ms]` -> one fence for every member, or nil.
pub fn macquire(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    if keys_request(ctx, argv) {
        return Ok(());
    }
    let req = set_args::acquire(argv.bytes(), &state::limits())?;
    refuse_on_replica(ctx)?;
    let wait_ms = match req.wait_ms {
        Some(t) if can_block(ctx.flags()?) => Some(t),
        _ => None,
    };
    let names = req
        .members
        .indexes()
        .map(|i| argv.raw(i))
        .collect::<Result<Vec<_>, _>>()?;
    job_runner::before_command(ctx, names.iter().copied())?;
    if let Some(reply) = sets_plain::try_acquire(ctx, &names, &req, wait_ms.is_some())? {
        return match reply {
            Some(fence) => ctx.reply_integer(fence as i64),
            None => ctx.reply_null(),
        };
    }
    let members = resources(ctx, argv, &req.members)?;
    let check = || req.check_new_token();
    let new = NewSet {
        members,
        token: req.token,
        ttl_ms: req.ttl_ms,
        mode: req.mode,
        wait_ms,
        check_new_token: &check,
    };
    match sets::decide(ctx, &new.members, Some(&new))? {
        Some(Outcome::Granted { fence }) => ctx.reply_integer(fence as i64),
        // Blocked: the parking lot answers.
        Some(Outcome::Queued) => Ok(()),
        Some(Outcome::Busy) | None => ctx.reply_null(),
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
    job_runner::before_command(ctx, names(argv, &req.members)?)?;
    // Every member is read first: a member of another type refuses the
    // whole command before anything is released.
    for i in req.members.indexes() {
        LockKey::open_read(ctx, argv.raw(i)?)?.stored()?;
    }
    // With nobody waiting anywhere nothing is handed over: no release can
    // fail once the first one is done.
    let waited = blocking::anyone_waiting().then(|| -> Result<_, Error> {
        // Every handoff the releases cause needs a fence: all of them are
        // counted, at one instant, before anything changes, and the
        // releases then run at that instant, deciding the same.
        let instant = OneInstant::now();
        let members = resources(ctx, argv, &req.members)?;
        let mut needed = sets::fences_needed(ctx, &members, Some(req.token))?;
        for i in req.members.indexes() {
            needed += release_fences(ctx, argv.raw(i)?, req.token)?;
        }
        fences_left(needed, instant.us())?;
        Ok((instant, members))
    });
    let waited = waited.transpose()?;
    let mut released = 0;
    for i in req.members.indexes() {
        if release_key(ctx, argv.raw(i)?, req.token)? {
            released += 1;
        }
    }
    if let Some((_instant, members)) = &waited {
        // What was freed may be what queued sets wait for: their
        // components are settled once, after every member.
        sets::settle_all(ctx, members)?;
    }
    ctx.reply_integer(released)
}

/// `DLOCK.MEXTEND numkeys resource [resource ...] token ttl_ms` -> 1 when
/// `token` held every member (now all ending `ttl_ms` from now), else 0 and
/// nothing changed: a set with a lost member is no longer a lock.
pub fn mextend(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    if keys_request(ctx, argv) {
        return Ok(());
    }
    let req = set_args::extend(argv.bytes(), &state::limits())?;
    refuse_on_replica(ctx)?;
    job_runner::before_command(ctx, names(argv, &req.members)?)?;
    // One instant: what is checked live is extended, and every member gets
    // the same deadline. With someone waiting it holds for the whole
    // command, so the count of fences below and the extensions decide the
    // same.
    let instant = blocking::anyone_waiting().then(OneInstant::now);
    let now = instant.as_ref().map_or_else(now_us, OneInstant::us);
    for i in req.members.indexes() {
        if !holds_live(ctx, argv.raw(i)?, req.token, now / 1000)? {
            return ctx.reply_integer(0);
        }
    }
    let members = match instant {
        // Dead holds of others, pruned on the way, may let a queue in: the
        // fences of every such grant are counted before anything changes.
        Some(_) => {
            let members = resources(ctx, argv, &req.members)?;
            let mut needed = sets::fences_needed(ctx, &members, None)?;
            for i in req.members.indexes() {
                needed += extend_fences(ctx, argv.raw(i)?, req.token, req.ttl_ms, now)?;
            }
            fences_left(needed, now)?;
            Some(members)
        }
        // Nobody waits: nothing is handed over, no extension can fail.
        None => None,
    };
    for i in req.members.indexes() {
        extend_key(ctx, argv.raw(i)?, req.token, req.ttl_ms, now)?;
    }
    if let Some(members) = &members {
        // Dead holds of others dropped on the way may be what a queued set
        // waits for.
        sets::settle_all(ctx, members)?;
    }
    ctx.reply_integer(1)
}

/// Refuses a command whose grants need `needed` fences the clock no longer
/// has, before it changes anything.
fn fences_left(needed: usize, now_us: u64) -> Result<(), Error> {
    if state::fences_left(needed, now_us) {
        Ok(())
    } else {
        Err(Error::FenceExhausted)
    }
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
