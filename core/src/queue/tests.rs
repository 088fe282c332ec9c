//! Unit tests of `queue`.
use super::*;
use crate::ask::Mode;

type Q = WaitQueues<&'static str, u32>;

#[test]
fn fifo_per_resource() {
    let mut q = Q::default();
    q.push("r", b"a", Wants::default(), 10, None, 1);
    q.push("other", b"x", Wants::default(), 10, None, 9);
    q.push("r", b"b", Wants::default(), 20, None, 2);
    assert_eq!(q.waiting(&"r"), 2);
    assert_eq!(q.total(), 3);
    let g = q.pop_grantee(&"r").unwrap();
    assert_eq!((&*g.token, g.ttl_ms, g.handles), (&b"a"[..], 10, vec![1]));
    let g = q.pop_grantee(&"r").unwrap();
    assert_eq!(g.handles, vec![2]);
    assert!(q.pop_grantee(&"r").is_none());
    assert_eq!(q.total(), 1);
}

#[test]
fn one_grant_answers_every_entry_of_the_same_token() {
    let mut q = Q::default();
    q.push("r", b"a", Wants::default(), 10, None, 1);
    q.push("r", b"b", Wants::default(), 10, None, 2);
    q.push("r", b"a", Wants::default(), 10, None, 3);
    let g = q.pop_grantee(&"r").unwrap();
    assert_eq!(g.handles, vec![1, 3]);
    assert_eq!(q.waiting(&"r"), 1);
    assert_eq!(q.total(), 1);
}

#[test]
fn removal_is_idempotent_and_cleans_up() {
    let mut q = Q::default();
    let a = q.push("r", b"a", Wants::default(), 10, None, 1);
    let b = q.push("r", b"b", Wants::default(), 10, None, 2);
    assert_eq!(q.remove(a).map(|w| w.handle), Some(1));
    assert!(q.remove(a).is_none());
    assert_eq!(q.pop_grantee(&"r").map(|g| g.handles), Some(vec![2]));
    assert!(
        q.remove(b).is_none(),
        "granted waiters are no longer removable"
    );
    assert_eq!(q.total(), 0);
    assert!(q.resources(|_| true).is_empty());
}

#[test]
fn drains() {
    let mut q = Q::default();
    q.push("r", b"a", Wants::default(), 10, None, 1);
    q.push("s", b"a", Wants::default(), 10, None, 2);
    assert_eq!(q.drain(&"r").len(), 1);
    assert_eq!(q.total(), 1);
    assert_eq!(q.drain_all().len(), 1);
    assert_eq!(q.total(), 0);
    let mut emptied = q.take_emptied();
    emptied.sort_unstable();
    assert_eq!(emptied, ["r", "s"]);
}

#[test]
fn queues_that_empty_without_a_grant_are_told() {
    let mut q = Q::default();
    let a = q.push("r", b"a", Wants::default(), 10, None, 1);
    q.push("r", b"b", Wants::default(), 10, None, 2);
    q.push("s", b"c", Wants::default(), 10, None, 3);
    q.remove(a);
    assert!(q.take_emptied().is_empty(), "b still waits");
    assert!(q.pop_grantee(&"r").is_some());
    assert!(
        q.take_emptied().is_empty(),
        "a grant is a change of its own"
    );
    q.push("t", b"d", Wants::default(), 10, Some(5), 4);
    q.take_given_up(&"t", 6);
    let s = q.waiters(&"s").next().map(|w| w.id).unwrap();
    q.remove(s);
    assert_eq!(q.take_emptied(), ["t", "s"]);
    assert!(q.take_emptied().is_empty());
}

#[test]
fn eviction_holds_waiters_until_the_known_deadline() {
    let mut q = Q::default();
    q.push("r", b"a", Wants::default(), 10, None, 1);
    assert_eq!(q.hold_after_eviction(&"r"), None, "deadline unknown");
    q.note_deadline(&"r", 500);
    q.note_deadline(&"r", 900);
    assert_eq!(q.hold_after_eviction(&"r"), Some(900));
    assert_eq!(q.held_until(&"r"), Some(900));
    assert_eq!(q.held_until(&"other"), None);
    q.pop_grantee(&"r");
    assert_eq!(q.held_until(&"r"), None, "gone with its queue");
}

