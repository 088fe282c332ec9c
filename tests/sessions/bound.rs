//! `SESSION id` on `DLOCK.ACQUIRE` (plain, `SHARED`, `LIMIT`, `OWNER`) and
//! `DLOCK.MACQUIRE`: the hold has no deadline of its own, is shown with its
//! session, refuses `EXTEND`, leaves the session on `RELEASE`; a retry must
//! name the same session; an unknown session is `NOSESSION`.
use super::*;

/// A session `w` holding one hold of every kind, in this grant order:
/// `plain` (t1), `sh` (t2, shared), `sem` (t3, one of 3 permits), `own`
/// (t4, owner o), `m1`+`m2` (t5, a set), and `other` (t6) in db 1.
fn every_kind(c: &mut Connection) -> Vec<i64> {
    open(c, "w", 60_000);
    let fences = vec![
        req("plain", "t1").session("w").grant(c),
        req("sh", "t2").shared().session("w").grant(c),
        req("sem", "t3").limit(3).session("w").grant(c),
        req("own", "t4").owner("o").session("w").grant(c),
        mreq(&["m1", "m2"], "t5").session("w").grant(c),
    ];
    let _: () = redis::cmd("SELECT").arg(1).query(c).unwrap();
    req("other", "t6").session("w").grant(c);
    let _: () = redis::cmd("SELECT").arg(0).query(c).unwrap();
    fences
}

#[test]
fn every_kind_binds_to_a_session_with_no_deadline_of_its_own() {
    let s = Server::start();
    let mut c = s.conn();
    let fences = every_kind(&mut c);
    for (res, tok) in [
        ("plain", "t1"),
        ("sh", "t2"),
        ("sem", "t3"),
        ("own", "t4"),
        ("m1", "t5"),
        ("m2", "t5"),
    ] {
        assert_bound(&mut c, res, tok, "w");
    }
    let sh = assert_bound(&mut c, "sh", "t2", "w");
    assert_eq!((sh.mode.as_str(), sh.fence), ("shared", fences[1]));
    let own = assert_bound(&mut c, "own", "t4", "w");
    assert_eq!(own.owner, "o");
    match shown(&mut c, "plain") {
        Shown::List { kind, limit, .. } => assert_eq!((kind.as_str(), limit), ("rwlock", 1)),
        other => panic!("{other:?}"),
    }
    match shown(&mut c, "sem") {
        Shown::List { kind, limit, .. } => assert_eq!((kind.as_str(), limit), ("semaphore", 3)),
        other => panic!("{other:?}"),
    }
    assert_eq!(shown(&mut c, "m1").hold("t5").fence, fences[4]);
    assert_eq!(shown(&mut c, "m2").hold("t5").fence, fences[4]);
    let i = live(&mut c, "w");
    assert_eq!((i.holds, i.waits), (7, 0));
    assert_eq!(
        holds_all(&mut c, "w", None),
        [
            bound(0, "plain", "t1"),
            bound(0, "sh", "t2"),
            bound(0, "sem", "t3"),
            bound(0, "own", "t4"),
            bound(0, "m1", "t5"),
            bound(0, "m2", "t5"),
            bound(1, "other", "t6"),
        ]
    );
    assert_eq!(stat(&mut c, "session_holds"), 7);
    // Bound holds exclude others as any hold does.
    req("plain", "x").ttl("1000").busy(&mut c);
    req("m2", "x").ttl("1000").busy(&mut c);
    req("sh", "x").ttl("1000").shared().grant(&mut c);
}

