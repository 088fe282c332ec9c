//! What `RELEASE ... TO` grants, and what it refuses without changing
//! anything.
use super::*;
use crate::common::dump::digest;

#[test]
fn a_deep_target_is_granted_and_the_head_keeps_its_place() {
    let s = Server::start();
    let mut c = s.conn();
    let released = grant(&mut c, "r", "h", 60_000);
    let a = queue(&s, &mut c, "r", "a", &[]);
    let b = queue(&s, &mut c, "r", "b", &[]);
    let t = queue(&s, &mut c, "r", "t", &[]);
    let last = counter(&mut c, "last_fence");
    assert_eq!(release_to(&mut c, "r", "h", "t"), 1);
    let (fence, _) = t.granted();
    // The next fence drawn after the releaser's: no grant between.
    assert!(fence > released && fence > last, "{fence} after {last}");
    assert_eq!(counter(&mut c, "last_fence"), fence);
    assert_eq!(holders(&mut c, "r"), [("t".to_string(), fence)]);
    assert_eq!(waiting(&mut c, "r"), ["a", "b"]);
    assert!(a.pending() && b.pending());
    assert_eq!(counter(&mut c, "handovers"), 1);
    assert_eq!(counter(&mut c, "handoffs"), 1);
    assert_eq!(counter(&mut c, "releases"), 1);
    // The queue goes on in its order.
    assert_eq!(release(&mut c, "r", "t"), 1);
    let (_, _) = a.granted();
    assert!(b.pending());
    assert_eq!(counter(&mut c, "handovers"), 1);
}

#[test]
fn readers_that_fit_are_granted_in_the_same_step() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "rw", "w", 60_000);
    let r1 = queue(&s, &mut c, "rw", "r1", &["SHARED"]);
    let w2 = queue(&s, &mut c, "rw", "w2", &[]);
    let r3 = queue(&s, &mut c, "rw", "r3", &["SHARED"]);
    let r4 = queue(&s, &mut c, "rw", "r4", &["SHARED"]);
    assert_eq!(release_to(&mut c, "rw", "w", "r3"), 1);
    let (f3, _) = r3.granted();
    let (f1, _) = r1.granted();
    // The target's fence first; the writer keeps its place, and the
    // reader behind it stays behind it.
    assert!(f3 < f1, "{f3} {f1}");
    let mut held = holders(&mut c, "rw");
    held.sort();
    assert_eq!(held, [("r1".to_string(), f1), ("r3".to_string(), f3)]);
    assert_eq!(waiting(&mut c, "rw"), ["w2", "r4"]);
    assert!(w2.pending() && r4.pending());
    assert_eq!(counter(&mut c, "handovers"), 1);
    assert_eq!(counter(&mut c, "handoffs"), 2);
}

#[test]
fn a_semaphore_permit_is_handed_over() {
    let s = Server::start();
    let mut c = s.conn();
    let permit = ["LIMIT", "2"];
    for t in ["x", "y"] {
        let mut cmd = redis::cmd("DLOCK.ACQUIRE");
        cmd.arg("sem").arg(t).arg(60_000).arg(&permit);
        let _: i64 = cmd.query(&mut c).unwrap();
    }
    let a = queue(&s, &mut c, "sem", "a", &permit);
    let b = queue(&s, &mut c, "sem", "b", &permit);
    assert_eq!(release_to(&mut c, "sem", "x", "b"), 1);
    let (fb, _) = b.granted();
    let held: Vec<String> = holders(&mut c, "sem").into_iter().map(|h| h.0).collect();
    assert_eq!(held, ["y", "b"]);
    assert!(fb > 0 && a.pending());
    assert_eq!(waiting(&mut c, "sem"), ["a"]);
}

#[test]
fn a_token_queued_twice_is_answered_by_the_one_grant() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "r", "h", 60_000);
    let a = queue(&s, &mut c, "r", "a", &[]);
    let t1 = queue(&s, &mut c, "r", "t", &[]);
    let t2 = queue(&s, &mut c, "r", "t", &[]);
    assert_eq!(release_to(&mut c, "r", "h", "t"), 1);
    let (f1, _) = t1.granted();
    let (f2, _) = t2.granted();
    assert_eq!(f1, f2);
    assert_eq!(waiting(&mut c, "r"), ["a"]);
    assert!(a.pending());
}

/// A second entry of a token that asks for another session or `MAXHOLD`
/// (or none) than the entry granted is refused as a same-token retry of
/// that shape is, never handed a grant it did not ask for: a hold its
/// session does not keep, or a lease capped below what it asked.
#[test]
fn a_token_queued_twice_with_other_terms_is_refused_not_answered() {
    let s = Server::start();
    let mut c = s.conn();
    let _: i64 = redis::cmd("DLOCK.SESSION")
        .arg("OPEN")
        .arg("s1")
        .arg(60_000)
        .query(&mut c)
        .unwrap();
    let shapes: [(&[&str], &[&str], &str); 4] = [
        (&[], &["SESSION", "s1"], "another session"),
        (&["SESSION", "s1"], &[], "another session"),
        (&[], &["MAXHOLD", "5000"], "another MAXHOLD"),
        (&["MAXHOLD", "5000"], &[], "another MAXHOLD"),
    ];
    for (handover, (first, second, refusal)) in [false, true]
        .into_iter()
        .flat_map(|h| shapes.iter().map(move |s| (h, s)))
    {
        let res = format!("r-{handover}-{first:?}-{second:?}");
        grant(&mut c, &res, "h", 60_000);
        let t1 = queue(&s, &mut c, &res, "t", first);
        let t2 = queue(&s, &mut c, &res, "t", second);
        let released = if handover {
            release_to(&mut c, &res, "h", "t")
        } else {
            release(&mut c, &res, "h")
        };
        assert_eq!(released, 1);
        let (f1, _) = t1.granted();
        match t2.reply() {
            (Err(e), _) => assert!(e.to_string().contains(refusal), "{res}: {e}"),
            (other, _) => panic!("{res}: the second entry got {other:?}, not a refusal"),
        }
        assert_eq!(holders(&mut c, &res), [("t".to_string(), f1)]);
        assert!(waiting(&mut c, &res).is_empty());
    }
}

