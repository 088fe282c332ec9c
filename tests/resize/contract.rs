//! The contract of `DLOCK.RESIZE`.
use super::*;

#[test]
fn growing_grants_the_queued_requests_that_fit_in_the_same_command() {
    let s = Server::start();
    let mut c = s.conn();
    fence_of(&mut c, &permit("sem", "a", 2, &[]));
    fence_of(&mut c, &permit("sem", "b", 2, &[]));
    let w1 = Waiter::send(&s, permit("sem", "w1", 2, &["WAIT", "0"]));
    wait_queued(&mut c, "sem", 1);
    let w2 = Waiter::send(&s, permit("sem", "w2", 2, &["WAIT", "0"]));
    wait_queued(&mut c, "sem", 2);
    let w3 = Waiter::send(&s, permit("sem", "w3", 2, &["WAIT", "0"]));
    wait_queued(&mut c, "sem", 3);
    // Two more permits: the first two waiters, in queue order; the third
    // keeps waiting.
    let replies = transaction(
        &mut c,
        &[
            resize_cmd("sem", 4),
            redis::cmd("DLOCK.INFO").arg("sem").clone(),
        ],
    );
    assert_eq!(replies[0], Value::Int(2));
    let Value::Array(info) = &replies[1] else {
        panic!("{replies:?}")
    };
    let waiters = info
        .chunks(2)
        .find(|p| text(&p[0]) == "waiters")
        .map(|p| text(&p[1]));
    assert_eq!(waiters.as_deref(), Some("1"), "granted within the command");
    let (f1, _) = w1.granted();
    let (f2, _) = w2.granted();
    assert!(f2 > f1);
    assert!(w3.pending());
    assert_eq!(holders(&mut c, "sem"), ["a", "b", "w1", "w2"]);
    assert_eq!(field(&mut c, "sem", "limit").as_deref(), Some("4"));
    assert_eq!(field(&mut c, "sem", "resized").as_deref(), Some("1"));
    assert_eq!(release(&mut c, "sem", "a"), 1);
    w3.granted();
}

#[test]
fn shrinking_keeps_every_hold_and_grants_nobody_until_they_fit() {
    let s = Server::start();
    let mut c = s.conn();
    for t in ["a", "b", "c", "d"] {
        fence_of(&mut c, &permit("sem", t, 4, &[]));
    }
    assert_eq!(resize(&mut c, "sem", 2), Some(4));
    assert_eq!(holders(&mut c, "sem"), ["a", "b", "c", "d"]);
    assert_eq!(
        extend(&mut c, "sem", "a", 90_000),
        1,
        "a hold past the limit lives on"
    );
    let w = Waiter::send(&s, permit("sem", "w", 4, &["WAIT", "0"]));
    wait_queued(&mut c, "sem", 1);
    for t in ["a", "b"] {
        assert_eq!(release(&mut c, "sem", t), 1);
        assert!(w.pending(), "2 held of 2 after {t}");
    }
    assert_eq!(try_fence(&mut c, &permit("sem", "x", 4, &[])), None);
    assert_eq!(release(&mut c, "sem", "c"), 1);
    w.granted();
    assert_eq!(holders(&mut c, "sem"), ["d", "w"]);
}

#[test]
fn a_free_resource_answers_nil_and_changes_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(resize(&mut c, "free", 5), None);
    assert!(!exists(&mut c, "free"));
    // Dead holds are gone: nothing holds it.
    fence_of(
        &mut c,
        &redis::cmd("DLOCK.ACQUIRE")
            .arg("short")
            .arg("t")
            .arg(1)
            .arg("LIMIT")
            .arg(3)
            .clone(),
    );
    wait_until(SOON, "the permit ended", || !exists(&mut c, "short"));
    assert_eq!(resize(&mut c, "short", 5), None);
}

