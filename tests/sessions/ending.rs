//! A session ends — its ttl passes, `CLOSE`, `KILL`, or the connection that
//! opened it with `BIND` closes — and every hold of every kind is released
//! as a `RELEASE` would, each resource handed to its queue; every bound
//! waiter is answered `NOSESSION`. The lock-delay keeps the resources of an
//! involuntary end; a `CLOSE` or a `RELEASE` never delays. Counters, gauges
//! and keyspace events follow.
use super::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    Ttl,
    Close,
    Kill,
    Disconnect,
}

impl End {
    /// Its counter, an index into `END_COUNTERS`.
    fn counter(self) -> usize {
        match self {
            End::Close => 1,
            End::Ttl => 2,
            End::Kill => 3,
            End::Disconnect => 4,
        }
    }
    /// The event published on the session's id.
    fn event(self) -> &'static str {
        match self {
            End::Close => "dlock.session.closed",
            End::Ttl => "dlock.session.expired",
            End::Kill => "dlock.session.killed",
            End::Disconnect => "dlock.session.disconnected",
        }
    }
}

/// Opens session `w` (60 s) with `extra`; for `Disconnect`, with `BIND` on
/// a connection of its own, which is returned.
fn open_for(s: &Server, c: &mut Connection, how: End, extra: &[&str]) -> Option<Connection> {
    if how == End::Disconnect {
        let mut owner = s.conn();
        let mut args = vec!["BIND"];
        args.extend_from_slice(extra);
        assert_eq!(open_with(&mut owner, "w", 60_000, &args), 1);
        assert_eq!(live(c, "w").bound, 1);
        Some(owner)
    } else {
        assert_eq!(open_with(c, "w", 60_000, extra), 1);
        None
    }
}

/// Ends `w` the way `how` says; the earliest instant the server can have
/// ended it.
fn end(c: &mut Connection, how: End, owner: Option<Connection>) -> Instant {
    let sent = Instant::now();
    match how {
        End::Ttl => {
            assert_eq!(keepalive(c, "w", Some(200)), 200);
            return sent + Duration::from_millis(200);
        }
        End::Close => assert_eq!(close(c, "w"), 1),
        End::Kill => assert_eq!(kill(c, "w"), 1),
        End::Disconnect => drop(owner.expect("the BIND connection")),
    }
    sent
}

/// Session `w` holds one hold of each kind, each with a request queued
/// behind it; a waiter bound to `w` queues on `bw` (held by another); an
/// unrelated session `v` holds `kept`. Then `w` ends `how`.
fn ends_releasing_every_hold(how: End) {
    let s = Server::start();
    let mut c = s.conn();
    let owner = open_for(&s, &mut c, how, &[]);
    open(&mut c, "v", 60_000);
    req("kept", "t7").session("v").grant(&mut c);
    req("p", "t1").session("w").grant(&mut c);
    req("sh", "t2").shared().session("w").grant(&mut c);
    req("sem", "t3").limit(2).session("w").grant(&mut c);
    req("sem", "x3").limit(2).ttl("60000").grant(&mut c);
    req("own", "t4").owner("o").session("w").grant(&mut c);
    mreq(&["m1", "m2"], "t5").session("w").grant(&mut c);
    req("bw", "other").ttl("60000").grant(&mut c);
    let waiters = [
        ("p", "wp", req("p", "wp")),
        ("sh", "wsh", req("sh", "wsh")),
        ("sem", "wsem", req("sem", "wsem").limit(2)),
        ("own", "wown", req("own", "wown").owner("o2")),
        ("m1", "wm", mreq(&["m1", "m2"], "wm")),
    ];
    let waiters: Vec<(&str, &str, Blocked)> = waiters
        .into_iter()
        .map(|(res, tok, r)| {
            let b = r.ttl("60000").wait(0).spawn(&s);
            wait_queued(&mut c, res, 1);
            (res, tok, b)
        })
        .collect();
    let bound_waiter = req("bw", "wb").wait(0).session("w").spawn(&s);
    wait_queued(&mut c, "bw", 1);
    let bound_set_waiter = mreq(&["bw", "bx"], "wb2").wait(0).session("w").spawn(&s);
    wait_queued(&mut c, "bw", 2);
    let i = live(&mut c, "w");
    assert_eq!((i.holds, i.waits), (6, 2));
    let mut sub = events(&s, &["w", "p", "sh"]);
    let before = end_counters(&mut c);

    end(&mut c, how, owner);

    assert_eq!(bound_waiter.error(), NOSESSION);
    assert_eq!(bound_set_waiter.error(), NOSESSION);
    for (res, tok, w) in &waiters {
        let fence = w.granted();
        assert_eq!(shown(&mut c, res).hold(tok).fence, fence, "{res}");
    }
    assert_eq!(shown(&mut c, "sem").tokens(), ["x3", "wsem"]);
    assert_eq!(shown(&mut c, "m2").tokens(), ["wm"]);
    assert_eq!(shown(&mut c, "bw").tokens(), ["other"]);
    assert_eq!(queued(&mut c, "bw"), 0, "the bound waiters left the queue");
    assert_eq!(shown(&mut c, "bx"), Shown::Free);
    wait_ended(&mut c, "w");
    wait_until(RELEASED, "w's holds released", || {
        stat(&mut c, "session_holds") == 1 && stat(&mut c, "session_holds_ending") == 0
    });
    assert_bound(&mut c, "kept", "t7", "v");
    assert_eq!(live(&mut c, "v").holds, 1);
    assert_eq!(stat(&mut c, "sessions"), 1);
    let after = end_counters(&mut c);
    let mut want = [0; 5];
    want[how.counter()] = 1;
    let delta: Vec<i64> = (0..5).map(|i| after[i] - before[i]).collect();
    assert_eq!(delta, want, "{END_COUNTERS:?}");
    wait_blocked_clients(&mut c, 0);

    let mut got = events_until(&mut sub, 1, "w");
    let handed =
        |got: &[(String, String)], key: &str| of(got, key).iter().any(|e| e == "dlock.handoff");
    while !handed(&got, "p") || !handed(&got, "sh") {
        got.push(next_event(&mut sub));
        assert!(got.len() < 100, "{got:?}");
    }
    assert_eq!(of(&got, "w"), [how.event()]);
    // As a release: `dlock.released`, then the handoff to the queue.
    for key in ["p", "sh"] {
        assert_eq!(of(&got, key), ["dlock.released", "dlock.handoff"], "{key}");
    }
}

