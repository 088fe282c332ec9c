//! One handler per command: parse, open the key, let `lock` decide, reply,
//! propagate the effect. Errors returned here become the error reply.

use super::api::{now_us, Ctx};
use super::effects;
use super::ffi::Argv;
use super::keys::LockKey;
use super::state;
use crate::lock::lease::AcquireDecision;
use crate::lock::{args, Error, Lease};

/// `DLOCK.ACQUIRE resource token ttl_ms` -> fence, or nil when held by another.
pub fn acquire(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    let req = args::acquire(argv.bytes(), state::max_token())?;
    refuse_on_replica(ctx)?;
    let name = argv.key()?;
    let mut key = LockKey::open_write(ctx, name)?;
    let now = now_us();
    let deadline = now / 1000 + req.ttl_ms;
    let decision = state::with_clock(|clock| Lease::acquire(key.lease()?, &req, clock, now))?;
    let fence = match decision {
        AcquireDecision::Busy => return ctx.reply_null(),
        AcquireDecision::Grant(lease) => {
            let fence = lease.fence();
            key.store(lease)?;
            fence
        }
        AcquireDecision::Refresh { fence } => fence,
    };
    key.set_deadline(deadline)?;
    effects::granted(ctx, name, req.token, fence, deadline)?;
    key.signal_modified()?;
    ctx.reply_integer(fence as i64)
}

/// `DLOCK.RELEASE resource token` -> 1 if the owner released it, else 0.
pub fn release(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    let req = args::release(argv.bytes(), state::max_token())?;
    refuse_on_replica(ctx)?;
    let name = argv.key()?;
    let mut key = LockKey::open_write(ctx, name)?;
    if !owned_by(&key, req.token)? {
        return ctx.reply_integer(0);
    }
    key.delete()?;
    effects::released(ctx, name)?;
    key.signal_modified()?;
    ctx.reply_integer(1)
}

/// `DLOCK.EXTEND resource token ttl_ms` -> 1 if the owner's lease now ends
/// `ttl_ms` from now, else 0.
pub fn extend(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    let req = args::extend(argv.bytes(), state::max_token())?;
    refuse_on_replica(ctx)?;
    let name = argv.key()?;
    let mut key = LockKey::open_write(ctx, name)?;
    let Some(fence) = key
        .lease()?
        .filter(|l| l.is_owned_by(req.token))
        .map(Lease::fence)
    else {
        return ctx.reply_integer(0);
    };
    let deadline = now_us() / 1000 + req.ttl_ms;
    key.set_deadline(deadline)?;
    effects::granted(ctx, name, req.token, fence, deadline)?;
    key.signal_modified()?;
    ctx.reply_integer(1)
}

/// `DLOCK.INFO resource` -> nil when free, else a map of the lease.
pub fn info(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    args::info(argv.bytes())?;
    let key = LockKey::open_read(ctx, argv.key()?)?;
    let Some(lease) = key.lease()? else {
        return ctx.reply_null();
    };
    // Like PTTL: -1 when an admin removed the expiry.
    let ttl = match key.deadline()? {
        Some(at) => at.saturating_sub(now_us() / 1000) as i64,
        None => -1,
    };
    ctx.reply_map(4)?;
    ctx.reply_bytes(b"token")?;
    ctx.reply_bytes(lease.token())?;
    ctx.reply_bytes(b"fence")?;
    ctx.reply_integer(lease.fence() as i64)?;
    ctx.reply_bytes(b"ttl")?;
    ctx.reply_integer(ttl)?;
    ctx.reply_bytes(b"waiters")?;
    ctx.reply_integer(0)
}

fn owned_by(key: &LockKey, token: &[u8]) -> Result<bool, Error> {
    Ok(key.lease()?.is_some_and(|l| l.is_owned_by(token)))
}

/// With `replica-read-only no` a replica accepts writes; a grant there would
/// be invisible to the master and lost on the next sync.
fn refuse_on_replica(ctx: Ctx) -> Result<(), Error> {
    let flags = ctx.flags()?;
    if flags.is_replica() && !flags.is_replicated() {
        return Err(Error::ReadOnlyReplica);
    }
    Ok(())
}
