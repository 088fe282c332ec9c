//! `MAXHOLD` on `DLOCK.ACQUIRE`: the lease, the refusals, the errors.
use super::*;
use std::time::{Duration, Instant};

#[test]
fn the_lease_is_the_smaller_of_ttl_and_maxhold_and_info_shows_the_cap() {
    let s = Server::start();
    let mut c = s.conn();
    let f = fence_of(&mut c, &capped("p", "t", 100_000, 5_000, &[]));
    let left = pttl(&mut c, "p");
    assert!((0..=5_000).contains(&left), "the lease is capped: {left}");
    // A capped plain lock is shown in the list form, with its cap.
    let h = only(&mut c, "p");
    assert_eq!(
        (h.token.as_str(), h.fence, h.mode.as_str()),
        ("t", f, "exclusive")
    );
    assert_eq!(
        h.fields,
        ["token", "owner", "fence", "ttl", "mode", "maxhold"],
        "maxhold last, for a capped hold only"
    );
    let cap = h.maxhold.unwrap();
    assert!((0..=5_000).contains(&cap) && h.ttl <= cap, "{h:?}");
    // A ttl below the cap is the lease.
    fence_of(&mut c, &capped("q", "t", 2_000, 600_000, &[]));
    let h = only(&mut c, "q");
    assert!(h.ttl <= 2_000 && h.maxhold.unwrap() > 590_000, "{h:?}");
    // Without MAXHOLD nothing changes: the plain form.
    grant(&mut c, "r", "t", 10_000);
    assert_eq!(held(&mut c, "r").token, b"t");
    // SHARED, LIMIT and OWNER holds take a cap each; others have none.
    fence_of(&mut c, &capped("rw", "a", 10_000, 600_000, &["SHARED"]));
    fence_of(&mut c, &capped("rw", "b", 10_000, 300_000, &["SHARED"]));
    let _: i64 = redis::cmd("DLOCK.ACQUIRE")
        .arg("rw")
        .arg("c")
        .arg(10_000)
        .arg("SHARED")
        .query(&mut c)
        .unwrap();
    let caps: Vec<_> = shown(&mut c, "rw")
        .into_iter()
        .map(|h| (h.token, h.maxhold.map(|m| m > 290_000)))
        .collect();
    assert_eq!(
        caps,
        [
            ("a".into(), Some(true)),
            ("b".into(), Some(true)),
            ("c".into(), None)
        ]
    );
    fence_of(&mut c, &capped("sem", "p1", 10_000, 1_000, &["LIMIT", "2"]));
    assert!(only(&mut c, "sem").maxhold.unwrap() <= 1_000);
    fence_of(
        &mut c,
        &capped("own", "o1", 10_000, 1_000, &["OWNER", "me"]),
    );
    fence_of(
        &mut c,
        &capped("own", "o2", 10_000, 2_000, &["OWNER", "me"]),
    );
    assert_eq!(shown(&mut c, "own").len(), 2);
}

#[test]
fn an_extend_past_the_cap_is_refused_and_changes_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    fence_of(&mut c, &capped("p", "t", 10_000, 60_000, &[]));
    // Within the cap: extended.
    assert_eq!(extend(&mut c, "p", "t", 30_000), 1);
    let before = snapshot(&mut c, &["p"]);
    let e = refused(&mut c, &extend_cmd("p", "t", 60_001));
    let n = ms_left(&e);
    assert!((0..=60_000).contains(&n), "{e}");
    assert_eq!(
        snapshot(&mut c, &["p"]),
        before,
        "a refusal changes nothing"
    );
    let h = only(&mut c, "p");
    assert!(h.ttl <= 30_000, "the deadline did not move: {h:?}");
    // Another token, or a hold that ended: 0, as without a cap.
    assert_eq!(extend(&mut c, "p", "other", 60_001), 0);
    // A shared hold and a permit are refused alike.
    fence_of(&mut c, &capped("rw", "a", 10_000, 1_000, &["SHARED"]));
    ms_left(&refused(&mut c, &extend_cmd("rw", "a", 1_001)));
    fence_of(&mut c, &capped("sem", "a", 10_000, 1_000, &["LIMIT", "3"]));
    ms_left(&refused(&mut c, &extend_cmd("sem", "a", 1_001)));
}

