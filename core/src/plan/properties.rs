//! Properties of the planner, over random runs: sequences of steps on three
//! resources, drawn by a fixed-seed xorshift generator from a small
//! alphabet (tokens a..d, `OWNER` o1/o2, `SHARED`, `LIMIT` 2/3 with
//! `PERMITS` 1 to 3 on `LIMIT` 3, sets of two
//! or three resources, `WAIT`, release, extend, revoke, settle, a waiter
//! giving up, the quarantine, an evicted lease, time passing). The test
//! keeps what the server keeps: each resource's holds (pruned before every
//! step), the queue in enqueue order and the fence clock; it carries every
//! plan out as the module's `server/execute/step.rs` does and checks after every step:
//!
//! 1. every resource's holds are consistent (`Holds::is_consistent`),
//!    within their limit (a semaphore's holds' permits summed), an exclusive hold of a lock beside holds of its
//!    own owner only, every new hold of the resource's limit;
//! 2. fences only rise: the clock never goes back, a fence new to its
//!    owner on a resource is above every fence drawn before (and within
//!    the clock after the step), and no fence ever belongs to two owners;
//! 3. FIFO for new owners: a request granted in a step passes a request
//!    that waits on one of its resources (queued earlier and still
//!    waiting, or reserving it in a step that leaves the queues as they
//!    are) only if its owner holds that resource then: before the step,
//!    less the command's ended hold, or granted it earlier in the step;
//! 4. a request that gets nothing changes nothing: a refused step (`Err`)
//!    is never applied (and only an acquire, or a fence clock at its end,
//!    refuses one), and an acquire that waits or gets nil, or a release,
//!    extend or revoke that counts nothing, carries no operation of its
//!    own: whatever its plan does is a queued request's grant;
//! 5. only touched resources are written: every operation is on a resource
//!    of the request it carries out (the command's, or a granted queued
//!    request's), and every grant is whole: each member holds it under the
//!    fence answered;
//! 6. progress: after a step that serves the queues (not quarantined, no
//!    evicted lease), no request left waiting that nobody waits ahead of
//!    on its resources could hold them all now (a hold the step ended is
//!    handed on in the same step).
//!
//! `the_checker_catches_*` plant bugs in plans before they are carried
//! out and show the same check reports them.
//!
//! Longer than 400 lines because the model of the server, the generator,
//! the checks, the shrinker and the planted-bug tests are one harness: each
//! check is shown to fail on a planted bug through the same model.

use std::collections::HashMap;
use std::fmt;

use super::{plan, Command, Member, Op, Outcome, Plan, Step, Waiting, Who};
use crate::ask::{Ask, Mode};
use crate::fence::MAX_FENCE;
use crate::plan::component::{admit_request, Queued};
use crate::queue::{Priority, Rank};
use crate::resource::holds::Holds;
use crate::{Error, FenceClock};

const RESOURCES: usize = 3;
const START_US: u64 = 1_000_000_000;
const TOKENS: [&[u8]; 4] = [b"a", b"b", b"c", b"d"];
const OWNERS: [&[u8]; 2] = [b"o1", b"o2"];
const TTLS: [u64; 4] = [30, 100, 400, 2_000];
const ADVANCES_MS: [u64; 6] = [1, 10, 50, 150, 500, 3_000];
/// From this many waiters on, new requests do not wait (short queues).
const MAX_QUEUE: usize = 6;
/// One priority level per this many ms waited: within `ADVANCES_MS`, so
/// that later requests both pass and fail to pass earlier ones.
const AGING_MS: u64 = 100;
/// The property run: seeds 1..=SEEDS, STEPS steps each.
const SEEDS: u64 = 400;
const STEPS: usize = 1_000;

/// xorshift64 with a multiplied output: deterministic, dependency-free.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng((seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03) | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())]
    }
}

/// A queued request, as the server keeps it.
#[derive(Debug, Clone)]
struct Entry {
    /// Its resources (global indexes).
    members: Vec<usize>,
    ask: Ask<'static>,
    /// Where it stands in every queue (computed here, as the server does).
    rank: Rank,
}

/// What the server keeps between steps.
#[derive(Debug, Clone)]
struct Model {
    holds: Vec<Holds>,
    /// Every waiting request, in rank order (the order of every queue).
    queue: Vec<Entry>,
    /// The id the next request that waits gets.
    next_id: u64,
    clock: FenceClock,
    now_us: u64,
    /// The owner of every fence ever added to a hold.
    owner_of_fence: HashMap<u64, &'static [u8]>,
}

impl Model {
    fn new(clock: FenceClock) -> Self {
        Model {
            holds: vec![Holds::new(1); RESOURCES],
            queue: Vec::new(),
            next_id: 1,
            clock,
            now_us: START_US,
            owner_of_fence: HashMap::new(),
        }
    }
}

/// What a step's command is.
#[derive(Debug, Clone)]
enum Cmd {
    Settle,
    Acquire {
        ask: Ask<'static>,
        /// `PRIORITY` (0..=2), ranked with `AGING_MS` per level.
        priority: u16,
        blocks: bool,
        /// The token may not start a new hold or wait (too long).
        long_token: bool,
    },
    Release {
        token: &'static [u8],
    },
    Extend {
        token: &'static [u8],
        ttl_ms: u64,
    },
    /// `held`: under the token's fence on its first resource (else 1).
    Revoke {
        token: &'static [u8],
        held: bool,
    },
    /// The waiter at this position (modulo the queue's length) gives up,
    /// then its resources' queues are served.
    Leave {
        at: usize,
    },
    /// `DLOCK.RESIZE` of the one resource.
    Resize {
        limit: u32,
    },
}

