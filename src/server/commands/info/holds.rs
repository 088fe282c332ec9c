//! `DLOCK.INFO` replies. A plain lock answers a map of its lease
//! (`reply_plain`); a resource that is not a plain lock one form for every
//! kind, a map (a flat array in RESP2):
//!
//! ```text
//! kind     "rwlock" (limit 1: shared and exclusive holds) or "semaphore"
//! limit    the number of holds that may coexist
//! waiters  requests queued
//! used     the permits the live holds take together, only while one of
//!          them counts as several (`PERMITS`)
//! resized  1, only when `DLOCK.RESIZE` set the limit
//! holds    an array of maps: token, owner, fence, ttl (ms, -1: none), mode,
//!          session for a hold bound to one, maxhold (ms left to its
//!          cap) for a hold granted with `MAXHOLD` (a capped plain lock is
//!          shown in this form too), and permits for a hold counting as
//!          more than one
//! priority the highest `PRIORITY` queued; only when above 0
//! ```
//!
//! Both forms end with `priority` only while a request queued there named
//! a priority above 0: the shapes clients read stay as they were
//! whenever priorities are unused, and the field comes last, so a reader
//! by position finds every other field where it was.
//!
//! Holds past their deadline are left out: a replica keeps them until its
//! master drops them, but they are gone for every client.

use crate::server::commands::wanted::Wanted;
use crate::server::edge::api::Ctx;
use dlock_core::resource::changes::mode_name;
use dlock_core::resource::holds::{Holds, NEVER};
use dlock_core::Error;

pub fn reply(ctx: Ctx, holds: &Holds, now_ms: u64, queue: Wanted) -> Result<(), Error> {
    let live = Holds::from_holds(holds.limit, holds.live(now_ms).map(|h| h.to_hold()));
    if let Some(h) = live.as_plain() {
        // What a plain lock answers (its dead holds' drop is pending).
        let ttl = ttl(h.deadline_ms, now_ms);
        return reply_plain(ctx, Some(h.token), h.fence, ttl, queue);
    }
    let weighted = live.is_weighted();
    ctx.reply_map(
        4 + usize::from(weighted) + usize::from(holds.resized) + usize::from(queue.priority > 0),
    )?;
    ctx.reply_bytes(b"kind")?;
    ctx.reply_bytes(if holds.limit > 1 {
        b"semaphore"
    } else {
        b"rwlock"
    })?;
    ctx.reply_bytes(b"limit")?;
    ctx.reply_integer(i64::from(holds.limit))?;
    ctx.reply_bytes(b"waiters")?;
    ctx.reply_integer(queue.waiters as i64)?;
    if weighted {
        ctx.reply_bytes(b"used")?;
        ctx.reply_integer(live.used_permits() as i64)?;
    }
    if holds.resized {
        ctx.reply_bytes(b"resized")?;
        ctx.reply_integer(1)?;
    }
    ctx.reply_bytes(b"holds")?;
    ctx.reply_array(holds.live(now_ms).count())?;
    for h in holds.live(now_ms) {
        let extra = usize::from(h.session.is_some())
            + usize::from(h.cap.is_some())
            + usize::from(h.permits > 1);
        ctx.reply_map(5 + extra)?;
        ctx.reply_bytes(b"token")?;
        ctx.reply_bytes(h.token)?;
        ctx.reply_bytes(b"owner")?;
        ctx.reply_bytes(h.owner)?;
        ctx.reply_bytes(b"fence")?;
        ctx.reply_integer(h.fence as i64)?;
        ctx.reply_bytes(b"ttl")?;
        ctx.reply_integer(ttl(h.deadline_ms, now_ms))?;
        ctx.reply_bytes(b"mode")?;
        ctx.reply_bytes(mode_name(h.mode))?;
        if let Some(session) = h.session {
            ctx.reply_bytes(b"session")?;
            ctx.reply_bytes(session)?;
        }
        if let Some(cap) = h.cap {
            ctx.reply_bytes(b"maxhold")?;
            ctx.reply_integer(cap.at_ms.saturating_sub(now_ms) as i64)?;
        }
        if h.permits > 1 {
            ctx.reply_bytes(b"permits")?;
            ctx.reply_integer(i64::from(h.permits))?;
        }
    }
    top_priority(ctx, queue)
}

/// The last field of either form: the highest priority queued, when above 0.
fn top_priority(ctx: Ctx, queue: Wanted) -> Result<(), Error> {
    if queue.priority > 0 {
        ctx.reply_bytes(b"priority")?;
        ctx.reply_integer(i64::from(queue.priority))?;
    }
    Ok(())
}

/// The plain lock's map: token (nil when reserved for the queue), fence,
/// ttl, waiters, and priority when above 0.
pub fn reply_plain(
    ctx: Ctx,
    token: Option<&[u8]>,
    fence: u64,
    ttl: i64,
    queue: Wanted,
) -> Result<(), Error> {
    ctx.reply_map(4 + usize::from(queue.priority > 0))?;
    ctx.reply_bytes(b"token")?;
    match token {
        Some(t) => ctx.reply_bytes(t)?,
        None => ctx.reply_null()?,
    }
    ctx.reply_bytes(b"fence")?;
    ctx.reply_integer(fence as i64)?;
    ctx.reply_bytes(b"ttl")?;
    ctx.reply_integer(ttl)?;
    ctx.reply_bytes(b"waiters")?;
    ctx.reply_integer(queue.waiters as i64)?;
    top_priority(ctx, queue)
}

/// Milliseconds left, like `PTTL`: -1 for a hold without a deadline.
fn ttl(deadline_ms: u64, now_ms: u64) -> i64 {
    if deadline_ms >= NEVER {
        -1
    } else {
        deadline_ms.saturating_sub(now_ms) as i64
    }
}
