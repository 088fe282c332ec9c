//! `RELEASE ... TO`: the planner's side (`handover.rs`).
use super::*;
use crate::ask::Mode;
use crate::resource::holds::Holds;

const NOW_US: u64 = 1_000_000_000;
const NOW_MS: u64 = NOW_US / 1000;
/// The fence clock before the step: every fresh fence is drawn from here.
const CLOCK: u64 = 10;

fn ask(token: &'static str, mode: Mode) -> Ask<'static> {
    Ask {
        token: token.as_bytes(),
        owner: None,
        mode,
        limit: None,
        ttl_ms: 100,
        session: None,
        max_hold_ms: None,
        permits: None,
    }
}

fn holding(asks: &[Ask<'static>]) -> Holds {
    let limit = asks.first().and_then(|a| a.limit).unwrap_or(1);
    let mut h = Holds::new(limit);
    for (i, a) in asks.iter().enumerate() {
        h.add(a, 5 + i as u64, NOW_MS + 50, 0);
    }
    h
}

fn member(holds: &Holds) -> Member<'_> {
    Member {
        holds,
        has_waiters: true,
        reserved_from: None,
        reserved_rank: None,
        held_elsewhere: false,
    }
}

fn queue(asks: &[Ask<'static>]) -> Vec<Waiting<'static>> {
    asks.iter()
        .enumerate()
        .map(|(i, a)| Waiting {
            rank: Rank {
                key: 0,
                id: i as u64 + 1,
            },
            members: vec![0],
            ask: *a,
        })
        .collect()
}

fn release_to(token: &'static str, to: &'static str) -> Command<'static> {
    Command::Release {
        token: token.as_bytes(),
        members: 1,
        to: Some(to.as_bytes()),
    }
}

fn run_on(
    members: &[Member<'_>],
    waiting: &[Waiting<'_>],
    command: Command<'_>,
    quarantined_ms: u64,
) -> Result<Plan, Error> {
    let step = Step {
        members,
        waiting,
        command,
        quarantined_ms,
        now_us: NOW_US,
    };
    plan(&step, &FenceClock::starting_at(CLOCK), || Ok(true))
}

fn run(holds: &Holds, waiting: &[Waiting<'_>], command: Command<'_>) -> Result<Plan, Error> {
    run_on(&[member(holds)], waiting, command, 0)
}

fn x() -> Ask<'static> {
    ask("x", Mode::Exclusive)
}

#[test]
fn a_deep_target_is_granted_and_the_head_keeps_waiting() {
    let h = holding(&[x()]);
    let waiting = queue(&[
        ask("w1", Mode::Exclusive),
        ask("w2", Mode::Exclusive),
        ask("t", Mode::Exclusive),
    ]);
    let p = run(&h, &waiting, release_to("x", "t")).unwrap();
    assert_eq!(p.outcome, Outcome::Count(1));
    // The first fence drawn after the releaser's: nothing between.
    assert_eq!(p.granted, vec![(2, NOW_US)]);
    let add = Op::Add {
        who: Who::Queued(2),
        fence: NOW_US,
    };
    assert_eq!(p.ops, vec![(0, Op::Drop), (0, add)]);
    assert_eq!(p.events, vec![(0, Event::Released), (0, Event::Handoff)]);
    let c = p.counts;
    assert_eq!(
        (c.releases, c.grants, c.handoffs, c.handovers),
        (1, 1, 1, 1)
    );
}

#[test]
fn a_plain_release_counts_no_handover() {
    let h = holding(&[x()]);
    let waiting = queue(&[ask("w1", Mode::Exclusive)]);
    let release = Command::Release {
        token: b"x",
        members: 1,
        to: None,
    };
    let p = run(&h, &waiting, release).unwrap();
    assert_eq!(p.granted, vec![(0, NOW_US)]);
    assert_eq!((p.counts.handoffs, p.counts.handovers), (1, 0));
}

#[test]
fn readers_that_fit_are_served_in_the_same_step_after_the_target() {
    let h = holding(&[x()]);
    let waiting = queue(&[
        ask("r1", Mode::Shared),
        ask("w2", Mode::Exclusive),
        ask("r3", Mode::Shared),
        ask("r4", Mode::Shared),
    ]);
    let p = run(&h, &waiting, release_to("x", "r3")).unwrap();
    // The target's fence first, then the head reader's; the writer keeps
    // its place and r4 stays behind it.
    assert_eq!(p.granted, vec![(2, NOW_US), (0, NOW_US + 1)]);
    assert_eq!(p.counts.handovers, 1);
    assert_eq!(p.counts.handoffs, 2);
}

#[test]
fn a_token_queued_twice_is_answered_by_the_one_grant() {
    let h = holding(&[x()]);
    let waiting = queue(&[
        ask("w1", Mode::Exclusive),
        ask("t", Mode::Exclusive),
        ask("t", Mode::Exclusive),
    ]);
    let p = run(&h, &waiting, release_to("x", "t")).unwrap();
    assert_eq!(p.granted, vec![(1, NOW_US), (2, NOW_US)]);
    assert_eq!(p.counts.handovers, 1);
    let adds = p.ops.iter().filter(|(_, o)| matches!(o, Op::Add { .. }));
    assert_eq!(adds.count(), 1);
}

#[test]
fn a_semaphore_permit_is_handed_over() {
    let permit = |t| Ask {
        limit: Some(2),
        ..ask(t, Mode::Exclusive)
    };
    let h = holding(&[permit("x"), permit("y")]);
    let waiting = queue(&[permit("a"), permit("b")]);
    let p = run(&h, &waiting, release_to("x", "b")).unwrap();
    assert_eq!(p.granted, vec![(1, NOW_US)]);
    // Its limit must match, as for any grant.
    let other = Ask {
        limit: Some(3),
        ..ask("c", Mode::Exclusive)
    };
    let waiting = queue(&[permit("a"), other]);
    let err = run(&h, &waiting, release_to("x", "c")).unwrap_err();
    assert_eq!(err, Error::LimitMismatch { limit: 2 });
}

#[test]
fn an_owner_that_holds_shares_its_fence_with_the_target() {
    let owned = |t| Ask {
        owner: Some(&b"o"[..]),
        ..ask(t, Mode::Shared)
    };
    let h = holding(&[owned("o1"), ask("x", Mode::Shared)]);
    let waiting = queue(&[ask("w", Mode::Exclusive), owned("o2")]);
    let p = run(&h, &waiting, release_to("x", "o2")).unwrap();
    // o1 holds under fence 5.
    assert_eq!(p.granted, vec![(1, 5)]);
    assert_eq!(p.clock.last(), CLOCK);
}

#[test]
fn every_refusal_is_an_error_of_the_step() {
    let h = holding(&[x()]);
    let single = queue(&[ask("w1", Mode::Exclusive), ask("t", Mode::Exclusive)]);
    // Not queued here.
    let err = run(&h, &single, release_to("x", "nobody")).unwrap_err();
    assert_eq!(err, Error::NotWaiting);
    // Queued, but only on another resource of the step.
    let other = Holds::new(1);
    let mut elsewhere = single.clone();
    elsewhere[1].members = vec![1];
    let members = [member(&h), member(&other)];
    let err = run_on(&members, &elsewhere, release_to("x", "t"), 0).unwrap_err();
    assert_eq!(err, Error::NotWaiting);
    // A set request.
    let mut set = single.clone();
    set[1].members = vec![0, 1];
    let err = run_on(&members, &set, release_to("x", "t"), 0).unwrap_err();
    assert_eq!(err, Error::HandoverToSet);
    // The quarantine holds every new grant back.
    let err = run_on(&[member(&h)], &single, release_to("x", "t"), 700).unwrap_err();
    assert_eq!(err, Error::Quarantine { ms_left: 700 });
    // Still believed held by an evicted lease's owner.
    let mut m = member(&h);
    m.held_elsewhere = true;
    let err = run_on(&[m], &single, release_to("x", "t"), 0).unwrap_err();
    assert_eq!(err, Error::NotReady);
    // A writer while another reader stays.
    let readers = holding(&[ask("x", Mode::Shared), ask("y", Mode::Shared)]);
    let err = run(&readers, &single, release_to("x", "t")).unwrap_err();
    assert_eq!(err, Error::NotReady);
}

#[test]
fn a_release_of_nothing_hands_nothing_over() {
    let h = holding(&[ask("y", Mode::Exclusive)]);
    let waiting = queue(&[ask("t", Mode::Exclusive)]);
    let p = run(&h, &waiting, release_to("x", "t")).unwrap();
    assert_eq!(p.outcome, Outcome::Count(0));
    assert!(p.granted.is_empty() && p.ops.is_empty());
    // Nor is a missing target an error then: nothing was released.
    let p = run(&h, &waiting, release_to("x", "nobody")).unwrap();
    assert_eq!(p.outcome, Outcome::Count(0));
}
