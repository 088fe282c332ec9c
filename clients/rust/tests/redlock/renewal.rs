//! Renewal of a Redlock guard: the watchdog keeps it across several ttls;
//! a minority deleted is survived, a majority deleted is lost; unreachable
//! servers make a renewal fail without losing the guard.

use crate::common::{holder, ms, pttl, SEC};
use crate::redlock::{holders, start, urls};
use dlock_client::{Error, Redlock};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const NODE_TIMEOUT: Duration = Duration::from_millis(300);

fn del(s: &crate::common::Server, key: &str) {
    let n: i64 = redis::cmd("DEL").arg(key).query(&mut s.conn()).unwrap();
    assert_eq!(n, 1, "{key} was held");
}

#[test]
fn the_watchdog_keeps_the_lock_until_a_majority_is_deleted() {
    let servers = start(5);
    let rl = Redlock::new(&urls(&servers))
        .unwrap()
        .with_node_timeout(NODE_TIMEOUT);
    let (tx, lost) = mpsc::channel();
    let ttl = ms(900);
    let g = rl
        .request("res")
        .ttl(ttl)
        .watchdog()
        .on_lost(move || tx.send(()).unwrap())
        .acquire()
        .unwrap()
        .expect("granted");
    let first_until = g.valid_until();
    std::thread::sleep(3 * ttl + ttl / 2);
    assert!(!g.is_lost());
    assert!(g.valid_until() > first_until, "renewed");
    for (i, s) in servers.iter().enumerate() {
        let mut c = s.conn();
        assert_eq!(
            holder(&mut c, "res").map(|h| h.0).as_deref(),
            Some(g.token()),
            "node {i}"
        );
        assert!(pttl(&mut c, "res") > 0);
    }

    // An admin deletes the lock on two of five: three still hold it.
    del(&servers[0], "res");
    del(&servers[1], "res");
    std::thread::sleep(2 * ttl);
    assert!(!g.is_lost(), "a quorum still renews");
    assert!(g.remaining() > Duration::ZERO);
    assert!(g.extend(ttl).unwrap(), "three 1s and two 0s: extended");

    // A third: no quorum can hold the token any more.
    del(&servers[2], "res");
    assert!(g.wait_lost(5 * SEC), "the watchdog saw three 0s");
    lost.recv_timeout(SEC).expect("on_lost called");
    assert!(!g.extend(ttl).unwrap());
    assert!(!g.release().unwrap(), "no quorum held it");
    assert!(holders(&servers, "res").iter().all(Option::is_none));
}

#[test]
fn a_renewal_without_a_quorum_of_answers_fails_but_is_not_lost() {
    let servers = start(5);
    let rl = Redlock::new(&urls(&servers))
        .unwrap()
        .with_node_timeout(NODE_TIMEOUT);
    let g = rl.try_lock("res", 10 * SEC).unwrap().expect("granted");
    let until = g.valid_until();
    for s in &servers[..3] {
        s.stop();
    }
    let t = Instant::now();
    let r = g.extend(20 * SEC);
    let took = t.elapsed();
    for s in &servers[..3] {
        s.cont();
    }
    let e = r.unwrap_err();
    assert!(
        matches!(
            e,
            Error::NoQuorum {
                granted: 2,
                reached: 2,
                nodes: 5
            }
        ),
        "{e}"
    );
    assert!(took < NODE_TIMEOUT + ms(700), "{took:?}");
    assert!(!g.is_lost(), "two 1s and three silent servers: undecided");
    assert_eq!(g.valid_until(), until, "the budget stays as it was");

    // Reachable again: renewed from this extend's send time.
    let t = Instant::now();
    assert!(g.extend(20 * SEC).unwrap());
    assert!(g.valid_until() >= t + 20 * SEC - ms(202));
    assert!(g.valid_until() <= Instant::now() + 20 * SEC - ms(202));
    assert!(g.release().unwrap());
}
