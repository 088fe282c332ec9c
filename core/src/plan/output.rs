//! What a step returns: the plan the server carries out.

use crate::fence::FenceClock;
use crate::Error;

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
    /// `DLOCK.RESIZE`: the limit becomes this, the holds marked resized
    /// (before any grant of the same step).
    SetLimit(u32),
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
    /// Grants out of turn (`RELEASE ... TO`), counted in `handoffs` too.
    pub handovers: u64,
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
    pub(super) fn new(outcome: Outcome, clock: &FenceClock) -> Self {
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
