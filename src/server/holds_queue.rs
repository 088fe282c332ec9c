//! The queue of a resource with several holds: who of the queued requests
//! fits now (`Holds::admit_queue`), with fences drawn before anything
//! changes, and the answers handed to the parking lot once the holds are
//! written.

use std::collections::HashMap;

use redis_module::raw;

use super::api::Ctx;
use super::blocking::{self, Resource};
use super::hold_work::{Deadlines, Work};
use super::{quarantine, state, stats};
use crate::lock::holds::QueueGrant as G;
use crate::lock::holds::NEVER;
use crate::lock::queue::Wants;
use crate::lock::Error;

/// Queued requests granted or refused by one step, to hand to the parking
/// lot once the holds are written.
#[derive(Default)]
pub struct QueueStep {
    pub granted: Vec<(u64, u64)>,
    pub retried: Vec<Box<[u8]>>,
    pub refused: Vec<(u64, Error)>,
}

impl QueueStep {
    pub fn is_empty(&self) -> bool {
        self.granted.is_empty() && self.refused.is_empty()
    }
}

/// Grants the queue of `res` as far as it now fits `work`'s holds: the run
/// of shared requests at the head, permits as far as they go, owners that
/// hold. Fences are drawn before anything changes; on `Err` only the fence
/// clock has moved.
pub fn plan_queue(ctx: Ctx, res: &Resource, work: &mut Work) -> Result<QueueStep, Error> {
    let mut step = QueueStep::default();
    let Some((queued, decisions)) = decide_queue(ctx, res, work)? else {
        return Ok(step);
    };
    let asks: Vec<_> = queued
        .iter()
        .map(|(_, token, wants, ttl)| ask_of(token, wants, *ttl))
        .collect();
    // Every fence first: a failure leaves the holds as they were.
    let mut fences: HashMap<usize, u64> = HashMap::with_capacity(decisions.len());
    let fence_of = |fences: &HashMap<usize, u64>, j: usize| fences.get(&j).copied();
    for (i, d) in &decisions {
        let fence = match d {
            Ok(G::Fresh) => Some(state::with_clock(|c| c.next(work.now_us))?),
            Ok(G::Retry { fence } | G::Owner { fence }) => Some(*fence),
            Ok(G::SameAs(j) | G::Duplicate(j)) => fence_of(&fences, *j),
            Err(_) => None,
        };
        if let Some(f) = fence {
            fences.insert(*i, f);
        }
    }
    for (i, d) in decisions {
        let (Some((id, token, _, ttl)), Some(ask)) = (queued.get(i), asks.get(i)) else {
            continue;
        };
        let grant = match d {
            Err(e) => {
                step.refused.push((*id, e));
                continue;
            }
            Ok(grant) => grant,
        };
        let Some(fence) = fence_of(&fences, i) else {
            continue;
        };
        match grant {
            G::Fresh | G::SameAs(_) | G::Owner { .. } => work.add(ask, fence),
            G::Retry { .. } => {
                work.move_deadline(token, *ttl);
                step.retried.push(token.clone());
            }
            G::Duplicate(_) => {}
        }
        step.granted.push((*id, fence));
    }
    Ok(step)
}

/// The requests queued on a resource (head first, as `blocking::queued`)
/// and, by index, who of them fits now.
type Decided = (
    Vec<(u64, Box<[u8]>, Wants, u64)>,
    Vec<(usize, Result<G, Error>)>,
);

/// Who of the queue of `res` fits `work`'s holds now, if anyone may be
/// granted: the queue and its decisions. Draws no fence, changes no hold.
fn decide_queue(ctx: Ctx, res: &Resource, work: &Work) -> Result<Option<Decided>, Error> {
    // A queue holding a set request is decided with its component, by
    // whoever changed it (`server::sets`).
    if quarantine::ms_left() > 0 || blocking::waiters_on(res) == 0 || blocking::has_sets(res) {
        return Ok(None);
    }
    let now_ms = work.now_ms();
    if let Some(until) = blocking::held_until(res).filter(|u| *u >= now_ms) {
        // An evicted lease is still believed held by its owner.
        blocking::arm_expiry(res, until)?;
        return Ok(None);
    }
    blocking::time_out_given_up(res, now_ms);
    if !blocking::has_live_waiter(res, now_ms) {
        return Ok(None);
    }
    let queued = blocking::queued(res);
    let asks: Vec<_> = queued
        .iter()
        .map(|(_, token, wants, ttl)| ask_of(token, wants, *ttl))
        .collect();
    let decisions = work.holds.admit_queue(&asks);
    if decisions.is_empty() {
        return Ok(None);
    }
    if !super::cluster::may_grant(ctx, &res.key)? {
        blocking::fail(Some(res), Error::SlotMoved);
        return Ok(None);
    }
    Ok(Some((queued, decisions)))
}

/// How many fresh fences `plan_queue` would draw for `res` on `work`'s
/// holds now.
pub fn fences_needed(ctx: Ctx, res: &Resource, work: &Work) -> Result<usize, Error> {
    Ok(match decide_queue(ctx, res, work)? {
        Some((_, decisions)) => decisions
            .iter()
            .filter(|(_, d)| matches!(d, Ok(G::Fresh)))
            .count(),
        None => 0,
    })
}

fn ask_of<'a>(token: &'a [u8], wants: &'a Wants, ttl_ms: u64) -> crate::lock::ask::Ask<'a> {
    crate::lock::ask::Ask {
        token,
        owner: wants.owner.as_deref(),
        mode: wants.mode,
        limit: wants.limit,
        ttl_ms,
    }
}

/// Answers the queued requests of a step (after the holds are written).
pub fn commit_queue(ctx: Ctx, name: *mut raw::RedisModuleString, step: QueueStep) {
    if step.is_empty() {
        return;
    }
    let retried: Vec<&[u8]> = step.retried.iter().map(|t| &**t).collect();
    let new_holds = step.granted.len();
    blocking::grant_entries(&step.granted, &retried, step.refused);
    for _ in 0..new_holds {
        stats::GRANTS.add();
        stats::HANDOFFS.add();
    }
    if new_holds > 0 {
        stats::notify(ctx, c"dlock.handoff", name);
    }
}

/// Wakes the queue of `res` when the earliest hold ends, so a waiter that
/// fits then is granted within milliseconds of that deadline.
pub fn arm_for_queue(res: &Resource, deadlines: Deadlines) -> Result<(), Error> {
    if let Some(at) = deadlines.earliest.filter(|d| *d < NEVER) {
        blocking::arm_expiry(res, at)?;
    }
    // Were the value evicted, its holders would believe they hold it until
    // the latest deadline: the queue waits that long (`hold_after_eviction`).
    if let Some(last) = deadlines.latest {
        blocking::note_deadline(res, last);
    }
    Ok(())
}
