//! The queue of a multi-hold resource: a run of shared waiters granted
//! together, an owner's queued requests granted with its first one, mixed
//! plain and shared queues, waiters that leave, `DEL`, a shortened hold,
//! replicas.
use super::*;

const TTL: u64 = 60_000;

#[test]
fn a_run_of_shared_waiters_at_the_head_is_granted_together() {
    let s = Server::start();
    let mut c = s.conn();
    let fw = grant(&mut c, "q", "w", TTL);
    let mut queued = Vec::new();
    for (n, a) in [
        acq("q", "r1", TTL).shared(),
        acq("q", "r2", TTL).shared(),
        acq("q", "r3", TTL).shared().owner("R"),
        acq("q", "w2", TTL),
        acq("q", "r4", TTL).shared(),
    ]
    .into_iter()
    .enumerate()
    {
        queued.push(a.wait(20_000).spawn(&s.url()));
        wait_queue(&mut c, "q", n as i64 + 1);
    }
    assert_eq!(release(&mut c, "q", "w"), 1);
    // The run ends at the writer: r4 waits behind it.
    let fences: Vec<i64> = queued[..3].iter().map(|p| p.granted().0).collect();
    assert!(fw < fences[0] && fences[0] < fences[1] && fences[1] < fences[2]);
    let h = holds(&mut c, "q");
    assert_eq!((h.tokens(), h.waiters), (vec!["r1", "r2", "r3"], 2));
    thread::sleep(Duration::from_millis(100));
    queued[3].assert_pending();
    queued[4].assert_pending();
    for t in ["r1", "r2", "r3"] {
        assert_eq!(release(&mut c, "q", t), 1);
    }
    let (f2, _, mut wc) = queued[3].granted();
    assert!(f2 > fences[2]);
    queued[4].assert_pending();
    assert_eq!(release(&mut wc, "q", "w2"), 1);
    assert!(queued[4].granted().0 > f2);
}

#[test]
fn an_owner_queued_twice_is_granted_both_with_one_fence() {
    let s = Server::start();
    let mut c = s.conn();
    acq("q", "a0", TTL).owner("A").grant(&mut c);
    let b1 = acq("q", "b1", TTL)
        .shared()
        .owner("B")
        .wait(20_000)
        .spawn(&s.url());
    wait_queue(&mut c, "q", 1);
    let w = acq("q", "c", TTL).wait(20_000).spawn(&s.url());
    wait_queue(&mut c, "q", 2);
    let b2 = acq("q", "b2", TTL).owner("B").wait(20_000).spawn(&s.url());
    wait_queue(&mut c, "q", 3);
    assert_eq!(release(&mut c, "q", "a0"), 1);
    // B holds once b1 is granted: its second request passes the writer.
    let (f1, ..) = b1.granted();
    assert_eq!(b2.granted().0, f1);
    let h = holds(&mut c, "q");
    assert_eq!((h.tokens(), h.waiters), (vec!["b1", "b2"], 1));
    assert_eq!(h.hold("b2").mode, "exclusive");
    thread::sleep(Duration::from_millis(100));
    w.assert_pending();
    assert_eq!(release(&mut c, "q", "b2"), 1);
    assert_eq!(release(&mut c, "q", "b1"), 1);
    assert!(w.granted().0 > f1);
}

#[test]
fn a_mixed_queue_of_plain_and_shared_requests_is_served_in_order() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "q", "t", TTL);
    let w1 = acq("q", "w1", TTL).wait(20_000).spawn(&s.url());
    wait_queue(&mut c, "q", 1);
    let r = acq("q", "r", TTL).shared().wait(20_000).spawn(&s.url());
    wait_queue(&mut c, "q", 2);
    let w2 = acq("q", "w2", TTL).wait(20_000).spawn(&s.url());
    wait_queue(&mut c, "q", 3);
    assert_eq!(release(&mut c, "q", "t"), 1);
    let (f1, _, mut c1) = w1.granted();
    match shown(&mut c, "q") {
        Shown::Plain(i) => assert_eq!((i.token, i.fence, i.waiters), (b"w1".to_vec(), f1, 2)),
        other => panic!("one plain holder: the plain form, got {other:?}"),
    }
    assert_eq!(release(&mut c1, "q", "w1"), 1);
    let (fr, ..) = r.granted();
    assert_eq!(holds(&mut c, "q").tokens(), ["r"]);
    w2.assert_pending();
    assert_eq!(release(&mut c, "q", "r"), 1);
    assert!(w2.granted().0 > fr);
}

