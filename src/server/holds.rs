//! Commands on resources that are not plain locks: shared holds,
//! semaphores, an owner's several holds. `lock::holds` decides; this file
//! loads the holds, prunes the ones past their deadline (with their
//! effects), completes a pending handoff to the queue, applies the decision
//! and writes the holds back with their effects. Plain locks keep their own
//! path in `commands.rs`.

use redis_module::raw;

use super::api::Ctx;
use super::blocking::{self, Resource};
pub use super::hold_work::{Deadlines, Work};
use super::holds_queue::{arm_for_queue, commit_queue, plan_queue, QueueStep};
use super::keys::LockKey;
use super::{quarantine, state, stats};
use crate::lock::admission::Admission;
use crate::lock::args::Acquire;
use crate::lock::holds::Decision;
use crate::lock::queue::Wants;
use crate::lock::Error;

/// Prunes `key`'s holds and grants its queue as far as it fits: from a
/// timer, a revocation, or before a command decides. Whether anyone was
/// granted.
pub fn settle(
    ctx: Ctx,
    key: &mut LockKey,
    name: *mut raw::RedisModuleString,
    res: &Resource,
) -> Result<bool, Error> {
    let mut work = Work::load(key)?;
    let step = plan_queue(ctx, res, &mut work)?;
    let granted = !step.granted.is_empty();
    let holds = work.finish(ctx, key, name)?;
    commit_queue(ctx, name, step);
    arm_for_queue(res, holds)?;
    Ok(granted)
}

/// `DLOCK.ACQUIRE` with `SHARED`, `LIMIT` or `OWNER`, or on a resource
/// that is not a plain lock.
pub fn acquire(
    ctx: Ctx,
    key: &mut LockKey,
    name: *mut raw::RedisModuleString,
    req: &Acquire<'_>,
    can_block: bool,
) -> Result<(), Error> {
    let ask = req.ask();
    let mut work = Work::load(key)?;
    let waiting = blocking::waiting_resource(ctx, name)?;
    // A refused request changes nothing: judge it on the live holds first.
    let blocks = req.wait_ms.is_some() && can_block;
    match work.holds.admit(&ask, waiting.is_some())? {
        Admission::Retry { .. } => {}
        Admission::New { .. } => req.check_new_token()?,
        Admission::Busy if blocks => req.check_new_token()?,
        Admission::Busy => {}
    }
    // Every command completes a pending handoff before deciding.
    let mut step = match &waiting {
        Some(res) if work.freed => plan_queue(ctx, res, &mut work)?,
        _ => QueueStep::default(),
    };
    let queued = waiting
        .as_ref()
        .is_some_and(|r| blocking::waiters_on(r) > step.granted.len() + step.refused.len());
    let left = quarantine::ms_left();
    let quarantined = (left > 0).then_some(left);
    let decision = state::with_clock(|clock| {
        work.holds
            .decide(&ask, queued, quarantined, clock, || work.now_us)
    });
    let decision = match decision {
        Err(Error::Quarantine { .. })
            if blocks
                && work.holds.admit(&ask, queued) == Ok(Admission::New { owner_fence: None }) =>
        {
            // A new owner waits out the quarantine in the queue, as a
            // plain request does.
            Ok(Decision::Busy)
        }
        other => other,
    };
    let reply = match decision {
        // Nothing pending was completed: nothing to write either.
        Err(e) if step.is_empty() => return Err(e),
        Err(e) => Err(e),
        Ok(Decision::Busy) => Ok(None),
        // The queue may have emptied since the check above: a new hold
        // still needs a token within the configured limit.
        Ok(Decision::Grant { .. }) if req.check_new_token().is_err() => {
            req.check_new_token().map(|_| None)
        }
        Ok(Decision::Grant { fence }) => {
            work.add(&ask, fence);
            stats::GRANTS.add();
            Ok(Some(fence))
        }
        Ok(Decision::Refresh { fence }) => {
            // The owner knows its fence now: a grant of this token still in
            // flight stands, also one made by this very step.
            step.retried.push(req.token.into());
            blocking::confirm(|| Resource::of(ctx, name), req.token)?;
            work.move_deadline(req.token, req.ttl_ms);
            stats::REFRESHES.add();
            Ok(Some(fence))
        }
    };
    let holds = work.finish(ctx, key, name)?;
    if waiting.is_some() {
        commit_queue(ctx, name, step);
    }
    let fence = match reply? {
        Some(fence) => fence,
        None => return wait_or_refuse(ctx, name, req, waiting, holds, blocks),
    };
    stats::notify(ctx, c"dlock.acquired", name);
    if let Some(res) = &waiting {
        arm_for_queue(res, holds)?;
    }
    ctx.reply_integer(fence as i64)
}

