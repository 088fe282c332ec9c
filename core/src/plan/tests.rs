use super::*;
use crate::ask::Mode;
use crate::fence::MAX_FENCE;
use crate::queue::Priority;
use crate::resource::holds::Holds;

const NOW_US: u64 = 1_000_000_000;
const NOW_MS: u64 = NOW_US / 1000;

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

fn held(token: &'static str, mode: Mode, fence: u64) -> Holds {
    let mut h = Holds::new(1);
    h.add(&ask(token, mode), fence, NOW_MS + 50, 0);
    h
}

fn member(holds: &Holds) -> Member<'_> {
    Member {
        holds,
        has_waiters: false,
        reserved_from: None,
        reserved_rank: None,
        held_elsewhere: false,
    }
}

fn acquire(a: Ask<'static>, members: usize, blocks: bool) -> Command<'static> {
    Command::Acquire {
        priority: Priority::FIFO,
        ask: a,
        members,
        blocks,
        new_token: Ok(()),
    }
}

fn run(
    members: &[Member<'_>],
    waiting: &[Waiting<'_>],
    command: Command<'_>,
) -> Result<Plan, Error> {
    let step = Step {
        members,
        waiting,
        command,
        quarantined_ms: 0,
        now_us: NOW_US,
    };
    plan(&step, &FenceClock::starting_at(10), || Ok(true))
}

#[test]
fn a_free_resource_is_granted_a_fresh_fence() {
    let free = Holds::new(1);
    let p = run(
        &[member(&free)],
        &[],
        acquire(ask("a", Mode::Exclusive), 1, false),
    )
    .unwrap();
    let fence = NOW_US;
    assert_eq!(
        p.outcome,
        Outcome::Granted {
            fence,
            refresh: false
        }
    );
    assert_eq!(
        p.ops,
        vec![(
            0,
            Op::Add {
                who: Who::Command,
                fence
            }
        )]
    );
    assert_eq!(p.events, vec![(0, Event::Acquired)]);
    assert_eq!(p.counts.grants, 1);
    assert_eq!(p.clock.last(), fence);
}

#[test]
fn a_busy_resource_parks_a_waiting_request_or_answers_nil() {
    let h = held("x", Mode::Exclusive, 5);
    let m = [member(&h)];
    let p = run(&m, &[], acquire(ask("a", Mode::Exclusive), 1, true)).unwrap();
    assert_eq!(p.outcome, Outcome::Wait);
    assert!(p.ops.is_empty());
    let p = run(&m, &[], acquire(ask("a", Mode::Exclusive), 1, false)).unwrap();
    assert_eq!(p.outcome, Outcome::Busy);
    assert_eq!(p.counts.contended, 1);
    // The fence clock is untouched by a request that gets nothing.
    assert_eq!(p.clock.last(), 10);
}

#[test]
fn a_release_hands_the_resource_to_the_head_of_the_queue_in_one_plan() {
    let h = held("x", Mode::Exclusive, 5);
    let mut m = member(&h);
    m.has_waiters = true;
    let waiting = [
        Waiting {
            rank: Rank::default(),
            members: vec![0],
            ask: ask("w1", Mode::Exclusive),
        },
        Waiting {
            rank: Rank::default(),
            members: vec![0],
            ask: ask("w2", Mode::Exclusive),
        },
    ];
    let p = run(
        &[m],
        &waiting,
        Command::Release {
            token: b"x",
            members: 1,
            to: None,
        },
    )
    .unwrap();
    assert_eq!(p.outcome, Outcome::Count(1));
    assert_eq!(p.granted, vec![(0, NOW_US)]);
    assert_eq!(
        p.ops,
        vec![
            (0, Op::Drop),
            (
                0,
                Op::Add {
                    who: Who::Queued(0),
                    fence: NOW_US
                }
            )
        ]
    );
    // Subscribers see the release before the handoff it causes.
    assert_eq!(p.events, vec![(0, Event::Released), (0, Event::Handoff)]);
}

#[test]
fn a_release_whose_handoff_has_no_fence_left_fails_whole() {
    let a = held("x", Mode::Exclusive, 5);
    let b = held("x", Mode::Exclusive, 5);
    let waiting = [Waiting {
        rank: Rank::default(),
        members: vec![1],
        ask: ask("w", Mode::Exclusive),
    }];
    let step = Step {
        members: &[member(&a), member(&b)],
        waiting: &waiting,
        command: Command::Release {
            token: b"x",
            members: 2,
            to: None,
        },
        quarantined_ms: 0,
        now_us: NOW_US,
    };
    let out = plan(&step, &FenceClock::starting_at(MAX_FENCE), || Ok(true));
    assert_eq!(out.unwrap_err(), Error::FenceExhausted);
}

#[test]
fn a_reserved_resource_is_passed_only_by_an_owner_that_holds() {
    let free = Holds::new(1);
    let mut m = member(&free);
    m.has_waiters = true;
    m.reserved_from = Some(0);
    let p = run(&[m], &[], acquire(ask("a", Mode::Exclusive), 1, false)).unwrap();
    assert_eq!(p.outcome, Outcome::Busy);
}

#[test]
fn a_set_is_granted_every_member_under_one_fence_or_waits_for_all() {
    let free = Holds::new(1);
    let busy = held("x", Mode::Exclusive, 5);
    let p = run(
        &[member(&free), member(&busy)],
        &[],
        acquire(ask("s", Mode::Exclusive), 2, false),
    )
    .unwrap();
    assert_eq!(p.outcome, Outcome::Busy);
    assert!(p.ops.is_empty(), "no member of a busy set changes");
    let p = run(
        &[member(&free), member(&free)],
        &[],
        acquire(ask("s", Mode::Exclusive), 2, false),
    )
    .unwrap();
    let fence = NOW_US;
    assert_eq!(
        p.outcome,
        Outcome::Granted {
            fence,
            refresh: false
        }
    );
    assert_eq!(
        p.ops,
        vec![
            (
                0,
                Op::Add {
                    who: Who::Command,
                    fence
                }
            ),
            (
                1,
                Op::Add {
                    who: Who::Command,
                    fence
                }
            )
        ]
    );
    assert_eq!(p.counts.grants, 1);
}

#[test]
fn a_quarantine_refuses_new_owners_and_lets_retries_pass() {
    let free = Holds::new(1);
    let mine = held("a", Mode::Exclusive, 5);
    let quarantined = |holds, blocks| {
        let m = [member(holds)];
        let step = Step {
            members: &m,
            waiting: &[],
            command: acquire(ask("a", Mode::Exclusive), 1, blocks),
            quarantined_ms: 700,
            now_us: NOW_US,
        };
        plan(&step, &FenceClock::new(), || Ok(true)).map(|p| p.outcome)
    };
    assert_eq!(
        quarantined(&free, false),
        Err(Error::Quarantine { ms_left: 700 })
    );
    assert_eq!(quarantined(&free, true), Ok(Outcome::Wait));
    let retry = Outcome::Granted {
        fence: 5,
        refresh: true,
    };
    assert_eq!(quarantined(&mine, false), Ok(retry));
}

#[test]
fn a_long_token_is_refused_before_it_could_hold_or_wait() {
    let free = Holds::new(1);
    let busy = held("x", Mode::Exclusive, 5);
    let too_long = |holds, blocks| {
        let m = [member(holds)];
        let step = Step {
            members: &m,
            waiting: &[],
            command: Command::Acquire {
                priority: Priority::FIFO,
                ask: ask("a", Mode::Exclusive),
                members: 1,
                blocks,
                new_token: Err(Error::TokenTooLong { max: 1 }),
            },
            quarantined_ms: 0,
            now_us: NOW_US,
        };
        plan(&step, &FenceClock::new(), || Ok(true)).map(|p| p.outcome)
    };
    assert!(too_long(&free, false).is_err());
    assert!(too_long(&busy, true).is_err());
    // Nil without WAIT: it neither holds nor waits.
    assert_eq!(too_long(&busy, false), Ok(Outcome::Busy));
}

#[test]
fn a_slot_this_node_may_not_grant_sends_the_waiters_away_instead_of_granting_them() {
    let held_by_a = held("a", Mode::Exclusive, 5);
    let waiting = [Waiting {
        rank: Rank::default(),
        members: vec![0],
        ask: ask("w", Mode::Exclusive),
    }];
    let mut m = member(&held_by_a);
    m.has_waiters = true;
    let step = |command| Step {
        members: std::slice::from_ref(&m),
        waiting: &waiting,
        command,
        quarantined_ms: 0,
        now_us: NOW_US,
    };
    let release = step(Command::Release {
        token: b"a",
        members: 1,
        to: None,
    });
    let clock = FenceClock::starting_at(10);
    let owned = plan(&release, &clock, || Ok(true)).unwrap();
    assert_eq!(owned.granted, [(0, NOW_US)]);
    let moving = plan(&release, &clock, || Ok(false)).unwrap();
    assert_eq!(moving.outcome, Outcome::SendAway);
    assert!(moving.ops.is_empty() && moving.granted.is_empty());
    assert_eq!(moving.clock, clock);
    // Nothing to grant: the step goes ahead, and the slot is not asked.
    let extend = step(Command::Extend {
        token: b"a",
        ttl_ms: 100,
        members: 1,
    });
    let asked = |_| -> Result<bool, Error> { panic!("the slot was asked") };
    let p = plan(&extend, &clock, || asked(())).unwrap();
    assert_eq!(p.outcome, Outcome::Count(1));
}

#[test]
fn a_member_is_reserved_where_requests_left_waiting_start_or_for_a_queue_left_alone() {
    let free = Holds::new(1);
    let found = |queue, held_until| Member::found(&free, queue, held_until, NOW_MS);
    let served = |requests, left_from| QueueSeen::Served {
        requests,
        left_from,
        left_rank: None,
    };
    let m = found(served(true, None), None);
    assert_eq!((m.has_waiters, m.reserved_from), (true, None));
    let m = found(served(false, Some(2)), None);
    assert_eq!((m.has_waiters, m.reserved_from), (true, Some(2)));
    let m = found(served(false, None), None);
    assert_eq!((m.has_waiters, m.reserved_from), (false, None));
    let m = found(
        QueueSeen::Left {
            head: Some(Rank::default()),
        },
        None,
    );
    assert_eq!((m.has_waiters, m.reserved_from), (true, Some(0)));
    let m = found(QueueSeen::Left { head: None }, Some(NOW_MS));
    assert_eq!((m.has_waiters, m.held_elsewhere), (false, true));
    assert!(!found(QueueSeen::Left { head: None }, Some(NOW_MS - 1)).held_elsewhere);
}

/// A resource still believed held by an evicted lease's owner keeps its
/// waiters frozen until that deadline; a request that outranks them (a
/// higher `PRIORITY`) is kept out as well, as the plain path keeps it out
/// (`plain::acquire`: no grant while a handoff may not happen), rather
/// than granted a lock its evicted owner still believes it holds.
#[test]
fn a_request_outranking_the_waiters_of_a_resource_held_elsewhere_is_not_granted() {
    let free = Holds::new(1);
    let mut m = member(&free);
    m.has_waiters = true;
    m.held_elsewhere = true;
    let waiting = [Waiting {
        rank: Rank { key: 10, id: 1 },
        members: vec![0],
        ask: ask("w", Mode::Exclusive),
    }];
    for (blocks, expected) in [(true, Outcome::Wait), (false, Outcome::Busy)] {
        let command = Command::Acquire {
            priority: Priority { level: 5, key: 0 },
            ask: ask("n", Mode::Exclusive),
            members: 1,
            blocks,
            new_token: Ok(()),
        };
        let p = run(&[m], &waiting, command).unwrap();
        assert_eq!(p.outcome, expected, "blocks {blocks}");
        assert!(p.granted.is_empty() && p.ops.is_empty());
    }
}

/// In a quarantine the waiters are frozen and a request that may not wait
/// finds the resource queued: nil, as on the plain path
/// (`plain::acquire`), also when it outranks every waiter.
#[test]
fn a_request_outranking_quarantined_waiters_is_answered_as_behind_them() {
    let free = Holds::new(1);
    let mut m = member(&free);
    m.has_waiters = true;
    let waiting = [Waiting {
        rank: Rank { key: 10, id: 1 },
        members: vec![0],
        ask: ask("w", Mode::Exclusive),
    }];
    for (key, who) in [(20, "behind"), (0, "outranking")] {
        let members = [m];
        let step = Step {
            members: &members,
            waiting: &waiting,
            command: Command::Acquire {
                priority: Priority { level: 5, key },
                ask: ask("n", Mode::Exclusive),
                members: 1,
                blocks: false,
                new_token: Ok(()),
            },
            quarantined_ms: 700,
            now_us: NOW_US,
        };
        let p = plan(&step, &FenceClock::new(), || Ok(true)).map(|p| p.outcome);
        assert_eq!(p, Ok(Outcome::Busy), "{who}");
    }
}

/// A request left out of the step waits on a free resource (ranked
/// `left`): a command that outranks it is decided before its reservation
/// and granted; one ranked after it waits behind it.
#[test]
fn a_command_goes_before_a_reservation_it_outranks_and_after_one_it_does_not() {
    let free = Holds::new(1);
    let mut m = member(&free);
    m.has_waiters = true;
    m.reserved_from = Some(0);
    m.reserved_rank = Some(Rank { key: 20, id: 9 });
    for (key, granted) in [(5, true), (20, false), (30, false)] {
        let command = Command::Acquire {
            priority: Priority { level: 0, key },
            ask: ask("n", Mode::Exclusive),
            members: 1,
            blocks: true,
            new_token: Ok(()),
        };
        let p = run(&[m], &[], command).unwrap();
        let outcome = matches!(p.outcome, Outcome::Granted { .. });
        assert_eq!(outcome, granted, "key {key}: {:?}", p.outcome);
    }
}