/// How a queued writer leaves: its timeout, its connection, `CLIENT
/// UNBLOCK`.
fn writer_leaves(how: &str) {
    let s = Server::start();
    let mut c = s.conn();
    acq("q", "r1", TTL).shared().grant(&mut c);
    let timeout = if how == "timeout" { 300 } else { 0 };
    let w = acq("q", "w", TTL).wait(timeout).spawn(&s.url());
    wait_queue(&mut c, "q", 1);
    let r2 = acq("q", "r2", TTL).shared().wait(20_000).spawn(&s.url());
    wait_queue(&mut c, "q", 2);
    let left = Instant::now();
    match how {
        "timeout" => assert_eq!(w.outcome(SOON).0.unwrap(), None),
        "kill" => {
            let n: i64 = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("ID")
                .arg(w.id)
                .query(&mut c)
                .unwrap();
            assert_eq!(n, 1);
        }
        _ => {
            let n: i64 = redis::cmd("CLIENT")
                .arg("UNBLOCK")
                .arg(w.id)
                .query(&mut c)
                .unwrap();
            assert_eq!(n, 1);
        }
    }
    // Nothing but the writer kept r2 from sharing with r1: granted at once,
    // without any other command touching the resource.
    let (_, at, _) = r2.granted();
    eprintln!(
        "{how}: r2 granted {:?} after the writer left",
        at.saturating_duration_since(left)
    );
    assert_eq!(holds(&mut c, "q").tokens(), ["r1", "r2"]);
}

#[test]
fn readers_behind_a_writer_that_leaves_are_granted_at_once() {
    for how in ["timeout", "kill", "unblock"] {
        writer_leaves(how);
    }
}

#[test]
fn a_shared_grant_unblocked_in_its_turn_is_revoked_and_the_run_keeps_the_rest() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "q", "w", TTL);
    let r1 = acq("q", "r1", TTL).shared().wait(20_000).spawn(&s.url());
    wait_queue(&mut c, "q", 1);
    let r2 = acq("q", "r2", TTL).shared().wait(20_000).spawn(&s.url());
    wait_queue(&mut c, "q", 2);
    let revoked = |c: &mut Connection| info_field(c, "dlock", "dlock_revoked_grants");
    let before = revoked(&mut c);
    let v: Vec<i64> = redis::pipe()
        .atomic()
        .cmd("DLOCK.RELEASE")
        .arg("q")
        .arg("w")
        .cmd("CLIENT")
        .arg("UNBLOCK")
        .arg(r1.id)
        .query(&mut c)
        .unwrap();
    assert_eq!(v, [1, 1]);
    assert_eq!(r1.outcome(SOON).0.unwrap(), None, "unblocked: nil");
    let (f2, ..) = r2.granted();
    let h = holds(&mut c, "q");
    assert_eq!((h.tokens(), h.hold("r2").fence), (vec!["r2"], f2));
    assert_ne!(
        revoked(&mut c),
        before,
        "r1's grant was not counted revoked"
    );
}

#[test]
fn a_timed_out_shared_waiter_leaves_the_queue() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "q", "w", TTL);
    let t = Instant::now();
    assert_eq!(
        acq("q", "r", TTL).shared().wait(200).send(&mut c).unwrap(),
        None
    );
    assert!(t.elapsed() >= Duration::from_millis(200));
    assert_eq!(queue_len(&mut c, "q"), 0);
    assert_eq!(blocked_clients(&mut c), 0);
    assert_eq!(release(&mut c, "q", "w"), 1);
    assert_eq!(shown(&mut c, "q"), Shown::Free);
    acq("q", "r", TTL).shared().grant(&mut c);
}

