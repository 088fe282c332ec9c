//! `WANTED` on `DLOCK.EXTEND` and `DLOCK.MEXTEND`: the renewal a holder
//! sends anyway also tells it whether anyone waits for what it holds, so
//! that it can yield at a safe point without polling. The reply is a map
//! (a flat array in RESP2); fields may be added later (a waiter's
//! priority), so clients read them by name:
//!
//! ```text
//! extended  1 when the hold now ends ttl_ms from now, else 0
//! waiters   requests queued on the resource (MEXTEND: an array, one
//!           count per member in the order named)
//! ```
//!
//! The count is the queue's length after the extension: every request
//! queued there waits for a hold (the holder's, or one beside it), none
//! is left out or weighed. One hash lookup per resource: O(1) each.

use redis_module::raw;

use crate::server::edge::api::Ctx;
use crate::server::waiting::blocking;
use dlock_core::Error;

/// Requests queued on `name` in the caller's database.
pub fn waiters_of(ctx: Ctx, name: *mut raw::RedisModuleString) -> Result<usize, Error> {
    Ok(blocking::waiting_resource(ctx, name)?.map_or(0, |res| blocking::waiters_on(&res)))
}

/// `DLOCK.EXTEND ... WANTED`'s reply.
pub fn reply(ctx: Ctx, extended: bool, waiters: usize) -> Result<(), Error> {
    ctx.reply_map(2)?;
    ctx.reply_bytes(b"extended")?;
    ctx.reply_integer(i64::from(extended))?;
    ctx.reply_bytes(b"waiters")?;
    ctx.reply_integer(waiters as i64)
}

/// `DLOCK.MEXTEND ... WANTED`'s reply: the waiters of each member.
pub fn reply_set(ctx: Ctx, extended: bool, waiters: &[usize]) -> Result<(), Error> {
    ctx.reply_map(2)?;
    ctx.reply_bytes(b"extended")?;
    ctx.reply_integer(i64::from(extended))?;
    ctx.reply_bytes(b"waiters")?;
    ctx.reply_array(waiters.len())?;
    for n in waiters {
        ctx.reply_integer(*n as i64)?;
    }
    Ok(())
}
