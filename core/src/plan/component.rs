//! Queues that share requests. A set request (`DLOCK.MACQUIRE`) waits in
//! the queue of every member; it is granted when it is at the head of each
//! of those queues and every member fits it, all in one step. A member that
//! is free while its set still waits for another member stays reserved.
//!
//! The resources whose queues share set requests form a component (one
//! cluster slot, since a set's members share a slot). Its requests are
//! decided in global enqueue order: every queue is FIFO in that order, so
//! deciding them in that order is FIFO on every resource at once, and no
//! cycle can form among requests of clients that hold nothing.

use crate::ask::Ask;
use crate::resource::admission::{Admission, Summary};
use crate::resource::holds::Holds;
use crate::Error;

/// One queued request of the component, in enqueue order.
#[derive(Debug, Clone)]
pub struct Queued<'x> {
    /// Indexes of its resources in the component (one for a single
    /// request, every member for a set).
    pub members: Vec<usize>,
    pub ask: Ask<'x>,
    /// May not be granted in this step (grants are quarantined, or a member
    /// still waits for an evicted hold's deadline): it keeps waiting and
    /// reserves its members.
    pub frozen: bool,
    /// Whether it stays queued when it is not granted, reserving its
    /// members for itself against the requests ranked after it: false for
    /// a command's own request that may not wait (no `WAIT`).
    pub stays: bool,
}

/// How a request is granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Granted {
    /// A new owner: one fresh fence for every member.
    Fresh,
    /// Its token already holds every member identically: that fence.
    Retry { fence: u64 },
    /// Its owner holds (a single request of an owner that holds).
    Owner { fence: u64 },
    /// Its owner is granted earlier in this step (request `n`): that
    /// fence, for a hold of its own.
    SameOwnerAs(usize),
    /// Its token is granted earlier in this step (request `n`), asking the
    /// same: that grant answers it too, nothing is added.
    AnsweredBy(usize),
}

/// The fence a request granted in a step holds under in the holds as the
/// step leaves them (`after`) until its real fence is drawn: above every
/// real fence, so that a later request of its token or owner is told to
/// share its grant (`Granted::AnsweredBy`, `Granted::SameOwnerAs`).
pub(crate) fn stand_in(i: usize) -> u64 {
    u64::MAX - i as u64
}

/// Decides the component's queued requests against its resources' holds:
/// `Ok` requests are granted (on every member), `Err` ones leave with that
/// error, the others keep waiting (and reserve their members).
pub fn admit_component<'x>(
    resources: &[&'x Holds],
    queued: &'x [Queued<'x>],
) -> Vec<(usize, Result<Granted, Error>)> {
    let after = resources.iter().map(|h| h.summary()).collect();
    admit_reserved(after, &vec![None; resources.len()], queued)
}

/// As `admit_component`, on the resources' holds as the step left them
/// (`after`), with resources reserved by requests that wait and are not
/// part of `queued` (requests the step leaves waiting): `reserved_from[m]
/// = Some(i)` when the first of them on `m` is queued just before
/// `queued[i]` (`queued.len()`: after every one). From there on only owners
/// that hold pass `m`.
pub fn admit_reserved<'x>(
    mut after: Vec<Summary<'x>>,
    reserved_from: &[Option<usize>],
    queued: &'x [Queued<'x>],
) -> Vec<(usize, Result<Granted, Error>)> {
    let drawn_by = |fence: u64| {
        (fence > crate::fence::MAX_FENCE)
            .then(|| usize::try_from(u64::MAX - fence).ok())
            .flatten()
    };
    let mut waits = vec![false; after.len()];
    let mut marks: Vec<(usize, usize)> = reserved_from
        .iter()
        .enumerate()
        .filter_map(|(m, from)| Some(((*from)?, m)))
        .collect();
    marks.sort_unstable();
    let mut marks = marks.into_iter().peekable();
    let mut out = Vec::new();
    for (i, q) in queued.iter().enumerate() {
        while let Some((_, m)) = marks.next_if(|(from, _)| *from <= i) {
            set(&mut waits, m);
        }
        let decided = if q.frozen {
            None
        } else {
            admit_request(&after, &waits, q)
        };
        let Some(decided) = decided else {
            // Waits: every member is reserved for it.
            if q.stays {
                q.members.iter().for_each(|m| set(&mut waits, *m));
            }
            continue;
        };
        let grant = match decided {
            Err(e) => Err(e),
            Ok(Admission::Retry { fence }) => Ok(match drawn_by(fence) {
                Some(first) => Granted::AnsweredBy(first),
                None => Granted::Retry { fence },
            }),
            Ok(Admission::New { owner_fence: None }) => Ok(Granted::Fresh),
            Ok(Admission::New {
                owner_fence: Some(f),
            }) => Ok(match drawn_by(f) {
                Some(first) => Granted::SameOwnerAs(first),
                None => Granted::Owner { fence: f },
            }),
            Ok(Admission::Busy) => continue,
        };
        if let Ok(g) = grant {
            let fence = match g {
                Granted::Fresh => stand_in(i),
                Granted::SameOwnerAs(first) | Granted::AnsweredBy(first) => stand_in(first),
                Granted::Retry { fence } | Granted::Owner { fence } => fence,
            };
            if !matches!(g, Granted::Retry { .. } | Granted::AnsweredBy(_)) {
                for m in &q.members {
                    if let Some(s) = after.get_mut(*m) {
                        let a = &q.ask;
                        s.add_granted(a, fence);
                    }
                }
            }
        }
        out.push((i, grant));
    }
    out
}

