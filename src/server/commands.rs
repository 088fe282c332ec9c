//! One handler per command: parse, open the key, let `lock` decide, reply,
//! propagate the effect. Errors returned here become the error reply.

use redis_module::raw;

use super::api::{self, now_us, Ctx, Flags, LazyNow};
use super::blocking::{self, Resource};
use super::effects;
use super::ffi::Argv;
use super::handoff;
use super::job_runner;
use super::jobs;
use super::keys::LockKey;
use super::value::Stored;
use super::{holds, holds_info, sets};
use super::{quarantine, state, stats};
use crate::lock::lease::{AcquireDecision, LeaseRef};
use crate::lock::queue::Wants;
use crate::lock::{args, Error, Lease};

/// `DLOCK.ACQUIRE resource token ttl_ms [WAIT timeout_ms]` -> fence, or nil
/// when held by another (after `timeout_ms` with WAIT).
pub fn acquire(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    let req = args::acquire(argv.bytes(), &state::limits())?;
    refuse_on_replica(ctx)?;
    let name = argv.key()?;
    job_runner::before_command(ctx, [name])?;
    around_sets(ctx, name, || acquire_key(ctx, name, &req))
}

fn acquire_key(
    ctx: Ctx,
    name: *mut raw::RedisModuleString,
    req: &args::Acquire<'_>,
) -> Result<(), Error> {
    let mut key = LockKey::open_write(ctx, name)?;
    if !req.is_plain() || key.is_multi()? || !plain_queue(ctx, name)? {
        let blocks = req.wait_ms.is_some() && can_block(ctx.flags()?);
        return holds::acquire(ctx, &mut key, name, req, blocks);
    }
    let waiting = blocking::waiting_resource(ctx, name)?;
    if let Some(res) = &waiting {
        // Freed where no handoff could run yet (expiry, DEL, FLUSHALL): the
        // queue goes first, so a newcomer never barges ahead of it.
        if key.lease()?.is_none() {
            // This request will queue behind it: refuse it before anything
            // changes if it may not (a failed command changes nothing).
            if req.wait_ms.is_some() && can_block(ctx.flags()?) {
                req.check_new_token()?;
            }
            handoff::grant_next(ctx, &mut key, name, res)?;
        }
    }
    let current = key.lease()?;
    if current.is_none() {
        let queued = waiting
            .as_ref()
            .is_some_and(|r| blocking::waiters_on(r) > 0);
        if queued || quarantine::ms_left() > 0 {
            // A free lock that may not be granted now: the queue still holds
            // it (a quarantine delays its handoff), or grants are quarantined.
            return wait_or_refuse(ctx, &key, name, req, waiting, true);
        }
    }
    let now = LazyNow::default();
    let decision = state::with_clock(|clock| Lease::acquire(current, req, clock, || now.us()))?;
    // Busy is decided without reading the clock.
    let deadline = || now.us() / 1000 + req.ttl_ms;
    let (fence, deadline) = match decision {
        AcquireDecision::Busy => return wait_or_refuse(ctx, &key, name, req, waiting, false),
        AcquireDecision::Grant { fence } => {
            let deadline = deadline();
            key.store(LeaseRef::new(req.token, fence))?;
            key.set_deadline(deadline)?;
            quarantine::note_ttl(req.ttl_ms);
            effects::granted(ctx, name, req.token, fence, deadline)?;
            stats::GRANTS.add();
            (fence, deadline)
        }
        AcquireDecision::Refresh { fence } => {
            // The owner now knows its fence even if the waiter it queued
            // as has left: that grant is no longer revoked.
            blocking::confirm(|| Resource::of(ctx, name), req.token)?;
            let deadline = deadline();
            key.set_deadline(deadline)?;
            quarantine::note_ttl(req.ttl_ms);
            effects::deadline_moved(ctx, name, deadline)?;
            stats::REFRESHES.add();
            (fence, deadline)
        }
    };
    key.signal_modified()?;
    stats::notify(ctx, c"dlock.acquired", name);
    if let Some(res) = &waiting {
        // A refresh may shorten the lease: wake the queue at the new end.
        blocking::arm_expiry(res, deadline)?;
    }
    ctx.reply_integer(fence as i64)
}