#[test]
fn timers_are_armed_once_per_earlier_deadline() {
    let mut q = Q::default();
    assert!(!q.needs_timer(&"r", 100), "no waiters, no timer");
    q.push("r", b"a", Wants::default(), 10, None, 1);
    assert!(q.needs_timer(&"r", 100));
    assert!(!q.needs_timer(&"r", 150));
    assert!(q.needs_timer(&"r", 50), "an earlier deadline needs its own");
    q.timer_fired(&"r", 100, 0);
    assert!(!q.needs_timer(&"r", 60), "the 50 ms timer is still armed");
    q.timer_fired(&"r", 50, 0);
    assert!(q.needs_timer(&"r", 60));
}

#[test]
fn an_emptied_queue_hands_back_its_timers() {
    let mut q = Q::default();
    let a = q.push("r", b"a", Wants::default(), 10, None, 1);
    q.add_timer(&"r", 11);
    q.add_timer(&"r", 12);
    q.timer_fired(&"r", 0, 11);
    assert!(q.take_stale_timers().is_empty());
    q.remove(a);
    assert_eq!(q.take_stale_timers(), vec![12]);
    q.add_timer(&"gone", 13);
    assert_eq!(q.take_stale_timers(), vec![13], "no queue: stale at once");
    q.push("s", b"a", Wants::default(), 10, Some(5), 1);
    q.add_timer(&"s", 14);
    q.take_given_up(&"s", 6);
    assert_eq!(q.take_stale_timers(), vec![14]);
}

#[test]
fn queues_know_whether_they_hold_only_plain_requests() {
    let mut q = Q::default();
    let shared = Wants {
        mode: Mode::Shared,
        ..Wants::default()
    };
    q.push("r", b"a", Wants::default(), 10, None, 1);
    assert!(q.is_plain(&"r") && q.is_plain(&"none"));
    let s = q.push("r", b"s", shared.clone(), 10, None, 2);
    let t = q.push("r", b"t", shared, 10, None, 3);
    assert!(!q.is_plain(&"r"));
    q.remove(s);
    assert!(!q.is_plain(&"r"));
    let taken = q.take(&[t]);
    assert_eq!(taken.iter().map(|(w, _)| w.handle).collect::<Vec<_>>(), [3]);
    assert_eq!(taken[0].1, ["r"]);
    assert!(q.is_plain(&"r"));
    assert_eq!(q.waiters(&"r").map(|w| w.handle).collect::<Vec<_>>(), [1]);
    assert_eq!(q.take_to_settle(), ["r"], "s left while t still waited");
    assert!(q.take_to_settle().is_empty());
    assert_eq!(q.total(), 1);
}

#[test]
fn the_head_is_the_one_a_handoff_grants() {
    let mut q = Q::default();
    assert_eq!(q.head(&"r"), None);
    q.push("r", b"a", Wants::default(), 10, None, 1);
    assert_eq!(q.head(&"r"), Some(&b"a"[..]));
    // The same token queued again is granted with the head: nobody else.
    q.push("r", b"a", Wants::default(), 10, None, 2);
    assert_eq!(q.head(&"r"), Some(&b"a"[..]));
    q.push("r", b"b", Wants::default(), 10, None, 3);
    assert_eq!(q.head(&"r"), Some(&b"a"[..]));
    let granted = q.pop_grantee(&"r").map(|g| g.token);
    assert_eq!(granted.as_deref(), Some(&b"a"[..]));
    assert_eq!(q.head(&"r"), Some(&b"b"[..]));
}

#[test]
fn given_up_waiters_are_taken_out() {
    let mut q = Q::default();
    q.push("r", b"a", Wants::default(), 10, Some(100), 1);
    q.push("r", b"b", Wants::default(), 10, None, 2);
    assert!(q.has_live_waiter(&"r", 1000));
    let gone = q.take_given_up(&"r", 101);
    assert_eq!(gone.iter().map(|w| w.handle).collect::<Vec<_>>(), vec![1]);
    assert_eq!(q.waiting(&"r"), 1);
    assert_eq!(q.total(), 1);
    assert!(q.take_given_up(&"r", u64::MAX).is_empty(), "no deadline");
    assert!(q.has_live_waiter(&"r", u64::MAX));
    q.push("s", b"c", Wants::default(), 10, Some(5), 3);
    assert!(!q.has_live_waiter(&"s", 6));
}

