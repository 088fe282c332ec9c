//! The planner: what one step on a group of resources does, decided as a
//! pure function. A group is one resource, or a component of queues that
//! share set requests (`component`). A step is a command (acquire, release,
//! extend, revoke) or an event that only serves the queues (a timer, a
//! waiter that left, `DLOCK.INFO`), decided together with the queues it
//! touches, in rank order (`crate::queue::Rank`), the command's own request
//! at its rank among them.
//!
//! The result is a `Plan`: the hold operations per resource, in order, the
//! queued requests granted or refused, the reply, the keyspace events, the
//! counters and the fence clock after the step. Every refusal and every
//! error is decided before the plan exists, so a command either changes
//! nothing (`Err`) or the server carries out the whole plan.
//!
//! What a step is decided on is in `input.rs`, what it returns in
//! `output.rs`; this file is the function between them.

use crate::ask::Ask;
use crate::fence::FenceClock;
use crate::plan::component::{admit_request, admit_reserved, Granted, Queued};
use crate::queue::Rank;
use crate::resource::admission::{Admission, Summary};
use crate::Error;

mod input;
mod output;
pub use input::{Command, Found, Member, QueueSeen, Step, Waiting};
pub use output::{Counts, Event, Op, Outcome, Plan, Who};

/// Decides `step`, drawing fences from a copy of `clock`. `owns_slot`:
/// whether this node may grant the group's slot now (Redis Cluster: not
/// while it migrates or after it moved), asked only when the step would
/// grant a queued request.
pub fn plan(
    step: &Step<'_, '_>,
    clock: &FenceClock,
    owns_slot: impl FnOnce() -> Result<bool, Error>,
) -> Result<Plan, Error> {
    let plan = plan_served(step, clock)?;
    if !plan.granted.is_empty() && !owns_slot()? {
        return Ok(Plan::new(Outcome::SendAway, clock));
    }
    Ok(plan)
}

