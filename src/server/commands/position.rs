//! `DLOCK.POSITION resource token` and `DLOCK.WAITERS resource [OFFSET k]
//! [COUNT n]`: where a request stands in a resource's wait queue, and who
//! waits there, in the order they are served.
//!
//! Both read the queue as `DLOCK.INFO` reads the resource: after any
//! handoff that is due (the head about to be granted is a holder, not a
//! waiter), or as it stands inside a transaction or script. They read the
//! parking lot's order-statistics index (`dlock_core::queue`), so a
//! position costs O(log n) in the queue's length and a page O(log n +
//! count). A replica's queues are its own (nobody waits there).

use redis_module::raw;

use crate::server::commands::info;
use crate::server::edge::api::Ctx;
use crate::server::edge::ffi::Argv;
use crate::server::execute::revoke;
use crate::server::keyspace::keys::LockKey;
use crate::server::resource::Resource;
use crate::server::waiting::blocking;
use dlock_core::request::queue_args;
use dlock_core::resource::changes::mode_name;
use dlock_core::Error;

/// `DLOCK.POSITION resource token` -> the token's position in the
/// resource's queue (1: served next), or nil when it does not wait there.
pub fn position(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    let token = queue_args::position(argv.bytes())?;
    let name = argv.key()?;
    settle(ctx, name)?;
    let found = if blocking::anyone_waiting() {
        blocking::position(&Resource::of(ctx, name)?, token)
    } else {
        None
    };
    match found {
        Some(at) => ctx.reply_integer(at as i64),
        None => ctx.reply_null(),
    }
}

/// `DLOCK.WAITERS resource [OFFSET k] [COUNT n]` -> an array of maps (flat
/// arrays in RESP2), one per waiter from position k + 1 on, at most n.
pub fn waiters(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    let page = queue_args::waiters(argv.bytes())?;
    let name = argv.key()?;
    settle(ctx, name)?;
    let listed = if blocking::anyone_waiting() {
        blocking::waiters_page(&Resource::of(ctx, name)?, page.offset, page.count)
    } else {
        Vec::new()
    };
    ctx.reply_array(listed.len())?;
    for w in &listed {
        reply_waiter(ctx, w)?;
    }
    Ok(())
}

/// Completes what `DLOCK.INFO` completes before reading (revocations, a
/// handoff that is due, outside a transaction or script), and refuses a
/// key of another type, without reading the holds (a semaphore's many
/// holds would cost O(h)).
fn settle(ctx: Ctx, name: *mut raw::RedisModuleString) -> Result<(), Error> {
    revoke::before_command(ctx, [name])?;
    if let Some(res) = blocking::waiting_resource(ctx, name)? {
        if !ctx.flags()?.in_transaction_or_script() {
            info::settle_before_reading(ctx, name, &res)?;
        }
    }
    LockKey::open_read(ctx, name)?.stored()?;
    Ok(())
}

/// One waiter's map: position, token, owner (when named), mode, limit,
/// permits (when above 1), priority, set (a set request's member count),
/// session (when bound), waited, timeout (ms left, -1: forever).
fn reply_waiter(ctx: Ctx, w: &blocking::QueuedRequest) -> Result<(), Error> {
    let pairs = 7
        + usize::from(w.owner.is_some())
        + usize::from(w.permits.is_some())
        + usize::from(w.set.is_some())
        + usize::from(w.session.is_some());
    ctx.reply_map(pairs)?;
    ctx.reply_bytes(b"position")?;
    ctx.reply_integer(w.position as i64)?;
    ctx.reply_bytes(b"token")?;
    ctx.reply_bytes(&w.token)?;
    if let Some(owner) = &w.owner {
        ctx.reply_bytes(b"owner")?;
        ctx.reply_bytes(owner)?;
    }
    ctx.reply_bytes(b"mode")?;
    ctx.reply_bytes(mode_name(w.mode))?;
    ctx.reply_bytes(b"limit")?;
    ctx.reply_integer(i64::from(w.limit))?;
    if let Some(k) = w.permits {
        ctx.reply_bytes(b"permits")?;
        ctx.reply_integer(i64::from(k))?;
    }
    ctx.reply_bytes(b"priority")?;
    ctx.reply_integer(i64::from(w.priority))?;
    if let Some(members) = w.set {
        ctx.reply_bytes(b"set")?;
        ctx.reply_integer(members as i64)?;
    }
    if let Some(session) = &w.session {
        ctx.reply_bytes(b"session")?;
        ctx.reply_bytes(session)?;
    }
    ctx.reply_bytes(b"waited")?;
    ctx.reply_integer(i64::try_from(w.waited_ms).unwrap_or(i64::MAX))?;
    ctx.reply_bytes(b"timeout")?;
    ctx.reply_integer(
        w.timeout_ms
            .map_or(-1, |ms| i64::try_from(ms).unwrap_or(i64::MAX)),
    )
}