/// One step as drawn: plain data, so a failing run can be replayed and
/// shrunk.
#[derive(Debug, Clone)]
struct Spec {
    advance_ms: u64,
    quarantined_ms: u64,
    held_elsewhere: Option<usize>,
    /// Leave the queues as they are (an acquire or an extend that freed
    /// nothing): no waiting requests, their resources reserved.
    keep_queues: bool,
    /// The command's resources (global indexes, in the command's order).
    resources: Vec<usize>,
    cmd: Cmd,
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn ask_text(ask: &Ask<'_>) -> String {
    let mut s = format!("{} ttl {}", text(ask.token), ask.ttl_ms);
    if let Some(o) = ask.owner {
        s += &format!(" OWNER {}", text(o));
    }
    if ask.mode == Mode::Shared {
        s += " SHARED";
    }
    if let Some(l) = ask.limit {
        s += &format!(" LIMIT {l}");
    }
    if let Some(k) = ask.permits {
        s += &format!(" PERMITS {k}");
    }
    s
}

impl fmt::Display for Spec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.advance_ms > 0 {
            write!(f, "+{}ms ", self.advance_ms)?;
        }
        if self.quarantined_ms > 0 {
            write!(f, "quarantined ")?;
        }
        if let Some(r) = self.held_elsewhere {
            write!(f, "r{r}-held-elsewhere ")?;
        }
        if self.keep_queues {
            write!(f, "queues-kept ")?;
        }
        let on = &self.resources;
        match &self.cmd {
            Cmd::Settle => write!(f, "SETTLE {on:?}"),
            Cmd::Resize { limit } => write!(f, "RESIZE {on:?} {limit}"),
            Cmd::Acquire {
                ask,
                priority,
                blocks,
                long_token,
            } => {
                write!(f, "ACQUIRE {on:?} {} PRIORITY {priority}", ask_text(ask))?;
                if *blocks {
                    write!(f, " WAIT")?;
                }
                if *long_token {
                    write!(f, " (token too long)")?;
                }
                Ok(())
            }
            Cmd::Release { token } => write!(f, "RELEASE {on:?} {}", text(token)),
            Cmd::Extend { token, ttl_ms } => {
                write!(f, "EXTEND {on:?} {} {ttl_ms}", text(token))
            }
            Cmd::Revoke { token, held } => {
                let which = if *held { "its fence" } else { "fence 1" };
                write!(f, "REVOKE {on:?} {} {which}", text(token))
            }
            Cmd::Leave { at } => write!(f, "LEAVE waiter #{at}"),
        }
    }
}

fn describe(model: &Model) -> String {
    let mut s = format!(
        "clock {}, now_ms {}\n",
        model.clock.last(),
        model.now_us / 1000
    );
    for (r, h) in model.holds.iter().enumerate() {
        s += &format!("  r{r} (limit {}):", h.limit);
        for hold in h.iter() {
            s += &format!(
                " [{} owner {} fence {} {:?} until {}]",
                text(hold.token),
                text(hold.owner),
                hold.fence,
                hold.mode,
                hold.deadline_ms
            );
        }
        s += "\n";
    }
    for (i, e) in model.queue.iter().enumerate() {
        s += &format!(
            "  queued #{i} on {:?}: {} (rank {:?})\n",
            e.members,
            ask_text(&e.ask),
            e.rank
        );
    }
    s
}

/// One step as passed to `plan`: the group and what its members were told.
#[derive(Debug, Clone)]
struct Input {
    /// The global index of each member: the command's resources first.
    order: Vec<usize>,
    /// How many members are the command's.
    n: usize,
    has_waiters: Vec<bool>,
    reserved: Vec<bool>,
    /// Per member: the rank of the first request waiting on it.
    head_rank: Vec<Option<Rank>>,
    held_elsewhere: Vec<bool>,
    /// The whole queue (members as group indexes), or nothing when the
    /// step leaves the queues as they are.
    waiting: Vec<Waiting<'static>>,
    command: Command<'static>,
    quarantined_ms: u64,
    now_us: u64,
}

