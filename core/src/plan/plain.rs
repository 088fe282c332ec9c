//! The plain lock's fast path, decided: a plain request (no `SHARED`,
//! `LIMIT` or `OWNER`) on a plain lock, or a free resource, whose queue
//! holds only plain requests. `route` tells it from a step of `plan`, for
//! every entry point alike. The lock is read in place through a borrowed
//! view of its one-allocation value (`LeaseRef`), decided by the one
//! admission rule (`Summary::of_plain`), and the answer is a small `Copy`
//! plan the server carries out: the handoff that goes first, then the
//! command's own outcome. Nothing is allocated, and what the decision reads
//! of the server (`Reads`: the clock, the quarantine, Redis Cluster, whether
//! the client may wait) is read only when the decision depends on it.

use crate::ask::Ask;
use crate::fence::FenceClock;
use crate::queue::Rank;
use crate::resource::admission::{Admission, Decision, Summary};
use crate::resource::lease::LeaseRef;
use crate::Error;

/// What a key holds, as `route` reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Nothing: the resource is free.
    Free,
    /// A plain lock.
    Plain,
    /// Several holds (`SHARED`, `LIMIT`, `OWNER`).
    Multi,
}

/// Which path decides a request on a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The plain lock's fast path (this file).
    Plain,
    /// A step: `plan::plan`, carried out whole.
    Step,
}

/// The one place that tells the two paths apart. `plain_request`: the
/// request asks for a plain exclusive hold (a release, an extend and a
/// timer's visit always do); `plain_queue`: nobody waits, or only plain
/// requests do (no reader, permit, owner or set).
#[inline]
pub fn route(shape: Shape, plain_queue: bool, plain_request: bool) -> Route {
    if plain_request && plain_queue && shape != Shape::Multi {
        Route::Plain
    } else {
        Route::Step
    }
}

/// What a plain decision reads of the server besides the lock and its
/// queue. Each is asked only when the decision depends on it, so the fast
/// path reads no clock for a refusal and no quarantine for a held lock.
pub trait Reads {
    /// Whether the request may wait (`WAIT`, outside a transaction, a
    /// script or a replayed command).
    fn blocks(&self) -> bool;
    /// Whether the token may start a new lease or wait
    /// (`dlock.max-token-length`).
    fn new_token(&self) -> Result<(), Error>;
    /// Milliseconds left of the restart quarantine.
    fn quarantined_ms(&self) -> u64;
    /// Until when (unix ms) the owner of an evicted lease still believes
    /// it holds the lock.
    fn held_until(&self) -> Option<u64>;
    /// Whether this node may grant the resource's slot now (Redis
    /// Cluster: not while it migrates or after it moved).
    fn owns_slot(&self) -> Result<bool, Error>;
    /// The time, unix µs, the same at every call.
    fn now_us(&self) -> u64;
}

/// A plain lock as a request finds it, once the waiters whose `WAIT` ran
/// out have left.
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    /// The lease, read in place (`None`: free).
    pub lease: Option<LeaseRef<'a>>,
    /// The token of its queue's head (`None`: nobody waits): a handoff
    /// grants it (and every entry of the same token).
    pub head: Option<&'a [u8]>,
    /// The head's rank (`None`: nobody waits, or not known): a newcomer
    /// that outranks it is decided before the handoff.
    pub head_rank: Option<Rank>,
}

/// Whether a free plain lock with waiters goes to its head waiter now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handoff {
    /// Yes, under this fresh fence.
    Grant { fence: u64 },
    /// Not yet: the owner of an evicted lease still believes it holds it
    /// until this unix ms; wake the queue then.
    HeldUntil(u64),
    /// Not yet: the quarantine holds the waiters; its end grants them in
    /// order.
    Quarantined,
    /// No: this node may not grant the slot (it migrates, or moved). A
    /// grant here would split ownership with the slot's next node: the
    /// waiters are answered `TRYAGAIN`, retry and follow the redirect.
    SlotMoved,
}