#[test]
fn a_same_token_retry_must_name_the_same_maxhold_and_stay_within_the_cap() {
    let s = Server::start();
    let mut c = s.conn();
    let f = fence_of(&mut c, &capped("p", "t", 10_000, 60_000, &[]));
    // The same request again: the same fence, a new lease within the cap.
    assert_eq!(fence_of(&mut c, &capped("p", "t", 20_000, 60_000, &[])), f);
    assert!(only(&mut c, "p").ttl > 10_000);
    let before = snapshot(&mut c, &["p"]);
    ms_left(&refused(&mut c, &capped("p", "t", 60_001, 60_000, &[])));
    assert_eq!(
        refused(&mut c, &capped("p", "t", 10, 59_999, &[])),
        MISMATCH
    );
    let plain = {
        let mut cmd = redis::cmd("DLOCK.ACQUIRE");
        cmd.arg("p").arg("t").arg(10);
        cmd
    };
    assert_eq!(refused(&mut c, &plain), MISMATCH, "none is another MAXHOLD");
    assert_eq!(snapshot(&mut c, &["p"]), before, "refusals change nothing");
    // An uncapped hold retried with a cap: the same error.
    grant(&mut c, "q", "t", 10_000);
    assert_eq!(refused(&mut c, &capped("q", "t", 10, 5, &[])), MISMATCH);
    // Another token is busy, as without a cap.
    let busy: Option<i64> = capped("p", "u", 10, 5, &[]).query(&mut c).unwrap();
    assert_eq!(busy, None);
}

#[test]
fn bad_maxhold_arguments_are_clear_errors_that_change_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    fence_of(&mut c, &capped("held", "t", 10_000, 60_000, &[]));
    let before = snapshot(&mut c, &["held", "free"]);
    let range = "ERR MAXHOLD must be an integer from 1 to 140737488355328";
    for bad in [
        "0",
        "-1",
        "1.5",
        "x",
        "",
        "140737488355329",
        "99999999999999999999",
    ] {
        for res in ["held", "free"] {
            let mut cmd = redis::cmd("DLOCK.ACQUIRE");
            cmd.arg(res).arg("t").arg(10_000).arg("MAXHOLD").arg(bad);
            assert_eq!(refused(&mut c, &cmd), range, "{res} {bad:?}");
        }
    }
    let syntax = "ERR syntax error";
    for tail in [&["MAXHOLD"][..], &["MAXHOLD", "5", "MAXHOLD", "5"]] {
        let mut cmd = redis::cmd("DLOCK.ACQUIRE");
        cmd.arg("free").arg("t").arg(10_000).arg(tail);
        assert_eq!(refused(&mut c, &cmd), syntax, "{tail:?}");
    }
    let mut cmd = redis::cmd("DLOCK.ACQUIRE");
    cmd.arg("free").arg("t").arg(10_000).arg("MAXHOLD").arg(5);
    cmd.arg("SESSION").arg("s");
    assert_eq!(
        refused(&mut c, &cmd),
        "ERR MAXHOLD cannot be combined with SESSION (a session's hold has no deadline)"
    );
    assert_eq!(snapshot(&mut c, &["held", "free"]), before);
    assert!(!exists(&mut c, "free"));
}

#[test]
fn a_waiter_is_capped_from_its_grant() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "p", "h", 60_000);
    let url = s.url();
    let waiter = std::thread::spawn(move || {
        let mut w = connect_within(&url, SOON).unwrap();
        let cmd = capped("p", "w", 600_000, 10_000, &["WAIT", "0"]);
        cmd.query::<Option<i64>>(&mut w).unwrap()
    });
    wait_waiters(&mut c, "p", 1);
    // Queued well before the grant: a cap counted from the queueing would
    // show less than 10 s minus this wait once granted.
    std::thread::sleep(Duration::from_millis(300));
    let released = Instant::now();
    assert_eq!(release(&mut c, "p", "h"), 1);
    let fence = waiter.join().unwrap().expect("granted");
    let h = only(&mut c, "p");
    let since = released.elapsed().as_millis() as i64;
    assert_eq!((h.token.as_str(), h.fence), ("w", fence));
    let cap = h.maxhold.unwrap();
    assert!(
        cap >= 10_000 - since - 1,
        "{cap} ms left, {since} ms after the release"
    );
    assert!(h.ttl <= cap, "the lease is capped: {h:?}");
}

#[test]
fn a_capped_hold_ends_at_its_cap_and_the_queue_moves_on() {
    let s = Server::start();
    let mut c = s.conn();
    fence_of(&mut c, &capped("p", "t", 600_000, 300, &[]));
    let next = acquire_wait(&mut c, "p", "u", 10_000, 0).unwrap();
    assert!(next.is_some(), "granted once the cap ended the hold");
    assert_eq!(
        held(&mut c, "p").token,
        b"u",
        "the next holder is a plain lock"
    );
}
