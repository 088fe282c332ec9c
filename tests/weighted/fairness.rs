//! A big request at the head of a semaphore's queue is not starved by
//! small ones: nothing here is timed, each step waits for the state the
//! next one needs (`DLOCK.INFO`'s waiters).
use super::*;
use common::waiter::Waiter;

#[test]
fn a_big_request_is_not_passed_by_a_stream_of_single_permits() {
    let s = Server::start();
    let mut c = s.conn();
    // 2 of 4 permits held, by two holders of one permit each.
    fence_of(&mut c, &weighted("sem", "h1", 4, 1, &[]));
    fence_of(&mut c, &weighted("sem", "h2", 4, 1, &[]));
    let big = Waiter::send(&s, weighted("sem", "big", 4, 3, &["WAIT", "0"]));
    wait_queued(&mut c, "sem", 1);
    // Two permits are free all along, yet no single-permit request passes
    // the waiting one: not without WAIT, not by waiting behind it.
    for i in 0..200 {
        let token = format!("s{i}");
        assert_eq!(
            try_fence(&mut c, &weighted("sem", &token, 4, 1, &[])),
            None,
            "{token} passed the big request"
        );
    }
    let small = Waiter::send(&s, weighted("sem", "small", 4, 1, &["WAIT", "0"]));
    wait_queued(&mut c, "sem", 2);
    assert_eq!(
        value_field(&mut c, "sem", "used").as_deref(),
        None,
        "2 single holds"
    );
    assert!(big.pending() && small.pending());
    // One permit back makes 3 free: the big request goes first; the single
    // one behind it waits for the last permit held before.
    assert_eq!(release(&mut c, "sem", "h1"), 1);
    let (fence, _) = big.granted();
    assert_eq!(permits_shown(&mut c, "sem", "big").as_deref(), Some("3"));
    assert_eq!(value_field(&mut c, "sem", "used").as_deref(), Some("4"));
    wait_queued(&mut c, "sem", 1);
    assert!(small.pending());
    assert_eq!(release(&mut c, "sem", "h2"), 1);
    let (small_fence, _) = small.granted();
    assert!(small_fence > fence);
    assert_eq!(value_field(&mut c, "sem", "used").as_deref(), Some("4"));
    assert_eq!(value_field(&mut c, "sem", "waiters").as_deref(), Some("0"));
}

#[test]
fn single_permits_queued_first_are_granted_before_the_big_one() {
    let s = Server::start();
    let mut c = s.conn();
    fence_of(&mut c, &weighted("sem", "h", 3, 3, &[]));
    let first = Waiter::send(&s, weighted("sem", "s1", 3, 1, &["WAIT", "0"]));
    wait_queued(&mut c, "sem", 1);
    let big = Waiter::send(&s, weighted("sem", "big", 3, 3, &["WAIT", "0"]));
    wait_queued(&mut c, "sem", 2);
    assert_eq!(release(&mut c, "sem", "h"), 1);
    // FIFO: the single permit first; the big one waits for all three.
    first.granted();
    wait_queued(&mut c, "sem", 1);
    assert!(big.pending());
    assert_eq!(release(&mut c, "sem", "s1"), 1);
    big.granted();
    assert_eq!(value_field(&mut c, "sem", "used").as_deref(), Some("3"));
}
