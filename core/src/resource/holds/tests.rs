//! Unit tests of `holds`.
//!
//! Longer than 400 lines because it is a table of cases, one per rule.
use super::*;
use crate::ask::Ask;
use crate::fence::FenceClock;
use crate::resource::admission::Admission;
use crate::Error;

const NOW: u64 = 1_000_000;

fn ask(token: &'static str, mode: Mode) -> Ask<'static> {
    Ask {
        token: token.as_bytes(),
        owner: None,
        mode,
        limit: None,
        ttl_ms: 1000,
        session: None,
        max_hold_ms: None,
        permits: None,
    }
}

fn shared(token: &'static str) -> Ask<'static> {
    ask(token, Mode::Shared)
}

fn excl(token: &'static str) -> Ask<'static> {
    ask(token, Mode::Exclusive)
}

fn owned(a: Ask<'static>, owner: &'static str) -> Ask<'static> {
    Ask {
        owner: Some(owner.as_bytes()),
        ..a
    }
}

fn permit(token: &'static str, n: u32) -> Ask<'static> {
    Ask {
        limit: Some(n),
        ..excl(token)
    }
}

/// Decides and, on a grant, adds the hold.
fn take(h: &mut Holds, a: &Ask<'_>, queued: bool, clock: &mut FenceClock) -> Decision {
    let d = h.decide(a, queued, None, clock, || NOW * 1000).unwrap();
    if let Decision::Grant { fence } = d {
        h.add(a, fence, NOW + a.ttl_ms, 0);
    }
    d
}

fn fence(d: Decision) -> u64 {
    match d {
        Decision::Grant { fence } | Decision::Refresh { fence } => fence,
        Decision::Busy => panic!("busy"),
    }
}

#[test]
fn a_plain_lock_is_one_exclusive_hold() {
    let (mut h, mut c) = (Holds::new(1), FenceClock::new());
    let f = fence(take(&mut h, &excl("a"), false, &mut c));
    assert_eq!(take(&mut h, &excl("b"), false, &mut c), Decision::Busy);
    assert_eq!(take(&mut h, &shared("b"), false, &mut c), Decision::Busy);
    assert_eq!(
        take(&mut h, &excl("a"), false, &mut c),
        Decision::Refresh { fence: f }
    );
    assert_eq!(h.len(), 1, "a retry adds nothing");
}

#[test]
fn shared_holds_coexist_and_exclude_writers() {
    let (mut h, mut c) = (Holds::new(1), FenceClock::new());
    let r1 = fence(take(&mut h, &shared("r1"), false, &mut c));
    let r2 = fence(take(&mut h, &shared("r2"), false, &mut c));
    assert!(r2 > r1, "each reader is its own owner: a fresh fence");
    assert_eq!(take(&mut h, &excl("w"), false, &mut c), Decision::Busy);
    assert!(h.release(b"r1") && h.release(b"r2"));
    assert!(fence(take(&mut h, &excl("w"), false, &mut c)) > r2);
}

#[test]
fn a_reader_never_passes_a_queued_writer() {
    let (mut h, mut c) = (Holds::new(1), FenceClock::new());
    take(&mut h, &shared("r1"), false, &mut c);
    assert_eq!(take(&mut h, &shared("r2"), true, &mut c), Decision::Busy);
}

#[test]
fn an_owner_that_holds_is_decided_regardless_of_the_queue() {
    let (mut h, mut c) = (Holds::new(1), FenceClock::new());
    let f = fence(take(&mut h, &owned(shared("a1"), "A"), false, &mut c));
    // A writer queues; A's nested read is granted at once, same fence.
    let d = take(&mut h, &owned(shared("a2"), "A"), true, &mut c);
    assert_eq!(d, Decision::Grant { fence: f });
    assert_eq!(h.len(), 2);
}

#[test]
fn reentrant_exclusive_holds_share_the_first_fence() {
    let (mut h, mut c) = (Holds::new(1), FenceClock::new());
    let f = fence(take(&mut h, &owned(excl("t1"), "A"), false, &mut c));
    assert_eq!(
        take(&mut h, &owned(excl("t2"), "A"), true, &mut c),
        Decision::Grant { fence: f }
    );
    assert_eq!(
        take(&mut h, &owned(excl("t3"), "B"), false, &mut c),
        Decision::Busy
    );
    assert!(h.release(b"t1"));
    assert_eq!(
        take(&mut h, &owned(excl("t3"), "B"), false, &mut c),
        Decision::Busy
    );
    assert!(h.release(b"t2"));
    assert!(fence(take(&mut h, &owned(excl("t3"), "B"), false, &mut c)) > f);
}

#[test]
fn downgrade_keeps_writers_out_and_upgrade_is_refused_beside_readers() {
    let (mut h, mut c) = (Holds::new(1), FenceClock::new());
    let f = fence(take(&mut h, &owned(excl("w"), "A"), false, &mut c));
    // Downgrade: a shared hold under the same owner, then drop the write.
    assert_eq!(
        take(&mut h, &owned(shared("r"), "A"), true, &mut c),
        Decision::Grant { fence: f }
    );
    assert!(h.release(b"w"));
    assert_eq!(take(&mut h, &excl("other"), false, &mut c), Decision::Busy);
    // Another reader joins; A's upgrade is refused at once, never queued.
    take(&mut h, &shared("B"), false, &mut c);
    let up = h.decide(&owned(excl("w2"), "A"), false, None, &mut c, || NOW);
    assert_eq!(up, Err(Error::UpgradeRefused));
    // Alone again: granted.
    assert!(h.release(b"B"));
    assert_eq!(
        take(&mut h, &owned(excl("w2"), "A"), false, &mut c),
        Decision::Grant { fence: f }
    );
}

#[test]
fn a_semaphore_has_n_leased_permits_each_with_its_own_fence() {
    let (mut h, mut c) = (Holds::new(1), FenceClock::new());
    let f1 = fence(take(&mut h, &permit("p1", 2), false, &mut c));
    let f2 = fence(take(&mut h, &permit("p2", 2), false, &mut c));
    assert!(f2 > f1);
    assert_eq!(h.limit, 2);
    assert_eq!(
        take(&mut h, &permit("p3", 2), false, &mut c),
        Decision::Busy
    );
    // An abandoned permit comes back at its deadline.
    let first = h.iter().next().unwrap().token.to_vec();
    h.set_deadline(&first, NOW - 1);
    assert_eq!(h.prune(NOW).len(), 1);
    assert!(fence(take(&mut h, &permit("p3", 2), false, &mut c)) > f2);
}

#[test]
fn a_held_resource_keeps_its_limit() {
    let (mut h, mut c) = (Holds::new(1), FenceClock::new());
    take(&mut h, &permit("p1", 3), false, &mut c);
    for a in [permit("x", 2), excl("x")] {
        assert_eq!(
            h.decide(&a, false, None, &mut c, || NOW),
            Err(Error::LimitMismatch { limit: 3 })
        );
    }
    let before = h.clone();
    assert_eq!(
        h.decide(&shared("x"), false, None, &mut c, || NOW),
        Err(Error::LimitMismatch { limit: 3 })
    );
    assert_eq!(
        h.decide(
            &Ask {
                limit: Some(3),
                ..shared("x")
            },
            false,
            None,
            &mut c,
            || NOW
        ),
        Err(Error::SharedSemaphore)
    );
    assert_eq!(h, before, "nothing changed");
    // Free again: another limit is fine.
    assert!(h.release(b"p1"));
    take(&mut h, &excl("x"), false, &mut c);
    assert_eq!(h.limit, 1);
}

#[test]
fn the_same_token_with_anything_different_is_an_error() {
    let (mut h, mut c) = (Holds::new(1), FenceClock::new());
    take(&mut h, &owned(shared("t"), "A"), false, &mut c);
    for a in [
        owned(excl("t"), "A"),
        owned(shared("t"), "B"),
        shared("t"),
        permit("t", 2),
    ] {
        assert_eq!(
            h.decide(&a, false, None, &mut c, || NOW),
            Err(Error::TokenInUse),
            "{a:?}"
        );
    }
}

#[test]
fn quarantine_refuses_every_new_hold_but_not_retries() {
    let (mut h, mut c) = (Holds::new(1), FenceClock::new());
    let f = fence(take(&mut h, &owned(shared("a1"), "A"), false, &mut c));
    let q = Some(500);
    let retry = h.decide(&owned(shared("a1"), "A"), false, q, &mut c, || NOW);
    assert_eq!(retry, Ok(Decision::Refresh { fence: f }));
    for a in [
        owned(shared("a2"), "A"),
        owned(excl("a3"), "A"),
        shared("b"),
    ] {
        assert_eq!(
            h.decide(&a, false, q, &mut c, || NOW),
            Err(Error::Quarantine { ms_left: 500 }),
            "{a:?}"
        );
    }
}

#[test]
fn holds_past_their_deadline_are_gone() {
    let (mut h, mut c) = (Holds::new(1), FenceClock::new());
    take(&mut h, &excl("a"), false, &mut c);
    h.set_deadline(b"a", NOW);
    assert!(h.prune(NOW).is_empty(), "the deadline itself still counts");
    assert!(!h.extend(b"a", NOW + 5, NOW + 1), "EXTEND of a dead hold");
    assert_eq!(h.prune(NOW + 1).len(), 1);
    assert!(h.is_empty());
    assert_eq!(h.deadline_ms(), None);
}

#[test]
fn the_key_lives_as_long_as_its_latest_hold() {
    let (mut h, mut c) = (Holds::new(1), FenceClock::new());
    take(&mut h, &shared("a"), false, &mut c);
    take(
        &mut h,
        &Ask {
            ttl_ms: 5000,
            ..shared("b")
        },
        false,
        &mut c,
    );
    assert_eq!(h.deadline_ms(), Some(NOW + 5000));
    assert!(h.extend(b"a", NOW + 9000, NOW));
    assert_eq!(h.deadline_ms(), Some(NOW + 9000));
}

#[test]
fn a_run_of_shared_waiters_at_the_head_is_granted_together() {
    let (mut h, mut c) = (Holds::new(1), FenceClock::new());
    take(&mut h, &excl("w"), false, &mut c);
    let queue = [shared("r1"), shared("r2"), excl("w2"), shared("r3")];
    assert!(h.admit_queue(&queue).is_empty(), "the writer still holds");
    assert!(h.release(b"w"));
    let granted: Vec<usize> = h.admit_queue(&queue).into_iter().map(|(i, _)| i).collect();
    assert_eq!(
        granted,
        [0, 1],
        "the run ends at the writer; r3 waits behind it"
    );
}

#[test]
fn a_queued_writer_is_granted_alone_and_a_semaphore_as_far_as_it_fits() {
    let h = Holds::new(1);
    let queue = [excl("w"), shared("r")];
    let granted: Vec<usize> = h.admit_queue(&queue).into_iter().map(|(i, _)| i).collect();
    assert_eq!(granted, [0]);
    let queue = [permit("a", 2), permit("b", 2), permit("c", 2)];
    let granted: Vec<usize> = h.admit_queue(&queue).into_iter().map(|(i, _)| i).collect();
    assert_eq!(granted, [0, 1]);
}

#[test]
fn an_owner_queued_behind_others_is_granted_once_it_holds() {
    // A holds shared; W (writer) waits; A's exclusive request queued
    // behind W would be an upgrade refused at once, but its second read
    // passes W: A already holds.
    let (mut h, mut c) = (Holds::new(1), FenceClock::new());
    let f = fence(take(&mut h, &owned(shared("a1"), "A"), false, &mut c));
    let queue = [excl("W"), owned(shared("a2"), "A")];
    assert_eq!(
        h.admit_queue(&queue),
        vec![(1, Ok(QueueGrant::Owner { fence: f }))]
    );
    // Granted in the same step: the second request of a new owner shares
    // the fence drawn for the first.
    let h = Holds::new(1);
    let queue = [owned(excl("b1"), "B"), excl("X"), owned(excl("b2"), "B")];
    assert_eq!(
        h.admit_queue(&queue),
        vec![
            (0, Ok(QueueGrant::Fresh)),
            (2, Ok(QueueGrant::SameOwnerAs(0)))
        ]
    );
}

#[test]
fn a_token_queued_twice_is_one_grant() {
    let h = Holds::new(1);
    let queue = [shared("r"), shared("r"), excl("w")];
    assert_eq!(
        h.admit_queue(&queue),
        vec![
            (0, Ok(QueueGrant::Fresh)),
            (1, Ok(QueueGrant::AnsweredBy(0)))
        ]
    );
}

#[test]
fn plain_shape() {
    let lease = crate::Lease::new(b"t", 7);
    let h = Holds::from_plain(lease.as_ref(), None);
    assert_eq!(h.as_plain().map(|h| h.deadline_ms), Some(NEVER));
    let mut h = Holds::new(1);
    h.add(&owned(excl("t"), "A"), 5, NOW, 0);
    assert!(h.as_plain().is_none(), "an owner apart from the token");
    let mut h = Holds::new(1);
    h.add(&shared("t"), 5, NOW, 0);
    assert!(h.as_plain().is_none());
    let mut h = Holds::new(1);
    h.add(&permit("t", 2), 5, NOW, 0);
    assert!(h.as_plain().is_none());
    let mut h = Holds::new(1);
    h.add(&excl("t"), 5, NOW, 0);
    assert!(h.as_plain().is_some());
}

#[test]
fn only_holds_the_rules_can_make_are_consistent() {
    let mut h = Holds::new(1);
    h.add(&owned(shared("a1"), "A"), 5, NOW, 0);
    h.add(&owned(excl("a2"), "A"), 5, NOW, 0);
    h.add(&owned(shared("a3"), "A"), 5, NOW, 0);
    assert!(h.is_consistent());
    let mut two_writers = h.clone();
    two_writers.add(&excl("b"), 6, NOW, 0);
    assert!(!two_writers.is_consistent());
    let mut reader_beside_writer = h.clone();
    reader_beside_writer.add(&shared("r"), 7, NOW, 0);
    assert!(!reader_beside_writer.is_consistent());
    let mut two_fences = h.clone();
    two_fences.add(&owned(shared("a4"), "A"), 9, NOW, 0);
    assert!(!two_fences.is_consistent());
    // A token holds once: adding it again changes nothing (and the
    // decoder refuses a value naming it twice, layout.rs).
    let mut dup = h.clone();
    dup.add(&owned(shared("a1"), "A"), 5, NOW + 9, 0);
    assert_eq!(dup, h);
    assert_eq!(dup.deadline_ms(), Some(NOW));
    let mut sem = Holds::new(1);
    sem.add(&permit("p", 2), 5, NOW, 0);
    sem.add(&permit("q", 2), 6, NOW, 0);
    assert!(sem.is_consistent());
    sem.add(&permit("r", 2), 7, NOW, 0);
    assert!(!sem.is_consistent(), "over the limit");
}

#[test]
fn a_refused_grant_consumes_no_fence() {
    let (mut h, mut c) = (Holds::new(1), FenceClock::new());
    take(&mut h, &excl("a"), false, &mut c);
    let before = c.clone();
    assert_eq!(take(&mut h, &excl("b"), false, &mut c), Decision::Busy);
    assert_eq!(c, before);
}

/// The rules as first written: linear scans over the holds. The indexed
/// `Summary` must decide exactly the same.
fn reference_admit(h: &Holds, ask: &Ask<'_>, queued: bool) -> Result<Admission, Error> {
    if let Some(x) = h.hold_of(ask.token) {
        let same = x.mode == ask.mode && *x.owner == *ask.owner() && h.limit == ask.limit();
        return if same {
            Ok(Admission::Retry { fence: x.fence })
        } else {
            Err(Error::TokenInUse)
        };
    }
    if ask.limit() > 1 && ask.mode == Mode::Shared {
        return Err(Error::SharedSemaphore);
    }
    if !h.is_empty() && h.limit != ask.limit() {
        return Err(Error::LimitMismatch { limit: h.limit });
    }
    let owner = ask.owner();
    let mine: Vec<HoldRef<'_>> = h.iter().filter(|x| *x.owner == *owner).collect();
    let others: Vec<HoldRef<'_>> = h.iter().filter(|x| *x.owner != *owner).collect();
    let own_fence = mine.first().map(|x| x.fence);
    let fits = match (ask.mode, ask.limit()) {
        (_, n) if n > 1 => h.len() < n as usize,
        (Mode::Exclusive, _) => others.is_empty(),
        (Mode::Shared, _) => others.iter().all(|x| x.mode == Mode::Shared),
    };
    let upgrade = own_fence.is_some()
        && ask.mode == Mode::Exclusive
        && ask.limit() == 1
        && mine.iter().all(|x| x.mode == Mode::Shared);
    if upgrade && !fits {
        return Err(Error::UpgradeRefused);
    }
    if !fits || (own_fence.is_none() && queued) {
        return Ok(Admission::Busy);
    }
    Ok(Admission::New {
        owner_fence: own_fence.filter(|_| ask.limit() == 1),
    })
}

#[test]
fn the_indexed_rules_decide_as_the_reference() {
    const TOKENS: [&str; 6] = ["a", "b", "c", "d", "e", "f"];
    const OWNERS: [Option<&str>; 3] = [None, Some("A"), Some("B")];
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    for _ in 0..2000 {
        let mut h = Holds::new(1);
        let mut clock = FenceClock::new();
        let mut asks = Vec::new();
        for _ in 0..8 {
            let limit = [None, None, Some(2), Some(3)][next(4)];
            let shared = limit.is_none() && next(2) == 0;
            let owner = if limit.is_none() {
                OWNERS[next(3)]
            } else {
                None
            };
            asks.push(Ask {
                token: TOKENS[next(6)].as_bytes(),
                owner: owner.map(str::as_bytes),
                mode: if shared {
                    Mode::Shared
                } else {
                    Mode::Exclusive
                },
                limit,
                ttl_ms: 10,
                session: None,
                max_hold_ms: None,
                permits: None,
            });
        }
        for (i, ask) in asks.iter().enumerate() {
            let queued = next(3) == 0;
            assert_eq!(
                h.admit(ask, queued),
                reference_admit(&h, ask, queued),
                "step {i}: {ask:?} on {h:?}"
            );
            if let Ok(Decision::Grant { fence }) = h.decide(ask, queued, None, &mut clock, || NOW) {
                h.add(ask, fence, NOW + 10, 0);
            }
            assert!(h.is_consistent(), "{h:?}");
        }
    }
}

#[test]
fn clamp_ends_every_later_hold_at_the_given_time() {
    let mut h = Holds::new(1);
    h.add(&shared("a"), 1, NOW + 100, 0);
    h.add(&shared("b"), 2, NOW + 500, 0);
    h.add(&shared("c"), 3, NEVER, 0);
    let moved = h.clamp(NOW + 200);
    assert_eq!(moved, vec![Box::from(&b"b"[..]), Box::from(&b"c"[..])]);
    let deadlines: Vec<u64> = h.iter().map(|x| x.deadline_ms).collect();
    assert_eq!(deadlines, [NOW + 100, NOW + 200, NOW + 200]);
    assert!(h.clamp(NOW + 200).is_empty(), "nothing later is left");
}

#[test]
fn the_marks_follow_every_change_of_the_live_holds() {
    use crate::observe::hold_mark;
    let recount = |h: &Holds, now_ms: u64| {
        h.live(now_ms)
            .fold(0, |m, x| m ^ hold_mark(x.token, x.fence, x.mode))
    };
    let mut h = Holds::new(3);
    assert_eq!(h.live_marks(NOW), 0, "nobody holds");
    h.add(&permit("a", 3), 1, NOW + 10, 0);
    h.add(&permit("b", 3), 2, NOW + 20, 0);
    h.add(&permit("c", 3), 3, NOW + 30, 0);
    let all = h.live_marks(NOW);
    assert_eq!(all, recount(&h, NOW));
    assert_ne!(all, 0);
    // A hold past its deadline leaves the version before it is pruned.
    assert_eq!(h.live_marks(NOW + 15), recount(&h, NOW + 15));
    assert_ne!(h.live_marks(NOW + 15), all);
    // Moving a deadline changes no holder.
    h.set_deadline(b"b", NOW + 40);
    assert_eq!(h.live_marks(NOW), all);
    // Taken and put back: the same holders, the same version.
    let (hold, seq) = h.take(b"c").unwrap();
    assert_eq!(h.live_marks(NOW), recount(&h, NOW));
    h.restore(hold, seq);
    assert_eq!(h.live_marks(NOW), all);
    h.prune(NOW + 15);
    assert_eq!(h.live_marks(NOW + 15), recount(&h, NOW + 15));
    h.release(b"b");
    h.release(b"c");
    assert_eq!(h.live_marks(NOW), 0);
    // A new grant to the same token is another state (another fence).
    h.add(&permit("a", 3), 4, NOW + 10, 0);
    assert_ne!(h.live_marks(NOW), 0);
    assert_ne!(h.live_marks(NOW), hold_mark(b"a", 1, Mode::Exclusive));
}

#[test]
fn a_hold_is_found_by_its_fence_while_it_holds() {
    let hold = |token: &str, owner: &str, fence: u64| Hold {
        token: token.as_bytes().into(),
        owner: owner.as_bytes().into(),
        fence,
        mode: Mode::Shared,
        deadline_ms: NOW,
        session: None,
        cap: None,
        permits: 1,
    };
    let mut h = Holds::from_holds(
        1,
        [
            hold("a", "a", 10),
            hold("b", "w", 20),
            hold("c", "w", 20),
            hold("d", "d", 30),
        ],
    );
    let tokens = |h: &Holds, f: u64| -> Vec<Vec<u8>> {
        h.holds_of_fence(f).map(|x| x.token.to_vec()).collect()
    };
    assert_eq!(tokens(&h, 10), [b"a".to_vec()]);
    assert_eq!(
        tokens(&h, 20),
        [b"b".to_vec(), b"c".to_vec()],
        "an owner's holds share it"
    );
    assert!(tokens(&h, 25).is_empty());
    h.release(b"b");
    assert_eq!(tokens(&h, 20), [b"c".to_vec()]);
    let (taken, seq) = h.take(b"a").unwrap();
    assert!(tokens(&h, 10).is_empty());
    h.restore(taken, seq);
    assert_eq!(tokens(&h, 10), [b"a".to_vec()]);
    h.set_deadline(b"d", NOW + 5);
    assert_eq!(
        tokens(&h, 30),
        [b"d".to_vec()],
        "a new deadline keeps the fence"
    );
}
