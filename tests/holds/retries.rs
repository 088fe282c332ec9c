//! Retries: the same token asking for anything else is refused and changes
//! nothing; a reentrant owner's retries after lost replies add nothing.
use super::*;
use proxy::{Frame, Proxy};

const TTL: u64 = 60_000;

fn repl_offset(c: &mut Connection) -> i64 {
    info_field(c, "replication", "master_repl_offset")
        .expect("master_repl_offset")
        .parse()
        .unwrap()
}

/// The next keyspace event on a `PSUBSCRIBE __keyspace@0__:*` connection:
/// (key, event).
fn next_event(sub: &mut Connection) -> (String, String) {
    match sub.recv_response().expect("a keyspace event") {
        Value::Array(p) | Value::Push { data: p, .. } => {
            let channel = text(&p[p.len() - 2]);
            let key = channel.trim_start_matches("__keyspace@0__:").to_string();
            (key, text(&p[p.len() - 1]))
        }
        other => panic!("unexpected message {other:?}"),
    }
}

#[test]
fn the_same_token_asking_for_anything_else_is_refused_and_changes_nothing() {
    let m = Server::builder()
        .arg("--repl-ping-replica-period")
        .arg("3600")
        .start();
    let r = Server::builder().replica_of(&m).start();
    r.wait_for_sync(Duration::from_secs(20));
    let mut c = m.conn();
    acq("rw", "a1", TTL).shared().owner("A").grant(&mut c);
    acq("rw", "b1", TTL).shared().grant(&mut c);
    acq("ex", "e1", TTL).owner("A").grant(&mut c);
    acq("sem", "p1", TTL).limit(3).grant(&mut c);
    let plain = grant(&mut c, "plain", "t", TTL);
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut c).unwrap();
    assert_eq!(acked, 1, "the replica has the setup");
    let keys = ["rw", "ex", "sem"];
    let before: Vec<Holds> = keys.iter().map(|k| holds(&mut c, k)).collect();
    let mut rc = r.conn();
    for (k, b) in keys.iter().zip(&before) {
        b.assert_same(&holds(&mut rc, k));
    }
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("KA")
        .query(&mut c)
        .unwrap();
    let mut sub = m.conn();
    let _: () = redis::cmd("PSUBSCRIBE")
        .arg("__keyspace@0__:*")
        .query(&mut sub)
        .unwrap();
    let offset = repl_offset(&mut c);

    let tiu = TOKEN_IN_USE.to_string();
    let cases: Vec<(Acq, String)> = vec![
        // A shared hold of owner A.
        (acq("rw", "a1", TTL).owner("A"), tiu.clone()),
        (acq("rw", "a1", TTL).owner("A").wait(30_000), tiu.clone()),
        (acq("rw", "a1", TTL).shared().owner("B"), tiu.clone()),
        (acq("rw", "a1", TTL).shared(), tiu.clone()),
        (acq("rw", "a1", TTL), tiu.clone()),
        (acq("rw", "a1", TTL).limit(2), tiu.clone()),
        (acq("rw", "b1", TTL).shared().owner("b2"), tiu.clone()),
        (acq("rw", "z", TTL).limit(2), limit_mismatch(1)),
        // An exclusive hold of owner A.
        (acq("ex", "e1", TTL).shared().owner("A"), tiu.clone()),
        (acq("ex", "e1", TTL), tiu.clone()),
        (acq("ex", "e1", TTL).owner("B").wait(30_000), tiu.clone()),
        (acq("ex", "e1", TTL).limit(3), tiu.clone()),
        // A permit of a LIMIT 3 semaphore.
        (acq("sem", "p1", TTL), tiu.clone()),
        (acq("sem", "p1", TTL).limit(2), tiu.clone()),
        (acq("sem", "p1", TTL).limit(4).wait(30_000), tiu.clone()),
        (acq("sem", "p1", TTL).shared(), tiu.clone()),
        (acq("sem", "p1", TTL).owner("p1"), tiu.clone()),
        (
            acq("sem", "p1", TTL).limit(3).shared(),
            SHARED_SEMAPHORE.into(),
        ),
        (acq("sem", "q", TTL).limit(2), limit_mismatch(3)),
        (
            acq("sem", "q", TTL).limit(2).wait(30_000),
            limit_mismatch(3),
        ),
        (acq("sem", "q", TTL), limit_mismatch(3)),
        (acq("sem", "q", TTL).shared(), limit_mismatch(3)),
        (acq("sem", "q", TTL).owner("o"), limit_mismatch(3)),
        // A plain lock.
        (acq("plain", "t", TTL).shared(), tiu.clone()),
        (acq("plain", "t", TTL).limit(2), tiu.clone()),
        (acq("plain", "t", TTL).owner("X"), tiu.clone()),
        (acq("plain", "t", TTL).shared().owner("t"), tiu.clone()),
    ];
    for (a, want) in &cases {
        let t = Instant::now();
        assert_eq!(&a.error(&mut c), want, "{a:?}");
        assert!(t.elapsed() < SOON, "{a:?} waited");
    }
    for (k, b) in keys.iter().zip(&before) {
        b.assert_same(&holds(&mut c, k));
    }
    let i = held(&mut c, "plain");
    assert_eq!(
        (i.token.as_slice(), i.fence, i.waiters),
        (&b"t"[..], plain, 0)
    );
    assert!(i.ttl > TTL as i64 - 20_000);
    assert_eq!(repl_offset(&mut c), offset, "a refused command replicated");
    // The first event after all that is the marker's: none was published.
    assert_eq!(extend(&mut c, "rw", "b1", TTL), 1);
    assert_eq!(next_event(&mut sub), ("rw".into(), "dlock.extended".into()));
    assert!(
        repl_offset(&mut c) > offset,
        "the offset does move on a change"
    );
    // A retry asking exactly the same passes.
    let f = before[0].hold("a1").fence;
    assert_eq!(acq("rw", "a1", TTL).shared().owner("A").grant(&mut c), f);
}