#[test]
fn a_resized_semaphore_takes_any_limit_above_one_until_its_last_permit_ends() {
    let s = Server::start();
    let mut c = s.conn();
    fence_of(&mut c, &permit("sem", "a", 2, &[]));
    assert_eq!(field(&mut c, "sem", "resized"), None, "not resized");
    assert_eq!(resize(&mut c, "sem", 3), Some(2));
    // The old limit and any other above 1 join; the limit stays 3.
    fence_of(&mut c, &permit("sem", "b", 2, &[]));
    fence_of(&mut c, &permit("sem", "c", 7, &[]));
    assert_eq!(
        try_fence(&mut c, &permit("sem", "d", 2, &[])),
        None,
        "3 of 3"
    );
    assert_eq!(field(&mut c, "sem", "limit").as_deref(), Some("3"));
    // A retry under another LIMIT is the same hold.
    let f = fence_of(&mut c, &permit("sem", "a", 9, &[]));
    assert_eq!(fence_of(&mut c, &permit("sem", "a", 2, &[])), f);
    // No LIMIT, LIMIT 1 and SHARED are still refused.
    let limit_error = "ERR the resource is held with LIMIT 3: requests must ask for the same LIMIT";
    assert_eq!(
        refused(
            &mut c,
            &redis::cmd("DLOCK.ACQUIRE")
                .arg("sem")
                .arg("x")
                .arg(1000)
                .clone()
        ),
        limit_error
    );
    assert_eq!(refused(&mut c, &permit("sem", "x", 1, &[])), limit_error);
    // PERMITS against the resized limit.
    assert_eq!(
        refused(&mut c, &permit("sem", "x", 9, &["PERMITS", "4"])),
        "ERR PERMITS must be an integer from 1 to LIMIT"
    );
    for t in ["a", "b", "c"] {
        assert_eq!(release(&mut c, "sem", t), 1);
    }
    // Forgotten with the last permit: the next LIMIT sets the limit.
    assert!(!exists(&mut c, "sem"));
    fence_of(&mut c, &permit("sem", "e", 2, &[]));
    assert_eq!(field(&mut c, "sem", "limit").as_deref(), Some("2"));
    assert_eq!(field(&mut c, "sem", "resized"), None);
    assert_eq!(
        refused(&mut c, &permit("sem", "f", 3, &[])),
        "ERR the resource is held with LIMIT 2: requests must ask for the same LIMIT"
    );
}

#[test]
fn a_waiter_asking_more_than_the_new_limit_keeps_waiting_and_its_place() {
    let s = Server::start();
    let mut c = s.conn();
    fence_of(&mut c, &permit("sem", "a", 4, &[]));
    fence_of(&mut c, &permit("sem", "x", 4, &[]));
    let big = Waiter::send(&s, permit("sem", "big", 4, &["PERMITS", "3", "WAIT", "0"]));
    wait_queued(&mut c, "sem", 1);
    assert_eq!(resize(&mut c, "sem", 2), Some(4));
    assert_eq!(release(&mut c, "sem", "x"), 1);
    // 1 + 3 of 2 never fits: it waits, and nobody passes it.
    assert!(big.pending());
    assert_eq!(try_fence(&mut c, &permit("sem", "b", 4, &[])), None);
    assert_eq!(field(&mut c, "sem", "waiters").as_deref(), Some("1"));
    // Grown again, it is granted in the same command.
    assert_eq!(resize(&mut c, "sem", 4), Some(2));
    big.granted();
    assert_eq!(holders(&mut c, "sem"), ["a", "big"]);
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    fence_of(&mut c, &permit("sem", "a", 3, &[]));
    fence_of(
        &mut c,
        &redis::cmd("DLOCK.ACQUIRE")
            .arg("plain")
            .arg("t")
            .arg(60_000)
            .clone(),
    );
    fence_of(
        &mut c,
        &redis::cmd("DLOCK.ACQUIRE")
            .arg("rw")
            .arg("t")
            .arg(60_000)
            .arg("SHARED")
            .clone(),
    );
    let _: () = redis::cmd("SET").arg("str").arg("x").query(&mut c).unwrap();
    let keys = ["sem", "plain", "rw", "str"];
    let digests =
        |c: &mut Connection| -> Vec<String> { keys.iter().map(|k| digest(c, k)).collect() };
    let before = (digests(&mut c), field(&mut c, "sem", "limit"));
    let range = "ERR n must be an integer from 2 to 1048576";
    for bad in ["1", "0", "-3", "1048577", "x", "2.5"] {
        let cmd = redis::cmd("DLOCK.RESIZE").arg("sem").arg(bad).clone();
        assert_eq!(refused(&mut c, &cmd), range, "{bad}");
    }
    let kind = "ERR DLOCK.RESIZE applies to a semaphore (LIMIT above 1)";
    assert_eq!(refused(&mut c, &resize_cmd("plain", 3)), kind);
    assert_eq!(refused(&mut c, &resize_cmd("rw", 3)), kind);
    assert!(refused(&mut c, &resize_cmd("str", 3)).starts_with("WRONGTYPE"));
    assert!(
        refused(&mut c, &redis::cmd("DLOCK.RESIZE").arg("sem").clone())
            .contains("wrong number of arguments")
    );
    assert!(refused(
        &mut c,
        &redis::cmd("DLOCK.RESIZE").arg("sem").arg(3).arg(4).clone()
    )
    .contains("wrong number of arguments"));
    assert_eq!((digests(&mut c), field(&mut c, "sem", "limit")), before);
    assert_eq!(field(&mut c, "sem", "resized"), None);
}