#[test]
fn a_session_whose_ttl_passes_releases_every_hold() {
    ends_releasing_every_hold(End::Ttl);
}

#[test]
fn a_closed_session_releases_every_hold() {
    ends_releasing_every_hold(End::Close);
}

#[test]
fn a_killed_session_releases_every_hold() {
    ends_releasing_every_hold(End::Kill);
}

#[test]
fn a_bind_session_whose_connection_closes_releases_every_hold() {
    ends_releasing_every_hold(End::Disconnect);
}

/// The lock-delay under test: long enough that a loaded machine still sees
/// the delayed holds before it runs out.
const DELAY: u64 = 8000;

/// A session with `LOCKDELAY` ends involuntarily: each resource keeps its
/// hold (same token and fence, a deadline `DELAY` away, no session) and is
/// handed on only after it.
fn delays_after(how: End) {
    let s = Server::start();
    let mut c = s.conn();
    let owner = open_for(&s, &mut c, how, &["LOCKDELAY", &DELAY.to_string()]);
    let fp = req("p", "t1").session("w").grant(&mut c);
    let fsh = req("sh", "t2").shared().session("w").grant(&mut c);
    let wp = req("p", "wp").ttl("60000").wait(0).spawn(&s);
    wait_queued(&mut c, "p", 1);
    let wsh = req("sh", "wsh").ttl("60000").wait(0).spawn(&s);
    wait_queued(&mut c, "sh", 1);

    let earliest = end(&mut c, how, owner);

    wait_until(RELEASED, "the holds to take the lock-delay", || {
        pttl(&mut c, "p") != -1 && pttl(&mut c, "sh") != -1
    });
    for (res, tok, fence) in [("p", "t1", fp), ("sh", "t2", fsh)] {
        let p = pttl(&mut c, res);
        assert!(p > 0 && p <= DELAY as i64, "{res}: PTTL {p}");
        let h = shown(&mut c, res).hold(tok);
        // Held by nobody: under its ended session, until the delay ends.
        assert_eq!(
            (h.fence, h.session.as_deref()),
            (fence, Some("w")),
            "{res}: {h:?}"
        );
        assert!(h.ttl > 0 && h.ttl <= DELAY as i64, "{res}: {h:?}");
    }
    wp.assert_pending();
    wsh.assert_pending();
    assert_eq!(session_info(&mut c, "w"), None);
    let within = Duration::from_millis(DELAY) + RELEASED;
    for w in [&wp, &wsh] {
        let (_, at) = w.granted_within(within);
        let waited = at.duration_since(earliest);
        assert!(
            waited + Duration::from_millis(50) >= Duration::from_millis(DELAY),
            "{how:?}: handed on {waited:?} after the end, before the lock-delay"
        );
    }
}

#[test]
fn a_ttl_end_keeps_the_resources_for_the_lock_delay() {
    delays_after(End::Ttl);
}

