//! `DLOCK.QUEUED [pattern]`: the resources of the caller's database that
//! clients wait for, held or not. A resource nobody holds while its queue
//! waits (a set's member kept for a queued set, a handoff held back) often
//! has no key, so `SCAN` cannot find it; this command can, for `dlock
//! list` and for an operator asking why a resource cannot be taken.
//!
//! It reads the parking lot only: no key is opened, nothing is settled or
//! written, so it behaves the same inside `MULTI` and scripts and on a
//! replica (whose queues are its own).

use crate::server::edge::api::{rm, Ctx};
use crate::server::edge::ffi::Argv;
use crate::server::waiting::blocking;
use dlock_core::{request::args, request::glob, Error};

/// Replies with the names (bulk strings, in no particular order) of the
/// resources with waiters in the selected database that match the
/// pattern, if one is given.
pub fn queued(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    let pattern = args::queued(argv.bytes())?
        .map(glob::Pattern::new)
        .transpose()?;
    let db = selected_db(ctx)?;
    let names = blocking::resources_where(|r| {
        r.db == db && pattern.as_ref().is_none_or(|p| p.matches(&r.key))
    });
    ctx.reply_array(names.len())?;
    for r in &names {
        ctx.reply_bytes(&r.key)?;
    }
    Ok(())
}

fn selected_db(ctx: Ctx) -> Result<i32, Error> {
    Ok(unsafe { rm!(RedisModule_GetSelectedDb)(ctx.0) })
}