/// Decides the handoff of a free plain lock that someone waits for. A
/// fence is drawn from `clock` only for a grant.
#[inline]
pub fn handoff(reads: &impl Reads, clock: &mut FenceClock) -> Result<Handoff, Error> {
    if reads.quarantined_ms() > 0 {
        return Ok(Handoff::Quarantined);
    }
    let now_us = reads.now_us();
    if let Some(until) = reads.held_until().filter(|u| *u >= now_us / 1000) {
        return Ok(Handoff::HeldUntil(until));
    }
    if !reads.owns_slot()? {
        return Ok(Handoff::SlotMoved);
    }
    Ok(Handoff::Grant {
        fence: clock.next(now_us)?,
    })
}

/// Whether a newcomer ranked `rank` needs a step rather than `acquire`:
/// it outranks the head of a free lock's queue (so it would take the lock
/// before the handoff) while a wait of its own token (`token_queued`) is
/// queued there. A step grants it and answers that wait with the same
/// grant (`Granted::AnsweredBy`); the plain path would leave the wait
/// queued, to be granted the lock again after the token releases it.
#[inline]
pub fn outranks_own_wait(view: &View<'_>, rank: Rank, token_queued: impl FnOnce() -> bool) -> bool {
    view.lease.is_none() && view.head_rank.is_some_and(|head| rank < head) && token_queued()
}

/// Whether `handoff` would grant now, drawing no fence.
#[inline]
fn handoff_would_grant(reads: &impl Reads) -> Result<bool, Error> {
    if reads.quarantined_ms() > 0 {
        return Ok(false);
    }
    let now_ms = reads.now_us() / 1000;
    if reads.held_until().is_some_and(|u| u >= now_ms) {
        return Ok(false);
    }
    reads.owns_slot()
}

/// What `DLOCK.ACQUIRE` does on a plain lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquire {
    /// A new lease under a fresh fence.
    Grant { fence: u64 },
    /// The token's own lease: the same fence, a new deadline.
    Refresh { fence: u64 },
    /// Not now: the client waits in the queue.
    Wait,
    /// Not now, and it may not wait: nil.
    Busy,
}

/// A plain `DLOCK.ACQUIRE`, decided whole: the handoff that goes first (a
/// free lock that someone waits for goes to them before any newcomer), then
/// the command's own outcome on the lock as the handoff leaves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcquirePlan {
    pub handoff: Option<Handoff>,
    pub outcome: Acquire,
}

/// Decides `DLOCK.ACQUIRE` of `ask`, ranked `rank` (`Rank::arriving`), on
/// `view`. Fences are drawn from `clock`: the handoff's, or the grant's.
/// On `Err` nothing is to be done (and no fence was drawn).
#[inline]
pub fn acquire(
    view: &View<'_>,
    ask: &Ask<'_>,
    rank: Rank,
    reads: &impl Reads,
    clock: &mut FenceClock,
) -> Result<AcquirePlan, Error> {
    let outranks_head = view.head_rank.is_some_and(|head| rank < head);
    let (lease, queued, handoff) = match (view.lease, view.head) {
        // A free lock the newcomer outranks every waiter for, that a
        // handoff would grant now: the newcomer is decided on it, and the
        // waiters keep waiting behind it. Not when the head is its own
        // token: the handoff's grant answers both (as a step answers a
        // token queued twice), leaving no wait of it queued.
        (None, Some(head)) if outranks_head && head != ask.token && handoff_would_grant(reads)? => {
            (None, false, None)
        }
        (None, Some(head)) => {
            // This request would queue behind the head: refused before a
            // handoff draws a fence if it may not.
            if reads.blocks() {
                reads.new_token()?;
            }
            match handoff(reads, clock)? {
                h @ Handoff::Grant { fence } => {
                    // Held now: whoever still waits no longer matters to
                    // the newcomer, only the lease does.
                    (Some(LeaseRef::new(head, fence)), false, Some(h))
                }
                // Every waiter is sent away.
                h @ Handoff::SlotMoved => (None, false, Some(h)),
                h => (None, true, Some(h)),
            }
        }
        (lease, head) => (lease, head.is_some(), None),
    };
    let outcome = acquire_after(lease, queued, ask, reads, clock)?;
    Ok(AcquirePlan { handoff, outcome })
}