// ---------------------------------------------------------------- lost replies

const DROP_PER_MILLE: u64 = 350;
const ROUNDS: usize = 12;
const HOLDS_PER_OWNER: usize = 5;

fn lock_command(args: &[Vec<u8>]) -> bool {
    args.first().is_some_and(|a| {
        a.eq_ignore_ascii_case(b"DLOCK.ACQUIRE") || a.eq_ignore_ascii_case(b"DLOCK.RELEASE")
    })
}

#[derive(Default, Debug)]
struct Lost {
    grants: usize,
    same_fence_on_retry: usize,
    releases: usize,
    zero_on_retry: usize,
}

/// The replies the proxy withheld for `cmd` with this token.
fn drops(p: &Proxy, cmd: &[u8], token: &str) -> Vec<Frame> {
    p.dropped_where(|d| d.arg(0).eq_ignore_ascii_case(cmd) && d.arg(2) == token.as_bytes())
        .into_iter()
        .map(|d| d.reply)
        .collect()
}

/// `a` through the proxy until a definite answer, the same request every
/// time: the fence.
fn acquire_through(p: &Proxy, pc: &mut Option<Connection>, a: &Acq, lost: &mut Lost) -> i64 {
    let mut lost_fence = None;
    for errors in 1..50 {
        let c = pc.get_or_insert_with(|| connect(&p.url()));
        match a.send(c) {
            Ok(Some(f)) => {
                if let Some(l) = lost_fence {
                    assert_eq!(f, l, "{a:?}: the retry returned another fence");
                    lost.same_fence_on_retry += 1;
                }
                return f;
            }
            Ok(None) => panic!("{a:?}: nil for an owner that holds"),
            Err(e) => {
                *pc = None;
                let d = drops(p, b"DLOCK.ACQUIRE", &a.token);
                assert_eq!(d.len(), errors, "{a:?}: `{e}` not caused by the proxy");
                match d.last() {
                    Some(Frame::Int(f)) => {
                        assert!(lost_fence.is_none_or(|l| l == *f), "two fences");
                        lost_fence = Some(*f);
                        lost.grants += 1;
                    }
                    other => panic!("{a:?}: lost reply {other:?}"),
                }
            }
        }
    }
    panic!("{a:?}: no answer in 50 tries")
}