#[test]
fn a_kill_keeps_the_resources_for_the_lock_delay() {
    delays_after(End::Kill);
}

#[test]
fn a_closed_connection_keeps_the_resources_for_the_lock_delay() {
    delays_after(End::Disconnect);
}

#[test]
fn a_close_never_delays() {
    let s = Server::start();
    let mut c = s.conn();
    open_with(&mut c, "w", 60_000, &["LOCKDELAY", "60000"]);
    req("p", "t1").session("w").grant(&mut c);
    req("sh", "t2").shared().session("w").grant(&mut c);
    let wp = req("p", "wp").ttl("60000").wait(0).spawn(&s);
    let wsh = req("sh", "wsh").ttl("60000").wait(0).spawn(&s);
    wait_queued(&mut c, "p", 1);
    wait_queued(&mut c, "sh", 1);
    assert_eq!(close(&mut c, "w"), 1);
    // Granted well within the 60 s the delay would take.
    wp.granted();
    wsh.granted();
}

#[test]
fn a_release_of_a_bound_hold_never_delays() {
    let s = Server::start();
    let mut c = s.conn();
    open_with(&mut c, "w", 60_000, &["LOCKDELAY", "60000"]);
    req("p", "t1").session("w").grant(&mut c);
    let wp = req("p", "wp").ttl("60000").wait(0).spawn(&s);
    wait_queued(&mut c, "p", 1);
    assert_eq!(release(&mut c, "p", "t1"), 1);
    let fence = wp.granted();
    assert_eq!(shown(&mut c, "p").hold("wp").fence, fence);
    req("q", "t2").session("w").grant(&mut c);
    assert_eq!(release(&mut c, "q", "t2"), 1);
    assert_eq!(shown(&mut c, "q"), Shown::Free);
}

#[test]
fn a_bind_session_still_ends_at_its_ttl() {
    let s = Server::start();
    let mut c = s.conn();
    let mut owner = s.conn();
    assert_eq!(open_with(&mut owner, "w", 60_000, &["BIND"]), 1);
    req("p", "t1").session("w").grant(&mut c);
    assert_eq!(keepalive(&mut c, "w", Some(200)), 200);
    wait_ended(&mut c, "w");
    wait_until(RELEASED, "p released", || !exists(&mut c, "p"));
    assert_eq!(end_counters(&mut c), [1, 0, 1, 0, 0], "{END_COUNTERS:?}");
    // The owner's connection lives on, and its close later ends nothing.
    ping(&mut owner);
    drop(owner);
    open(&mut c, "later", 60_000);
    assert_eq!(stat(&mut c, "sessions_disconnected"), 0);
}

#[test]
fn counters_and_gauges_follow_sessions_and_holds() {
    let s = Server::start();
    let mut c = s.conn();
    for id in ["a", "b", "c"] {
        open(&mut c, id, 60_000);
    }
    assert_eq!(open_with(&mut c, "a", 60_000, &[]), 0);
    for (res, id) in [
        ("a1", "a"),
        ("a2", "a"),
        ("b1", "b"),
        ("b2", "b"),
        ("b3", "b"),
    ] {
        req(res, "t").session(id).grant(&mut c);
    }
    assert_eq!(stat(&mut c, "sessions"), 3);
    assert_eq!(stat(&mut c, "session_holds"), 5);
    assert_eq!(release(&mut c, "a1", "t"), 1);
    assert_eq!(stat(&mut c, "session_holds"), 4);
    assert_eq!(close(&mut c, "b"), 1);
    assert_eq!(stat(&mut c, "sessions"), 2);
    wait_until(RELEASED, "b's holds released", || {
        stat(&mut c, "session_holds") == 1 && stat(&mut c, "session_holds_ending") == 0
    });
    assert_eq!(kill(&mut c, "c"), 1);
    assert_eq!(end_counters(&mut c), [3, 1, 0, 1, 0], "{END_COUNTERS:?}");
    assert_eq!(stat(&mut c, "sessions"), 1);
    for res in ["b1", "b2", "b3"] {
        assert!(!exists(&mut c, res), "{res}");
    }
}

#[test]
fn the_end_of_a_session_is_published_in_db_0_whatever_the_db() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sub = events(&s, &["w"]);
    let _: () = redis::cmd("SELECT").arg(3).query(&mut c).unwrap();
    open(&mut c, "w", 60_000);
    req("r", "t").session("w").grant(&mut c);
    assert_eq!(close(&mut c, "w"), 1);
    for want in ["dlock.session.opened", "dlock.session.closed"] {
        let got = next_event(&mut sub);
        assert_eq!((got.0.as_str(), got.1.as_str()), ("w", want));
    }
    wait_until(RELEASED, "r released in db 3", || !exists(&mut c, "r"));
}