/// The lock cannot be granted now: park the client with WAIT, else nil, or
/// the quarantine error when only the quarantine stands in the way (`free`:
/// nobody holds it).
fn wait_or_refuse(
    ctx: Ctx,
    key: &LockKey,
    name: *mut raw::RedisModuleString,
    req: &args::Acquire,
    waiting: Option<blocking::Resource>,
    free: bool,
) -> Result<(), Error> {
    let blocking_allowed = match req.wait_ms {
        Some(_) => can_block(ctx.flags()?),
        None => false,
    };
    let Some(timeout) = req.wait_ms.filter(|_| blocking_allowed) else {
        let queued = waiting.is_some_and(|r| blocking::waiters_on(&r) > 0);
        if free && !queued {
            quarantine::check()?;
        }
        stats::CONTENDED.add();
        return ctx.reply_null();
    };
    // A new waiter: its token must be within `dlock.max-token-length`.
    req.check_new_token()?;
    stats::CONTENDED.add();
    let res = match waiting {
        Some(res) => res,
        None => Resource::of(ctx, name)?,
    };
    blocking::block(
        ctx,
        res.clone(),
        req.token,
        Wants::of(&req.ask()),
        req.ttl_ms,
        timeout,
    )?;
    match key.deadline()? {
        Some(at) => blocking::arm_expiry(&res, at),
        None => Ok(()),
    }
}

/// `DLOCK.RELEASE resource token` -> 1 if the owner released it, else 0.
/// With waiters queued the lock passes straight to the head waiter.
/// A RELEASE that fails (no fence left for the handoff) changes nothing.
pub fn release(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    let req = args::release(argv.bytes(), &state::limits())?;
    refuse_on_replica(ctx)?;
    let name = argv.key()?;
    job_runner::before_command(ctx, [name])?;
    let released = around_sets(ctx, name, || release_key(ctx, name, req.token))?;
    ctx.reply_integer(i64::from(released))
}

/// Releases `token`'s hold of `name`; whether it held one.
pub fn release_key(
    ctx: Ctx,
    name: *mut raw::RedisModuleString,
    token: &[u8],
) -> Result<bool, Error> {
    let mut key = LockKey::open_write(ctx, name)?;
    if key.is_multi()? {
        return holds::release(ctx, &mut key, name, token);
    }
    if !releases(&key, token)? {
        return Ok(false);
    }
    if !plain_queue(ctx, name)? {
        // Readers, permits or owners wait: the holds model hands over.
        return holds::release(ctx, &mut key, name, token);
    }
    let waiting = blocking::waiting_resource(ctx, name)?;
    let next = match &waiting {
        Some(res) => handoff::prepare_grant(ctx, res)?,
        None => None,
    };
    // Subscribers see the release before the handoff it causes.
    stats::RELEASES.add();
    stats::notify(ctx, c"dlock.released", name);
    let handed_over = match (&waiting, next) {
        (Some(res), Some(next)) => handoff::commit_grant(ctx, &mut key, name, res, next)?,
        _ => false,
    };
    if !handed_over {
        key.delete()?;
        effects::released(ctx, name)?;
        key.signal_modified()?;
    }
    Ok(true)
}

/// Whether a release by `token` frees `key`, a plain lock (or none).
pub fn releases(key: &LockKey, token: &[u8]) -> Result<bool, Error> {
    Ok(owned_by(key, token)? || (cfg!(feature = "planted-release-any") && key.lease()?.is_some()))
}

/// How many fresh fences `release_key` of `token` would draw now on
/// `name` (a handoff of what it frees). Changes nothing (waiters whose
/// `WAIT` ran out may have been answered nil).
pub fn release_fences(
    ctx: Ctx,
    name: *mut raw::RedisModuleString,
    token: &[u8],
) -> Result<usize, Error> {
    let Some(res) = blocking::waiting_resource(ctx, name)? else {
        return Ok(0);
    };
    let key = LockKey::open_read(ctx, name)?;
    if !key.is_multi()? {
        if !releases(&key, token)? {
            return Ok(0);
        }
        if blocking::queue_is_plain(&res) {
            return Ok(usize::from(handoff::grant_due(ctx, &res, now_us())?));
        }
    }
    holds::release_fences(ctx, &key, &res, token)
}

/// As `release_fences`, for `extend_key`.
pub fn extend_fences(
    ctx: Ctx,
    name: *mut raw::RedisModuleString,
    token: &[u8],
    ttl_ms: u64,
    now_us: u64,
) -> Result<usize, Error> {
    let Some(res) = blocking::waiting_resource(ctx, name)? else {
        return Ok(0);
    };
    let key = LockKey::open_read(ctx, name)?;
    if !key.is_multi()? {
        // A plain lock's deadline moves; nothing is handed over.
        return Ok(0);
    }
    holds::extend_fences(ctx, &key, &res, token, ttl_ms, now_us)
}