#[test]
fn a_keepalive_leaves_every_hold_as_it_was() {
    let s = Server::start();
    let mut c = s.conn();
    every_kind(&mut c);
    let before: Vec<Shown> = ["plain", "sh", "sem", "own", "m1"]
        .iter()
        .map(|r| shown(&mut c, r))
        .collect();
    assert_eq!(keepalive(&mut c, "w", Some(90_000)), 90_000);
    assert_eq!(keepalive(&mut c, "w", None), 90_000);
    for (res, was) in ["plain", "sh", "sem", "own", "m1"].iter().zip(before) {
        assert_eq!(
            shown(&mut c, res),
            was,
            "{res}: a keep-alive writes no hold"
        );
        assert_eq!(pttl(&mut c, *res), -1, "{res}");
    }
}

#[test]
fn a_bound_retry_gets_the_same_fence() {
    let s = Server::start();
    let mut c = s.conn();
    let fences = every_kind(&mut c);
    assert_eq!(req("plain", "t1").session("w").grant(&mut c), fences[0]);
    // ttl_ms is not used, but a valid one is accepted.
    let retry = req("sh", "t2").ttl("5000").shared().session("w");
    assert_eq!(retry.grant(&mut c), fences[1]);
    let set = mreq(&["m1", "m2"], "t5").session("w");
    assert_eq!(set.grant(&mut c), fences[4]);
    assert_eq!(live(&mut c, "w").holds, 7, "a retry adds no hold");
    assert_bound(&mut c, "sh", "t2", "w");
}

#[test]
fn a_retry_under_another_session_or_none_is_refused_and_changes_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    every_kind(&mut c);
    open(&mut c, "v", 60_000);
    let free_fence = req("free", "u").ttl("60000").grant(&mut c);
    let names = ["plain", "sh", "m1", "m2", "free"];
    let before: Vec<Shown> = names.iter().map(|r| shown(&mut c, r)).collect();
    let grants = stat(&mut c, "grants");
    for r in [
        req("plain", "t1").session("v"),
        req("plain", "t1").ttl("60000"),
        req("sh", "t2").shared().session("v"),
        req("sh", "t2").shared().ttl("60000"),
        mreq(&["m1", "m2"], "t5").session("v"),
        mreq(&["m1", "m2"], "t5").ttl("60000"),
        req("free", "u").session("w"),
    ] {
        assert_eq!(r.error(&mut c), OTHER_SESSION, "{r:?}");
    }
    let after: Vec<Shown> = names.iter().map(|r| shown(&mut c, r)).collect();
    for ((res, b), a) in names.iter().zip(&before).zip(&after) {
        if *res == "free" {
            // Its lease ran on: only the ttl may differ.
            let (b, a) = (b.hold("u"), a.hold("u"));
            assert_eq!((a.fence, &a.session), (free_fence, &None));
            assert!(a.ttl <= b.ttl && a.ttl > 0, "{b:?} -> {a:?}");
        } else {
            assert_eq!(a, b, "{res} changed");
        }
    }
    assert_eq!(live(&mut c, "w").holds, 7);
    assert_eq!(live(&mut c, "v").holds, 0);
    assert_eq!(stat(&mut c, "grants"), grants, "no grant counted");
}

#[test]
fn extend_and_mextend_of_a_bound_hold_are_refused() {
    let s = Server::start();
    let mut c = s.conn();
    every_kind(&mut c);
    for (res, tok) in [("plain", "t1"), ("sh", "t2"), ("sem", "t3"), ("own", "t4")] {
        let e = err_text(&try_extend(&mut c, res, tok, 10_000).unwrap_err());
        assert_eq!(e, BOUND, "EXTEND {res}");
        assert_bound(&mut c, res, tok, "w");
    }
    let e = err_of(
        redis::cmd("DLOCK.MEXTEND")
            .arg(&["2", "m1", "m2", "t5", "10000"])
            .query(&mut c),
    );
    assert_eq!(e, BOUND);
    assert_bound(&mut c, "m1", "t5", "w");
    assert_bound(&mut c, "m2", "t5", "w");
}

