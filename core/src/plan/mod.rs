//! The planner: what one step on a group of resources does, decided as a
//! pure function. A group is one resource, or a component of queues that
//! share set requests (`component`). A step is a command (acquire, release,
//! extend, revoke) or an event that only serves the queues (a timer, a
//! waiter that left, `DLOCK.INFO`), decided together with the queues it
//! touches, in enqueue order, the command's own request last.
//!
//! The result is a `Plan`: the hold operations per resource, in order, the
//! queued requests granted or refused, the reply, the keyspace events, the
//! counters and the fence clock after the step. Every refusal and every
//! error is decided before the plan exists, so a command either changes
//! nothing (`Err`) or the server carries out the whole plan.
//!
//! Longer than 400 lines because the planner's input, its output and the
//! one function between them are one contract; its tests sit beside it.

use crate::ask::Ask;
use crate::fence::FenceClock;
use crate::plan::component::{admit_request, admit_reserved, Granted, Queued};
use crate::resource::admission::{Admission, Summary};
use crate::resource::holds::Holds;
use crate::Error;

/// One resource of a step, as the server found it.
#[derive(Debug, Clone, Copy)]
pub struct Member<'h> {
    /// Its live holds: the dead ones pruned, an admin's expiry applied.
    pub holds: &'h Holds,
    /// Someone waits in its queue.
    pub has_waiters: bool,
    /// Requests that this step leaves waiting (not among its `waiting`)
    /// wait in its queue, the first of them queued just before
    /// `waiting[i]`: `Some(i)` (`waiting.len()`: after all of them, before
    /// the command's own request). From there on they keep the resource
    /// reserved: only owners that hold pass it.
    pub reserved_from: Option<usize>,
    /// Still believed held by the owner of an evicted lease: nobody queued
    /// is granted it yet.
    pub held_elsewhere: bool,
}

/// How a step finds one resource's queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueSeen {
    /// The step serves the queues: `requests`, whether any of its
    /// `Step::waiting` waits here; `left_from`, where the requests it leaves
    /// waiting start (`Member::reserved_from`).
    Served {
        requests: bool,
        left_from: Option<usize>,
    },
    /// The step leaves the queue as it is: `waiters`, whether anyone waits
    /// (the resource is then reserved for them, before any request).
    Left { waiters: bool },
}

impl<'h> Member<'h> {
    /// A resource with its live `holds` and its queue as the step finds it;
    /// `held_until`: the deadline (unix ms) an evicted lease's owner still
    /// believes it holds the resource until, if any, at `now_ms`.
    pub fn found(holds: &'h Holds, queue: QueueSeen, held_until: Option<u64>, now_ms: u64) -> Self {
        let (requests, reserved_from) = match queue {
            QueueSeen::Served {
                requests,
                left_from,
            } => (requests, left_from),
            QueueSeen::Left { waiters } => (false, waiters.then_some(0)),
        };
        Member {
            holds,
            has_waiters: reserved_from.is_some() || requests,
            reserved_from,
            held_elsewhere: held_until.is_some_and(|u| u >= now_ms),
        }
    }
}

/// A request queued on the group, in enqueue order.
#[derive(Debug, Clone)]
pub struct Waiting<'a> {
    /// Indexes of its resources in the group.
    pub members: Vec<usize>,
    pub ask: Ask<'a>,
}

/// What a step does besides serving the queues. The command's resources
/// are the first `members` resources of the group.
#[derive(Debug, Clone)]
pub enum Command<'a> {
    /// Serve the queues only.
    Settle,
    /// A hold of every member (`DLOCK.ACQUIRE`, `DLOCK.MACQUIRE`).
    /// `blocks`: it may wait in the queue (`WAIT`, outside a transaction);
    /// `new_token`: whether its token may start a new hold or wait
    /// (`dlock.max-token-length`).
    Acquire {
        ask: Ask<'a>,
        members: usize,
        blocks: bool,
        new_token: Result<(), Error>,
    },
    /// The token's hold of each member ends.
    Release { token: &'a [u8], members: usize },
    /// The token's hold of each member ends `ttl_ms` after now.
    Extend {
        token: &'a [u8],
        ttl_ms: u64,
        members: usize,
    },
    /// A grant that never reached its waiter ends, where the token still
    /// holds it under `fence`.
    Revoke {
        token: &'a [u8],
        fence: u64,
        members: usize,
    },
}

/// What a step finds on one of its own resources when it opens it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Found {
    /// Nothing holds it.
    pub freed: bool,
    /// Holds that ended were pruned.
    pub pruned: bool,
    /// The command's token holds it.
    pub held_by_token: bool,
}

