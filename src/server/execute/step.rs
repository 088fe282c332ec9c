//! One step on a group of resources, carried out: every request that is not
//! the plain lock's fast path (shared holds, semaphores, owners, sets, and
//! every queue that holds such a request) and every event that serves such
//! a queue. The keys are opened once and their dead holds pruned
//! (`group`), `dlock_core::plan` decides the whole step, and this file carries
//! the plan out in order: the fence clock, the holds and their effects (in
//! one command or timer callback, so replicas and the AOF get one
//! transaction), the keyspace events and counters, the answers to the
//! queue, the command's own wait, and the wake-up timers.
//!
//! A step's part of a component grows round by round (`Group::widen`), and
//! a chain of grants (each uncovering the next request in another queue)
//! grows it by one request a round, deciding it all again each time: a
//! step stops growing once its rounds have decided `DECIDED_PER_STEP`
//! requests and resources, carries out what it decided (the whole
//! component's decision with the requests it uncovered kept waiting, see
//! `dlock_core::queue::Frontier`), and queues a `Settle` job where those wait,
//! which goes on in a later event-loop turn. So no command or timer
//! serves more than a bounded part of a cascade.

use std::cell::OnceCell;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::server::edge::api::{now_us, Ctx};
use crate::server::execute::deadlock;
use crate::server::execute::group::{self, Group};
use crate::server::execute::hold_work::{Deadlines, Work};
use crate::server::jobs::{self, Job};
use crate::server::notify::{figures, stats};
use crate::server::waiting::blocking::{self, Resource};
use crate::server::{quarantine, sessions, state};
use dlock_core::ask::Ask;
use dlock_core::ask::Mode;
use dlock_core::plan::{
    self, Command, Event, Found, Member, Op, Outcome, Plan, QueueSeen, Step, Waiting, Who,
};
use dlock_core::queue::Wants;
use dlock_core::resource::holds::NEVER;
use dlock_core::stats::{End, Kind};
use dlock_core::Error;

/// Requests and resources a step decides, summed over its rounds, before
/// it stops growing its part: a few ms of server time on a loaded 2-core
/// machine (a decision cost 2 to 5 µs there), so that a command and the
/// timer that may follow it in one event-loop turn stay well under 10 ms.
pub const DECIDED_PER_STEP: u64 = 600;

/// What carrying out one grant costs against `DECIDED_PER_STEP`: its reply
/// (with the `CLIENT LIST ID` that checks its client, see
/// `clients::marked_for_closing`), its effects and events, 20 to 40 µs.
const GRANT_WEIGHT: u64 = 16;

/// Owners looked at (`Group::scanned`) that count as one decision.
const OWNERS_PER_DECISION: u64 = 32;

/// Requests and resources decided by every step so far: the job runner
/// stops serving queues in one timer callback once its steps decided
/// `DECIDED_PER_STEP`.
static DECIDED: AtomicU64 = AtomicU64::new(0);

/// Requests and resources decided by every step so far.
pub fn decided() -> u64 {
    DECIDED.load(Ordering::Relaxed)
}

/// Runs one step of `command` on `starts` (distinct, in the caller's
/// database) at `now_us`; `wait_ms`, the `WAIT` of an acquire that may
/// block. On `Err` nothing a client can see changed (waiters whose `WAIT`
/// ran out may have been answered nil).
pub fn run(
    ctx: Ctx,
    starts: &[Resource],
    command: &Command<'_>,
    wait_ms: Option<u64>,
    now_us: u64,
) -> Result<Outcome, Error> {
    // Asked at most once a step: in Redis Cluster it reads `CLUSTER NODES`.
    let owns_slot = OnceCell::new();
    let token = command.token();
    // A handover's target (and its token's other entries) is decided
    // however deep it waits.
    let chosen = match (command, starts.first()) {
        (Command::Release { to: Some(to), .. }, Some(res)) => blocking::ids_of_token(res, to),
        _ => Vec::new(),
    };
    'open: loop {
        let serves = |work: &Work| {
            command.serves_queue(Found {
                freed: work.freed,
                pruned: work.pruned,
                held_by_token: work.holds.hold_of(token).is_some(),
            })
        };
        let refuses = command.refuses_other_types();
        let Some(mut group) = group::open(ctx, starts, serves, refuses, &chosen, now_us)? else {
            return Ok(Outcome::Count(0));
        };
        let n = group.own;
        let command = command.on(n);
        let mut spent = 0;
        let mut left_over = Vec::new();
        let plan = loop {
            let plan = decide(ctx, &group, &command, now_us, &owns_slot)?;
            let size = group.component.requests.len() + group.component.resources.len();
            spent += size as u64;
            DECIDED.fetch_add(size as u64, Ordering::Relaxed);
            let granted = plan.granted.iter().map(|(i, _)| *i);
            let decided: Vec<usize> = granted
                .chain(plan.refused.iter().map(|(i, _)| *i))
                .collect();
            // Its grants, and the owners looked at to find the requests of
            // owners that hold (once per step, as many as hold or wait; a
            // look costs a hash, some 30 times less than a decision).
            let besides = plan.granted.len() as u64 * GRANT_WEIGHT
                + group.scanned() as u64 / OWNERS_PER_DECISION;
            // A step that decided nothing goes on whatever it spent (only
            // requests of owners it left out can still be decided):
            // stopping there would start over, never done.
            if spent + besides >= DECIDED_PER_STEP && !decided.is_empty() {
                left_over = group.left_over(&decided);
                DECIDED.fetch_add(besides, Ordering::Relaxed);
                break plan;
            }
            match group.widen(ctx, &decided)? {
                group::Widened::Done => {
                    DECIDED.fetch_add(besides, Ordering::Relaxed);
                    break plan;
                }
                group::Widened::Grew => continue,
                group::Widened::FoundOtherType => continue 'open,
            }
        };
        if let (Outcome::Wait, Command::Acquire { ask, .. }) = (plan.outcome, &command) {
            if let Some(me) = ask.session.filter(|_| sessions::any()) {
                // Refused before anything of the plan is carried out.
                let resources = &group.component.resources;
                let opened: Vec<_> = resources
                    .iter()
                    .cloned()
                    .zip(group.members.iter().map(|m| &m.work.holds))
                    .collect();
                let targets = resources.get(..n).unwrap_or_default();
                deadlock::refuse_cycle(ctx, me, targets, &opened)?;
            }
        }
        if plan.outcome == Outcome::SendAway {
            // The waiters follow the redirect; the step is decided again
            // without them.
            group::send_away(group.component.resources.get(..n).unwrap_or_default());
            continue;
        }
        let outcome = execute(ctx, &mut group, &command, wait_ms, plan)?;
        // The rest of the cascade: each of these is at the head of its
        // queue now (or of an owner that holds there).
        for res in left_over {
            jobs::push(Job::Settle(res));
        }
        return Ok(outcome);
    }
}