fn set(flags: &mut [bool], i: usize) {
    if let Some(f) = flags.get_mut(i) {
        *f = true;
    }
}

/// The request's admission on every member at once: `None` while it must
/// wait on any of them; an error from any member refuses it; a retry
/// counts only if it is one on every member, with one fence. `waits`: the
/// members reserved by a request that waits.
pub fn admit_request(
    after: &[Summary<'_>],
    waits: &[bool],
    q: &Queued<'_>,
) -> Option<Result<Admission, Error>> {
    let mut seen: Option<Admission> = None;
    for m in &q.members {
        let (s, queued) = (after.get(*m)?, *waits.get(*m)?);
        // Behind a request that waits only owners that hold can pass.
        if queued && !s.holds_owner(q.ask.owner()) {
            return None;
        }
        let a = match s.admit(&q.ask, queued) {
            Err(Error::TokenInUse) if q.members.len() > 1 => return Some(Err(Error::SetMismatch)),
            Err(e) => return Some(Err(e)),
            Ok(Admission::Busy) => return None,
            Ok(a) => a,
        };
        seen = match (seen, a) {
            (None, a) => Some(a),
            (Some(x), y) if x == y => Some(x),
            // A token holding some members but not others, or under
            // different fences: not this set.
            _ => return Some(Err(Error::SetMismatch)),
        };
    }
    seen.map(Ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ask::Mode;

    const NOW: u64 = 1_000_000;

    fn ask(token: &'static str, mode: Mode) -> Ask<'static> {
        Ask {
            token: token.as_bytes(),
            owner: None,
            mode,
            limit: None,
            ttl_ms: 10,
            session: None,
            max_hold_ms: None,
            permits: None,
        }
    }

    fn q(members: &[usize], token: &'static str) -> Queued<'static> {
        Queued {
            members: members.to_vec(),
            ask: ask(token, Mode::Exclusive),
            frozen: false,
            stays: true,
        }
    }

    fn held(token: &'static str) -> Holds {
        let mut h = Holds::new(1);
        h.add(&ask(token, Mode::Exclusive), 5, NOW, 0);
        h
    }

    fn refs(res: &[Holds]) -> Vec<&Holds> {
        res.iter().collect()
    }

    fn granted(out: &[(usize, Result<Granted, Error>)]) -> Vec<usize> {
        out.iter()
            .filter(|(_, g)| g.is_ok())
            .map(|(i, _)| *i)
            .collect()
    }

    #[test]
    fn a_set_is_granted_only_when_every_member_fits() {
        // A free, B held: the set {A, B} waits and reserves A, so a later
        // single request on A does not pass it.
        let res = [Holds::new(1), held("x")];
        let queue = [q(&[0, 1], "set"), q(&[0], "single")];
        assert!(admit_component(&refs(&res), &queue).is_empty());
        // B free too: the set goes first, the single request waits behind.
        let res = [Holds::new(1), Holds::new(1)];
        let out = admit_component(&refs(&res), &queue);
        assert_eq!(out, vec![(0, Ok(Granted::Fresh))]);
    }

    #[test]
    fn disjoint_requests_are_granted_together_in_enqueue_order() {
        let res = [Holds::new(1), Holds::new(1), Holds::new(1)];
        let queue = [q(&[0, 1], "s1"), q(&[2], "c"), q(&[1, 2], "s2")];
        assert_eq!(granted(&admit_component(&refs(&res), &queue)), [0, 1]);
    }

    #[test]
    fn shared_sets_share_members() {
        let res = [Holds::new(1), Holds::new(1)];
        let shared = |m: &[usize], t| Queued {
            members: m.to_vec(),
            ask: ask(t, Mode::Shared),
            frozen: false,
            stays: true,
        };
        let queue = [shared(&[0, 1], "r1"), shared(&[1], "r2"), q(&[0], "w")];
        assert_eq!(granted(&admit_component(&refs(&res), &queue)), [0, 1]);
    }

    #[test]
    fn a_token_holding_part_of_a_set_is_refused() {
        let res = [held("t"), Holds::new(1)];
        let out = admit_component(&refs(&res), &[q(&[0, 1], "t")]);
        assert_eq!(out, vec![(0, Err(Error::SetMismatch))]);
        let res = [held("t"), held("t")];
        let out = admit_component(&refs(&res), &[q(&[0, 1], "t")]);
        assert_eq!(out, vec![(0, Ok(Granted::Retry { fence: 5 }))]);
    }

    #[test]
    fn a_token_queued_twice_is_one_grant() {
        let res = [Holds::new(1), Holds::new(1)];
        let queue = [q(&[0, 1], "s"), q(&[0, 1], "s")];
        let out = admit_component(&refs(&res), &queue);
        assert_eq!(
            out,
            vec![(0, Ok(Granted::Fresh)), (1, Ok(Granted::AnsweredBy(0)))]
        );
    }

    #[test]
    fn a_token_queued_twice_with_other_terms_is_refused_not_answered() {
        // The grant of its first entry answers a second entry only when
        // that asks the same: a hold of another session (or none) or
        // another MAXHOLD (or none) is not what the second entry asked for.
        let with = |session: Option<&'static [u8]>, max_hold_ms: Option<u64>| Queued {
            members: vec![0],
            ask: Ask {
                session,
                max_hold_ms,
                ..ask("t", Mode::Exclusive)
            },
            frozen: false,
            stays: true,
        };
        let res = [Holds::new(1)];
        let cases = [
            (
                with(None, None),
                with(Some(b"s1"), None),
                Error::SessionMismatch,
            ),
            (
                with(Some(b"s1"), None),
                with(None, None),
                Error::SessionMismatch,
            ),
            (
                with(None, None),
                with(None, Some(5_000)),
                Error::MaxHoldMismatch,
            ),
            (
                with(None, Some(5_000)),
                with(None, None),
                Error::MaxHoldMismatch,
            ),
            (
                with(None, Some(5_000)),
                with(None, Some(9_000)),
                Error::MaxHoldMismatch,
            ),
        ];
        for (first, second, refused) in cases {
            let queue = [first, second];
            let out = admit_component(&refs(&res), &queue);
            assert_eq!(out, vec![(0, Ok(Granted::Fresh)), (1, Err(refused))]);
        }
        // The same terms: one grant.
        let queue = [with(Some(b"s1"), Some(5)), with(Some(b"s1"), Some(5))];
        let out = admit_component(&refs(&res), &queue);
        assert_eq!(
            out,
            vec![(0, Ok(Granted::Fresh)), (1, Ok(Granted::AnsweredBy(0)))]
        );
    }

    #[test]
    fn a_frozen_request_reserves_its_members() {
        let res = [Holds::new(1), Holds::new(1)];
        let mut frozen = q(&[0], "f");
        frozen.frozen = true;
        let queue = [frozen, q(&[0, 1], "s"), q(&[1], "b")];
        // f waits on 0, so s waits (on 0 and 1), so b waits on 1.
        assert!(admit_component(&refs(&res), &queue).is_empty());
    }

    #[test]
    fn a_single_owner_request_joins_its_owner_granted_in_the_same_step() {
        let res = [Holds::new(1)];
        let owned = |t| Queued {
            members: vec![0],
            ask: Ask {
                owner: Some(b"o"),
                ..ask(t, Mode::Exclusive)
            },
            frozen: false,
            stays: true,
        };
        let out = admit_component(&refs(&res), &[owned("t1"), owned("t2")]);
        assert_eq!(
            out,
            vec![(0, Ok(Granted::Fresh)), (1, Ok(Granted::SameOwnerAs(0)))]
        );
    }
}
