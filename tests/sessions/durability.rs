//! Sessions and their bound holds through `DEBUG RELOAD`, an RDB restart
//! (and its quarantine), the AOF with and without RDB preamble, a replica,
//! its promotion, and `DUMP`/`RESTORE`/`MIGRATE` to a server without the
//! session (where a bound hold becomes an ordinary lease).
use super::*;

/// Session `w` (ttl 60 s, lock-delay 1500) with `p` (t1), `sh` (t2,
/// shared), `m1`+`m2` (t3); session `v` with `q` (t4).
fn populate(c: &mut Connection) -> Vec<i64> {
    assert_eq!(open_with(c, "w", 60_000, &["LOCKDELAY", "1500"]), 1);
    open(c, "v", 60_000);
    vec![
        req("p", "t1").session("w").grant(c),
        req("sh", "t2").shared().session("w").grant(c),
        mreq(&["m1", "m2"], "t3").session("w").grant(c),
        req("q", "t4").session("v").grant(c),
    ]
}

/// What must come back: each session's INFO (but its ttl), its holds, and
/// each resource as shown.
#[derive(Debug, PartialEq)]
struct State {
    sessions: Vec<SessionInfo>,
    holds: Vec<Vec<Bound>>,
    shown: Vec<Shown>,
}

fn state(c: &mut Connection, ids: &[&str], resources: &[&str]) -> State {
    State {
        sessions: ids
            .iter()
            .map(|id| SessionInfo {
                ttl: 0,
                ..live(c, id)
            })
            .collect(),
        // As a set: a replay binds the holds again in the order of the
        // rewritten file (the order itself is checked in paging.rs).
        holds: ids
            .iter()
            .map(|id| {
                let mut h = holds_all(c, id, None);
                h.sort_by(|a, b| (a.db, &a.resource).cmp(&(b.db, &b.resource)));
                h
            })
            .collect(),
        shown: resources.iter().map(|r| shown(c, r)).collect(),
    }
}

const RESOURCES: [&str; 5] = ["p", "sh", "m1", "m2", "q"];

#[test]
fn debug_reload_keeps_sessions_and_bound_holds() {
    let s = no_quarantine().start();
    let mut c = s.conn();
    populate(&mut c);
    let before = state(&mut c, &["w", "v"], &RESOURCES);
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut c).unwrap();
    assert_eq!(state(&mut c, &["w", "v"], &RESOURCES), before);
    for res in RESOURCES {
        assert_eq!(pttl(&mut c, res), -1, "{res}");
    }
    assert_eq!(stat(&mut c, "sessions"), 2);
    assert_eq!(stat(&mut c, "session_holds"), 5);
    assert_eq!(keepalive(&mut c, "w", None), 60_000);
    assert_eq!(close(&mut c, "w"), 1);
    wait_until(RELEASED, "w's holds released", || {
        ["p", "sh", "m1", "m2"].iter().all(|r| !exists(&mut c, *r))
    });
    assert_bound(&mut c, "q", "t4", "v");
}

#[test]
fn a_crash_that_quarantines_ends_every_session_and_refuses_new_ones() {
    let mut s = Server::builder()
        .arg("--dlock.restart-quarantine")
        .arg("60000")
        .start();
    let mut c = s.conn();
    populate(&mut c);
    let _: () = redis::cmd("SAVE").query(&mut c).unwrap();
    let mut c = s.crash_and_restart();
    assert!(
        stat(&mut c, "quarantine_ms_left") > 0,
        "a crash quarantines"
    );
    // What the sessions did may be lost (a grant after the last save): no
    // session is vouched for, so each ends and its client learns it.
    wait_until(RELEASED, "every session to end", || {
        stat(&mut c, "sessions") == 0
    });
    assert_eq!(
        refused(&mut c, &session_cmd("KEEPALIVE", &["w"])),
        NOSESSION
    );
    wait_no_session_holds(&mut c);
    // Nothing new during the quarantine: no session, no hold.
    let e = refused(&mut c, &session_cmd("OPEN", &["new", "60000"]));
    assert!(e.starts_with("QUARANTINE"), "{e}");
    assert_eq!(session_info(&mut c, "new"), None);
    // Lifted, new sessions open again and the resources of an ended
    // session without a lock-delay are free.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("dlock.restart-quarantine")
        .arg("off")
        .query(&mut c)
        .unwrap();
    wait_until(SOON, "the quarantine to lift", || {
        stat(&mut c, "quarantine_ms_left") == 0
    });
    open(&mut c, "new", 60_000);
    req("q", "t9").session("new").grant(&mut c);
}