/// `plan`, on a slot this node may grant.
fn plan_served(step: &Step<'_, '_>, clock: &FenceClock) -> Result<Plan, Error> {
    let n = step.command.members().min(step.members.len());
    let mut plan = Plan::new(Outcome::Settled, clock);
    if let Command::Acquire {
        ask,
        blocks,
        new_token,
        ..
    } = &step.command
    {
        precheck(step.members, n, ask, *blocks, new_token)?;
        // Past the precheck, a member the token holds is a retry: its new
        // deadline must stay within the hold's cap.
        within_caps(step, n, ask.token, ask.ttl_ms)?;
    }
    if let (Command::Resize { .. }, Some(m)) = (&step.command, step.members.first()) {
        if !m.holds.is_empty() && m.holds.limit < 2 {
            return Err(Error::ResizeNotSemaphore);
        }
    }
    if let Command::Extend { token, ttl_ms, .. } = &step.command {
        // A session's keep-alive keeps its holds: no member moves.
        let bound = |m: &Member<'_>| m.holds.hold_of(token).is_some_and(|h| h.session.is_some());
        if step.members.iter().take(n).any(bound) {
            return Err(Error::BoundHold);
        }
        within_caps(step, n, token, *ttl_ms)?;
    }
    // The holds as the command's own change leaves them: the stored
    // indexes, read in place, without the holds that ended.
    let mut after: Vec<Summary<'_>> = step.members.iter().map(|m| m.holds.summary()).collect();
    command_change(step, n, &mut plan, &mut after);
    // The command's request is decided at its rank among the queued ones.
    let (new_at, command_rank) = match &step.command {
        Command::Acquire { priority, .. } => {
            let rank = Rank::arriving(priority.key);
            (
                Some(step.waiting.partition_point(|w| w.rank < rank)),
                Some(rank),
            )
        }
        _ => (None, None),
    };
    let reserved: Vec<Option<usize>> = step
        .members
        .iter()
        .map(|m| reservation(m, command_rank, step.quarantined_ms > 0))
        .collect();
    let frozen = |members: &[usize]| {
        step.quarantined_ms > 0
            || members
                .iter()
                .any(|i| step.members.get(*i).is_some_and(|m| m.held_elsewhere))
    };
    let mut queued: Vec<Queued<'_>> = step
        .waiting
        .iter()
        .map(|w| Queued {
            members: w.members.clone(),
            ask: w.ask,
            frozen: frozen(&w.members),
            stays: true,
        })
        .collect();
    if let (Command::Acquire { ask, blocks, .. }, Some(at)) = (&step.command, new_at) {
        let at = at.min(queued.len());
        queued.insert(
            at,
            Queued {
                members: (0..n).collect(),
                ask: *ask,
                frozen: false,
                stays: *blocks,
            },
        );
    }
    // A queued request's index in `step.waiting`, from its index in
    // `queued` (where the command's request may sit among them).
    let waiting_at = |i: usize| match new_at {
        Some(at) if i > at => i - 1,
        _ => i,
    };
    // A handover's target is decided first, past the reservations; the
    // rest of the queue is then served as usual, without it.
    let handed = handover::decide(step, &queued, &plan, &mut after)?;
    if let Some(q) = handed.and_then(|(i, _)| queued.get_mut(i)) {
        q.frozen = true;
        q.stays = false;
    }
    let mut decisions: Vec<(usize, Result<Granted, Error>)> =
        handed.map(|(i, g)| (i, Ok(g))).into_iter().collect();
    decisions.extend(admit_reserved(after, &reserved, &queued));
    let fences = draw_fences(step, &decisions, new_at, &mut plan)?;
    for (i, _) in &mut plan.refused {
        *i = waiting_at(*i);
    }
    for (i, d) in decisions {
        let (Ok(grant), Some(q)) = (d, queued.get(i)) else {
            continue;
        };
        let Some(fence) = fences.get(i).copied().flatten() else {
            continue;
        };
        let is_new = Some(i) == new_at;
        let who = if is_new {
            Who::Command
        } else {
            Who::Queued(waiting_at(i))
        };
        match grant {
            // A queued request of a token granted earlier in this step: that
            // grant answers it too.
            Granted::AnsweredBy(_) if !is_new => {}
            // Its token's own holds, or (a new request asking again what its
            // token was granted earlier in this step) a retry of that grant:
            // new deadlines, and its client now knows the fence.
            Granted::Retry { .. } | Granted::AnsweredBy(_) => {
                let ttl_ms = q.ask.ttl_ms;
                plan.ops
                    .extend(q.members.iter().map(|m| (*m, Op::Move { who, ttl_ms })));
                plan.confirmed.push(who);
            }
            Granted::Fresh | Granted::SameOwnerAs(_) | Granted::Owner { .. } => {
                for m in &q.members {
                    plan.ops.push((*m, Op::Add { who, fence }));
                }
            }
        }
        if is_new {
            let refresh = matches!(grant, Granted::Retry { .. } | Granted::AnsweredBy(_));
            if refresh {
                plan.counts.refreshes += 1;
            } else {
                plan.counts.grants += 1;
            }
            plan.outcome = Outcome::Granted { fence, refresh };
        } else {
            plan.granted.push((waiting_at(i), fence));
            plan.counts.grants += 1;
            plan.counts.handoffs += 1;
            if handed.is_some_and(|(t, _)| t == i) {
                plan.counts.handovers += 1;
            }
        }
    }
    let mut handed = vec![false; step.members.len()];
    for (i, _) in &plan.granted {
        let members = step.waiting.get(*i).map(|w| &w.members[..]);
        for m in members.unwrap_or_default() {
            if let Some(h) = handed.get_mut(*m) {
                *h = true;
            }
        }
    }
    let handoffs = handed.iter().enumerate().filter(|(_, h)| **h);
    plan.events
        .extend(handoffs.map(|(m, _)| (m, Event::Handoff)));
    if let Command::Acquire { blocks, .. } = &step.command {
        match plan.outcome {
            Outcome::Granted { .. } => plan.events.extend((0..n).map(|m| (m, Event::Acquired))),
            // Waits behind the queue or the quarantine, or nil.
            Outcome::Wait | Outcome::Settled if *blocks => {
                plan.outcome = Outcome::Wait;
                plan.counts.contended += 1;
            }
            _ => {
                plan.outcome = Outcome::Busy;
                plan.counts.contended += 1;
            }
        }
    }
    Ok(plan)
}