/// Serves the queues of `res` (its component): from a timer, a
/// revocation, a hold guard, or before `DLOCK.INFO` reads.
pub fn settle(ctx: Ctx, res: &Resource) -> Result<(), Error> {
    run(
        ctx,
        std::slice::from_ref(res),
        &Command::Settle,
        None,
        now_us(),
    )
    .map(|_| ())
}

fn decide(
    ctx: Ctx,
    group: &Group,
    command: &Command<'_>,
    now_us: u64,
    owns_slot: &OnceCell<bool>,
) -> Result<Plan, Error> {
    let comp = &group.component;
    let mut has_waiters = vec![false; comp.resources.len()];
    for r in &comp.requests {
        for m in &r.members {
            if let Some(w) = has_waiters.get_mut(*m) {
                *w = true;
            }
        }
    }
    let now_ms = now_us / 1000;
    let members: Vec<Member<'_>> = group
        .members
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let res = comp.resources.get(i);
            let queue = if group.serves_queues {
                QueueSeen::Served {
                    requests: has_waiters.get(i).copied().unwrap_or(false),
                    left_from: comp.reserved_from.get(i).copied().flatten(),
                    left_rank: comp.reserved_rank.get(i).copied().flatten(),
                }
            } else {
                QueueSeen::Left {
                    head: res.and_then(blocking::head_rank),
                }
            };
            Member::found(
                &m.work.holds,
                queue,
                res.and_then(blocking::held_until),
                now_ms,
            )
        })
        .collect();
    let waiting: Vec<Waiting<'_>> = comp
        .requests
        .iter()
        .map(|r| Waiting {
            rank: r.rank,
            members: r.members.clone(),
            ask: ask_of(&r.token, &r.wants, r.ttl_ms),
        })
        .collect();
    let step = Step {
        members: &members,
        waiting: &waiting,
        command: command.clone(),
        quarantined_ms: quarantine::ms_left(),
        now_us,
    };
    let owns_slot = || match owns_slot.get() {
        Some(owns) => Ok(*owns),
        None => {
            let owns = group::may_grant(ctx, comp)?;
            Ok(*owns_slot.get_or_init(|| owns))
        }
    };
    state::with_clock(|clock| plan::plan(&step, clock, owns_slot))
}