#[test]
fn a_release_frees_a_bound_hold_and_it_leaves_the_session() {
    let s = Server::start();
    let mut c = s.conn();
    every_kind(&mut c);
    let waiter = req("plain", "next").ttl("60000").wait(0).spawn(&s);
    wait_queued(&mut c, "plain", 1);
    assert_eq!(release(&mut c, "plain", "t1"), 1);
    let fence = waiter.granted();
    assert_eq!(shown(&mut c, "plain").hold("next").fence, fence);
    assert_eq!(release(&mut c, "sh", "t2"), 1);
    assert_eq!(shown(&mut c, "sh"), Shown::Free);
    let n: i64 = redis::cmd("DLOCK.MRELEASE")
        .arg(&["2", "m1", "m2", "t5"])
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 2);
    assert!(!exists(&mut c, "m1") && !exists(&mut c, "m2"));
    assert_eq!(live(&mut c, "w").holds, 3);
    assert_eq!(
        holds_all(&mut c, "w", None),
        [
            bound(0, "sem", "t3"),
            bound(0, "own", "t4"),
            bound(1, "other", "t6"),
        ]
    );
    assert_eq!(stat(&mut c, "session_holds"), 3);
    // Released twice: nothing to release.
    assert_eq!(release(&mut c, "sh", "t2"), 0);
}

#[test]
fn an_unknown_session_is_refused_and_nothing_changes() {
    let s = Server::start();
    let mut c = s.conn();
    req("busy", "holder").ttl("60000").grant(&mut c);
    open(&mut c, "ended", 60_000);
    assert_eq!(close(&mut c, "ended"), 1);
    for id in ["never", "ended"] {
        for r in [
            req("free", "t").session(id),
            req("free", "t").shared().session(id),
            req("free", "t").limit(2).session(id),
            req("free", "t").owner("o").session(id),
            mreq(&["free", "free2"], "t").session(id),
            // A busy resource with WAIT: refused at once, never queued.
            req("busy", "t").wait(0).session(id),
            mreq(&["busy", "free"], "t").wait(0).session(id),
        ] {
            assert_eq!(r.error(&mut c), NOSESSION, "{r:?}");
        }
    }
    assert!(!exists(&mut c, "free") && !exists(&mut c, "free2"));
    assert_eq!(queued(&mut c, "busy"), 0);
    assert_eq!(blocked_clients(&mut c), 0);
}

#[test]
fn bad_session_options_are_refused() {
    let s = Server::start();
    let mut c = s.conn();
    open(&mut c, "w", 60_000);
    for ttl in ["abc", "-5", "1.5", "140737488355329"] {
        let e = req("r", "t").ttl(ttl).session("w").error(&mut c);
        assert_eq!(e, TTL_RANGE, "ttl {ttl:?}");
    }
    let twice = redis::cmd("DLOCK.ACQUIRE")
        .arg(&["r", "t", "0", "SESSION", "w", "SESSION", "w"])
        .query::<Value>(&mut c);
    assert_eq!(err_of(twice), SYNTAX);
    let bare = redis::cmd("DLOCK.ACQUIRE")
        .arg(&["r", "t", "0", "SESSION"])
        .query::<Value>(&mut c);
    assert_eq!(err_of(bare), SYNTAX);
    // ttl 0 is still refused without SESSION.
    let e = req("r", "t").error(&mut c);
    assert_eq!(e, TTL_RANGE);
    assert!(!exists(&mut c, "r"));
    assert_eq!(live(&mut c, "w").holds, 0);
}

#[test]
fn a_bound_waiter_is_counted_and_its_grant_is_bound() {
    let s = Server::start();
    let mut c = s.conn();
    open(&mut c, "w", 60_000);
    req("res", "holder").ttl("60000").grant(&mut c);
    let waiter = req("res", "tw").wait(0).session("w").spawn(&s);
    wait_queued(&mut c, "res", 1);
    assert_eq!(live(&mut c, "w").waits, 1);
    assert_eq!(live(&mut c, "w").holds, 0);
    assert_eq!(release(&mut c, "res", "holder"), 1);
    let fence = waiter.granted();
    let h = assert_bound(&mut c, "res", "tw", "w");
    assert_eq!(h.fence, fence);
    let i = live(&mut c, "w");
    assert_eq!((i.holds, i.waits), (1, 0));
    assert_eq!(holds_all(&mut c, "w", None), [bound(0, "res", "tw")]);
}

