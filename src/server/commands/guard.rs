//! `DLOCK.GUARD`, a write only a holder can make, and `DLOCK.CHECK`, the
//! sequencer check: whether a token or fence is a live hold on a resource
//! now, read as `DLOCK.INFO` reads it.

use std::ffi::c_int;

use redis_module::raw;

use crate::server::commands::info::{read, View};
use crate::server::commands::lock::refuse_on_replica;
use crate::server::edge::api::Ctx;
use crate::server::edge::ffi::Argv;
use crate::server::guarded;
use crate::server::sessions;
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
        return Err(Error::NotHeld);
    }
    guarded::run(ctx, prepared)
}

/// `DLOCK.CHECK resource (TOKEN token | FENCE fence)` -> 1 when that is a
/// live hold on the resource now, else 0.
pub fn check(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    let proof = args::check(argv.bytes())?;
    let live = holds(ctx, argv, proof)?;
    ctx.reply_integer(i64::from(live))
}

/// Whether `proof` is a live hold on the resource now (after any handoff
/// that is due, without a grant that is being revoked).
fn holds(ctx: Ctx, argv: &Argv, proof: Proof<'_>) -> Result<bool, Error> {
    read(ctx, argv.key()?, true, |view| {
        Ok(match view {
            View::Free | View::Reserved { .. } => guard::holder(proof, [], 0, |_| false),
            View::Plain { token, fence, .. } => {
                let hold = HoldRef {
                    token,
                    owner: token,
                    fence: *fence,
                    mode: Mode::Exclusive,
                    deadline_ms: NEVER,
                    session: None,
                };
                guard::holder(proof, [hold], 0, |_| false)
            }
            View::Holds { holds, now_ms, .. } => {
                guard::holder(proof, holds.iter(), *now_ms, |session| {
                    sessions::fate(session, *now_ms) == Fate::Live
                })
            }
        })
    })
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
