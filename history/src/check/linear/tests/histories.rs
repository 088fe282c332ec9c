use super::*;

// ---- (1) hand-written histories ----

#[test]
fn a_sequential_plain_lock_history_is_linearizable() {
    let mut h = H::new();
    h.op(1, 0, 10, acq("l0", "a"), fence(100));
    h.op(2, 20, 30, acq("l0", "b"), nil());
    h.op(1, 40, 50, acq("l0", "a"), fence(100)); // retry: same fence
    h.op(2, 60, 70, ext("l0", "b"), int(0));
    h.op(1, 80, 90, ext("l0", "a"), int(1));
    h.op(3, 95, 96, info("l0"), holds(&[("a", "a", 100, false)]));
    h.op(2, 100, 110, rel("l0", "b"), int(0));
    h.op(1, 120, 130, rel("l0", "a"), int(1));
    h.op(3, 135, 136, info("l0"), nil());
    h.op(2, 140, 150, acq("l0", "b"), fence(101));
    assert!(h.check().is_empty());
}

#[test]
fn overlapping_operations_may_take_effect_in_either_order() {
    let mut h = H::new();
    // b's grant and a's release overlap: a released first.
    h.op(1, 0, 10, acq("l0", "a"), fence(100));
    let r = h.invoke(1, 20, rel("l0", "a"));
    h.op(2, 25, 30, acq("l0", "b"), fence(200));
    h.complete(1, 40, r, int(1));
    assert!(h.check().is_empty());
}

#[test]
fn two_exclusive_grants_in_real_time_order_are_a_violation() {
    let mut h = H::new();
    let a = h.op(1, 0, 10, acq("l0", "a"), fence(100));
    let b = h.op(2, 20, 30, acq("l0", "b"), fence(200));
    let v = h.check();
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].checker, "linearizability");
    assert!(v[0].what.starts_with("l0 (Plain)"));
    assert!(v[0].ops.contains(&b), "{:?} {a}", v[0].ops);
}

#[test]
fn release_by_a_non_owner_answering_1_is_a_violation() {
    let mut h = H::new();
    h.op(1, 0, 10, acq("l0", "a"), fence(100));
    h.op(2, 20, 30, rel("l0", "b"), int(1));
    assert_eq!(h.check().len(), 1);
}

#[test]
fn a_fence_below_an_earlier_fresh_fence_is_a_violation() {
    let mut h = H::new();
    h.op(1, 0, 10, acq("l0", "a"), fence(100));
    h.op(1, 20, 30, rel("l0", "a"), int(1));
    h.op(2, 40, 50, acq("l0", "b"), fence(100));
    assert_eq!(h.check().len(), 1);
    // Concurrent fresh grants may come in any order, but not both equal.
    let mut h = H::new();
    h.op(1, 0, 10, limit(acq("l2", "a"), 2), fence(100));
    h.op(2, 0, 10, limit(acq("l2", "b"), 2), fence(100));
    assert_eq!(h.check().len(), 1);
    let mut h = H::new();
    h.op(1, 0, 10, limit(acq("l2", "a"), 2), fence(101));
    h.op(2, 0, 10, limit(acq("l2", "b"), 2), fence(100));
    assert!(h.check().is_empty());
}

#[test]
fn a_reader_granted_while_a_writer_holds_is_a_violation() {
    let mut h = H::new();
    h.op(1, 0, 10, acq("l1", "w"), fence(100));
    h.op(2, 20, 30, shared(acq("l1", "r")), fence(200));
    assert_eq!(h.check().len(), 1);
    // Readers coexist; a writer waits for both.
    let mut h = H::new();
    h.op(1, 0, 10, shared(acq("l1", "r1")), fence(100));
    h.op(2, 20, 30, shared(acq("l1", "r2")), fence(200));
    h.op(3, 40, 50, acq("l1", "w"), nil());
    h.op(1, 60, 70, rel("l1", "r1"), int(1));
    h.op(3, 80, 90, acq("l1", "w"), nil());
    h.op(2, 100, 110, rel("l1", "r2"), int(1));
    h.op(3, 120, 130, acq("l1", "w"), fence(300));
    assert!(h.check().is_empty());
}