#[test]
fn a_session_loaded_from_rdb_ends_at_its_ttl() {
    let mut s = no_quarantine().start();
    let mut c = s.conn();
    populate(&mut c);
    assert_eq!(keepalive(&mut c, "w", Some(3000)), 3000);
    let deadline = live(&mut c, "w").deadline;
    let _: () = redis::cmd("SAVE").query(&mut c).unwrap();
    s.restart();
    let mut c = s.conn();
    wait_until(RELEASED, "w to end", || session_info(&mut c, "w").is_none());
    assert!(now_ms() + 5 >= deadline, "w ended before its deadline");
    wait_until(RELEASED, "w's holds released", || {
        ["p", "sh", "m1", "m2"].iter().all(|r| !exists(&mut c, *r))
    });
    assert_eq!(stat(&mut c, "sessions_expired"), 1);
    assert_bound(&mut c, "q", "t4", "v");
}

fn aof_keeps_sessions(preamble: &str) {
    let mut s = Server::builder()
        .aof("always")
        .arg("--aof-use-rdb-preamble")
        .arg(preamble)
        .start();
    let mut c = s.conn();
    populate(&mut c);
    rewrite_aof(&mut c);
    // After the rewrite: a session opens, one ends, one is kept alive.
    open(&mut c, "late", 60_000);
    req("l1", "t5").session("late").grant(&mut c);
    assert_eq!(close(&mut c, "v"), 1);
    wait_until(RELEASED, "q released", || !exists(&mut c, "q"));
    assert_eq!(keepalive(&mut c, "w", Some(90_000)), 90_000);
    let resources = ["p", "sh", "m1", "m2", "q", "l1"];
    let before = state(&mut c, &["w", "late"], &resources);
    let mut c = s.crash_and_restart();
    assert_eq!(state(&mut c, &["w", "late"], &resources), before);
    assert_eq!(session_info(&mut c, "v"), None);
    assert_eq!(stat(&mut c, "sessions"), 2);
    assert_eq!(pttl(&mut c, "p"), -1);
    // And the AOF goes on from there.
    assert_eq!(close(&mut c, "late"), 1);
    wait_until(RELEASED, "l1 released", || !exists(&mut c, "l1"));
    let mut c = s.crash_and_restart();
    assert_eq!(session_info(&mut c, "late"), None);
    assert!(!exists(&mut c, "l1"));
    assert!(session_info(&mut c, "w").is_some());
}

#[test]
fn the_aof_with_rdb_preamble_keeps_sessions() {
    aof_keeps_sessions("yes");
}

#[test]
fn the_aof_without_rdb_preamble_keeps_sessions() {
    aof_keeps_sessions("no");
}

#[test]
fn a_replica_shows_sessions_and_bound_holds_until_they_end() {
    let m = Server::start();
    let r = Server::builder().replica_of(&m).start();
    r.wait_for_sync(SOON);
    let mut mc = m.conn();
    let mut rc = r.conn();
    populate(&mut mc);
    wait_replica(&mut mc);
    assert_eq!(
        state(&mut rc, &["w", "v"], &RESOURCES),
        state(&mut mc, &["w", "v"], &RESOURCES)
    );
    assert_eq!(list_all(&mut rc, None, None), ["v", "w"]);
    assert_bound(&mut rc, "sh", "t2", "w");
    // A keep-alive moves the replica's deadline to the master's.
    keepalive(&mut mc, "w", Some(90_000));
    wait_replica(&mut mc);
    assert_eq!(live(&mut rc, "w").deadline, live(&mut mc, "w").deadline);
    // A waiter on the master gets p when w ends; the replica follows.
    let waiter = req("p", "W").ttl("60000").wait(0).spawn(&m);
    wait_queued(&mut mc, "p", 1);
    assert_eq!(close(&mut mc, "w"), 1);
    let fence = waiter.granted();
    wait_until(RELEASED, "w's end on the replica", || {
        session_info(&mut rc, "w").is_none()
            && ["sh", "m1", "m2"].iter().all(|k| !exists(&mut rc, *k))
            && shown(&mut rc, "p").tokens() == ["W"]
    });
    assert_eq!(shown(&mut rc, "p").hold("W").fence, fence);
    assert_bound(&mut rc, "q", "t4", "v");
    assert_eq!(list_all(&mut rc, None, None), ["v"]);
}