fn command_token(command: &Command<'static>) -> &'static [u8] {
    match command {
        Command::Settle | Command::Resize { .. } => b"",
        Command::Acquire { ask, .. } => ask.token,
        Command::Release { token, .. }
        | Command::Extend { token, .. }
        | Command::Revoke { token, .. } => token,
    }
}

fn command_ask(command: &Command<'static>) -> Option<Ask<'static>> {
    match command {
        Command::Acquire { ask, .. } => Some(*ask),
        _ => None,
    }
}

/// What the server does before it plans: time passes, dead holds are
/// pruned, a waiter that gave up leaves; then the group is opened.
fn prepare(model: &mut Model, spec: &Spec) -> Input {
    model.now_us += spec.advance_ms * 1000;
    let now_ms = model.now_us / 1000;
    for h in &mut model.holds {
        h.prune(now_ms);
    }
    let mut resources = spec.resources.clone();
    let n = resources.len();
    let command = match spec.cmd {
        Cmd::Settle => Command::Settle,
        Cmd::Leave { at } => {
            if !model.queue.is_empty() {
                let at = at % model.queue.len();
                resources = model.queue.remove(at).members;
            }
            Command::Settle
        }
        Cmd::Acquire {
            ask,
            priority,
            blocks,
            long_token,
        } => Command::Acquire {
            ask,
            priority: Priority {
                level: priority,
                key: Rank::key(now_ms, priority, AGING_MS),
            },
            members: n,
            blocks,
            new_token: if long_token {
                Err(Error::TokenTooLong { max: 0 })
            } else {
                Ok(())
            },
        },
        Cmd::Release { token } => Command::Release {
            token,
            members: n,
            to: None,
        },
        Cmd::Resize { limit } => Command::Resize { limit, members: n },
        Cmd::Extend { token, ttl_ms } => Command::Extend {
            token,
            ttl_ms,
            members: n,
        },
        Cmd::Revoke { token, held } => {
            let fence = resources
                .first()
                .and_then(|r| model.holds[*r].hold_of(token))
                .filter(|_| held)
                .map_or(1, |h| h.fence);
            Command::Revoke {
                token,
                fence,
                members: n,
            }
        }
    };
    let n = match command {
        Command::Settle => 0,
        _ => n,
    };
    let mut order = resources;
    let rest: Vec<usize> = (0..RESOURCES).filter(|r| !order.contains(r)).collect();
    order.extend(rest);
    let mut pos = [0; RESOURCES];
    for (i, g) in order.iter().enumerate() {
        pos[*g] = i;
    }
    let keep = spec.keep_queues
        && matches!(command, Command::Acquire { .. } | Command::Extend { .. })
        && !model.queue.is_empty();
    let queued_on = |g: usize| model.queue.iter().any(|e| e.members.contains(&g));
    let has_waiters: Vec<bool> = order.iter().map(|g| queued_on(*g)).collect();
    let waiting = if keep {
        Vec::new()
    } else {
        model
            .queue
            .iter()
            .map(|e| Waiting {
                rank: e.rank,
                members: e.members.iter().map(|g| pos[*g]).collect(),
                ask: e.ask,
            })
            .collect()
    };
    Input {
        n,
        reserved: has_waiters.iter().map(|w| keep && *w).collect(),
        head_rank: order
            .iter()
            .map(|g| {
                model
                    .queue
                    .iter()
                    .find(|e| e.members.contains(g))
                    .map(|e| e.rank)
            })
            .collect(),
        has_waiters,
        held_elsewhere: order
            .iter()
            .map(|g| spec.held_elsewhere == Some(*g))
            .collect(),
        order,
        waiting,
        command,
        quarantined_ms: spec.quarantined_ms,
        now_us: model.now_us,
    }
}

fn decide(model: &Model, input: &Input) -> Result<Plan, Error> {
    let members: Vec<Member<'_>> = input
        .order
        .iter()
        .enumerate()
        .map(|(i, g)| Member {
            holds: &model.holds[*g],
            has_waiters: input.has_waiters[i],
            reserved_from: input.reserved[i].then_some(0),
            reserved_rank: input.head_rank[i].filter(|_| input.reserved[i]),
            held_elsewhere: input.held_elsewhere[i],
        })
        .collect();
    let step = Step {
        members: &members,
        waiting: &input.waiting,
        command: input.command.clone(),
        quarantined_ms: input.quarantined_ms,
        now_us: input.now_us,
    };
    plan(&step, &model.clock, || Ok(true))
}

/// `plan` carried out on a copy of `before` as the module's `server/execute/step.rs` does: the
/// clock, the operations in order, the queue's answers, the command's wait.
fn apply(before: &Model, input: &Input, plan: &Plan) -> Model {
    let mut after = before.clone();
    let now_ms = input.now_us / 1000;
    let ask_of = |who: Who| match who {
        Who::Command => command_ask(&input.command),
        Who::Queued(i) => input.waiting.get(i).map(|w| w.ask),
    };
    after.clock = plan.clock.clone();
    for (m, op) in &plan.ops {
        let Some(holds) = input.order.get(*m).and_then(|g| after.holds.get_mut(*g)) else {
            continue;
        };
        match *op {
            Op::SetLimit(limit) => holds.set_limit(limit),
            Op::Add { who, fence } => {
                if let Some(ask) = ask_of(who) {
                    holds.add(&ask, fence, now_ms + ask.ttl_ms, 0);
                    after.owner_of_fence.entry(fence).or_insert(ask.owner());
                }
            }
            Op::Move { who, ttl_ms } => {
                let token = match who {
                    Who::Command => command_token(&input.command),
                    Who::Queued(i) => input.waiting.get(i).map_or(&b""[..], |w| w.ask.token),
                };
                holds.set_deadline(token, now_ms + ttl_ms);
            }
            Op::Drop => {
                holds.release(command_token(&input.command));
            }
        }
    }
    let answered: Vec<usize> = plan
        .granted
        .iter()
        .map(|(i, _)| *i)
        .chain(plan.refused.iter().map(|(i, _)| *i))
        .collect();
    if !input.waiting.is_empty() {
        after.queue = before
            .queue
            .iter()
            .enumerate()
            .filter(|(i, _)| !answered.contains(i))
            .map(|(_, e)| e.clone())
            .collect();
    }
    if let (Outcome::Wait, Command::Acquire { ask, priority, .. }) = (plan.outcome, &input.command)
    {
        let rank = Rank {
            key: priority.key,
            id: after.next_id,
        };
        after.next_id += 1;
        let at = after.queue.partition_point(|e| e.rank < rank);
        after.queue.insert(
            at,
            Entry {
                members: input.order[..input.n].to_vec(),
                ask: *ask,
                rank,
            },
        );
    }
    after
}

/// A refused step: only an acquire (its own request's error), a resize of
/// what is no semaphore or a fence clock at its end may refuse one; nothing of it is carried out.
fn check_refusal(input: &Input, err: &Error) -> Result<(), String> {
    match input.command {
        Command::Acquire { .. } => Ok(()),
        // A resize of what is no semaphore, before anything is decided.
        Command::Resize { .. } if *err == Error::ResizeNotSemaphore => Ok(()),
        _ if *err == Error::FenceExhausted => Ok(()),
        ref c => Err(format!(
            "invariant 4: {c:?} refused with {err:?}: only an acquire or an exhausted \
             fence clock refuses a step"
        )),
    }
}

/// Every invariant of one step: `before` (pruned) was planned as `input`
/// into `plan`, which carried out gave `after`.
fn check(before: &Model, input: &Input, plan: &Plan, after: &Model) -> Result<(), String> {
    let n = input.n;
    let k = input.waiting.len();
    let now_ms = input.now_us / 1000;
    let group = input.order.len();
    let held_before = |m: usize| &before.holds[input.order[m]];
    let token = command_token(&input.command);
    let outcome = plan.outcome;

    // The requests of the step in enqueue order, the command's last:
    // members, ask, and the fence it is granted under.
    let mut requests: Vec<(Vec<usize>, Ask<'static>, Option<u64>)> = input
        .waiting
        .iter()
        .map(|w| (w.members.clone(), w.ask, None))
        .collect();
    let mut refused = vec![false; k];
    for (i, fence) in &plan.granted {
        match requests.get_mut(*i) {
            Some(r) if r.2.is_none() => r.2 = Some(*fence),
            Some(_) => return Err(format!("queued request {i} granted twice")),
            None => return Err(format!("granted request {i} is not queued (of {k})")),
        }
    }
    for (i, e) in &plan.refused {
        match (refused.get_mut(*i), requests.get(*i)) {
            (Some(r), Some(q)) if !*r && q.2.is_none() => *r = true,
            _ => {
                return Err(format!(
                    "queued request {i} refused ({e:?}) twice or granted"
                ))
            }
        }
    }
    if let Some(ask) = command_ask(&input.command) {
        let fence = match outcome {
            Outcome::Granted { fence, .. } => Some(fence),
            _ => None,
        };
        requests.push(((0..n).collect(), ask, fence));
    }
    let still_waits = |i: usize| i < k && requests[i].2.is_none() && !refused[i];

    // The command's own change, computed here: where its token's hold ends
    // (release, revoke) or moves (extend).
    let changed: Vec<bool> = (0..group)
        .map(|m| {
            let hold = held_before(m).hold_of(token);
            m < n
                && match input.command {
                    Command::Release { .. } | Command::Extend { .. } => hold.is_some(),
                    Command::Revoke { fence, .. } => hold.is_some_and(|h| h.fence == fence),
                    _ => false,
                }
        })
        .collect();
    let counted = changed.iter().filter(|c| **c).count();

    // The outcome fits the command.
    let fits = match (&input.command, outcome) {
        (Command::Settle, Outcome::Settled) => true,
        (Command::Acquire { .. }, Outcome::Granted { .. }) => true,
        (Command::Acquire { blocks, .. }, Outcome::Wait) => *blocks,
        (Command::Acquire { blocks, .. }, Outcome::Busy) => !*blocks,
        (
            Command::Release { .. } | Command::Extend { .. } | Command::Revoke { .. },
            Outcome::Count(c),
        ) => c == counted,
        // The previous limit of what holds it, or nothing (0) when nothing
        // does.
        (Command::Resize { .. }, Outcome::Count(c)) => {
            let before = held_before(0);
            c == if before.is_empty() {
                0
            } else {
                before.limit as usize
            }
        }
        _ => false,
    };
    if !fits {
        return Err(format!(
            "outcome: {outcome:?} for {:?} ({counted} of its holds changed)",
            input.command
        ));
    }
    // Quarantined: nobody new holds (retries pass); an evicted lease's
    // resource is granted to nobody queued.
    if input.quarantined_ms > 0 {
        let added = plan.ops.iter().any(|(_, op)| matches!(op, Op::Add { .. }));
        let fresh = matches!(outcome, Outcome::Granted { refresh: false, .. });
        if added || fresh || !plan.granted.is_empty() {
            return Err("quarantine: a quarantined step grants a new hold".into());
        }
    }
    for (i, _) in &plan.granted {
        if requests[*i].0.iter().any(|m| input.held_elsewhere[*m]) {
            return Err(format!(
                "eviction: queued request {i} granted a resource still held elsewhere"
            ));
        }
    }

    // Invariants 4 and 5: every operation carries out a request that gets
    // something, on that request's resources.
    let mut dropped = vec![false; group];
    let mut extended = vec![false; group];
    let gets_nothing = matches!(
        outcome,
        Outcome::Busy | Outcome::Wait | Outcome::Settled | Outcome::Count(0)
    );
    for (m, op) in &plan.ops {
        let (m, op) = (*m, op.clone());
        let at = |what: &str| {
            let r = input
                .order
                .get(m)
                .map_or(String::from("?"), |g| format!("r{g}"));
            format!("{op:?} on {r} (group member {m}): {what}")
        };
        if m >= group {
            return Err(format!("invariant 5: {}", at("not in the group")));
        }
        let by_command = matches!(
            op,
            Op::Drop
                | Op::Move {
                    who: Who::Command,
                    ..
                }
        ) || matches!(
            op,
            Op::Add {
                who: Who::Command,
                ..
            }
        );
        if by_command && gets_nothing {
            return Err(format!(
                "invariant 4: {}",
                at(&format!("the command gets nothing ({outcome:?})"))
            ));
        }
        let (who, value) = match op {
            Op::SetLimit(_) => {
                if !matches!(input.command, Command::Resize { .. }) || m != 0 {
                    return Err(format!("invariant 5: {}", at("a limit set by no resize")));
                }
                continue;
            }
            Op::Drop => {
                let ends = matches!(
                    input.command,
                    Command::Release { .. } | Command::Revoke { .. }
                ) && changed[m];
                if !ends || dropped[m] {
                    return Err(format!(
                        "invariant 5: {}",
                        at("not a hold the command ends (or ended twice)")
                    ));
                }
                dropped[m] = true;
                continue;
            }
            Op::Move { who, ttl_ms } => (who, ttl_ms),
            Op::Add { who, fence } => (who, fence),
        };
        // The request the operation carries out: its members, its ask and
        // the fence it is answered.
        let (members, ask, fence) = match (who, &input.command, outcome) {
            (Who::Command, Command::Extend { ttl_ms, .. }, _) => {
                let ok = matches!(op, Op::Move { .. }) && changed[m] && !extended[m];
                if !ok || value != *ttl_ms {
                    return Err(format!(
                        "invariant 5: {}",
                        at("not a hold the command extends")
                    ));
                }
                extended[m] = true;
                continue;
            }
            (Who::Command, Command::Acquire { ask, .. }, Outcome::Granted { fence, .. }) => {
                ((0..n).collect::<Vec<_>>(), *ask, fence)
            }
            (Who::Command, _, _) => {
                return Err(format!(
                    "invariant 5: {}",
                    at("the command has no such operation")
                ))
            }
            (Who::Queued(i), _, _) => match requests.get(i).filter(|_| i < k) {
                Some((members, ask, Some(fence))) => (members.clone(), *ask, *fence),
                _ => {
                    return Err(format!(
                        "invariant 5: {}",
                        at(&format!("queued request {i} is not granted"))
                    ))
                }
            },
        };
        if !members.contains(&m) {
            return Err(format!(
                "invariant 5: {}",
                at(&format!(
                    "not a resource of {who:?} (its members: {members:?})"
                ))
            ));
        }
        match op {
            Op::Move { ttl_ms, .. } => {
                let refresh = match who {
                    Who::Command => matches!(outcome, Outcome::Granted { refresh: true, .. }),
                    Who::Queued(_) => held_before(m).hold_of(ask.token).is_some(),
                };
                if !refresh || ttl_ms != ask.ttl_ms {
                    return Err(format!("invariant 5: {}", at("not a retry's hold")));
                }
            }
            // Taken before (`continue`).
            Op::SetLimit(_) => {}
            Op::Add { fence: added, .. } => {
                if who == Who::Command && matches!(outcome, Outcome::Granted { refresh: true, .. })
                {
                    return Err(format!("invariant 5: {}", at("a refresh adds a hold")));
                }
                if added != fence {
                    return Err(format!(
                        "invariant 2: {}",
                        at(&format!("{who:?} was answered fence {fence}"))
                    ));
                }
            }
            Op::Drop => {}
        }
    }
    if dropped != changed
        && matches!(
            input.command,
            Command::Release { .. } | Command::Revoke { .. }
        )
    {
        return Err(format!(
            "invariant 5: the command ends its holds on {dropped:?}, not on {changed:?}"
        ));
    }
    if extended != changed && matches!(input.command, Command::Extend { .. }) {
        return Err(format!(
            "invariant 5: the command extends its holds on {extended:?}, not on {changed:?}"
        ));
    }

    // Invariant 1: every resource's holds are consistent.
    for (r, h) in after.holds.iter().enumerate() {
        if !h.is_consistent() {
            return Err(format!("invariant 1: r{r}'s holds are inconsistent"));
        }
        // A resize down leaves holds past the limit; nobody new joins them.
        let added = plan
            .ops
            .iter()
            .any(|(m, op)| input.order.get(*m) == Some(&r) && matches!(op, Op::Add { .. }));
        if h.limit > 1 && (!h.resized || added) && h.used_permits() > u64::from(h.limit) {
            return Err(format!(
                "invariant 1: r{r} holds past its limit {}",
                h.limit
            ));
        }
        if h.limit == 1 {
            for w in h.iter().filter(|w| w.mode == Mode::Exclusive) {
                if h.iter().any(|o| o.owner != w.owner) {
                    return Err(format!(
                        "invariant 1: r{r}: {}'s exclusive hold beside another owner's",
                        text(w.token)
                    ));
                }
            }
        }
    }
    for (m, op) in &plan.ops {
        let Op::Add { who, .. } = op else { continue };
        let ask = match who {
            Who::Command => command_ask(&input.command),
            Who::Queued(i) => input.waiting.get(*i).map(|w| w.ask),
        };
        let held = &after.holds[input.order[*m]];
        let limit = held.limit;
        let joins = |a: Ask<'_>| a.limit() == limit || (held.resized && a.limit() > 1 && limit > 1);
        if ask.is_some_and(|a| !joins(a)) {
            return Err(format!(
                "invariant 1: a hold of LIMIT {:?} added to r{} of limit {limit}",
                ask.map(|a| a.limit),
                input.order[*m]
            ));
        }
    }

    // Invariant 2: fences only rise.
    let (last, now_last) = (before.clock.last(), plan.clock.last());
    if now_last < last {
        return Err(format!(
            "invariant 2: the clock went back from {last} to {now_last}"
        ));
    }
    let mut drawn: HashMap<u64, &[u8]> = HashMap::new();
    for (m, op) in &plan.ops {
        let Op::Add { who, fence } = *op else {
            continue;
        };
        let Some(ask) = (match who {
            Who::Command => command_ask(&input.command),
            Who::Queued(i) => input.waiting.get(i).map(|w| w.ask),
        }) else {
            continue;
        };
        let owner = ask.owner();
        let r = input.order[*m];
        let owners_fence = held_before(*m)
            .iter()
            .any(|h| *h.owner == *owner && h.fence == fence);
        if !owners_fence {
            if fence <= last || fence > now_last {
                return Err(format!(
                    "invariant 2: new fence {fence} for owner {} on r{r} is not above the \
                     clock {last} (clock after the step {now_last})",
                    text(owner)
                ));
            }
            if let Some(other) = drawn.insert(fence, owner).filter(|o| *o != owner) {
                return Err(format!(
                    "invariant 2: fence {fence} drawn for owners {} and {}",
                    text(other),
                    text(owner)
                ));
            }
        }
        if let Some(other) = before.owner_of_fence.get(&fence).filter(|o| **o != owner) {
            return Err(format!(
                "invariant 2: fence {fence} of owner {} given to owner {} on r{r}",
                text(other),
                text(owner)
            ));
        }
    }

    // Invariant 3: FIFO for new owners, in rank order: the queued requests
    // as they stand, the command's at its own rank among them (computed
    // here from the ranks, not taken from the planner).
    let command_rank = match &input.command {
        Command::Acquire { priority, .. } => Some(Rank::arriving(priority.key)),
        _ => None,
    };
    let mut by_rank: Vec<usize> = (0..k).collect();
    if let Some(rank) = command_rank {
        by_rank.insert(input.waiting.partition_point(|w| w.rank < rank), k);
    }
    // A queue the step leaves as it is reserves a member against the
    // command only if its head ranks ahead of it.
    let reserved_for = |g: usize, m: usize| {
        input.reserved[m]
            && (g < k
                || command_rank
                    .zip(input.head_rank[m])
                    .is_none_or(|(c, head)| head < c))
    };
    for (at, &g) in by_rank.iter().enumerate() {
        let (members, ask, fence) = &requests[g];
        if fence.is_none() {
            continue;
        }
        let ahead_of_g = &by_rank[..at];
        let owner = ask.owner();
        for m in members {
            let m = *m;
            let behind = reserved_for(g, m)
                || ahead_of_g
                    .iter()
                    .any(|e| still_waits(*e) && requests[*e].0.contains(&m));
            if !behind {
                continue;
            }
            let holds_now = held_before(m)
                .iter()
                .filter(|h| !(dropped[m] && *h.token == *token))
                .any(|h| *h.owner == *owner);
            let granted_earlier = ahead_of_g.iter().any(|e| {
                let (ms, a, f) = &requests[*e];
                f.is_some() && ms.contains(&m) && a.owner() == owner
            });
            if !holds_now && !granted_earlier {
                let who = if g == k {
                    "the command".into()
                } else {
                    format!("queued #{g}")
                };
                let ahead: Vec<usize> = ahead_of_g
                    .iter()
                    .copied()
                    .filter(|e| still_waits(*e) && requests[*e].0.contains(&m))
                    .collect();
                return Err(format!(
                    "invariant 3 (FIFO): {who} ({}) granted r{} past waiting requests \
                     {ahead:?} (reserved: {}), its owner holding nothing there",
                    ask_text(ask),
                    input.order[m],
                    input.reserved[m]
                ));
            }
        }
    }

    // Invariant 5, whole grants: every member holds a granted request
    // under the fence answered.
    for (g, (members, ask, fence)) in requests.iter().enumerate() {
        let Some(fence) = fence else { continue };
        for m in members {
            let r = input.order[*m];
            let whole = after.holds[r].hold_of(ask.token).is_some_and(|h| {
                h.fence == *fence
                    && h.mode == ask.mode
                    && *h.owner == *ask.owner()
                    && h.deadline_ms >= now_ms
            });
            if !whole {
                return Err(format!(
                    "invariant 5: request {g} ({}) answered fence {fence} but r{r} holds {:?}",
                    ask_text(ask),
                    after.holds[r].hold_of(ask.token)
                ));
            }
        }
    }

    // Invariant 6: progress. Holds only grow while a step grants, so a
    // request that found a member busy when its turn came still finds it
    // busy (or refuses itself) once the step is done.
    let served = !input.waiting.is_empty() || before.queue.is_empty();
    let frozen = input.quarantined_ms > 0 || input.held_elsewhere.iter().any(|h| *h);
    if served && !frozen && !input.reserved.iter().any(|r| *r) {
        let summaries: Vec<_> = after.holds.iter().map(|h| h.summary()).collect();
        let free = vec![false; RESOURCES];
        for (e, entry) in after.queue.iter().enumerate() {
            let ahead = after.queue[..e]
                .iter()
                .any(|a| a.members.iter().any(|m| entry.members.contains(m)));
            let q = Queued {
                members: entry.members.clone(),
                ask: entry.ask,
                frozen: false,
                stays: true,
            };
            if !ahead && matches!(admit_request(&summaries, &free, &q), Some(Ok(_))) {
                return Err(format!(
                    "invariant 6: queued #{e} ({}) on {:?} is left waiting, though nobody \
                     waits ahead of it and it fits now",
                    ask_text(&entry.ask),
                    entry.members
                ));
            }
        }
    }
    Ok(())
}

/// A change made to every plan before it is carried out: a planted bug.
type Plant = fn(&mut Plan, &Input, &Model);

fn no_plant(_: &mut Plan, _: &Input, _: &Model) {}

/// What a run exercised (so a change that makes it exercise nothing shows).
#[derive(Debug, Default, Clone)]
struct Tally {
    steps: usize,
    refused_steps: usize,
    handoffs: usize,
    set_handoffs: usize,
    joint_handoffs: usize,
    queued_refusals: usize,
    grants: usize,
    refreshes: usize,
    waits: usize,
    busy: usize,
    kept_queues: usize,
    counted: usize,
    quarantined: usize,
    /// Grants that passed a waiting request (their owners held).
    passes: usize,
    /// Queued requests granted several permits at once (`PERMITS`).
    weighted_handoffs: usize,
}

impl Tally {
    fn add(&mut self, o: &Tally) {
        self.steps += o.steps;
        self.refused_steps += o.refused_steps;
        self.handoffs += o.handoffs;
        self.set_handoffs += o.set_handoffs;
        self.joint_handoffs += o.joint_handoffs;
        self.queued_refusals += o.queued_refusals;
        self.grants += o.grants;
        self.weighted_handoffs += o.weighted_handoffs;
        self.refreshes += o.refreshes;
        self.waits += o.waits;
        self.busy += o.busy;
        self.kept_queues += o.kept_queues;
        self.counted += o.counted;
        self.quarantined += o.quarantined;
        self.passes += o.passes;
    }
}

/// Runs one step: plans it, plants, carries it out, checks.
fn step(model: &mut Model, spec: &Spec, plant: Plant, tally: &mut Tally) -> Result<(), String> {
    let input = prepare(model, spec);
    let before = model.clone();
    tally.steps += 1;
    let mut plan = match decide(&before, &input) {
        Ok(p) => p,
        Err(e) => {
            tally.refused_steps += 1;
            return check_refusal(&input, &e)
                .map_err(|m| format!("{m}\nstate before:\n{}", describe(&before)));
        }
    };
    plant(&mut plan, &input, &before);
    let after = apply(&before, &input, &plan);
    check(&before, &input, &plan, &after).map_err(|why| {
        let ops: Vec<String> = plan
            .ops
            .iter()
            .map(|(m, op)| match input.order.get(*m) {
                Some(g) => format!("r{g}: {op:?}"),
                None => format!("member {m}: {op:?}"),
            })
            .collect();
        format!(
            "{why}\nstate before:\n{}plan ops [{}]\ngranted {:?} refused {:?} outcome {:?}",
            describe(&before),
            ops.join(", "),
            plan.granted,
            plan.refused,
            plan.outcome
        )
    })?;
    tally.handoffs += plan.granted.len();
    tally.set_handoffs += plan
        .granted
        .iter()
        .filter(|(i, _)| input.waiting[*i].members.len() > 1)
        .count();
    tally.joint_handoffs += usize::from(plan.granted.len() > 1);
    tally.weighted_handoffs += plan
        .granted
        .iter()
        .filter(|(i, _)| input.waiting[*i].ask.permits.is_some())
        .count();
    tally.queued_refusals += plan.refused.len();
    tally.kept_queues += usize::from(input.reserved.iter().any(|r| *r));
    tally.quarantined += usize::from(input.quarantined_ms > 0);
    tally.passes += passes(&input, &plan);
    match plan.outcome {
        Outcome::Granted { refresh: false, .. } => tally.grants += 1,
        Outcome::Granted { refresh: true, .. } => tally.refreshes += 1,
        Outcome::Wait => tally.waits += 1,
        Outcome::Busy => tally.busy += 1,
        Outcome::Count(c) => tally.counted += usize::from(c > 0),
        // The random steps run on a slot this node owns.
        Outcome::Settled | Outcome::SendAway => {}
    }
    *model = after;
    Ok(())
}

/// How many grants of `plan` passed a request that waits on one of their
/// resources (what invariant 3 then checks).
fn passes(input: &Input, plan: &Plan) -> usize {
    let answered: Vec<usize> = plan
        .granted
        .iter()
        .map(|(i, _)| *i)
        .chain(plan.refused.iter().map(|(i, _)| *i))
        .collect();
    let waits_on = |e: usize, m: &usize| {
        !answered.contains(&e) && input.waiting.get(e).is_some_and(|w| w.members.contains(m))
    };
    let behind = |g: usize, members: &[usize]| {
        members
            .iter()
            .any(|m| input.reserved[*m] || (0..g).any(|e| waits_on(e, m)))
    };
    let queued = plan
        .granted
        .iter()
        .filter(|(g, _)| behind(*g, &input.waiting[*g].members))
        .count();
    let command: Vec<usize> = (0..input.n).collect();
    let granted = matches!(plan.outcome, Outcome::Granted { .. });
    queued + usize::from(granted && behind(input.waiting.len(), &command))
}

fn start_clock(seed: u64) -> FenceClock {
    // One run in eight starts near the end of the fence clock: its grants
    // run out of fences, and the refused steps must change nothing.
    if seed % 8 == 7 {
        FenceClock::starting_at(MAX_FENCE - 40)
    } else {
        FenceClock::starting_at(seed % 3 * 1_000)
    }
}

fn draw(rng: &mut Rng, model: &Model) -> Spec {
    let advance_ms = if rng.one_in(4) {
        rng.pick(&ADVANCES_MS)
    } else {
        0
    };
    let quarantined_ms = if rng.one_in(12) { 700 } else { 0 };
    let held_elsewhere = if rng.one_in(20) {
        Some(rng.below(RESOURCES))
    } else {
        None
    };
    let size = match rng.below(20) {
        0..=10 => 1,
        11..=16 => 2,
        _ => 3,
    };
    let mut all: Vec<usize> = (0..RESOURCES).collect();
    let mut resources = Vec::new();
    while resources.len() < size {
        resources.push(all.remove(rng.below(all.len())));
    }
    let token = rng.pick(&TOKENS);
    let cmd = match rng.below(20) {
        0..=8 => {
            let mut ask = Ask {
                token,
                owner: None,
                mode: Mode::Exclusive,
                limit: None,
                ttl_ms: rng.pick(&TTLS),
                session: None,
                max_hold_ms: None,
                permits: None,
            };
            if rng.one_in(3) {
                ask.mode = Mode::Shared;
            }
            // As the parsers allow: a set has no OWNER or LIMIT; LIMIT
            // above 1 goes with neither OWNER nor SHARED.
            if size == 1 {
                match rng.below(6) {
                    0 | 1 => ask.owner = Some(rng.pick(&OWNERS)),
                    2 => {
                        ask.limit = Some(rng.pick(&[2, 3]));
                        ask.mode = Mode::Exclusive;
                        // A weighted request takes 1 to 3 of LIMIT 3's
                        // permits at once (`PERMITS 1` is none).
                        if ask.limit == Some(3) {
                            ask.permits = Some(rng.pick(&[1, 2, 3])).filter(|k| *k > 1);
                        }
                    }
                    _ => {}
                }
            }
            Cmd::Acquire {
                ask,
                priority: if rng.one_in(2) {
                    0
                } else {
                    rng.below(3) as u16
                },
                blocks: model.queue.len() < MAX_QUEUE && rng.one_in(2),
                long_token: rng.one_in(25),
            }
        }
        9..=12 => Cmd::Release { token },
        13..=14 => Cmd::Extend {
            token,
            ttl_ms: rng.pick(&TTLS),
        },
        15 => Cmd::Revoke {
            token,
            held: !rng.one_in(4),
        },
        17 if size == 1 => Cmd::Resize {
            limit: rng.pick(&[2, 3, 4]),
        },
        16 | 17 => Cmd::Settle,
        _ if model.queue.is_empty() => Cmd::Settle,
        _ => Cmd::Leave { at: rng.below(8) },
    };
    Spec {
        advance_ms,
        quarantined_ms,
        held_elsewhere,
        keep_queues: rng.one_in(3),
        resources,
        cmd,
    }
}

/// A failed run: the step (counted from 1) and what failed.
#[derive(Debug)]
struct Failure {
    step: usize,
    message: String,
}

/// Draws and runs `steps` steps of `seed`; the steps drawn (up to the
/// failing one) and the tally or the failure.
fn explore(seed: u64, steps: usize, plant: Plant) -> (Vec<Spec>, Result<Tally, Failure>) {
    let mut rng = Rng::new(seed);
    let mut model = Model::new(start_clock(seed));
    let mut tally = Tally::default();
    let mut specs = Vec::with_capacity(steps);
    for i in 0..steps {
        let spec = draw(&mut rng, &model);
        specs.push(spec.clone());
        if let Err(message) = step(&mut model, &spec, plant, &mut tally) {
            return (
                specs,
                Err(Failure {
                    step: i + 1,
                    message,
                }),
            );
        }
    }
    (specs, Ok(tally))
}

fn replay(seed: u64, specs: &[Spec], plant: Plant) -> Result<(), Failure> {
    let mut model = Model::new(start_clock(seed));
    let mut tally = Tally::default();
    for (i, spec) in specs.iter().enumerate() {
        step(&mut model, spec, plant, &mut tally).map_err(|message| Failure {
            step: i + 1,
            message,
        })?;
    }
    Ok(())
}

/// The failing `specs` with every run of steps left out whose absence
/// still fails (halves first, then smaller runs down to single steps).
fn shrink(seed: u64, specs: &[Spec], plant: Plant) -> Vec<Spec> {
    let mut specs = specs.to_vec();
    let mut size = specs.len().div_ceil(2).max(1);
    loop {
        let mut shorter = false;
        let mut at = 0;
        while at < specs.len() {
            let mut fewer = specs.clone();
            fewer.drain(at..(at + size).min(specs.len()));
            if replay(seed, &fewer, plant).is_err() {
                specs = fewer;
                shorter = true;
            } else {
                at += size;
            }
        }
        if size == 1 && !shorter {
            return specs;
        }
        if !shorter {
            size = size.div_ceil(2);
        }
    }
}

fn report(seed: u64, specs: &[Spec], failure: &Failure, plant: Plant) -> String {
    let minimal = shrink(seed, specs, plant);
    let last = replay(seed, &minimal, plant).err();
    let steps: Vec<String> = minimal.iter().map(|s| format!("  {s}")).collect();
    format!(
        "seed {seed}, step {}: {}\n\nminimal sequence ({} steps, clock from {}):\n{}\n\
         its failure: {}",
        failure.step,
        failure.message,
        minimal.len(),
        start_clock(seed).last(),
        steps.join("\n"),
        last.map_or(String::from("(none)"), |f| f.message)
    )
}

#[test]
fn random_steps_keep_every_invariant() {
    let mut total = Tally::default();
    for seed in 1..=SEEDS {
        let (specs, result) = explore(seed, STEPS, no_plant);
        match result {
            Ok(t) => total.add(&t),
            Err(f) => panic!("{}", report(seed, &specs, &f, no_plant)),
        }
    }
    assert_eq!(total.steps, SEEDS as usize * STEPS);
    // The run exercised what it checks (the numbers are deterministic;
    // these floors only catch a generator that stopped reaching them).
    let floors = [
        ("handoffs", total.handoffs, 5_000),
        ("set handoffs", total.set_handoffs, 2_500),
        ("steps granting several queued", total.joint_handoffs, 600),
        ("queued requests refused", total.queued_refusals, 1_000),
        ("fresh grants", total.grants, 10_000),
        ("refreshes", total.refreshes, 1_200),
        ("waits", total.waits, 10_000),
        ("nil answers", total.busy, 10_000),
        ("steps with queues kept", total.kept_queues, 6_000),
        ("releases, extends, revokes counted", total.counted, 6_000),
        ("quarantined steps planned", total.quarantined, 7_000),
        ("refused steps", total.refused_steps, 10_000),
        ("grants past a waiting request", total.passes, 600),
        ("weighted handoffs", total.weighted_handoffs, 50),
    ];
    for (what, seen, floor) in floors {
        assert!(
            seen >= floor,
            "only {seen} {what} (floor {floor}): {total:?}"
        );
    }
}

// Planted bugs, each made to a plan before it is carried out.

/// A new owner gets the last fence drawn again (`planted-fence-reuse`).
fn reuse_fence(plan: &mut Plan, _: &Input, before: &Model) {
    let last = before.clock.last();
    if last == 0 {
        return;
    }
    let old = |f: &mut u64| {
        if *f > last {
            *f = last;
        }
    };
    for (_, op) in &mut plan.ops {
        if let Op::Add { fence, .. } = op {
            old(fence);
        }
    }
    plan.granted.iter_mut().for_each(|(_, f)| old(f));
    if let Outcome::Granted { fence, .. } = &mut plan.outcome {
        old(fence);
    }
}

/// The newest waiter of a granted one's kind is granted instead of it
/// (`planted-fifo-newest`).
fn grant_newest(plan: &mut Plan, input: &Input, before: &Model) {
    let answered: Vec<usize> = plan
        .granted
        .iter()
        .map(|(i, _)| *i)
        .chain(plan.refused.iter().map(|(i, _)| *i))
        .collect();
    let Some(&(i, fence)) = plan.granted.first() else {
        return;
    };
    let by_add = plan.ops.iter().any(|(_, op)| {
        *op == Op::Add {
            who: Who::Queued(i),
            fence,
        }
    });
    let like = |j: &usize| {
        let (a, b) = (&input.waiting[i], &input.waiting[*j]);
        // A waiter that would pass anyway (its owner holds) or is a
        // retry is no FIFO break.
        let holds = b.members.iter().any(|m| {
            let h = &before.holds[input.order[*m]];
            h.iter()
                .any(|h| *h.owner == *b.ask.owner() || *h.token == *b.ask.token)
        });
        !answered.contains(j)
            && !holds
            && a.members == b.members
            && (a.ask.mode, a.ask.limit) == (b.ask.mode, b.ask.limit)
    };
    let Some(j) = (i + 1..input.waiting.len())
        .rev()
        .find(like)
        .filter(|_| by_add)
    else {
        return;
    };
    for (_, op) in &mut plan.ops {
        if let Op::Add { who, .. } = op {
            if *who == Who::Queued(i) {
                *who = Who::Queued(j);
            }
        }
    }
    plan.granted[0].0 = j;
}

/// A set acquire without `WAIT` is granted its free members
/// (`planted-set-partial`).
fn grant_free_members(plan: &mut Plan, input: &Input, before: &Model) {
    if plan.outcome != Outcome::Busy || input.n < 2 {
        return;
    }
    let free: Vec<usize> = (0..input.n)
        .filter(|m| before.holds[input.order[*m]].is_empty())
        .collect();
    if free.is_empty() {
        return;
    }
    let Ok(fence) = plan.clock.next(input.now_us) else {
        return;
    };
    for m in free {
        plan.ops.push((
            m,
            Op::Add {
                who: Who::Command,
                fence,
            },
        ));
    }
}

/// A release also ends the token's hold of a resource it did not name.
fn release_beyond(plan: &mut Plan, input: &Input, _: &Model) {
    let released = matches!(plan.outcome, Outcome::Count(c) if c > 0);
    if matches!(input.command, Command::Release { .. }) && released && input.n < input.order.len() {
        plan.ops.push((input.n, Op::Drop));
    }
}

/// A handoff: r0 held by x (fence 5), b then c waiting for it, x releases.
fn handoff() -> (Model, Input, Plan) {
    let mut model = Model::new(FenceClock::starting_at(5));
    let x = Ask {
        token: b"x",
        owner: None,
        mode: Mode::Exclusive,
        limit: None,
        ttl_ms: 1_000,
        session: None,
        max_hold_ms: None,
        permits: None,
    };
    model.holds[0].add(&x, 5, START_US / 1000 + 1_000, 0);
    model.owner_of_fence.insert(5, b"x");
    let waiter = |token, id| Entry {
        members: vec![0],
        ask: Ask { token, ..x },
        rank: Rank { key: 0, id },
    };
    model.queue = vec![waiter(b"b", 1), waiter(b"c", 2)];
    model.next_id = 3;
    let spec = Spec {
        advance_ms: 0,
        quarantined_ms: 0,
        held_elsewhere: None,
        keep_queues: false,
        resources: vec![0],
        cmd: Cmd::Release { token: b"x" },
    };
    let input = prepare(&mut model, &spec);
    let plan = decide(&model, &input).expect("a release is planned");
    (model, input, plan)
}

fn verdict(before: &Model, input: &Input, plan: &Plan) -> Result<(), String> {
    check(before, input, plan, &apply(before, input, plan))
}

fn assert_caught(verdict: Result<(), String>, invariant: &str, bug: &str) {
    match verdict {
        Err(m) if m.starts_with(invariant) => {}
        other => panic!("{bug}: expected a failure of {invariant}, got {other:?}"),
    }
}

#[test]
fn the_checker_catches_bugs_planted_in_a_handoff() {
    let (before, input, plan) = handoff();
    assert_eq!(verdict(&before, &input, &plan), Ok(()));
    let [(0, fence)] = plan.granted[..] else {
        panic!("b is granted: {plan:?}");
    };
    assert!(fence > 5);

    // The exclusive hold added twice: for b, and for c as well.
    let mut p = plan.clone();
    p.ops.push((
        0,
        Op::Add {
            who: Who::Queued(1),
            fence,
        },
    ));
    p.granted.push((1, fence));
    assert_caught(
        verdict(&before, &input, &p),
        "invariant 1",
        "a second owner added",
    );

    // b's fresh fence replaced by x's old one.
    let mut p = plan.clone();
    reuse_fence(&mut p, &input, &before);
    assert_caught(
        verdict(&before, &input, &p),
        "invariant 2",
        "an old fence reused",
    );

    // c granted before b.
    let mut p = plan.clone();
    grant_newest(&mut p, &input, &before);
    assert_eq!(p.granted, vec![(1, fence)]);
    assert_caught(verdict(&before, &input, &p), "invariant 3", "FIFO broken");

    // b's hold written on r1 as well.
    let mut p = plan.clone();
    p.ops.push((
        1,
        Op::Add {
            who: Who::Queued(0),
            fence,
        },
    ));
    assert_caught(
        verdict(&before, &input, &p),
        "invariant 5",
        "an untouched resource written",
    );

    // x's hold of r1, which it did not release, ended too.
    let mut p = plan.clone();
    release_beyond(&mut p, &input, &before);
    assert_caught(
        verdict(&before, &input, &p),
        "invariant 5",
        "a release beyond its members",
    );

    // The handoff left out: b keeps waiting for a free r0.
    let mut p = plan.clone();
    p.ops.retain(|(_, op)| *op == Op::Drop);
    p.granted.clear();
    assert_caught(
        verdict(&before, &input, &p),
        "invariant 6",
        "a handoff left out",
    );

    // b answered but given nothing.
    let mut p = plan.clone();
    p.ops.retain(|(_, op)| *op == Op::Drop);
    assert_caught(
        verdict(&before, &input, &p),
        "invariant 5",
        "a grant not carried out",
    );
}

#[test]
fn the_checker_catches_a_nil_answer_that_holds() {
    // r0 and r1 free, r2 held by x: the set {r0, r1, r2} without WAIT gets
    // nil, and must hold nothing.
    let mut model = Model::new(FenceClock::new());
    let x = Ask {
        token: b"x",
        owner: None,
        mode: Mode::Exclusive,
        limit: None,
        ttl_ms: 1_000,
        session: None,
        max_hold_ms: None,
        permits: None,
    };
    model.holds[2].add(&x, 5, START_US / 1000 + 1_000, 0);
    let spec = Spec {
        advance_ms: 0,
        quarantined_ms: 0,
        held_elsewhere: None,
        keep_queues: false,
        resources: vec![0, 1, 2],
        cmd: Cmd::Acquire {
            ask: Ask { token: b"s", ..x },
            priority: 0,
            blocks: false,
            long_token: false,
        },
    };
    let input = prepare(&mut model, &spec);
    let plan = decide(&model, &input).expect("an acquire is planned");
    assert_eq!(plan.outcome, Outcome::Busy);
    assert_eq!(verdict(&model, &input, &plan), Ok(()));
    let mut p = plan.clone();
    grant_free_members(&mut p, &input, &model);
    assert_eq!(p.ops.len(), 2);
    assert_caught(
        verdict(&model, &input, &p),
        "invariant 4",
        "a partial set granted",
    );
}

#[test]
fn the_checker_catches_bugs_planted_in_random_runs() {
    let plants: [(&str, Plant, &str); 4] = [
        ("fence reuse", reuse_fence, "invariant 2"),
        ("newest waiter first", grant_newest, "invariant 3"),
        ("partial set", grant_free_members, "invariant 4"),
        ("release beyond its members", release_beyond, "invariant 5"),
    ];
    for (bug, plant, invariant) in plants {
        let caught = (1..=SEEDS).find_map(|seed| match explore(seed, STEPS, plant) {
            (specs, Err(failure)) => Some((seed, specs, failure)),
            (_, Ok(_)) => None,
        });
        let Some((seed, specs, failure)) = caught else {
            panic!("{bug}: never caught in {SEEDS} runs");
        };
        assert!(
            failure.message.starts_with(invariant),
            "{bug} at step {}: {}",
            failure.step,
            failure.message
        );
        // What a real failure would report: the run shrunk to a few steps
        // that still fail.
        let minimal = shrink(seed, &specs, plant);
        assert!(replay(seed, &minimal, plant).is_err());
        assert!(
            minimal.len() <= 6,
            "{bug}: {}",
            report(seed, &specs, &failure, plant)
        );
    }
}
