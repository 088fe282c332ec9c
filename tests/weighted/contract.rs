//! The contract of `LIMIT n PERMITS k`.
use super::*;

#[test]
fn all_k_permits_are_granted_at_once_or_none() {
    let s = Server::start();
    let mut c = s.conn();
    let a = fence_of(&mut c, &weighted("sem", "a", 5, 3, &[]));
    assert_eq!(value_field(&mut c, "sem", "used").as_deref(), Some("3"));
    assert_eq!(permits_shown(&mut c, "sem", "a").as_deref(), Some("3"));
    // 3 + 3 > 5: nothing now, not 2 now and 1 later.
    assert_eq!(try_fence(&mut c, &weighted("sem", "b", 5, 3, &[])), None);
    let b = fence_of(&mut c, &weighted("sem", "b", 5, 2, &[]));
    assert!(b > a);
    assert_eq!(value_field(&mut c, "sem", "used").as_deref(), Some("5"));
    assert_eq!(try_fence(&mut c, &weighted("sem", "c", 5, 1, &[])), None);
    // Releasing the one hold gives all of its permits back.
    assert_eq!(release(&mut c, "sem", "a"), 1);
    assert_eq!(value_field(&mut c, "sem", "used").as_deref(), Some("2"));
    fence_of(&mut c, &weighted("sem", "c", 5, 3, &[]));
    assert_eq!(value_field(&mut c, "sem", "used").as_deref(), Some("5"));
}

#[test]
fn info_shows_used_and_permits_only_for_weighted_holds() {
    let s = Server::start();
    let mut c = s.conn();
    fence_of(&mut c, &weighted("sem", "one", 4, 1, &[]));
    let (top, holds) = fields(&mut c, "sem");
    let names: Vec<&str> = top.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        ["kind", "limit", "waiters", "holds"],
        "k = 1 as before"
    );
    assert!(holds[0].iter().all(|(k, _)| k != "permits"));
    fence_of(&mut c, &weighted("sem", "two", 4, 2, &[]));
    let (top, _) = fields(&mut c, "sem");
    let names: Vec<&str> = top.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(names, ["kind", "limit", "waiters", "used", "holds"]);
    assert_eq!(permits_shown(&mut c, "sem", "one"), None);
    assert_eq!(permits_shown(&mut c, "sem", "two").as_deref(), Some("2"));
    assert_eq!(value_field(&mut c, "sem", "used").as_deref(), Some("3"));
}

#[test]
fn extend_and_release_act_on_all_permits_together() {
    let s = Server::start();
    let mut c = s.conn();
    fence_of(&mut c, &weighted("sem", "a", 3, 3, &[]));
    assert_eq!(extend(&mut c, "sem", "a", 120_000), 1);
    assert!(pttl(&mut c, "sem") > 60_000);
    assert_eq!(permits_shown(&mut c, "sem", "a").as_deref(), Some("3"));
    assert_eq!(try_fence(&mut c, &weighted("sem", "b", 3, 1, &[])), None);
    assert_eq!(release(&mut c, "sem", "a"), 1);
    assert!(!exists(&mut c, "sem"), "no permit left behind");
}

#[test]
fn a_retry_must_name_the_same_permits() {
    let s = Server::start();
    let mut c = s.conn();
    let f = fence_of(&mut c, &weighted("sem", "a", 4, 2, &[]));
    assert_eq!(fence_of(&mut c, &weighted("sem", "a", 4, 2, &[])), f);
    let before = snapshot(&mut c, &["sem"]);
    for k in [1, 3] {
        assert_eq!(refused(&mut c, &weighted("sem", "a", 4, k, &[])), MISMATCH);
    }
    // No PERMITS is one permit.
    let plain = redis::cmd("DLOCK.ACQUIRE")
        .arg("sem")
        .arg("a")
        .arg(1000)
        .arg("LIMIT")
        .arg(4)
        .clone();
    assert_eq!(refused(&mut c, &plain), MISMATCH);
    assert_eq!(
        snapshot(&mut c, &["sem"]),
        before,
        "refusals change nothing"
    );
    // A one-permit hold retried with PERMITS 1 is the same hold, and the
    // other way round.
    let one = |token: &str, permits: Option<u32>| {
        let mut cmd = redis::cmd("DLOCK.ACQUIRE");
        cmd.arg("sem").arg(token).arg(1000).arg("LIMIT").arg(4);
        if let Some(k) = permits {
            cmd.arg("PERMITS").arg(k);
        }
        cmd
    };
    let g = fence_of(&mut c, &one("g", None));
    assert_eq!(fence_of(&mut c, &one("g", Some(1))), g);
    let b = fence_of(&mut c, &one("b", Some(1)));
    assert_eq!(fence_of(&mut c, &one("b", None)), b);
    assert_ne!(b, g);
}

#[test]
fn bad_arguments_are_refused_and_change_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    fence_of(&mut c, &weighted("sem", "a", 4, 2, &[]));
    let before = snapshot(&mut c, &["sem", "free"]);
    let acquire = |args: &[&str]| {
        let mut cmd = redis::cmd("DLOCK.ACQUIRE");
        cmd.arg("free").arg("t").arg(1000).arg(args);
        cmd
    };
    let cases: [(&[&str], &str); 9] = [
        (&["PERMITS", "2"], "ERR PERMITS needs LIMIT above 1"),
        (
            &["LIMIT", "1", "PERMITS", "1"],
            "ERR PERMITS needs LIMIT above 1",
        ),
        (
            &["LIMIT", "4", "PERMITS", "5"],
            "ERR PERMITS must be an integer from 1 to LIMIT",
        ),
        (
            &["LIMIT", "4", "PERMITS", "0"],
            "ERR PERMITS must be an integer from 1 to LIMIT",
        ),
        (
            &["LIMIT", "4", "PERMITS", "x"],
            "ERR PERMITS must be an integer from 1 to LIMIT",
        ),
        (
            &["LIMIT", "4", "PERMITS", "-2"],
            "ERR PERMITS must be an integer from 1 to LIMIT",
        ),
        (&["LIMIT", "4", "PERMITS"], "ERR syntax error"),
        (
            &["LIMIT", "4", "PERMITS", "2", "PERMITS", "2"],
            "ERR syntax error",
        ),
        (
            &["LIMIT", "4", "PERMITS", "2", "SHARED"],
            "ERR SHARED cannot be combined with LIMIT above 1",
        ),
    ];
    for (args, want) in cases {
        assert_eq!(refused(&mut c, &acquire(args)), want, "{args:?}");
    }
    // Another LIMIT than the held one, whatever the permits.
    assert_eq!(
        refused(&mut c, &weighted("sem", "b", 5, 1, &[])),
        "ERR the resource is held with LIMIT 4: requests must ask for the same LIMIT"
    );
    assert_eq!(snapshot(&mut c, &["sem", "free"]), before);
}