#[test]
fn a_promoted_replica_ends_the_session_at_its_ttl() {
    let mut m = Server::start();
    // Without its quarantine: a promotion that quarantines ends every
    // session at once (`delay_and_loss.rs` has the restart's case).
    let r = Server::builder()
        .arg("--dlock.restart-quarantine")
        .arg("off")
        .replica_of(&m)
        .start();
    r.wait_for_sync(SOON);
    let mut mc = m.conn();
    // Bound on the master: after a failover it still ends at its ttl.
    let mut owner = m.conn();
    assert_eq!(open_with(&mut owner, "w", 60_000, &["BIND"]), 1);
    req("p", "t1").session("w").grant(&mut mc);
    req("sh", "t2").shared().session("w").grant(&mut mc);
    open(&mut mc, "v", 600_000);
    req("q", "t4").session("v").grant(&mut mc);
    assert_eq!(keepalive(&mut mc, "w", Some(3000)), 3000);
    let deadline = live(&mut mc, "w").deadline;
    wait_replica(&mut mc);
    m.kill9();
    drop(owner);
    let mut p = r.conn();
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut p)
        .unwrap();
    wait_until(RELEASED, "w to end", || session_info(&mut p, "w").is_none());
    assert!(now_ms() + 5 >= deadline, "w ended before its deadline");
    wait_until(RELEASED, "w's holds released", || {
        !exists(&mut p, "p") && !exists(&mut p, "sh")
    });
    assert_eq!(stat(&mut p, "sessions_expired"), 1);
    assert_bound(&mut p, "q", "t4", "v");
    assert!(
        keepalive(&mut p, "v", None) > 0,
        "v lives on, kept alive here"
    );
}

#[test]
fn a_bound_hold_restored_elsewhere_is_a_lease_ending_at_the_sessions_deadline() {
    let a = Server::start();
    let b = Server::start();
    let mut ac = a.conn();
    let mut bc = b.conn();
    open(&mut ac, "w", 60_000);
    let fp = req("p", "t1").session("w").grant(&mut ac);
    let fsh = req("sh", "t2").shared().session("w").grant(&mut ac);
    let fmig = req("mig", "t3").session("w").grant(&mut ac);
    let fq = req("q", "t4").session("w").grant(&mut ac);
    // Dumped 3 s before the session's deadline.
    keepalive(&mut ac, "w", Some(3000));
    let deadline = live(&mut ac, "w").deadline;
    for res in ["p", "sh", "q"] {
        let payload = common::dump::dump(&mut ac, res);
        common::dump::restore(&mut bc, res, 0, &payload).unwrap();
    }
    let _: Value = redis::cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(b.port())
        .arg("mig")
        .arg(0)
        .arg(5000)
        .query(&mut ac)
        .unwrap();
    for (res, tok, fence) in [
        ("p", "t1", fp),
        ("sh", "t2", fsh),
        ("mig", "t3", fmig),
        ("q", "t4", fq),
    ] {
        let h = shown(&mut bc, res).hold(tok);
        assert_eq!((h.fence, &h.session), (fence, &None), "{res}: {h:?}");
        assert!(h.ttl > 0 && h.ttl <= 3000, "{res}: {h:?}");
        let at: i64 = redis::cmd("PEXPIRETIME").arg(res).query(&mut bc).unwrap();
        if res == "sh" {
            // A resource of several holds may keep no key TTL: its holds
            // end at their own deadlines (tests/holds/durable/payloads.rs).
            assert!(at == deadline || at == -1, "{res}: PEXPIRETIME {at}");
        } else {
            assert_eq!(
                at, deadline,
                "{res}: a plain lease ends at the session's deadline"
            );
        }
    }
    assert_eq!(shown(&mut bc, "sh").hold("t2").mode, "shared");
    // An ordinary lease: EXTEND works there; the source is unchanged.
    assert_eq!(extend(&mut bc, "p", "t1", 60_000), 1);
    assert!(pttl(&mut bc, "p") > 30_000);
    assert_bound(&mut ac, "p", "t1", "w");
    assert!(!exists(&mut ac, "mig"));
    // The others end at the session's deadline, whatever happens to it
    // on the source.
    keepalive(&mut ac, "w", Some(60_000));
    wait_until(RELEASED, "the restored leases to end", || {
        ["sh", "mig", "q"]
            .iter()
            .all(|r| shown(&mut bc, r) == Shown::Free)
    });
    assert!(
        now_ms() + 5 >= deadline,
        "ended before the session's deadline"
    );
    assert_eq!(shown(&mut bc, "p").hold("t1").fence, fp);
}

#[test]
fn a_bound_hold_restored_where_its_session_exists_stays_bound() {
    let a = Server::start();
    let b = Server::start();
    let mut ac = a.conn();
    let mut bc = b.conn();
    open(&mut ac, "w", 30_000);
    let fence = req("p", "t1").session("w").grant(&mut ac);
    open(&mut bc, "w", 60_000);
    let payload = common::dump::dump(&mut ac, "p");
    common::dump::restore(&mut bc, "p2", 0, &payload).unwrap();
    assert_eq!(assert_bound(&mut bc, "p2", "t1", "w").fence, fence);
    assert_eq!(holds_all(&mut bc, "w", None), [bound(0, "p2", "t1")]);
    assert_eq!(close(&mut bc, "w"), 1);
    wait_until(RELEASED, "p2 released with b's session", || {
        !exists(&mut bc, "p2")
    });
    assert_bound(&mut ac, "p", "t1", "w");
}