/// `Error::MaxHold` when the token's hold on one of the command's members
/// would end `ttl_ms` from now, past its cap (`MAXHOLD`): no member moves.
fn within_caps(step: &Step<'_, '_>, n: usize, token: &[u8], ttl_ms: u64) -> Result<(), Error> {
    let now_ms = step.now_us / 1000;
    let deadline = now_ms.saturating_add(ttl_ms);
    for m in step.members.iter().take(n) {
        if let Some(cap) = m.holds.hold_of(token).and_then(|h| h.cap) {
            cap.allows(deadline, now_ms)?;
        }
    }
    Ok(())
}

/// Where the requests a step leaves waiting on `m` start to reserve it,
/// as an index into the requests decided (the queued ones with the
/// command's own at its rank): the command's request is decided before
/// that reservation when it outranks the first request left waiting.
/// A member whose waiters are frozen (`frozen`: the quarantine, or the
/// member still believed held elsewhere) is reserved ahead of every
/// request: one that outranks them is kept out too, as the plain path
/// keeps it out.
fn reservation(m: &Member<'_>, command_rank: Option<Rank>, frozen: bool) -> Option<usize> {
    if m.has_waiters && (frozen || m.held_elsewhere) {
        return Some(0);
    }
    let from = m.reserved_from?;
    match (m.reserved_rank, command_rank) {
        (Some(left), Some(command)) if command < left => Some(from + 1),
        _ => Some(from),
    }
}

/// A new request refused before anything else is decided, on the holds as
/// they are: an error of the rules, or a token too long for a new hold or
/// a wait.
fn precheck(
    members: &[Member<'_>],
    n: usize,
    ask: &Ask<'_>,
    blocks: bool,
    new_token: &Result<(), Error>,
) -> Result<(), Error> {
    let admission = if n == 1 {
        let m = members.first().ok_or(Error::Internal("no resource"))?;
        // A new request's PERMITS within a resized limit (without a resize
        // the limits must match, and the parser held k to its own).
        let held = &m.holds;
        if held.resized && ask.permits() > held.limit && held.hold_of(ask.token).is_none() {
            return Err(Error::PermitsRange);
        }
        match m.holds.admit(ask, m.has_waiters)? {
            Admission::Busy => None,
            a => Some(a),
        }
    } else {
        let summaries: Vec<_> = members.iter().take(n).map(|m| m.holds.summary()).collect();
        let waits: Vec<bool> = members.iter().take(n).map(|m| m.has_waiters).collect();
        let q = Queued {
            members: (0..n).collect(),
            ask: *ask,
            frozen: false,
            stays: true,
        };
        admit_request(&summaries, &waits, &q).transpose()?
    };
    match admission {
        Some(Admission::Retry { .. }) => Ok(()),
        Some(_) => new_token.clone(),
        None if blocks => new_token.clone(),
        None => Ok(()),
    }
}

/// The command's own change to the holds: the released, revoked or
/// extended holds, with their events and counters.
fn command_change<'x>(step: &Step<'x, '_>, n: usize, plan: &mut Plan, after: &mut [Summary<'x>]) {
    let members = step.members.iter().take(n).enumerate();
    let mut count = 0;
    match step.command {
        Command::Settle | Command::Acquire { .. } => return,
        Command::Resize { limit, .. } => {
            // Nothing holds it: nothing changes, the next LIMIT sets it.
            let held = step
                .members
                .first()
                .map(|m| m.holds)
                .filter(|h| !h.is_empty());
            plan.outcome = Outcome::Count(held.map_or(0, |h| h.limit as usize));
            if held.is_some() {
                plan.ops.push((0, Op::SetLimit(limit)));
                if let Some(s) = after.first_mut() {
                    s.set_limit(limit);
                }
            }
            return;
        }
        Command::Release { token, .. } => {
            for (i, m) in members {
                if m.holds.hold_of(token).is_some() {
                    end_hold(plan, after, i, token, Event::Released);
                    plan.counts.releases += 1;
                    count += 1;
                }
            }
        }
        Command::Revoke { token, fence, .. } => {
            for (i, m) in members {
                if m.holds.hold_of(token).is_some_and(|h| h.fence == fence) {
                    end_hold(plan, after, i, token, Event::Revoked);
                    count += 1;
                }
            }
        }
        Command::Extend { token, ttl_ms, .. } => {
            for (i, m) in members {
                if m.holds.hold_of(token).is_some() {
                    let who = Who::Command;
                    plan.ops.push((i, Op::Move { who, ttl_ms }));
                    plan.events.push((i, Event::Extended));
                    plan.counts.extends += 1;
                    count += 1;
                }
            }
        }
    }
    plan.outcome = Outcome::Count(count);
}