/// `DLOCK.EXTEND resource token ttl_ms` -> 1 if the owner's lease now ends
/// `ttl_ms` from now, else 0.
pub fn extend(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    let req = args::extend(argv.bytes(), &state::limits())?;
    refuse_on_replica(ctx)?;
    let name = argv.key()?;
    job_runner::before_command(ctx, [name])?;
    let now = now_us();
    let held = around_sets(ctx, name, || {
        extend_key(ctx, name, req.token, req.ttl_ms, now)
    })?;
    ctx.reply_integer(i64::from(held))
}

/// Moves the end of `token`'s live hold of `name` to `ttl_ms` after
/// `now_us`; whether it held one.
pub fn extend_key(
    ctx: Ctx,
    name: *mut raw::RedisModuleString,
    token: &[u8],
    ttl_ms: u64,
    now_us: u64,
) -> Result<bool, Error> {
    let mut key = LockKey::open_write(ctx, name)?;
    if key.is_multi()? {
        return holds::extend(ctx, &mut key, name, token, ttl_ms, now_us);
    }
    if !owned_by(&key, token)? {
        return Ok(false);
    }
    let deadline = now_us / 1000 + ttl_ms;
    key.set_deadline(deadline)?;
    quarantine::note_ttl(ttl_ms);
    effects::deadline_moved(ctx, name, deadline)?;
    key.signal_modified()?;
    stats::EXTENDS.add();
    stats::notify(ctx, c"dlock.extended", name);
    if let Some(res) = blocking::waiting_resource(ctx, name)? {
        // A shorter lease must still be handed over on time.
        blocking::arm_expiry(&res, deadline)?;
    }
    Ok(true)
}

/// `DLOCK.INFO resource` -> nil when free, else a map of the lease (of
/// the holds, for a resource that is not a plain lock: `holds_info`).
pub fn info(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    args::info(argv.bytes())?;
    let name = argv.key()?;
    // Also inside a transaction or script: no answer may show a grant
    // whose waiter left.
    job_runner::before_command(ctx, [name])?;
    let waiting = blocking::waiting_resource(ctx, name)?;
    // Inside MULTI/EXEC or a script INFO only reads, at the transaction's
    // frozen time where the server has one: a transaction of INFOs is one
    // instant (nothing is decided between them; a pending handoff shows as
    // reserved).
    let in_unit = waiting.is_some() && ctx.flags()?.in_transaction_or_script();
    if let Some(res) = waiting.as_ref().filter(|_| !in_unit) {
        settle_before_reading(ctx, name, res)?;
    }
    let key = LockKey::open_read(ctx, name)?;
    let waiters = waiting.as_ref().map_or(0, blocking::waiters_on);
    // Revocations that must wait (writes are held back): their grants
    // reached nobody, and an owner reading its fence here would believe it
    // holds the lock its revocation is about to release.
    let revoked = if jobs::revocations_pending() {
        jobs::revoked_on(&Resource::of(ctx, name)?)
    } else {
        Vec::new()
    };
    let is_revoked =
        |token: &[u8], fence: u64| revoked.iter().any(|(t, f)| **t == *token && *f == fence);
    let now_ms = api::read_now_us(in_unit || multi_read_in_unit(ctx, &key)?) / 1000;
    if let Some(Stored::Multi(h)) = key.stored()? {
        // An admin's earlier expiry of the key ends every hold there
        // (`Work::load` writes that down at the next change).
        let clamped;
        let h = match key.deadline()? {
            Some(until) if h.deadline_ms().is_some_and(|latest| latest > until) => {
                let mut c = h.clone();
                c.clamp(until);
                clamped = c;
                &clamped
            }
            _ => h,
        };
        let unrevoked;
        let h = if h.holds.iter().any(|x| is_revoked(&x.token, x.fence)) {
            let mut c = h.clone();
            c.holds.retain(|x| !is_revoked(&x.token, x.fence));
            unrevoked = c;
            &unrevoked
        } else {
            h
        };
        if h.live(now_ms).next().is_some() {
            // The live holds decide the form, not when the dead ones are
            // dropped: one live plain hold answers as a plain lock.
            return holds_info::reply(ctx, h, now_ms, waiters);
        }
        // Every hold has passed its deadline: free (or reserved).
        if waiters > 0 {
            return reply_reserved(ctx, waiters);
        }
        return ctx.reply_null();
    }
    let lease = key.lease()?.filter(|l| !is_revoked(l.token(), l.fence()));
    let Some(lease) = lease else {
        if waiters > 0 {
            // Free, but reserved for its queue: the handoff waits for a
            // quarantine, paused writes or an evicted lease's deadline.
            return reply_reserved(ctx, waiters);
        }
        return ctx.reply_null();
    };
    // Like PTTL: -1 when an admin removed the expiry.
    let ttl = match key.deadline()? {
        Some(at) => at.saturating_sub(now_ms) as i64,
        None => -1,
    };
    holds_info::reply_plain(ctx, Some(lease.token()), lease.fence(), ttl, waiters)
}

