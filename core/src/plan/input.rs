//! What a step is decided on: its resources as the server found them, the
//! requests queued on them, and the command.

use crate::ask::Ask;
use crate::queue::{Priority, Rank};
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
    /// The rank of that first request left waiting: the command's own
    /// request is decided before the reservation when it outranks it.
    pub reserved_rank: Option<Rank>,
    /// Still believed held by the owner of an evicted lease: nobody queued
    /// is granted it yet.
    pub held_elsewhere: bool,
}

/// How a step finds one resource's queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueSeen {
    /// The step serves the queues: `requests`, whether any of its
    /// `Step::waiting` waits here; `left_from`, where the requests it leaves
    /// waiting start (`Member::reserved_from`), and `left_rank` the rank
    /// of the first of them.
    Served {
        requests: bool,
        left_from: Option<usize>,
        left_rank: Option<Rank>,
    },
    /// The step leaves the queue as it is: `head`, the rank of its head if
    /// anyone waits (the resource is then reserved for them, before any
    /// request they outrank).
    Left { head: Option<Rank> },
}

impl<'h> Member<'h> {
    /// A resource with its live `holds` and its queue as the step finds it;
    /// `held_until`: the deadline (unix ms) an evicted lease's owner still
    /// believes it holds the resource until, if any, at `now_ms`.
    pub fn found(holds: &'h Holds, queue: QueueSeen, held_until: Option<u64>, now_ms: u64) -> Self {
        let (requests, reserved_from, reserved_rank) = match queue {
            QueueSeen::Served {
                requests,
                left_from,
                left_rank,
            } => (requests, left_from, left_rank),
            QueueSeen::Left { head } => (false, head.map(|_| 0), head),
        };
        Member {
            holds,
            has_waiters: reserved_from.is_some() || requests,
            reserved_from,
            reserved_rank,
            held_elsewhere: held_until.is_some_and(|u| u >= now_ms),
        }
    }
}

/// A request queued on the group, in rank order (the order of every
/// queue).
#[derive(Debug, Clone)]
pub struct Waiting<'a> {
    pub rank: Rank,
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
    /// `priority`: its `PRIORITY` and rank key; its request is decided at
    /// its rank among the queued ones (`Rank::arriving`), and queued there.
    Acquire {
        ask: Ask<'a>,
        priority: Priority,
        members: usize,
        blocks: bool,
        new_token: Result<(), Error>,
    },
    /// The token's hold of each member ends. `to`: the token of a single
    /// request queued on the first member that is granted in the same
    /// step, out of turn (`RELEASE ... TO`), or the step is refused.
    Release {
        token: &'a [u8],
        members: usize,
        to: Option<&'a [u8]>,
    },
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
    /// `DLOCK.RESIZE`: a held semaphore's limit becomes `limit`; the queue
    /// is then served under it.
    Resize { limit: u32, members: usize },
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
            Command::Settle | Command::Resize { .. } => b"",
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
            | Command::Revoke { members, .. }
            | Command::Resize { members, .. } => *members = n,
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
            Command::Settle | Command::Revoke { .. } | Command::Resize { .. } => true,
            Command::Acquire { .. } => found.freed,
            Command::Release { .. } => found.pruned || found.held_by_token,
            Command::Extend { .. } => found.pruned,
        }
    }

    pub(super) fn members(&self) -> usize {
        match self {
            Command::Settle => 0,
            Command::Acquire { members, .. }
            | Command::Release { members, .. }
            | Command::Extend { members, .. }
            | Command::Revoke { members, .. }
            | Command::Resize { members, .. } => *members,
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