fn end_hold<'x>(
    plan: &mut Plan,
    after: &mut [Summary<'x>],
    i: usize,
    token: &'x [u8],
    event: Event,
) {
    plan.ops.push((i, Op::Drop));
    plan.events.push((i, event));
    if let Some(s) = after.get_mut(i) {
        s.remove(token);
    }
}

/// The fence of every granted request, by index, drawn in enqueue order
/// from `plan.clock`; the new request's refusals are the step's error.
fn draw_fences(
    step: &Step<'_, '_>,
    decisions: &[(usize, Result<Granted, Error>)],
    new_at: Option<usize>,
    plan: &mut Plan,
) -> Result<Vec<Option<u64>>, Error> {
    let len = decisions.iter().map(|(i, _)| i + 1).max().unwrap_or(0);
    let mut fences: Vec<Option<u64>> = vec![None; len];
    let quarantined = step.quarantined_ms;
    for (i, d) in decisions {
        let is_new = Some(*i) == new_at;
        let fence = match d {
            Ok(Granted::Fresh) if is_new => {
                if let Command::Acquire { new_token, .. } = &step.command {
                    new_token.clone()?;
                }
                if quarantined > 0 {
                    // A new owner waits out the quarantine, or is refused.
                    match step.command {
                        Command::Acquire { blocks: true, .. } => plan.outcome = Outcome::Wait,
                        _ => {
                            return Err(Error::Quarantine {
                                ms_left: quarantined,
                            })
                        }
                    }
                    continue;
                }
                plan.clock.next(step.now_us)?
            }
            Ok(Granted::Owner { .. }) if is_new && quarantined > 0 => {
                return Err(Error::Quarantine {
                    ms_left: quarantined,
                })
            }
            Ok(Granted::Fresh) => plan.clock.next(step.now_us)?,
            Ok(Granted::Retry { fence } | Granted::Owner { fence }) => *fence,
            Ok(Granted::SameOwnerAs(j) | Granted::AnsweredBy(j)) => match fences.get(*j) {
                Some(Some(f)) => *f,
                _ => continue,
            },
            Err(e) if is_new => return Err(e.clone()),
            Err(e) => {
                plan.refused.push((*i, e.clone()));
                continue;
            }
        };
        if let Some(slot) = fences.get_mut(*i) {
            *slot = Some(fence);
        }
    }
    Ok(fences)
}

pub mod component;
mod handover;
pub mod plain;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod handover_tests;

#[cfg(test)]
mod max_hold_tests;

#[cfg(test)]
mod properties;

#[cfg(test)]
mod differential_tests;

#[cfg(test)]
mod plain_vs_step_tests;
