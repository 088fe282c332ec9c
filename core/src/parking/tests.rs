//! Unit tests of `parking`.
use super::*;

type P = Parking<&'static str, u32>;

fn granted(p: &mut P, fence: u64) -> (u64, Vec<(u32, Answer)>) {
    p.grant_head(&"r", fence).expect("a waiter");
    let answers = p.take_answers();
    let grant = match &answers[0].1 {
        Answer::Granted { grant, .. } => *grant,
        other => panic!("{other:?}"),
    };
    (grant, answers)
}

#[test]
fn entries_granted_together_are_delivered_or_revoked_per_token() {
    let mut p = P::default();
    let shared = Wants {
        mode: crate::ask::Mode::Shared,
        ..Wants::default()
    };
    p.park("r", b"a", shared.clone(), 10, None, 1);
    p.park("r", b"a", shared.clone(), 10, None, 2);
    p.park("r", b"b", shared.clone(), 10, None, 3);
    p.park("r", b"c", shared, 10, None, 4);
    p.park("r", b"w", Wants::default(), 10, None, 5);
    let ids: Vec<u64> = p.queues().waiters(&"r").map(|w| w.id).collect();
    p.grant_entries(
        &[(ids[0], 7), (ids[1], 7), (ids[2], 8)],
        &[],
        vec![(ids[3], Error::UpgradeRefused)],
    );
    assert_eq!(p.queues().waiting(&"r"), 1, "the writer still waits");
    let answers = p.take_answers();
    assert_eq!(answers.len(), 4);
    assert_eq!(answers[3], (4, Answer::Failed(Error::UpgradeRefused)));
    // One of a's two handles hears of it: delivered. b never does.
    assert_eq!(p.freed(1, &answers[0].1, true), []);
    assert_eq!(p.freed(2, &answers[1].1, false), []);
    let rv = p.freed(3, &answers[2].1, false).pop().expect("revoked");
    assert_eq!((&*rv.token, rv.fence), (&b"b"[..], 8));
}

#[test]
fn a_delivered_grant_is_kept() {
    let mut p = P::default();
    p.park("r", b"a", Wants::default(), 10, None, 1);
    let (_, answers) = granted(&mut p, 7);
    assert_eq!(answers.len(), 1);
    assert_eq!(p.leave(1), Left::nothing(), "handed over: the server's");
    assert_eq!(p.freed(1, &answers[0].1, true), []);
    assert_eq!(p.handles(), 0);
    assert!(!p.has_grants_in_flight());
}

#[test]
fn a_grant_freed_without_its_reply_is_revoked() {
    let mut p = P::default();
    p.park("r", b"a", Wants::default(), 10, None, 1);
    let (_, answers) = granted(&mut p, 7);
    let rv = p.freed(1, &answers[0].1, false).pop().expect("revoked");
    assert_eq!((rv.resource, &*rv.token, rv.fence), ("r", &b"a"[..], 7));
}

#[test]
fn leaving_before_the_hand_over_revokes_and_owes_an_unblock() {
    let mut p = P::default();
    p.park("r", b"a", Wants::default(), 10, Some(100), 1);
    p.ends_wait_at(1, 100_000);
    p.grant_head(&"r", 7).unwrap();
    let left = p.leave(1);
    assert!(left.unblock);
    assert_eq!(p.time_out_ended(200_000), 0, "granted: not timed out");
    assert_eq!(left.revoke.iter().map(|r| r.fence).collect::<Vec<_>>(), [7]);
    assert!(p.take_answers().is_empty(), "nothing left to hand over");
    assert_eq!(p.handles(), 0);
}

#[test]
fn a_refresh_by_the_owner_confirms_the_grant() {
    let mut p = P::default();
    p.park("r", b"a", Wants::default(), 10, None, 1);
    p.grant_head(&"r", 7).unwrap();
    p.confirm(&"r", b"other");
    p.confirm(&"other", b"a");
    p.confirm(&"r", b"a");
    assert_eq!(p.leave(1).revoke, []);
}

#[test]
fn one_grant_to_several_entries_needs_one_delivery() {
    let mut p = P::default();
    p.park("r", b"a", Wants::default(), 10, None, 1);
    p.park("r", b"a", Wants::default(), 10, None, 2);
    let (_, answers) = granted(&mut p, 9);
    assert_eq!(answers.len(), 2);
    assert_eq!(p.freed(1, &answers[0].1, false), [], "one still open");
    assert_eq!(p.freed(2, &answers[1].1, true), [], "delivered once");

    p.park("r", b"b", Wants::default(), 10, None, 3);
    p.park("r", b"b", Wants::default(), 10, None, 4);
    p.grant_head(&"r", 10).unwrap();
    assert_eq!(p.leave(3).revoke, []);
    let revoked: Vec<u64> = p.leave(4).revoke.iter().map(|r| r.fence).collect();
    assert_eq!(revoked, [10]);
}