#[test]
fn a_set_request_waits_in_every_member_queue_under_one_id() {
    let mut q = Q::default();
    q.push("a", b"x", Wants::default(), 10, None, 1);
    let set = q.push_set(vec!["a", "b"], b"s", Wants::default(), 10, Some(50), 2);
    q.push("b", b"y", Wants::default(), 10, None, 3);
    assert_eq!((q.waiting(&"a"), q.waiting(&"b"), q.total()), (2, 2, 3));
    assert!(q.has_sets(&"a") && q.has_sets(&"b") && !q.is_plain(&"a"));
    // Leaving removes it from both queues at once.
    assert_eq!(q.remove(set).map(|w| w.handle), Some(2));
    assert!(q.remove(set).is_none());
    assert_eq!((q.waiting(&"a"), q.waiting(&"b"), q.total()), (1, 1, 2));
    assert!(!q.has_sets(&"a") && q.is_plain(&"b"));
}

#[test]
fn a_set_that_gives_up_or_fails_on_one_member_leaves_them_all() {
    let mut q = Q::default();
    q.push_set(vec!["a", "b"], b"s", Wants::default(), 10, Some(50), 1);
    q.push("b", b"y", Wants::default(), 10, None, 2);
    let gone = q.take_given_up(&"a", 51);
    assert_eq!(gone.iter().map(|w| w.handle).collect::<Vec<_>>(), [1]);
    assert_eq!((q.waiting(&"a"), q.waiting(&"b"), q.total()), (0, 1, 1));

    q.push_set(vec!["a", "b", "c"], b"t", Wants::default(), 10, None, 3);
    let failed = q.drain(&"c");
    assert_eq!(failed.iter().map(|w| w.handle).collect::<Vec<_>>(), [3]);
    assert_eq!((q.waiting(&"a"), q.waiting(&"b"), q.total()), (0, 1, 1));
    q.push_set(vec!["a", "b"], b"u", Wants::default(), 10, None, 4);
    assert_eq!(q.drain_all().len(), 2, "one entry per request");
}

#[test]
fn taking_a_set_request_takes_every_entry() {
    let mut q = Q::default();
    let s = q.push_set(vec!["a", "b"], b"s", Wants::default(), 10, None, 1);
    let y = q.push("b", b"y", Wants::default(), 10, None, 2);
    let taken = q.take(&[s]);
    assert_eq!(taken.len(), 1);
    assert_eq!((taken[0].0.handle, taken[0].1.clone()), (1, vec!["a", "b"]));
    assert_eq!((q.waiting(&"a"), q.waiting(&"b"), q.total()), (0, 1, 1));
    assert_eq!(q.waiters(&"b").map(|w| w.id).collect::<Vec<_>>(), [y]);
}

#[test]
fn a_component_follows_sets_from_queue_to_queue_in_enqueue_order() {
    let mut q = Q::default();
    let x = q.push("c", b"x", Wants::default(), 10, None, 1);
    let s1 = q.push_set(vec!["a", "b"], b"s1", Wants::default(), 10, None, 2);
    let s2 = q.push_set(vec!["b", "c"], b"s2", Wants::default(), 10, None, 3);
    let y = q.push("a", b"y", Wants::default(), 10, None, 4);
    q.push("elsewhere", b"z", Wants::default(), 10, None, 5);
    let c = q.component(&["a"]);
    assert_eq!(c.resources, ["a", "b", "c"]);
    let ids: Vec<u64> = c.requests.iter().map(|r| r.id).collect();
    assert_eq!(ids, [x, s1, s2, y]);
    let members: Vec<Vec<usize>> = c.requests.iter().map(|r| r.members.clone()).collect();
    assert_eq!(members, [vec![2], vec![0, 1], vec![1, 2], vec![0]]);
    // A resource nobody waits on is its own component.
    let lone = q.component(&["free"]);
    assert_eq!((lone.resources, lone.requests.len()), (vec!["free"], 0));
}

#[test]
fn a_set_leaving_a_plain_queue_thins_it() {
    // The set reserved "b" while it was free: the plain waiter behind it
    // may be granted once it leaves.
    let mut q = Q::default();
    let s = q.push_set(vec!["a", "b"], b"s", Wants::default(), 10, None, 1);
    q.push("b", b"y", Wants::default(), 10, None, 2);
    q.remove(s);
    assert!(q.is_plain(&"b"));
    assert_eq!(q.take_to_settle(), ["b"]);
}