#[test]
fn del_of_a_shared_resource_hands_it_to_the_queue() {
    let s = Server::start();
    let mut c = s.conn();
    let f = acq("q", "r", TTL).shared().grant(&mut c);
    let w = acq("q", "w", TTL).wait(20_000).spawn(&s.url());
    wait_queue(&mut c, "q", 1);
    let n: i64 = redis::cmd("DEL").arg("q").query(&mut c).unwrap();
    assert_eq!(n, 1);
    assert!(w.granted().0 > f);
}

#[test]
fn a_shortened_permit_is_handed_over_at_its_new_deadline() {
    let _quiet = quiet();
    let s = Server::start();
    let mut c = s.conn();
    acq("sem", "p1", TTL).limit(2).grant(&mut c);
    acq("sem", "p2", TTL).limit(2).grant(&mut c);
    let w = acq("sem", "w", TTL).limit(2).wait(20_000).spawn(&s.url());
    wait_queue(&mut c, "sem", 1);
    let before = now_ms();
    assert_eq!(extend(&mut c, "sem", "p1", 300), 1);
    let after = now_ms();
    let (fw, ..) = w.granted();
    // Granted after the new deadline, within 50 ms of it (server clock).
    let granted = fw / 1000;
    assert!(granted > before + 300, "granted before the new deadline");
    assert!(
        granted <= after + 300 + 50,
        "granted {} ms late",
        granted - after - 300
    );
    assert_eq!(holds(&mut c, "sem").tokens(), ["p2", "w"]);
}

#[test]
fn replicas_hold_every_hold_and_hide_expired_ones() {
    let m = Server::start();
    let r = Server::builder().replica_of(&m).start();
    r.wait_for_sync(Duration::from_secs(20));
    let mut c = m.conn();
    acq("rw", "a1", TTL).shared().owner("A").grant(&mut c);
    acq("rw", "a2", TTL).owner("A").grant(&mut c);
    acq("rw", "short", 300).shared().owner("A").grant(&mut c);
    acq("sem", "p1", TTL).limit(3).grant(&mut c);
    acq("sem", "p2", 300).limit(3).grant(&mut c);
    assert_eq!(extend(&mut c, "rw", "a1", TTL * 2), 1);
    assert_eq!(release(&mut c, "rw", "a2"), 1);
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut c).unwrap();
    assert_eq!(acked, 1);
    let mut rc = r.conn();
    for k in ["rw", "sem"] {
        holds(&mut c, k).assert_same(&holds(&mut rc, k));
    }
    assert!(
        holds(&mut rc, "rw").hold("a1").ttl > TTL as i64,
        "EXTEND replicated"
    );
    // Past their deadline, holds are gone on the replica too (hidden, even
    // before the master's drop arrives).
    thread::sleep(Duration::from_millis(400));
    assert_eq!(holds(&mut rc, "rw").tokens(), ["a1"]);
    assert_eq!(holds(&mut rc, "sem").tokens(), ["p1"]);
    let digest = |c: &mut Connection, k: &str| -> Value {
        redis::cmd("DEBUG")
            .arg("DIGEST-VALUE")
            .arg(k)
            .query(c)
            .unwrap()
    };
    // Once the master has pruned them (any command does), both are equal.
    assert_eq!(holds(&mut c, "rw").tokens(), ["a1"]);
    assert_eq!(extend(&mut c, "sem", "p1", TTL), 1);
    assert_eq!(extend(&mut c, "rw", "a1", TTL), 1);
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut c).unwrap();
    assert_eq!(acked, 1);
    for k in ["rw", "sem"] {
        assert_eq!(
            digest(&mut c, k),
            digest(&mut rc, k),
            "{k} differs on the replica"
        );
    }
}