/// Everything a refused handover must leave as it was: each key's value,
/// holders and queue, and the counters.
fn snapshot(c: &mut Connection, keys: &[&str]) -> Vec<String> {
    let mut out: Vec<String> = keys
        .iter()
        .flat_map(|k| {
            [
                digest(c, k),
                format!("{:?}", holders(c, k)),
                format!("{:?}", waiting(c, k)),
            ]
        })
        .collect();
    out.extend(COUNTERS.iter().map(|n| format!("{n} {}", counter(c, n))));
    out
}

#[test]
fn a_release_of_nothing_hands_nothing_over() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "r", "h", 60_000);
    let t = queue(&s, &mut c, "r", "t", &[]);
    let before = snapshot(&mut c, &["r"]);
    assert_eq!(release_to(&mut c, "r", "nobody", "t"), 0);
    assert_eq!(release_to(&mut c, "r", "nobody", "nobody-either"), 0);
    assert_eq!(release_to(&mut c, "free", "h", "t"), 0);
    assert_eq!(snapshot(&mut c, &["r"]), before);
    assert!(t.pending());
}

#[test]
fn every_error_changes_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    // A plain lock, readers with a writer waiting, a set waiting.
    grant(&mut c, "r", "h", 60_000);
    let _a = queue(&s, &mut c, "r", "a", &[]);
    for t in ["x", "y"] {
        let mut cmd = redis::cmd("DLOCK.ACQUIRE");
        cmd.arg("rw").arg(t).arg(60_000).arg("SHARED");
        let _: i64 = cmd.query(&mut c).unwrap();
    }
    let _w = queue(&s, &mut c, "rw", "w", &[]);
    grant(&mut c, "{m}1", "h", 60_000);
    let mut set = redis::cmd("DLOCK.MACQUIRE");
    set.arg(2).arg("{m}1").arg("{m}2").arg("set").arg(60_000);
    set.arg("WAIT").arg(0);
    let _set = Waiter::send(&s, set);
    wait_until(SOON, "the set queued", || {
        waiting(&mut c, "{m}1") == ["set"]
    });
    let _: () = redis::cmd("SET").arg("str").arg("v").query(&mut c).unwrap();
    let keys = ["r", "rw", "{m}1", "{m}2", "str"];
    let before = snapshot(&mut c, &keys[..4]);
    let cases: [(&[&str], &str); 9] = [
        (
            &["r", "h", "TO", "nobody"],
            "NOTWAITING dlock: waiter_token is not queued on the resource (or its WAIT ran \
             out); nothing was released",
        ),
        // Queued, but on another resource.
        (
            &["r", "h", "TO", "w"],
            "NOTWAITING dlock: waiter_token is not queued on the resource (or its WAIT ran \
             out); nothing was released",
        ),
        (
            &["rw", "x", "TO", "w"],
            "NOTREADY dlock: the waiter does not fit while the resource's other holds stay; \
             nothing was released",
        ),
        (
            &["{m}1", "h", "TO", "set"],
            "ERR TO cannot name a set request (DLOCK.MACQUIRE); nothing was released",
        ),
        (
            &["r", "h", "TO", "h"],
            "ERR TO must name another token than the releaser's",
        ),
        (&["r", "h", "TO", ""], "ERR token must not be empty"),
        (&["r", "h", "TOO", "a"], "ERR syntax error"),
        (
            &["r", "h", "TO"],
            "ERR wrong number of arguments for 'dlock.release' command",
        ),
        (
            &["str", "h", "TO", "a"],
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ),
    ];
    for (args, want) in cases {
        let got = err_of(redis::cmd("DLOCK.RELEASE").arg(args).query(&mut c));
        assert_eq!(got, want, "{args:?}");
        assert_eq!(snapshot(&mut c, &keys[..4]), before, "{args:?}");
    }
    let long = "x".repeat((1 << 20) + 1);
    let got = err_of(
        redis::cmd("DLOCK.RELEASE")
            .arg("r")
            .arg("h")
            .arg("TO")
            .arg(&long)
            .query(&mut c),
    );
    assert!(got.starts_with("ERR token is longer than"), "{got}");
    assert_eq!(snapshot(&mut c, &keys[..4]), before);
    // The holds stayed: the releases go through.
    assert_eq!(release(&mut c, "r", "h"), 1);
    assert_eq!(release(&mut c, "rw", "x"), 1);
}
