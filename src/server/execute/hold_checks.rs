//! What a hold guard's job does (`Job::CheckHolds`, queued by
//! `hold_guards`): look at a multi-hold key that may keep holds past their
//! deadline because no expiry removes it (an admin's `PERSIST`, a
//! `RESTORE` with TTL 0), and drop those holds with their effects, through
//! the queue if someone waits. The change gives the key its latest hold
//! deadline as expiry again, so from then on it goes with its last hold.

use std::ffi::c_char;

use redis_module::raw;

use crate::server::edge::api::{now_us, rm, Ctx};
use crate::server::execute::hold_work::Work;
use crate::server::execute::step;
use crate::server::jobs::{self, PAUSED_RETRY_MS};
use crate::server::keyspace::hold_guards::{self, Found};
use crate::server::keyspace::keys::LockKey;
use crate::server::waiting::blocking;
use dlock_core::Error;

/// How often a replica looks again at a key whose dead holds its master has
/// not dropped yet.
const REPLICA_RECHECK_MS: u64 = 1000;

pub fn check_logged(ctx: Ctx, db: i32, key: &[u8]) {
    if let Err(e) = check(ctx, db, key) {
        ctx.log_warning(&format!("hold guard: {e}"));
    }
}

fn check(ctx: Ctx, db: i32, key: &[u8]) -> Result<(), Error> {
    unsafe { rm!(RedisModule_SelectDb)(ctx.0, db) };
    let name =
        unsafe { rm!(RedisModule_CreateString)(ctx.0, key.as_ptr().cast::<c_char>(), key.len()) };
    let result = check_key(ctx, db, key, name);
    unsafe { rm!(RedisModule_FreeString)(ctx.0, name) };
    result
}

fn check_key(
    ctx: Ctx,
    db: i32,
    key: &[u8],
    name: *mut raw::RedisModuleString,
) -> Result<(), Error> {
    let now_ms = now_us() / 1000;
    match hold_guards::find(&LockKey::open_read(ctx, name)?, now_ms)? {
        Found::Nothing => return Ok(()),
        Found::WakeAt(at) => {
            hold_guards::arm(db, key, at);
            return Ok(());
        }
        Found::Dead => {}
    }
    if ctx.flags()?.is_replica() {
        // Its master drops the holds; until then look again now and then,
        // in case this replica is promoted first.
        hold_guards::arm(db, key, now_ms + REPLICA_RECHECK_MS);
        return Ok(());
    }
    if jobs::writes_paused() {
        hold_guards::arm(db, key, now_ms + PAUSED_RETRY_MS);
        return Ok(());
    }
    match blocking::waiting_resource(ctx, name)? {
        // The queue may fit now: the handoff paths prune and grant.
        Some(waiting) => step::settle(ctx, &waiting)?,
        None => {
            let mut lock = LockKey::open_write(ctx, name)?;
            Work::load(&mut lock)?.finish(ctx, &mut lock, name)?;
        }
    }
    // The write armed the guard at the latest deadline; a key that stays
    // persistent needs it at its next one.
    if let Found::WakeAt(at) = hold_guards::find(&LockKey::open_read(ctx, name)?, now_us() / 1000)?
    {
        hold_guards::arm(db, key, at);
    }
    Ok(())
}

/// `Job::EndRestoredAt` (see `restored::note_end`).
pub fn end_at_logged(ctx: Ctx, db: i32, key: &[u8], token: &[u8], at_ms: u64) {
    if let Err(e) = end_at(ctx, db, key, token, at_ms) {
        ctx.log_warning(&format!("restored lock check failed: {e}"));
    }
}

fn end_at(ctx: Ctx, db: i32, key: &[u8], token: &[u8], at_ms: u64) -> Result<(), Error> {
    if ctx.flags()?.is_replica() {
        // The master gives its copy the same deadline, as an effect.
        return Ok(());
    }
    if jobs::writes_paused() {
        jobs::push_after(
            jobs::Job::EndRestoredAt {
                db,
                key: key.into(),
                token: token.into(),
                at_ms,
            },
            PAUSED_RETRY_MS,
        );
        return Ok(());
    }
    unsafe { rm!(RedisModule_SelectDb)(ctx.0, db) };
    let name =
        unsafe { rm!(RedisModule_CreateString)(ctx.0, key.as_ptr().cast::<c_char>(), key.len()) };
    let result = (|| {
        let mut lock = LockKey::open_write(ctx, name)?;
        let held = lock.lease()?.is_some_and(|l| l.token() == token);
        let later = lock.deadline()?.is_none_or(|d| d > at_ms);
        if held && later {
            lock.set_deadline(at_ms)?;
            crate::server::persistence::effects::deadline_moved(ctx, name, at_ms)?;
        }
        Ok(())
    })();
    unsafe { rm!(RedisModule_FreeString)(ctx.0, name) };
    result
}