#[test]
fn the_lock_kinds_owner_examples_are_linearizable() {
    // docs/lock-kinds.md#read-write-locks-shared: downgrade, then upgrade
    // refused and granted with the owner's fence.
    let mut h = H::new();
    h.op(1, 0, 1, owner(acq("l1", "w"), "app-1"), fence(313));
    h.op(1, 2, 3, shared(owner(acq("l1", "r"), "app-1")), fence(313));
    h.op(1, 4, 5, rel("l1", "w"), int(1));
    h.op(2, 6, 7, shared(acq("l1", "r2")), fence(477));
    h.op(
        1,
        8,
        9,
        owner(acq("l1", "w2"), "app-1"),
        fail("ERR upgrade refused: other owners hold the resource (an upgrade never waits)"),
    );
    h.op(2, 10, 11, rel("l1", "r2"), int(1));
    h.op(1, 12, 13, owner(acq("l1", "w2"), "app-1"), fence(313));
    h.op(
        3,
        14,
        15,
        info("l1"),
        holds(&[("r", "app-1", 313, true), ("w2", "app-1", 313, false)]),
    );
    // The same token asking differently; another LIMIT; SHARED with LIMIT.
    h.op(
        1,
        16,
        17,
        shared(owner(acq("l1", "w2"), "app-1")),
        fail("ERR token already holds this resource with another mode, LIMIT or OWNER"),
    );
    h.op(
        2,
        18,
        19,
        limit(acq("l1", "x"), 5),
        fail("ERR the resource is held with LIMIT 1: requests must ask for the same LIMIT"),
    );
    // Errors that change nothing whatever the state are left out.
    h.op(2, 20, 21, acq("l1", "y"), fail("LOADING Redis is loading"));
    // docs/lock-kinds.md#reentrant-holds-owner-owner.
    h.op(
        1,
        30,
        31,
        owner(acq("l0", "t-outer"), "worker-9"),
        fence(580),
    );
    h.op(
        1,
        32,
        33,
        owner(acq("l0", "t-inner"), "worker-9"),
        fence(580),
    );
    h.op(2, 34, 35, owner(acq("l0", "t-other"), "worker-3"), nil());
    h.op(1, 36, 37, rel("l0", "t-inner"), int(1));
    h.op(2, 38, 39, owner(acq("l0", "t-other"), "worker-3"), nil());
    h.op(1, 40, 41, rel("l0", "t-outer"), int(1));
    h.op(
        2,
        42,
        43,
        owner(acq("l0", "t-other"), "worker-3"),
        fence(581),
    );
    // Semaphore: two permits, the third nil, OWNER refused.
    h.op(1, 50, 51, limit(acq("l2", "c1"), 2), fence(600));
    h.op(2, 52, 53, limit(acq("l2", "c2"), 2), fence(601));
    h.op(3, 54, 55, limit(acq("l2", "c3"), 2), nil());
    h.op(
        3,
        56,
        57,
        owner(limit(acq("l2", "c3"), 2), "o"),
        fail("ERR OWNER cannot be combined with LIMIT above 1"),
    );
    assert!(h.check().is_empty());
}

#[test]
fn an_error_where_the_model_grants_is_a_violation() {
    let mut h = H::new();
    h.op(
        1,
        0,
        10,
        acq("l0", "a"),
        fail("ERR token already holds this resource with another mode, LIMIT or OWNER"),
    );
    assert_eq!(h.check().len(), 1);
    // And an upgrade granted while another owner holds.
    let mut h = H::new();
    h.op(1, 0, 1, shared(owner(acq("l1", "r"), "o1")), fence(10));
    h.op(2, 2, 3, shared(acq("l1", "r2")), fence(11));
    h.op(1, 4, 5, owner(acq("l1", "w"), "o1"), fence(10));
    assert_eq!(h.check().len(), 1);
}

#[test]
fn info_must_show_the_holds() {
    let mut h = H::new();
    h.op(1, 0, 10, acq("l0", "a"), fence(100));
    h.op(2, 20, 30, info("l0"), nil());
    assert_eq!(h.check().len(), 1);
    let mut h = H::new();
    h.op(1, 0, 10, acq("l0", "a"), fence(100));
    h.op(2, 20, 30, info("l0"), holds(&[("a", "a", 99, false)]));
    assert_eq!(h.check().len(), 1);
}

#[test]
fn only_lin_resources_are_checked() {
    let mut h = H::new();
    h.op(1, 0, 10, acq("m0", "a"), fence(100));
    h.op(2, 20, 30, acq("m0", "b"), fence(200));
    assert!(h.check().is_empty());
}

// ---- (2) operations with lost replies ----

#[test]
fn a_lost_grant_may_have_happened() {
    // Must be linearized: b got nil after a's lost acquire, and later a's
    // retry reveals the fence.
    let mut h = H::new();
    h.op(1, 0, 10, acq("l0", "a"), lost());
    h.op(2, 20, 30, acq("l0", "b"), nil());
    h.op(3, 40, 50, acq("l0", "a"), fence(100));
    h.op(3, 60, 70, rel("l0", "a"), int(1));
    h.op(2, 80, 90, acq("l0", "b"), fence(101));
    assert!(h.check().is_empty());
    // Or not: b was granted after it.
    let mut h = H::new();
    h.op(1, 0, 10, acq("l0", "a"), lost());
    h.op(2, 20, 30, acq("l0", "b"), fence(100));
    h.op(3, 40, 50, acq("l0", "a"), nil());
    assert!(h.check().is_empty());
}

