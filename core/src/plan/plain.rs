//! The plain lock's fast path, decided: a plain request (no `SHARED`,
//! `LIMIT` or `OWNER`) on a plain lock, or a free resource, whose queue
//! holds only plain requests. The lock is read in place through a borrowed
//! view of its one-allocation value (`LeaseRef`), decided by the one
//! admission rule (`Summary::of_plain`), and the answer is a small plan the
//! server carries out. Nothing is allocated, and the clock and the
//! quarantine are read only when the decision needs them. Every other
//! request is a step of `plan`.

use crate::ask::Ask;
use crate::fence::FenceClock;
use crate::resource::admission::{Admission, Decision, Summary};
use crate::resource::lease::LeaseRef;
use crate::Error;

/// A plain lock as a request finds it.
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    /// The lease, read in place (`None`: free).
    pub lease: Option<LeaseRef<'a>>,
    /// Someone waits in its queue (after any handoff that was due).
    pub queued: bool,
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

/// Decides `DLOCK.ACQUIRE` of `ask` on `view`. `blocks`: whether it may
/// wait (`WAIT`, outside a transaction), asked only when it cannot be
/// granted; `new_token`: whether the token may
/// start a new lease or wait (`dlock.max-token-length`); `quarantined`: the
/// milliseconds left of the restart quarantine. A fence is drawn from
/// `clock` only for a grant, at `now_us()`.
#[inline]
pub fn acquire(
    view: &View<'_>,
    ask: &Ask<'_>,
    blocks: impl FnOnce() -> bool,
    new_token: impl Fn() -> Result<(), Error>,
    quarantined: impl Fn() -> u64,
    clock: &mut FenceClock,
    now_us: impl FnOnce() -> u64,
) -> Result<Acquire, Error> {
    if view.lease.is_none() && (view.queued || quarantined() > 0) {
        // A free lock that may not be granted now: the queue still holds it
        // (a quarantine delays its handoff), or grants are quarantined.
        return wait_or_refuse(view, blocks, new_token, quarantined, true);
    }
    let summary = Summary::of_plain(view.lease);
    match summary.decide(ask, false, None, &new_token, clock, now_us)? {
        Decision::Busy => wait_or_refuse(view, blocks, new_token, quarantined, false),
        Decision::Grant { fence } => Ok(Acquire::Grant { fence }),
        Decision::Refresh { fence } => Ok(Acquire::Refresh { fence }),
    }
}

/// Not now: a wait (for a token that may wait), nil, or the quarantine
/// error when only the quarantine stands in the way (`free`: nobody holds
/// it and nobody waits).
#[inline]
fn wait_or_refuse(
    view: &View<'_>,
    blocks: impl FnOnce() -> bool,
    new_token: impl Fn() -> Result<(), Error>,
    quarantined: impl Fn() -> u64,
    free: bool,
) -> Result<Acquire, Error> {
    if blocks() {
        new_token()?;
        return Ok(Acquire::Wait);
    }
    if free && !view.queued {
        let ms_left = quarantined();
        if ms_left > 0 {
            return Err(Error::Quarantine { ms_left });
        }
    }
    Ok(Acquire::Busy)
}

/// Whether `token` holds the plain lock `lease`: its `RELEASE` frees it,
/// its `EXTEND` moves its deadline.
pub fn held_by(lease: Option<LeaseRef<'_>>, token: &[u8]) -> bool {
    lease.is_some_and(|l| l.is_owned_by(token))
}

/// Whether a `RELEASE` by `token` frees the plain lock `lease`.
pub fn releases(lease: Option<LeaseRef<'_>>, token: &[u8]) -> bool {
    held_by(lease, token) || (cfg!(feature = "planted-release-any") && lease.is_some())
}

/// Whether a free plain lock with waiters goes to its head waiter now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handoff {
    /// Yes, under a fresh fence.
    Now,
    /// Not yet: the owner of an evicted lease still believes it holds it
    /// until this unix ms; wake the queue then.
    HeldUntil(u64),
    /// Not yet: the quarantine holds the waiters; its end grants them in
    /// order.
    Quarantined,
    /// No: every waiter has given up (their `WAIT` ran out).
    GivenUp,
}