impl<'a> Command<'a> {
    /// The token the command names (none when it only serves the queues).
    pub fn token(&self) -> &'a [u8] {
        match self {
            Command::Settle => b"",
            Command::Acquire { ask, .. } => ask.token,
            Command::Release { token, .. }
            | Command::Extend { token, .. }
            | Command::Revoke { token, .. } => token,
        }
    }

    /// The same command on its first `n` resources (those that are locks,
    /// when a resource of another type left the step).
    pub fn on(&self, n: usize) -> Command<'a> {
        let mut command = self.clone();
        match &mut command {
            Command::Settle => {}
            Command::Acquire { members, .. }
            | Command::Release { members, .. }
            | Command::Extend { members, .. }
            | Command::Revoke { members, .. } => *members = n,
        }
        command
    }

    /// Whether a resource of another type among its own refuses the
    /// command; otherwise (serving the queues, a revocation) its waiters
    /// are answered with the error and the step goes on without it.
    pub fn refuses_other_types(&self) -> bool {
        !matches!(self, Command::Settle | Command::Revoke { .. })
    }

    /// Whether the step serves the queue of one of its resources, `found`
    /// so: serving the queues, a revocation, a hold that ended (pruned, or
    /// released by its holder), or an acquire where nothing holds (a
    /// handoff may be due). A release or an extend of nothing held changes
    /// nothing.
    pub fn serves_queue(&self, found: Found) -> bool {
        match self {
            Command::Settle | Command::Revoke { .. } => true,
            Command::Acquire { .. } => found.freed,
            Command::Release { .. } => found.pruned || found.held_by_token,
            Command::Extend { .. } => found.pruned,
        }
    }

    fn members(&self) -> usize {
        match self {
            Command::Settle => 0,
            Command::Acquire { members, .. }
            | Command::Release { members, .. }
            | Command::Extend { members, .. }
            | Command::Revoke { members, .. } => *members,
        }
    }
}

/// Everything a step is decided on.
#[derive(Debug, Clone)]
pub struct Step<'a, 'h> {
    pub members: &'a [Member<'h>],
    /// The queued requests this step serves (empty when it leaves the
    /// queues as they are).
    pub waiting: &'a [Waiting<'a>],
    pub command: Command<'a>,
    /// Milliseconds left of the restart quarantine (0: none).
    pub quarantined_ms: u64,
    pub now_us: u64,
}

/// Whose request an operation carries out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    /// The queued request at this index of `Step::waiting`.
    Queued(usize),
    /// The step's command.
    Command,
}

/// One operation on one resource's holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// A new hold for `who`'s request under `fence`, ending its ttl from now.
    Add { who: Who, fence: u64 },
    /// `who`'s hold now ends `ttl_ms` from now.
    Move { who: Who, ttl_ms: u64 },
    /// The command token's hold ends.
    Drop,
}

/// A keyspace event on one resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Released,
    Revoked,
    Extended,
    Acquired,
    Handoff,
}

/// What the command gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Only the queues were served.
    Settled,
    /// The fence of the hold; `refresh` when the token already held it.
    Granted { fence: u64, refresh: bool },
    /// Not now: the client waits in the queue.
    Wait,
    /// Not now, and it may not wait: nil.
    Busy,
    /// How many members were released, extended or revoked.
    Count(usize),
    /// Nothing is carried out: the step would grant queued requests on a
    /// slot this node may not grant (`owns_slot`), and a grant here
    /// would split ownership with the slot's next node. Every waiter of the
    /// component is sent away (`TRYAGAIN`: they retry and follow the
    /// redirect), and the step is decided again without them.
    SendAway,
}

/// Counters to add once the plan is carried out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub grants: u64,
    pub handoffs: u64,
    pub refreshes: u64,
    pub releases: u64,
    pub extends: u64,
    pub contended: u64,
}

/// What the server carries out, in this order: the operations (per
/// resource, in order) and their effects, the events, the answers to the
/// queue, then the command's outcome.
#[derive(Debug, Clone)]
pub struct Plan {
    /// (resource, operation), in the order they apply.
    pub ops: Vec<(usize, Op)>,
    /// Queued requests granted, with their fences.
    pub granted: Vec<(usize, u64)>,
    /// Queued requests that leave with an error.
    pub refused: Vec<(usize, Error)>,
    /// Requests whose token already held: their clients know the fence, so
    /// a grant of it in flight stands.
    pub confirmed: Vec<Who>,
    pub outcome: Outcome,
    pub events: Vec<(usize, Event)>,
    pub counts: Counts,
    /// The fence clock after every fence this step draws.
    pub clock: FenceClock,
}

impl Plan {
    fn new(outcome: Outcome, clock: &FenceClock) -> Self {
        Plan {
            ops: Vec::new(),
            granted: Vec::new(),
            refused: Vec::new(),
            confirmed: Vec::new(),
            outcome,
            events: Vec::new(),
            counts: Counts::default(),
            clock: clock.clone(),
        }
    }
}

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
    }
    // The holds as the command's own change leaves them: the stored
    // indexes, read in place, without the holds that ended.
    let mut after: Vec<Summary<'_>> = step.members.iter().map(|m| m.holds.summary()).collect();
    command_change(step, n, &mut plan, &mut after);
    let reserved: Vec<Option<usize>> = step.members.iter().map(|m| m.reserved_from).collect();
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
        })
        .collect();
    let new_at = match &step.command {
        Command::Acquire { ask, .. } => {
            queued.push(Queued {
                members: (0..n).collect(),
                ask: *ask,
                frozen: false,
            });
            Some(queued.len() - 1)
        }
        _ => None,
    };
    let decisions = admit_reserved(after, &reserved, &queued);
    let fences = draw_fences(step, &decisions, new_at, &mut plan)?;
    for (i, d) in decisions {
        let (Ok(grant), Some(q)) = (d, queued.get(i)) else {
            continue;
        };
        let Some(fence) = fences.get(i).copied().flatten() else {
            continue;
        };
        let is_new = Some(i) == new_at;
        let who = if is_new { Who::Command } else { Who::Queued(i) };
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
            plan.granted.push((i, fence));
            plan.counts.grants += 1;
            plan.counts.handoffs += 1;
        }
    }
    let mut handed = vec![false; step.members.len()];
    for (i, _) in &plan.granted {
        for m in queued.get(*i).map(|q| &q.members[..]).unwrap_or_default() {
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
pub mod plain;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod properties;

#[cfg(test)]
mod differential_tests;