#[test]
fn a_revocation_follows_its_moved_lock() {
    let mut p = P::default();
    p.park("r", b"a", Wants::default(), 10, None, 1);
    p.grant_head(&"r", 7).unwrap();
    p.move_grants(|k| (*k == "r").then_some("s"));
    let revoked: Vec<&str> = p.leave(1).revoke.iter().map(|r| r.resource).collect();
    assert_eq!(revoked, ["s"]);
}

#[test]
fn queued_waiters_leave_without_revocation() {
    let mut p = P::default();
    p.park("r", b"a", Wants::default(), 10, Some(5), 1);
    p.ends_wait_at(1, 5_000);
    let left = p.leave(1);
    assert_eq!(
        left,
        Left {
            unblock: true,
            revoke: Vec::new()
        }
    );
    assert_eq!(p.next_wait_end(), None, "its end is forgotten");
    assert_eq!(p.queues().total(), 0);
    assert_eq!(p.leave(1), Left::nothing(), "idempotent");
}

#[test]
fn given_up_waiters_are_answered_nil_and_never_granted() {
    let mut p = P::default();
    p.park("r", b"late", Wants::default(), 10, Some(100), 1);
    p.park("r", b"ok", Wants::default(), 10, Some(500), 2);
    p.park("r", b"forever", Wants::default(), 10, None, 3);
    assert!(p.queues().has_live_waiter(&"r", 200));
    assert_eq!(
        p.time_out_given_up(&"r", 100),
        0,
        "the deadline itself still counts"
    );
    assert_eq!(p.time_out_given_up(&"r", 101), 1);
    let (token, _) = p.grant_head(&"r", 5).unwrap();
    assert_eq!(&*token, b"ok");
    let answers = p.take_answers();
    assert_eq!(answers[0], (1, Answer::TimedOut));
    assert!(matches!(answers[1], (2, Answer::Granted { fence: 5, .. })));
}

#[test]
fn own_timeouts_only_hit_queued_waiters() {
    let mut p = P::default();
    p.park("r", b"a", Wants::default(), 10, Some(100), 1);
    p.park("r", b"b", Wants::default(), 10, Some(100), 2);
    assert!(p.time_out(1));
    assert!(!p.time_out(1), "answered already");
    p.grant_head(&"r", 5).unwrap();
    assert!(!p.time_out(2), "granted: the grant stands");
    let answers = p.take_answers();
    assert_eq!(answers[0], (1, Answer::TimedOut));
}

#[test]
fn failures_answer_every_waiter() {
    let mut p = P::default();
    p.park("r", b"a", Wants::default(), 10, None, 1);
    p.park("s", b"b", Wants::default(), 10, None, 2);
    p.fail(Some(&"r"), Error::Demoted);
    assert_eq!(p.take_answers(), vec![(1, Answer::Failed(Error::Demoted))]);
    p.fail(None, Error::SlotMoved);
    assert_eq!(
        p.take_answers(),
        vec![(2, Answer::Failed(Error::SlotMoved))]
    );
    assert_eq!(p.queues().total(), 0);
}

#[test]
fn a_set_grant_is_revoked_on_every_member() {
    let mut p = P::default();
    p.park_set(vec!["a", "b"], b"s", Wants::default(), 10, None, 1);
    let id = p.queues().waiters(&"a").map(|w| w.id).next().unwrap();
    p.grant_entries(&[(id, 7)], &[], Vec::new());
    assert_eq!(p.queues().total(), 0, "gone from both queues");
    let answers = p.take_answers();
    assert_eq!(answers.len(), 1, "one handle, one answer");
    let revoked: Vec<(&str, u64)> = p
        .freed(1, &answers[0].1, false)
        .iter()
        .map(|r| (r.resource, r.fence))
        .collect();
    assert_eq!(revoked, [("a", 7), ("b", 7)]);
    // A queued set leaves every queue when its client does.
    p.park_set(vec!["a", "b"], b"t", Wants::default(), 10, None, 2);
    assert!(p.leave(2).unblock);
    assert_eq!(p.queues().total(), 0);
}