/// Whether this is a read of a multi-hold value (whose holds' deadlines
/// are judged by the module's clock, not by key expiry) inside a
/// transaction or script. The flags are asked only then: they cost a call.
fn multi_read_in_unit(ctx: Ctx, key: &LockKey) -> Result<bool, Error> {
    Ok(key.is_multi().unwrap_or(false) && ctx.flags()?.in_transaction_or_script())
}

/// A resource nobody holds whose queue has a handoff pending: the same map
/// as a held lock, with no token (nil), fence 0 and ttl -2.
fn reply_reserved(ctx: Ctx, waiters: usize) -> Result<(), Error> {
    holds_info::reply_plain(ctx, None, 0, -2, waiters)
}

/// INFO must not show a resource as free while it has waiters: complete a
/// pending handoff first, unless writes are held back right now.
fn settle_before_reading(
    ctx: Ctx,
    name: *mut raw::RedisModuleString,
    res: &blocking::Resource,
) -> Result<(), Error> {
    if ctx.flags()?.is_replica() || jobs::writes_paused() {
        return Ok(());
    }
    if blocking::has_sets(res) {
        if let Err(e) = sets::settle(ctx, res) {
            ctx.log_warning(&format!("handoff before DLOCK.INFO failed: {e}"));
        }
        return Ok(());
    }
    let mut key = LockKey::open_write(ctx, name)?;
    if matches!(key.lease(), Ok(None)) {
        // If the handoff cannot happen (no fence left), INFO still answers:
        // the resource shows as reserved for its queue.
        if let Err(e) = handoff::grant_next(ctx, &mut key, name, res) {
            ctx.log_warning(&format!("handoff before DLOCK.INFO failed: {e}"));
        }
    }
    Ok(())
}

/// Runs a command on `name`. A resource on which a set request waits is
/// decided only with its component (`sets`): settled before `f` (pending
/// handoffs complete first) and after it (what `f` freed reaches the sets).
pub fn around_sets<R>(
    ctx: Ctx,
    name: *mut raw::RedisModuleString,
    f: impl FnOnce() -> Result<R, Error>,
) -> Result<R, Error> {
    let res = match blocking::waiting_resource(ctx, name)? {
        Some(res) if blocking::has_sets(&res) => res,
        _ => return f(),
    };
    sets::settle(ctx, &res)?;
    let result = f();
    if blocking::has_sets(&res) {
        if let Err(e) = sets::settle(ctx, &res) {
            ctx.log_warning(&format!("handoff to a set failed: {e}"));
        }
    }
    result
}

/// Whether the requests queued on `name` (if any) are all plain ones.
fn plain_queue(ctx: Ctx, name: *mut raw::RedisModuleString) -> Result<bool, Error> {
    Ok(match blocking::waiting_resource(ctx, name)? {
        Some(res) => blocking::queue_is_plain(&res),
        None => true,
    })
}

fn owned_by(key: &LockKey, token: &[u8]) -> Result<bool, Error> {
    Ok(key.lease()?.is_some_and(|l| l.is_owned_by(token)))
}

/// With `replica-read-only no` a replica accepts writes; a grant there would
/// be invisible to the master and lost on the next sync.
/// The role is cached from replication events, so the common case (a
/// master) reads no context flags.
pub fn refuse_on_replica(ctx: Ctx) -> Result<(), Error> {
    if !state::is_replica() {
        return Ok(());
    }
    let flags = ctx.flags()?;
    if flags.is_replica() && !flags.is_replicated() {
        return Err(Error::ReadOnlyReplica);
    }
    Ok(())
}

/// Inside MULTI, Lua, or a replayed command, WAIT degrades to a plain try.
pub fn can_block(flags: Flags) -> bool {
    !(flags.in_transaction_or_script() || flags.is_replicated() || flags.is_loading())
}