#[test]
fn a_bound_waiter_that_times_out_leaves_the_session() {
    let s = Server::start();
    let mut c = s.conn();
    open(&mut c, "w", 60_000);
    req("res", "holder").ttl("60000").grant(&mut c);
    let waiter = req("res", "tw").wait(100).session("w").spawn(&s);
    match waiter.outcome(RELEASED).0 {
        Ok(None) => {}
        other => panic!("a bound wait times out with nil, got {other:?}"),
    }
    let i = live(&mut c, "w");
    assert_eq!((i.holds, i.waits), (0, 0));
    assert_eq!(queued(&mut c, "res"), 0);
    assert_eq!(shown(&mut c, "res").tokens(), ["holder"]);
}

#[test]
fn a_bound_hold_deleted_by_an_admin_leaves_the_session_and_its_end_spares_the_new_holder() {
    let s = Server::start();
    let mut c = s.conn();
    open(&mut c, "w", 60_000);
    req("d", "t1").session("w").grant(&mut c);
    req("f", "t2").shared().session("w").grant(&mut c);
    req("kept", "t3").session("w").grant(&mut c);
    let n: i64 = redis::cmd("DEL").arg("d").query(&mut c).unwrap();
    assert_eq!(n, 1);
    let n: i64 = redis::cmd("UNLINK").arg("f").query(&mut c).unwrap();
    assert_eq!(n, 1);
    wait_until(SOON, "the deleted holds to leave the session", || {
        live(&mut c, "w").holds == 1
    });
    assert_eq!(holds_all(&mut c, "w", None), [bound(0, "kept", "t3")]);
    assert_eq!(stat(&mut c, "session_holds"), 1);
    // Others take the names; the session's end must not touch them.
    let fd = req("d", "x").ttl("60000").grant(&mut c);
    let ff = req("f", "t2").ttl("60000").shared().grant(&mut c);
    assert_eq!(close(&mut c, "w"), 1);
    wait_until(RELEASED, "kept released", || !exists(&mut c, "kept"));
    wait_no_session_holds(&mut c);
    assert_eq!(shown(&mut c, "d").hold("x").fence, fd);
    assert_eq!(
        shown(&mut c, "f").hold("t2").fence,
        ff,
        "same token, not bound"
    );
}

#[test]
fn flushall_removes_bound_holds_and_keeps_the_session_swapdb_moves_them() {
    let s = Server::start();
    let mut c = s.conn();
    open(&mut c, "w", 60_000);
    req("a", "t1").session("w").grant(&mut c);
    let _: () = redis::cmd("SELECT").arg(1).query(&mut c).unwrap();
    req("b", "t2").shared().session("w").grant(&mut c);
    let _: () = redis::cmd("SWAPDB").arg(0).arg(1).query(&mut c).unwrap();
    assert_eq!(
        holds_all(&mut c, "w", None),
        [bound(1, "a", "t1"), bound(0, "b", "t2")],
        "the holds moved with their databases"
    );
    assert_bound(&mut c, "a", "t1", "w");
    let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
    wait_until(SOON, "the flushed holds to leave the session", || {
        live(&mut c, "w").holds == 0
    });
    assert_eq!(holds_all(&mut c, "w", None), []);
    assert_eq!(stat(&mut c, "session_holds"), 0);
    // The session lives on and binds new holds.
    assert_eq!(keepalive(&mut c, "w", None), 60_000);
    req("a", "t3").session("w").grant(&mut c);
    assert_eq!(live(&mut c, "w").holds, 1);
}