#[test]
fn one_token_granted_under_two_fences_is_two_grants() {
    // Two sets of one token granted in one step: each revoked with its own
    // fence, on its own members.
    let mut p = P::default();
    p.park_set(vec!["a", "b"], b"t", Wants::default(), 10, None, 1);
    p.park_set(vec!["c", "d"], b"t", Wants::default(), 10, None, 2);
    let ids: Vec<u64> = ["a", "c"]
        .iter()
        .map(|r| p.queues().waiters(r).map(|w| w.id).next().unwrap())
        .collect();
    p.grant_entries(&[(ids[0], 7), (ids[1], 8)], &[], Vec::new());
    let answers = p.take_answers();
    let mut revoked: Vec<(&str, u64)> = answers
        .iter()
        .flat_map(|(h, a)| p.freed(*h, a, false))
        .map(|r| (r.resource, r.fence))
        .collect();
    revoked.sort();
    assert_eq!(revoked, [("a", 7), ("b", 7), ("c", 8), ("d", 8)]);
}

#[test]
fn waits_end_in_order_of_their_ends() {
    let mut p = P::default();
    p.park("r", b"a", Wants::default(), 10, Some(3), 1);
    p.park("s", b"b", Wants::default(), 10, Some(1), 2);
    p.park("r", b"c", Wants::default(), 10, Some(2), 3);
    p.park("r", b"forever", Wants::default(), 10, None, 4);
    for (h, at) in [(1, 3_000), (2, 1_000), (3, 2_000)] {
        p.ends_wait_at(h, at);
    }
    assert_eq!(p.next_wait_end(), Some(1_000));
    assert_eq!(p.time_out_ended(999), 0, "not yet");
    assert_eq!(p.time_out_ended(1_000), 1, "at its end, as its own timer");
    assert_eq!(p.next_wait_end(), Some(2_000));
    assert_eq!(p.time_out_ended(10_000), 2);
    assert_eq!(p.next_wait_end(), None);
    let answers = p.take_answers();
    assert_eq!(
        answers,
        [2, 3, 1].map(|h| (h, Answer::TimedOut)),
        "each in turn"
    );
    assert_eq!(p.queues().total(), 1, "only the one without WAIT end waits");
}

#[test]
fn waiters_that_leave_otherwise_are_skipped_and_dropped() {
    let mut p = P::default();
    p.park("r", b"gone", Wants::default(), 10, Some(1), 1);
    p.park("r", b"granted", Wants::default(), 10, Some(2), 2);
    p.park("r", b"stays", Wants::default(), 10, Some(3), 3);
    for h in 1..=3 {
        p.ends_wait_at(h, h as u64 * 1_000);
    }
    p.leave(1);
    p.grant_head(&"r", 7).unwrap();
    assert_eq!(p.next_wait_end(), Some(3_000), "departed ends skipped");
    assert_eq!(p.time_out_ended(3_000), 1);
    // Waiters that keep coming and going leave a bounded heap behind.
    for h in 10..10_000 {
        p.park("r", b"t", Wants::default(), 10, Some(u64::MAX), h);
        p.ends_wait_at(h, u64::MAX);
        p.leave(h);
    }
    // At most twice the one waiter, the slack, and the entry just pushed.
    assert!(
        p.wait_ends() <= 2 + 64 + 1,
        "{} entries kept",
        p.wait_ends()
    );
}

#[test]
fn a_request_that_leaves_is_noted_under_its_first_resource_as_it_waited() {
    let mut p = P::default();
    let wants = Wants {
        owner: Some((*b"o").into()),
        session: Some((*b"s").into()),
        ..Wants::default()
    };
    let single = p.park("r", b"a", wants.clone(), 10, None, 1);
    p.queues_mut().joined_at(single, 5);
    p.park_set(vec!["m", "n"], b"b", Wants::default(), 10, None, 2);
    assert!(p.leave(1).unblock && p.leave(2).unblock);
    let left = p.take_left();
    let seen: Vec<_> = left
        .iter()
        .map(|l| (l.resource, &*l.token, l.queued_at, l.granted, l.handle))
        .collect();
    assert_eq!(
        seen,
        [
            (Some("r"), &b"a"[..], 5, false, 1),
            (Some("m"), &b"b"[..], 0, false, 2)
        ]
    );
    assert_eq!(
        (&left[0].owner, &left[0].session),
        (&wants.owner, &wants.session)
    );
    assert_eq!(p.queues().total(), 0, "gone from every queue");
    assert!(p.take_left().is_empty());
}