/// `acquire` on the lock as any handoff left it: `queued`, someone still
/// waits.
#[inline]
fn acquire_after(
    lease: Option<LeaseRef<'_>>,
    queued: bool,
    ask: &Ask<'_>,
    reads: &impl Reads,
    clock: &mut FenceClock,
) -> Result<Acquire, Error> {
    if lease.is_none() && (queued || reads.quarantined_ms() > 0) {
        // A free lock that may not be granted now: the queue still holds it
        // (a quarantine delays its handoff), or grants are quarantined.
        return wait_or_refuse(queued, reads, true);
    }
    let summary = Summary::of_plain(lease);
    let new_token = || reads.new_token();
    match summary.decide(ask, false, None, new_token, clock, || reads.now_us())? {
        Decision::Busy => wait_or_refuse(queued, reads, false),
        Decision::Grant { fence } => Ok(Acquire::Grant { fence }),
        Decision::Refresh { fence } => Ok(Acquire::Refresh { fence }),
    }
}

/// Not now: a wait (for a token that may wait), nil, or the quarantine
/// error when only the quarantine stands in the way (`free`: nobody holds
/// it and nobody waits).
#[inline]
fn wait_or_refuse(queued: bool, reads: &impl Reads, free: bool) -> Result<Acquire, Error> {
    if reads.blocks() {
        reads.new_token()?;
        return Ok(Acquire::Wait);
    }
    if free && !queued {
        let ms_left = reads.quarantined_ms();
        if ms_left > 0 {
            return Err(Error::Quarantine { ms_left });
        }
    }
    Ok(Acquire::Busy)
}

/// Whether `token` holds the plain lock `lease`: its `RELEASE` frees it,
/// its `EXTEND` moves its deadline.
#[inline]
pub fn held_by(lease: Option<LeaseRef<'_>>, token: &[u8]) -> bool {
    lease.is_some_and(|l| l.is_owned_by(token))
}

/// Whether a `RELEASE` by `token` frees the plain lock `lease`.
#[inline]
pub fn releases(lease: Option<LeaseRef<'_>>, token: &[u8]) -> bool {
    held_by(lease, token) || (cfg!(feature = "planted-release-any") && lease.is_some())
}

/// What a plain `DLOCK.RELEASE` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// The token holds nothing here: 0, nothing changes.
    NotHeld,
    /// The lock is freed; `handoff`: what its queue gets (`None`: nobody
    /// waits).
    Freed { handoff: Option<Handoff> },
}

/// Decides a plain `DLOCK.RELEASE` by `token` of `view`'s lease.
#[inline]
pub fn release(
    view: &View<'_>,
    token: &[u8],
    reads: &impl Reads,
    clock: &mut FenceClock,
) -> Result<Release, Error> {
    if !releases(view.lease, token) {
        return Ok(Release::NotHeld);
    }
    let handoff = match view.head {
        Some(_) => Some(handoff(reads, clock)?),
        None => None,
    };
    Ok(Release::Freed { handoff })
}

/// Whether a revocation (a grant whose waiter left) releases `lease`: the
/// key still holds exactly that grant, the token's under its fence.
#[inline]
pub fn revokes(lease: Option<LeaseRef<'_>>, token: &[u8], fence: u64) -> bool {
    lease.is_some_and(|l| l.is_owned_by(token) && l.fence() == fence)
}

/// Which path decides a `DLOCK.MACQUIRE`: its common case here (nobody waits
/// anywhere, exclusive holds), or a step.
#[inline]
pub fn set_route(anyone_waiting: bool, exclusive: bool) -> Route {
    // The planted bug (test-only) takes this path whoever waits.
    let waiting = anyone_waiting && !cfg!(feature = "planted-set-partial");
    if waiting || !exclusive {
        Route::Step
    } else {
        Route::Plain
    }
}

