//! `WANTED` on `DLOCK.EXTEND` and `DLOCK.MEXTEND`: the renewal a holder
//! sends anyway also tells it whether anyone waits for what it holds, so
//! that it can yield at a safe point without polling. The reply is a map
//! (a flat array in RESP2); fields may be added later, so clients read
//! them by name:
//!
//! ```text
//! extended  1 when the hold now ends ttl_ms from now, else 0
//! waiters   requests queued on the resource (MEXTEND: an array, one
//!           count per member in the order named)
//! priority  the highest PRIORITY queued there (MEXTEND: one per member);
//!           only when some request queued there asked for more than 0
//! ```
//!
//! The count is the queue's length after the extension: every request
//! queued there waits for a hold (the holder's, or one beside it), none
//! is left out or weighed. One hash lookup per resource and the queue's
//! count of priorities: O(1) each (O(log P) in the distinct priorities).

use redis_module::raw;

use crate::server::edge::api::Ctx;
use crate::server::waiting::blocking;
use dlock_core::Error;

/// Who waits on one resource: how many, and the highest priority among
/// them (0 when none asked for one).
#[derive(Clone, Copy, Debug, Default)]
pub struct Wanted {
    pub waiters: usize,
    pub priority: u16,
}

/// Who waits on `name` in the caller's database.
pub fn wanted_of(ctx: Ctx, name: *mut raw::RedisModuleString) -> Result<Wanted, Error> {
    Ok(match blocking::waiting_resource(ctx, name)? {
        Some(res) => Wanted {
            waiters: blocking::waiters_on(&res),
            priority: blocking::top_priority(&res),
        },
        None => Wanted::default(),
    })
}

/// `DLOCK.EXTEND ... WANTED`'s reply.
pub fn reply(ctx: Ctx, extended: bool, wanted: Wanted) -> Result<(), Error> {
    let ranked = wanted.priority > 0;
    ctx.reply_map(if ranked { 3 } else { 2 })?;
    ctx.reply_bytes(b"extended")?;
    ctx.reply_integer(i64::from(extended))?;
    ctx.reply_bytes(b"waiters")?;
    ctx.reply_integer(wanted.waiters as i64)?;
    if ranked {
        ctx.reply_bytes(b"priority")?;
        ctx.reply_integer(i64::from(wanted.priority))?;
    }
    Ok(())
}

/// `DLOCK.MEXTEND ... WANTED`'s reply: the waiters of each member, and
/// each member's highest priority when any member's is above 0.
pub fn reply_set(ctx: Ctx, extended: bool, wanted: &[Wanted]) -> Result<(), Error> {
    let ranked = wanted.iter().any(|w| w.priority > 0);
    ctx.reply_map(if ranked { 3 } else { 2 })?;
    ctx.reply_bytes(b"extended")?;
    ctx.reply_integer(i64::from(extended))?;
    ctx.reply_bytes(b"waiters")?;
    ctx.reply_array(wanted.len())?;
    for w in wanted {
        ctx.reply_integer(w.waiters as i64)?;
    }
    if ranked {
        ctx.reply_bytes(b"priority")?;
        ctx.reply_array(wanted.len())?;
        for w in wanted {
            ctx.reply_integer(i64::from(w.priority))?;
        }
    }
    Ok(())
}