fn wait_or_refuse(
    ctx: Ctx,
    name: *mut raw::RedisModuleString,
    req: &Acquire<'_>,
    waiting: Option<Resource>,
    holds: Deadlines,
    blocks: bool,
) -> Result<(), Error> {
    stats::CONTENDED.add();
    let timeout = match req.wait_ms {
        Some(t) if blocks => t,
        _ => return ctx.reply_null(),
    };
    let res = match waiting {
        Some(res) => res,
        None => Resource::of(ctx, name)?,
    };
    let wants = Wants::of(&req.ask());
    blocking::block(ctx, res.clone(), req.token, wants, req.ttl_ms, timeout)?;
    arm_for_queue(&res, holds)
}

/// `DLOCK.RELEASE` of one hold; the queue is granted as far as it now fits.
pub fn release(
    ctx: Ctx,
    key: &mut LockKey,
    name: *mut raw::RedisModuleString,
    token: &[u8],
) -> Result<bool, Error> {
    let mut work = Work::load(key)?;
    let released = work.drop_hold(token);
    let waiting = blocking::waiting_resource(ctx, name)?;
    let step = match &waiting {
        Some(res) if work.freed => plan_queue(ctx, res, &mut work)?,
        _ => QueueStep::default(),
    };
    if released {
        stats::RELEASES.add();
        stats::notify(ctx, c"dlock.released", name);
    }
    let holds = work.finish(ctx, key, name)?;
    if let Some(res) = &waiting {
        commit_queue(ctx, name, step);
        arm_for_queue(res, holds)?;
    }
    Ok(released)
}

/// `DLOCK.EXTEND` of one live hold, its new deadline counted from
/// `now_us` (one clock read for every member of a `MEXTEND`).
pub fn extend(
    ctx: Ctx,
    key: &mut LockKey,
    name: *mut raw::RedisModuleString,
    token: &[u8],
    ttl_ms: u64,
    now_us: u64,
) -> Result<bool, Error> {
    let mut work = Work::load_at(key, now_us)?;
    let held = work.holds.hold_of(token).is_some();
    if held {
        work.move_deadline(token, ttl_ms);
    }
    let waiting = blocking::waiting_resource(ctx, name)?;
    let step = match &waiting {
        Some(res) if work.freed => plan_queue(ctx, res, &mut work)?,
        _ => QueueStep::default(),
    };
    let holds = work.finish(ctx, key, name)?;
    if held {
        // Counted once nothing can fail any more: a failed EXTEND counts
        // nothing.
        stats::EXTENDS.add();
        stats::notify(ctx, c"dlock.extended", name);
    }
    if let Some(res) = &waiting {
        commit_queue(ctx, name, step);
        arm_for_queue(res, holds)?;
    }
    Ok(held)
}

/// How many fresh fences `release` of `token` would draw now for the
/// queue of `res` (`key`'s). Changes nothing (waiters whose `WAIT` ran out
/// may have been answered nil).
pub fn release_fences(
    ctx: Ctx,
    key: &LockKey,
    res: &Resource,
    token: &[u8],
) -> Result<usize, Error> {
    let mut work = Work::load(key)?;
    work.drop_hold(token);
    queue_fences(ctx, res, &work)
}

/// As `release_fences`, for `extend` of `token`'s hold by `ttl_ms` at
/// `now_us`: a hold of another that ended, pruned, may let the queue in.
pub fn extend_fences(
    ctx: Ctx,
    key: &LockKey,
    res: &Resource,
    token: &[u8],
    ttl_ms: u64,
    now_us: u64,
) -> Result<usize, Error> {
    let mut work = Work::load_at(key, now_us)?;
    // Where `extend` moves the deadline (not recorded: nothing is written).
    work.holds.set_deadline(token, work.now_ms() + ttl_ms);
    queue_fences(ctx, res, &work)
}

fn queue_fences(ctx: Ctx, res: &Resource, work: &Work) -> Result<usize, Error> {
    if !work.freed {
        return Ok(0);
    }
    super::holds_queue::fences_needed(ctx, res, work)
}

/// Revokes the hold `token` was granted under `fence`, if the key still
/// has exactly it; the queue is granted as far as it now fits.
pub fn revoke(
    ctx: Ctx,
    key: &mut LockKey,
    name: *mut raw::RedisModuleString,
    res: &Resource,
    token: &[u8],
    fence: u64,
) -> Result<bool, Error> {
    let mut work = Work::load(key)?;
    let held = work.holds.hold_of(token).is_some_and(|h| h.fence == fence);
    if held {
        stats::notify(ctx, c"dlock.revoked", name);
        work.drop_hold(token);
    }
    let step = plan_queue(ctx, res, &mut work)?;
    let holds = work.finish(ctx, key, name)?;
    commit_queue(ctx, name, step);
    arm_for_queue(res, holds)?;
    Ok(held)
}