/// What `DLOCK.MACQUIRE`'s common case does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetPlan {
    /// Every member, one fresh fence and one deadline.
    Grant { fence: u64 },
    /// Every member held by the token under this fence: new deadlines.
    Retry { fence: u64 },
    /// A member held by another, and the set may not wait: nil.
    Busy,
    /// The general path decides (a step): the members are not all free or
    /// a plain lock, the set would wait, or the quarantine is running.
    Step,
}

/// Decides `DLOCK.MACQUIRE`'s common case on `members` as read in place
/// (`set_route` said it applies). A fence is drawn from `clock` only for a
/// grant, after the token was checked.
pub fn macquire(
    members: &[Member<'_>],
    token: &[u8],
    reads: &impl Reads,
    clock: &mut FenceClock,
) -> Result<SetPlan, Error> {
    Ok(match set(members, token)? {
        Set::Other => SetPlan::Step,
        // A queued set is the general path's.
        Set::Busy if reads.blocks() => SetPlan::Step,
        // The planted bug (test-only) grants a busy set's free members.
        Set::Busy if cfg!(feature = "planted-set-partial") && reads.quarantined_ms() == 0 => {
            SetPlan::Grant {
                fence: clock.next(reads.now_us())?,
            }
        }
        Set::Busy => SetPlan::Busy,
        Set::Free if reads.quarantined_ms() > 0 => SetPlan::Step,
        Set::Free => {
            reads.new_token()?;
            SetPlan::Grant {
                fence: clock.next(reads.now_us())?,
            }
        }
        Set::Retry(fence) => SetPlan::Retry { fence },
    })
}

/// A member of `DLOCK.MACQUIRE`'s common case, as read in place.
#[derive(Debug, Clone, Copy)]
pub enum Member<'a> {
    /// Free, or a plain lock.
    Plain(Option<LeaseRef<'a>>),
    /// A resource with several holds: the general path's.
    Multi,
}

/// What an exclusive `DLOCK.MACQUIRE` with nobody waiting anywhere finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Set {
    /// Every member free: one fresh fence for all.
    Free,
    /// Every member held by the token under this fence: a retry.
    Retry(u64),
    /// A member held by another: nil (without `WAIT`).
    Busy,
    /// Anything else (a member with several holds, a member free beside one
    /// held, two fences): the general path decides, with the same answers.
    Other,
}

/// The members' state, decided the way `component` decides a set: member
/// by member through the one admission rule, a busy member ends the
/// decision, a member unlike the first is the general path's.
pub fn set(members: &[Member<'_>], token: &[u8]) -> Result<Set, Error> {
    // An exclusive hold of the token, as `ACQUIRE` asks it of each member.
    let ask = Ask {
        token,
        owner: None,
        mode: crate::ask::Mode::Exclusive,
        limit: None,
        ttl_ms: 0,
        session: None,
        max_hold_ms: None,
        permits: None,
    };
    // Every member first: one the fast path cannot read is the general
    // path's, wherever it is.
    let mut states = Vec::with_capacity(members.len());
    for m in members {
        let lease = match m {
            Member::Multi if cfg!(feature = "planted-set-partial") => {
                states.push(Set::Busy);
                continue;
            }
            Member::Multi => return Ok(Set::Other),
            Member::Plain(lease) => *lease,
        };
        // The one admission rule, on the plain value read in place.
        states.push(match Summary::of_plain(lease).admit(&ask, false)? {
            Admission::New { owner_fence: None } => Set::Free,
            Admission::Retry { fence } => Set::Retry(fence),
            Admission::Busy => Set::Busy,
            Admission::New {
                owner_fence: Some(_),
            } => return Ok(Set::Other),
        });
    }
    let mut first: Option<Set> = None;
    for state in states {
        first = match (first, state) {
            (_, Set::Busy) => return Ok(Set::Busy),
            (None, s) => Some(s),
            (Some(Set::Free), Set::Free) => Some(Set::Free),
            (Some(Set::Retry(a)), Set::Retry(b)) if a == b => Some(Set::Retry(a)),
            _ => return Ok(Set::Other),
        };
    }
    Ok(first.unwrap_or(Set::Other))
}

#[cfg(test)]
mod tests;