/// Carries `plan` out on the opened `group`.
fn execute(
    ctx: Ctx,
    group: &mut Group,
    command: &Command<'_>,
    wait_ms: Option<u64>,
    plan: Plan,
) -> Result<Outcome, Error> {
    let n = group.own;
    state::with_clock(|clock| *clock = plan.clock.clone());
    let comp = &group.component;
    let token_of = |who: Who| -> &[u8] {
        match who {
            Who::Command => command.token(),
            Who::Queued(i) => comp.requests.get(i).map_or(&[][..], |r| &r.token),
        }
    };
    for (m, op) in &plan.ops {
        let Some(member) = group.members.get_mut(*m) else {
            continue;
        };
        match *op {
            Op::Drop => {
                let end = match command {
                    Command::Revoke { .. } => End::Revoked,
                    _ => End::Released,
                };
                member.work.drop_hold(command.token(), end);
            }
            Op::SetLimit(limit) => member.work.set_limit(limit),
            Op::Move { who, ttl_ms } => member.work.move_deadline(token_of(who), ttl_ms),
            Op::Add { who, fence } => {
                let ask = match (who, command) {
                    (Who::Command, Command::Acquire { ask, .. }) => *ask,
                    (Who::Queued(i), _) => match comp.requests.get(i) {
                        Some(r) => ask_of(&r.token, &r.wants, r.ttl_ms),
                        None => continue,
                    },
                    _ => continue,
                };
                let kind = Kind::of(ask.mode, ask.limit.unwrap_or(member.work.holds.limit));
                if member.work.add(&ask, fence) && who == Who::Command {
                    figures::granted(kind);
                }
            }
        }
    }
    let mut deadlines: Vec<Deadlines> = Vec::with_capacity(group.members.len());
    for member in group.members.iter_mut() {
        deadlines.push(member.finish(ctx)?);
    }
    for (m, event) in &plan.events {
        if let Some(member) = group.members.get(*m) {
            stats::notify(ctx, event_name(*event), member.name.ptr);
        }
    }
    count(&plan);
    if plan.counts.contended > 0 || plan.counts.handovers > 0 {
        let limit = group.members.first().map_or(1, |m| m.work.holds.limit);
        let kind = match command {
            Command::Acquire { ask, .. } => Kind::of(ask.mode, ask.limit.unwrap_or(limit)),
            // A handover is counted under the kind of what its target asked.
            Command::Release { to: Some(to), .. } => comp
                .requests
                .iter()
                .find(|r| &*r.token == *to)
                .map_or(Kind::Lock, |r| {
                    Kind::of(r.wants.mode, r.wants.limit.unwrap_or(limit))
                }),
            _ => Kind::of(Mode::Exclusive, limit),
        };
        if plan.counts.contended > 0 {
            figures::contended_set(comp.resources.get(..n).unwrap_or_default(), kind);
        }
        for _ in 0..plan.counts.handovers {
            figures::handed_over(kind);
        }
    }
    let mut retried: Vec<&[u8]> = Vec::new();
    for who in &plan.confirmed {
        retried.push(token_of(*who));
        if *who == Who::Command {
            // The owner knows its fence now: a grant of this token still
            // in flight stands.
            for res in comp.resources.iter().take(n) {
                blocking::confirm(|| Ok(res.clone()), command.token())?;
            }
        }
    }
    let ids = |i: usize| comp.requests.get(i).map(|r| r.id);
    let granted: Vec<(u64, u64)> = plan
        .granted
        .iter()
        .filter_map(|(i, f)| Some((ids(*i)?, *f)))
        .collect();
    let refused: Vec<(u64, Error)> = plan
        .refused
        .iter()
        .filter_map(|(i, e)| Some((ids(*i)?, e.clone())))
        .collect();
    if !granted.is_empty() || !refused.is_empty() {
        blocking::grant_entries(&granted, &retried, refused);
    }
    if let (Outcome::Wait, Command::Acquire { ask, priority, .. }) = (plan.outcome, command) {
        let members: Vec<Resource> = comp.resources.iter().take(n).cloned().collect();
        let timeout = wait_ms.unwrap_or(0);
        let (token, wants, ttl_ms) = (ask.token, Wants::of(ask), ask.ttl_ms);
        blocking::block_on(ctx, members, token, wants, ttl_ms, timeout, *priority)?;
    }
    let now_ms = group.now_us / 1000;
    for (i, res) in comp.resources.iter().enumerate() {
        if blocking::waiters_on(res) == 0 {
            continue;
        }
        if let Some(until) = blocking::held_until(res).filter(|u| *u >= now_ms) {
            blocking::arm_expiry(res, until)?;
        }
        if let Some(d) = deadlines.get(i) {
            arm_for_queue(res, *d)?;
        }
    }
    Ok(plan.outcome)
}

fn count(plan: &Plan) {
    let c = &plan.counts;
    stats::RELEASES.add_n(c.releases);
    stats::EXTENDS.add_n(c.extends);
    stats::GRANTS.add_n(c.grants);
    stats::HANDOFFS.add_n(c.handoffs);
    stats::HANDOVERS.add_n(c.handovers);
    stats::REFRESHES.add_n(c.refreshes);
    stats::CONTENDED.add_n(c.contended);
}

fn event_name(event: Event) -> &'static std::ffi::CStr {
    match event {
        Event::Released => c"dlock.released",
        Event::Revoked => c"dlock.revoked",
        Event::Extended => c"dlock.extended",
        Event::Acquired => c"dlock.acquired",
        Event::Handoff => c"dlock.handoff",
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

fn ask_of<'a>(token: &'a [u8], wants: &'a Wants, ttl_ms: u64) -> Ask<'a> {
    Ask {
        token,
        owner: wants.owner.as_deref(),
        mode: wants.mode,
        limit: wants.limit,
        ttl_ms,
        session: wants.session.as_deref(),
        max_hold_ms: wants.max_hold_ms,
        permits: wants.permits,
    }
}