/// Whether a free plain lock is handed to its queue at `now_ms`:
/// `quarantined` ms of restart quarantine left, `held_until` the deadline
/// of an evicted lease, `live_waiter` whether a waiter has not given up
/// (each asked only when the answer depends on it).
pub fn handoff(
    quarantined: u64,
    held_until: impl FnOnce() -> Option<u64>,
    live_waiter: impl FnOnce() -> bool,
    now_ms: u64,
) -> Handoff {
    if quarantined > 0 {
        return Handoff::Quarantined;
    }
    if let Some(until) = held_until().filter(|u| *u >= now_ms) {
        return Handoff::HeldUntil(until);
    }
    if live_waiter() {
        Handoff::Now
    } else {
        Handoff::GivenUp
    }
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
mod tests {
    use super::*;
    use crate::ask::Mode;

    const NOW_US: u64 = 1_000_000_000;

    fn ask(token: &'static str) -> Ask<'static> {
        Ask {
            token: token.as_bytes(),
            owner: None,
            mode: Mode::Exclusive,
            limit: None,
            ttl_ms: 100,
        }
    }

    fn decide(view: View<'_>, token: &'static str, blocks: bool, q: u64) -> Result<Acquire, Error> {
        let mut clock = FenceClock::starting_at(7);
        acquire(
            &view,
            &ask(token),
            || blocks,
            || Ok(()),
            || q,
            &mut clock,
            || NOW_US,
        )
    }

    #[test]
    fn a_free_lock_is_granted_and_a_held_one_refreshed_or_busy() {
        let free = View {
            lease: None,
            queued: false,
        };
        assert_eq!(
            decide(free, "a", false, 0),
            Ok(Acquire::Grant { fence: NOW_US })
        );
        let held = View {
            lease: Some(LeaseRef::new(b"a", 9)),
            queued: false,
        };
        assert_eq!(
            decide(held, "a", false, 0),
            Ok(Acquire::Refresh { fence: 9 })
        );
        assert_eq!(decide(held, "b", false, 0), Ok(Acquire::Busy));
        assert_eq!(decide(held, "b", true, 0), Ok(Acquire::Wait));
    }

    #[test]
    fn a_free_lock_with_waiters_or_quarantined_is_not_granted() {
        let queued = View {
            lease: None,
            queued: true,
        };
        assert_eq!(decide(queued, "a", false, 0), Ok(Acquire::Busy));
        assert_eq!(decide(queued, "a", true, 0), Ok(Acquire::Wait));
        let free = View {
            lease: None,
            queued: false,
        };
        let q = Err(Error::Quarantine { ms_left: 5 });
        assert_eq!(decide(free, "a", false, 5), q);
        assert_eq!(decide(free, "a", true, 5), Ok(Acquire::Wait));
        // Behind waiters the answer is nil, not the quarantine.
        assert_eq!(decide(queued, "a", false, 5), Ok(Acquire::Busy));
    }

    #[test]
    fn a_long_token_may_refresh_but_not_hold_anew_or_wait() {
        let long = || Err(Error::TokenTooLong { max: 1 });
        let mut clock = FenceClock::new();
        let held = View {
            lease: Some(LeaseRef::new(b"a", 9)),
            queued: false,
        };
        let refresh = acquire(&held, &ask("a"), || true, long, || 0, &mut clock, || NOW_US);
        assert_eq!(refresh, Ok(Acquire::Refresh { fence: 9 }));
        let wait = acquire(&held, &ask("b"), || true, long, || 0, &mut clock, || NOW_US);
        assert!(wait.is_err());
        let nil = acquire(
            &held,
            &ask("b"),
            || false,
            long,
            || 0,
            &mut clock,
            || NOW_US,
        );
        assert_eq!(nil, Ok(Acquire::Busy));
        let free = View {
            lease: None,
            queued: false,
        };
        let grant = acquire(
            &free,
            &ask("b"),
            || false,
            long,
            || 0,
            &mut clock,
            || NOW_US,
        );
        assert!(grant.is_err());
    }

    #[test]
    fn a_set_is_free_a_retry_busy_or_the_general_paths() {
        let (a, b) = (LeaseRef::new(b"t", 4), LeaseRef::new(b"t", 5));
        let other = LeaseRef::new(b"x", 6);
        let p = Member::Plain;
        assert_eq!(set(&[p(None), p(None)], b"t"), Ok(Set::Free));
        assert_eq!(set(&[p(Some(a)), p(Some(a))], b"t"), Ok(Set::Retry(4)));
        assert_eq!(set(&[p(Some(a)), p(Some(b))], b"t"), Ok(Set::Other));
        assert_eq!(set(&[p(None), p(Some(a))], b"t"), Ok(Set::Other));
        assert_eq!(set(&[p(None), p(Some(other))], b"t"), Ok(Set::Busy));
        assert_eq!(set(&[p(None), Member::Multi], b"t"), Ok(Set::Other));
        assert_eq!(set(&[], b"t"), Ok(Set::Other));
    }

    #[test]
    fn a_handoff_waits_for_the_quarantine_and_an_evicted_lease() {
        let due = |q, held: Option<u64>, live| handoff(q, || held, || live, 10);
        assert_eq!(due(0, None, true), Handoff::Now);
        assert_eq!(due(0, None, false), Handoff::GivenUp);
        assert_eq!(due(3, None, true), Handoff::Quarantined);
        assert_eq!(due(0, Some(12), true), Handoff::HeldUntil(12));
        assert_eq!(due(0, Some(9), true), Handoff::Now);
    }
}