/// `RELEASE` through the proxy until a definite answer.
fn release_through(p: &Proxy, pc: &mut Option<Connection>, res: &str, tok: &str, lost: &mut Lost) {
    let mut released = false;
    for errors in 1..50 {
        let c = pc.get_or_insert_with(|| connect(&p.url()));
        match try_release(c, res, tok) {
            Ok(1) => return assert!(!released, "{tok} released twice"),
            Ok(0) => {
                assert!(released, "{tok}: 0, though no lost RELEASE took effect");
                lost.zero_on_retry += 1;
                return;
            }
            Ok(n) => panic!("{tok}: RELEASE answered {n}"),
            Err(e) => {
                *pc = None;
                let d = drops(p, b"DLOCK.RELEASE", tok);
                assert_eq!(d.len(), errors, "{tok}: `{e}` not caused by the proxy");
                match d.last() {
                    Some(Frame::Int(1)) => {
                        assert!(!released, "{tok}: two RELEASEs answered 1");
                        released = true;
                        lost.releases += 1;
                    }
                    Some(Frame::Int(0)) => assert!(released, "{tok}: a lost RELEASE said 0"),
                    other => panic!("{tok}: lost RELEASE reply {other:?}"),
                }
            }
        }
    }
    panic!("{tok}: no answer in 50 tries")
}

#[test]
fn reentrant_retries_after_lost_replies_add_no_hold() {
    let s = Server::start();
    let p = Proxy::start(s.port(), 0xdd11, DROP_PER_MILLE, lock_command);
    let mut direct = s.conn();
    let mut pc = None;
    let mut lost = Lost::default();
    for round in 0..ROUNDS {
        let owner = format!("A{round}");
        let tokens: Vec<String> = (0..HOLDS_PER_OWNER)
            .map(|k| format!("a{round}-{k}"))
            .collect();
        let mut first = None;
        let mut other = None;
        for (k, tok) in tokens.iter().enumerate() {
            let mut a = acq("re", tok, TTL).owner(&owner);
            if (round + k) % 2 == 1 {
                a = a.shared();
            }
            if k > 0 {
                // Behind a queued owner: still decided at once.
                a = a.wait(20_000);
            }
            let f = acquire_through(&p, &mut pc, &a, &mut lost);
            let fa = *first.get_or_insert(f);
            assert_eq!(f, fa, "{tok}: an owner's holds share its first fence");
            let h = holds(&mut direct, "re");
            assert_eq!(h.tokens(), tokens[..=k], "a retry added a hold");
            assert!(h.holds.iter().all(|x| x.fence == fa && x.owner == owner));
            if k == 0 {
                let b = acq("re", &format!("b{round}"), TTL).wait(30_000);
                other = Some(b.spawn(&s.url()));
                wait_queue(&mut direct, "re", 1);
            }
        }
        let other = other.unwrap();
        for (k, tok) in tokens.iter().enumerate() {
            release_through(&p, &mut pc, "re", tok, &mut lost);
            if k + 1 < tokens.len() {
                let h = holds(&mut direct, "re");
                assert_eq!(h.tokens(), tokens[k + 1..], "released {tok}");
                assert_eq!(h.waiters, 1);
                other.assert_pending();
            }
        }
        let (fb, _, mut bc) = other.granted();
        assert!(fb > first.unwrap(), "a new owner gets a fresh fence");
        assert_eq!(release(&mut bc, "re", &format!("b{round}")), 1);
    }
    eprintln!("lost replies: {lost:?}");
    assert!(lost.grants > 0 && lost.releases > 0, "no reply was lost");
    assert_eq!(lost.releases, lost.zero_on_retry);
    assert!(lost.same_fence_on_retry > 0);
    assert_eq!(shown(&mut direct, "re"), Shown::Free);
}