/// A refused `ACQUIRE` changes nothing, even when a handoff was due on its
/// resource in the same turn: the reader's hold ends during a slow
/// transaction, and the request refused there (a semaphore asked of a lock)
/// does not grant the waiter (`DLOCK.INFO` in the same transaction does not
/// show it holding); the queue's wake-up timer grants the waiter once the
/// transaction is over.
#[test]
fn a_refused_acquire_leaves_a_due_handoff_to_the_queue_timer() {
    let s = Server::start();
    let mut c = s.conn();
    acq("q", "r", 300).shared().grant(&mut c);
    let w = acq("q", "w", TTL).wait(20_000).spawn(&s.url());
    wait_queue(&mut c, "q", 1);
    let mut sleep = redis::cmd("DEBUG");
    sleep.arg("SLEEP").arg("0.5");
    let mut refused = acq("q", "x", TTL).limit(2).cmd();
    refused.arg("WAIT").arg(1000);
    let mut info = redis::cmd("DLOCK.INFO");
    info.arg("q");
    let replies = transaction(&mut c, &[sleep, refused, info]);
    match &replies[1] {
        Value::ServerError(e) => assert!(
            e.details().unwrap_or_default().contains("LIMIT"),
            "the semaphore is refused: {e:?}"
        ),
        other => panic!("expected the LIMIT error, got {other:?}"),
    }
    // The waiter does not hold it yet. (Reserved for its queue: a nil
    // token. Where the server gives a transaction one cached instant, INFO
    // there may still show the reader, whose hold ended by the wall clock.)
    let reserved = matches!(&replies[2], Value::Nil)
        || pairs(&replies[2])
            .first()
            .is_some_and(|(_, t)| *t == Value::Nil);
    let during = if reserved {
        Vec::new()
    } else {
        tokens_of(parse_shown(replies[2].clone()))
    };
    assert!(
        !during.iter().any(|t| t == "w"),
        "the refused request granted the waiter: {during:?}"
    );
    let (fence, _, _) = w.granted();
    assert!(fence > 0);
    assert_eq!(
        tokens_of(shown(&mut c, "q")),
        ["w"],
        "the timer handed it over"
    );
}

/// The tokens holding a resource, in either `DLOCK.INFO` form.
fn tokens_of(shown: Shown) -> Vec<String> {
    match shown {
        Shown::Free => Vec::new(),
        Shown::Plain(i) if i.token.is_empty() => Vec::new(),
        Shown::Plain(i) => vec![String::from_utf8(i.token).expect("utf-8")],
        Shown::Holds(h) => h.tokens().into_iter().map(String::from).collect(),
    }
}

/// A `RELEASE` or `EXTEND` that holds nothing changes nothing, even where
/// a handoff is due: the resource freed by `DEL` in the same transaction
/// stays reserved for its (shared) waiter until the handoff runs, as with a
/// plain waiter.
#[test]
fn a_release_or_extend_that_holds_nothing_hands_nothing_over() {
    let s = Server::start();
    let mut c = s.conn();
    for (n, probe) in ["RELEASE", "EXTEND"].into_iter().enumerate() {
        let res = format!("n{n}");
        grant(&mut c, &res, "h", TTL);
        let w = acq(&res, "s", TTL).shared().wait(20_000).spawn(&s.url());
        wait_queue(&mut c, &res, 1);
        let mut del = redis::cmd("DEL");
        del.arg(&res);
        let mut nobody = redis::cmd(&format!("DLOCK.{probe}"));
        nobody.arg(&res).arg("nobody");
        if probe == "EXTEND" {
            nobody.arg(TTL);
        }
        let mut info = redis::cmd("DLOCK.INFO");
        info.arg(&res);
        let replies = transaction(&mut c, &[del, nobody, info]);
        assert_eq!(replies[1], Value::Int(0), "{probe} by a non-holder");
        let reserved = pairs(&replies[2])
            .first()
            .is_some_and(|(_, t)| *t == Value::Nil);
        assert!(
            reserved,
            "{probe}: still reserved, nobody granted: {:?}",
            replies[2]
        );
        let (fence, _, _) = w.granted();
        assert!(fence > 0, "{probe}: the handoff runs after the transaction");
    }
}
