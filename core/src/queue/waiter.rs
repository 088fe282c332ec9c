//! A queued request as the queues keep it: what it wants, who waits, and
//! who gets the lock next.

use super::rank::Rank;
use crate::ask::{Ask, Mode};

/// What a queued request asks for besides its token: `SHARED`, `LIMIT`,
/// `OWNER`. The default is the plain lock.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Wants {
    pub mode: Mode,
    pub limit: Option<u32>,
    pub owner: Option<Box<[u8]>>,
    /// `SESSION id`: the waiter leaves when the session ends, and its
    /// grant is bound to the session.
    pub session: Option<Box<[u8]>>,
    /// `MAXHOLD ms`: the grant's hold is capped that long from the grant.
    pub max_hold_ms: Option<u64>,
    /// `PERMITS k` above 1: the grant's hold counts as k permits.
    pub permits: Option<u32>,
}

impl Wants {
    pub fn of(ask: &Ask<'_>) -> Self {
        Wants {
            mode: ask.mode,
            limit: ask.limit,
            owner: ask.owner.map(Into::into),
            session: ask.session.map(Into::into),
            max_hold_ms: ask.max_hold_ms,
            permits: ask.permits,
        }
    }

    pub fn is_plain(&self) -> bool {
        *self == Wants::default()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter<H> {
    pub id: u64,
    /// Its place in every queue it waits in (its `id` is `rank.id`).
    pub rank: Rank,
    /// The priority it asked for (0 when none).
    pub priority: u16,
    pub token: Box<[u8]>,
    pub wants: Wants,
    pub ttl_ms: u64,
    /// When (ms on a monotonic clock) the waiter has given up (its `WAIT`
    /// timeout); `None` waits forever.
    pub gives_up_at: Option<u64>,
    /// When (ms on the same clock) it joined the queue, once the server
    /// said so (`WaitQueues::joined_at`); 0 until then.
    pub queued_at: u64,
    pub handle: H,
    /// One member's entry of a set request (`DLOCK.MACQUIRE`): the same id
    /// waits in the queue of every member.
    pub in_set: bool,
}

impl<H> Waiter<H> {
    /// Whether the plain handoff (head waiter, same-token duplicates) can
    /// serve this entry.
    pub fn is_plain(&self) -> bool {
        !self.in_set && self.wants.is_plain()
    }

    /// The request as the holds model decides it.
    pub fn ask(&self) -> Ask<'_> {
        Ask {
            token: &self.token,
            owner: self.wants.owner.as_deref(),
            mode: self.wants.mode,
            limit: self.wants.limit,
            ttl_ms: self.ttl_ms,
            session: self.wants.session.as_deref(),
            max_hold_ms: self.wants.max_hold_ms,
            permits: self.wants.permits,
        }
    }

    /// A waiter whose deadline has passed is never granted: its timeout
    /// is already due, and a grant racing it could not be delivered.
    /// Like Redis's own blocking timeouts, the deadline itself still counts.
    pub fn has_given_up(&self, now_ms: u64) -> bool {
        self.gives_up_at.is_some_and(|at| at < now_ms)
    }
}

/// Who gets the lock next: the head waiter, plus every other queued entry
/// with the same token (a client that reconnected and retried). One grant
/// answers them all with the same fence.
#[derive(Debug, PartialEq, Eq)]
pub struct Grantee<H> {
    pub token: Box<[u8]>,
    pub ttl_ms: u64,
    pub handles: Vec<H>,
    /// Ids of the entries granted, in queue order.
    pub ids: Vec<u64>,
    /// When the head joined the queue (`Waiter::queued_at`).
    pub queued_at: u64,
}