#[test]
fn a_lost_grant_takes_effect_before_its_completion_or_never() {
    // b's grant precedes a's lost acquire entirely; a's retry then gets a
    // fence while b still holds: impossible.
    let mut h = H::new();
    h.op(2, 0, 5, acq("l0", "b"), fence(100));
    h.op(1, 10, 20, acq("l0", "a"), lost());
    h.op(3, 30, 40, acq("l0", "a"), fence(101));
    assert_eq!(h.check().len(), 1);
    // The lost grant cannot have happened after its completion: b was
    // told nil before a's lost op was even invoked, and a never retried,
    // then b is granted: fine. But if b was told nil *after* a's release
    // surely ended (a released, answered 1), nobody holds: violation.
    let mut h = H::new();
    h.op(1, 0, 10, acq("l0", "a"), lost());
    h.op(1, 20, 30, rel("l0", "a"), int(1));
    h.op(2, 40, 50, acq("l0", "b"), nil());
    assert_eq!(h.check().len(), 1);
}

#[test]
fn a_lost_fence_revealed_later_is_bounded_by_the_fences_around_it() {
    // a's lost grant happened before c's (100 < ?) ... its retry shows 50:
    // below a fence known before it was drawn.
    let mut h = H::new();
    h.op(3, 0, 1, limit(acq("l2", "c"), 2), fence(100));
    h.op(1, 10, 20, limit(acq("l2", "a"), 2), lost());
    h.op(1, 30, 40, limit(acq("l2", "a"), 2), fence(50));
    assert_eq!(h.check().len(), 1);
    // A lost grant followed by a known fresh grant must be below it.
    let mut h = H::new();
    h.op(1, 0, 10, limit(acq("l2", "a"), 2), lost());
    h.op(2, 20, 30, limit(acq("l2", "b"), 2), fence(100));
    h.op(3, 32, 35, limit(acq("l2", "c"), 2), nil()); // so a holds
    h.op(1, 40, 50, limit(acq("l2", "a"), 2), fence(150));
    assert_eq!(h.check().len(), 1);
    // Without c's nil, a's acquire may not have happened: then its retry
    // is a fresh grant, and 150 is fine.
    let mut h = H::new();
    h.op(1, 0, 10, limit(acq("l2", "a"), 2), lost());
    h.op(2, 20, 30, limit(acq("l2", "b"), 2), fence(100));
    h.op(1, 40, 50, limit(acq("l2", "a"), 2), fence(150));
    assert!(h.check().is_empty());
    let mut h = H::new();
    h.op(1, 0, 10, limit(acq("l2", "a"), 2), lost());
    h.op(2, 20, 30, limit(acq("l2", "b"), 2), fence(100));
    h.op(1, 40, 50, limit(acq("l2", "a"), 2), fence(90));
    h.op(
        3,
        60,
        70,
        info("l2"),
        holds(&[("a", "a", 90, false), ("b", "b", 100, false)]),
    );
    assert!(h.check().is_empty());
}

#[test]
fn a_lost_release_may_or_may_not_have_freed() {
    let mut h = H::new();
    h.op(1, 0, 10, acq("l0", "a"), fence(100));
    h.op(1, 20, 30, rel("l0", "a"), lost());
    h.op(2, 40, 50, acq("l0", "b"), fence(200));
    assert!(h.check().is_empty());
    let mut h = H::new();
    h.op(1, 0, 10, acq("l0", "a"), fence(100));
    h.op(1, 20, 30, rel("l0", "a"), lost());
    h.op(2, 40, 50, acq("l0", "b"), nil());
    h.op(1, 60, 70, ext("l0", "a"), int(1));
    assert!(h.check().is_empty());
    // But not both: freed for b, then a still holds.
    let mut h = H::new();
    h.op(1, 0, 10, acq("l0", "a"), fence(100));
    h.op(1, 20, 30, rel("l0", "a"), lost());
    h.op(2, 40, 50, acq("l0", "b"), fence(200));
    h.op(1, 60, 70, ext("l0", "a"), int(1));
    assert_eq!(h.check().len(), 1);
}

#[test]
fn an_operation_never_completed_may_take_effect_up_to_the_end() {
    let mut h = H::new();
    h.op(1, 0, 10, acq("l0", "a"), fence(100));
    h.invoke(1, 20, rel("l0", "a"));
    h.op(2, 1_000, 1_010, acq("l0", "b"), fence(200));
    assert!(h.check().is_empty());
}

#[test]
fn the_model_decides_like_the_readme() {
    let s = State::default();
    assert_eq!(s.decide(0, None, false, None), Decision::Grant(None));
    assert_eq!(
        s.decide(0, None, true, Some(2)),
        Decision::Error(ErrKind::SharedSemaphore)
    );
}
