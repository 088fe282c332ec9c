//! `DLOCK.GUARD`, a write only a holder can make, and `DLOCK.CHECK`, the
//! sequencer check: whether a token or fence is a live hold on a resource
//! now, read as `DLOCK.INFO` reads it.

use std::ffi::c_int;

use redis_module::raw;

use crate::server::commands::info::settle_before_reading;
use crate::server::commands::lock::refuse_on_replica;
use crate::server::edge::api::{self, Ctx};
use crate::server::edge::ffi::Argv;
use crate::server::execute::revoke;
use crate::server::guarded;
use crate::server::jobs;
use crate::server::keyspace::keys::LockKey;
use crate::server::keyspace::value::Stored;
use crate::server::notify::stats;
use crate::server::resource::Resource;
use crate::server::sessions;
use crate::server::waiting::blocking;
use dlock_core::guard::{self, args, Proof};
use dlock_core::resource::holds::{HoldRef, NEVER};
use dlock_core::sessions::Fate;
use dlock_core::{ask::Mode, Error};

/// `DLOCK.GUARD resource (TOKEN token | FENCE fence) command [arg ...]`, or
/// `... BATCH count argc command [arg ...] ...` -> the command's reply (a
/// batch: an array of them), run only if the proof is a live hold on the
/// resource now; else `NOTHELD` and nothing ran.
pub fn guard(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    if keys_request(ctx, argv) {
        return Ok(());
    }
    let req = args::guard(argv.bytes())?;
    refuse_on_replica(ctx)?;
    let prepared = guarded::prepare(ctx, argv, &req)?;
    if !holds(ctx, argv, req.proof)? {
        stats::GUARDS_NOT_HELD.add();
        return Err(Error::NotHeld);
    }
    stats::GUARDS_RUN.add();
    guarded::run(ctx, prepared)
}

/// `DLOCK.CHECK resource (TOKEN token | FENCE fence)` -> 1 when that is a
/// live hold on the resource now, else 0.
pub fn check(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    let proof = args::check(argv.bytes())?;
    let live = holds(ctx, argv, proof)?;
    ctx.reply_integer(i64::from(live))
}

/// Whether `proof` is a live hold on the resource now: after any handoff
/// that is due (as `DLOCK.INFO` reads), never a grant being revoked, and
/// in O(log h) for one of h holds (the hold found by its token or fence).
fn holds(ctx: Ctx, argv: &Argv, proof: Proof<'_>) -> Result<bool, Error> {
    let name = argv.key()?;
    revoke::before_command(ctx, [name])?;
    let waiting = blocking::waiting_resource(ctx, name)?;
    let in_unit = ctx.flags()?.in_transaction_or_script();
    if let Some(res) = waiting.as_ref().filter(|_| !in_unit) {
        settle_before_reading(ctx, name, res)?;
    }
    let key = LockKey::open_read(ctx, name)?;
    let revoked = if jobs::revocations_pending() {
        jobs::revoked_on(&Resource::of(ctx, name)?)
    } else {
        Vec::new()
    };
    let is_revoked =
        |token: &[u8], fence: u64| revoked.iter().any(|(t, f)| **t == *token && *f == fence);
    match key.stored()? {
        None => Ok(guard::holder(proof, [], 0, |_| false)),
        Some(Stored::Plain(lease)) => {
            // A plain lock's key lives exactly as long as its lease.
            let hold = HoldRef {
                token: lease.token(),
                owner: lease.token(),
                fence: lease.fence(),
                mode: Mode::Exclusive,
                deadline_ms: NEVER,
                session: None,
                cap: None,
                permits: 1,
            };
            let live = !is_revoked(hold.token, hold.fence);
            Ok(guard::holder(
                proof,
                [hold].into_iter().filter(|_| live),
                0,
                |_| false,
            ))
        }
        Some(Stored::Multi(h)) => {
            let now_ms = api::read_now_us(in_unit) / 1000;
            // An admin's earlier expiry of the key ends every hold there.
            let until = key.deadline()?.unwrap_or(NEVER);
            let found: Vec<HoldRef<'_>> = match proof {
                Proof::Token(token) => h.hold_of(token).into_iter().collect(),
                Proof::Fence(fence) => h.holds_of_fence(fence).collect(),
            };
            let candidates = found
                .into_iter()
                .filter(|x| !is_revoked(x.token, x.fence))
                .map(|x| HoldRef {
                    deadline_ms: x.deadline_ms.min(until),
                    ..x
                });
            Ok(guard::holder(proof, candidates, now_ms, |session| {
                sessions::fate(session, now_ms) == Fate::Live
            }))
        }
    }
}

/// The server asking for the keys of a call (`getkeys-api`: cluster
/// routing, `COMMAND GETKEYS`, ACL key checks): the resource and every
/// inner command's keys.
fn keys_request(ctx: Ctx, argv: &Argv) -> bool {
    let asked =
        unsafe { raw::RedisModule_IsKeysPositionRequest }.is_some_and(|f| unsafe { f(ctx.0) } != 0);
    if !asked {
        return false;
    }
    let commands = args::guard(argv.bytes())
        .map(|g| g.commands)
        .unwrap_or_default();
    for (pos, flags) in guarded::key_positions(ctx, argv, &commands) {
        let Ok(pos) = c_int::try_from(pos) else {
            continue;
        };
        unsafe {
            match (
                raw::RedisModule_KeyAtPosWithFlags,
                raw::RedisModule_KeyAtPos,
            ) {
                (Some(with_flags), _) if flags != 0 => with_flags(ctx.0, pos, flags),
                (_, Some(plain)) => plain(ctx.0, pos),
                _ => {}
            }
        }
    }
    true
}
