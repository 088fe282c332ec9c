//! Leader election against a real server: campaign, terms, resign, loss,
//! and observing who leads without polling.

use crate::common::{ms, Server, SEC};
use dlock_client::{Leader, Locker};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn leads(l: &Leader) -> (String, u64) {
    match l {
        Leader::Leads { id, term, .. } => (id.clone(), *term),
        other => panic!("expected a leader, got {other:?}"),
    }
}

#[test]
fn candidates_lead_in_turn_with_rising_terms_and_observers_see_each() {
    let server = Server::start();
    let locker = Locker::new(&server.url()).unwrap();
    let election = locker.election("leader").ttl(10 * SEC);
    assert_eq!(election.leader().unwrap(), Leader::Nobody);
    // An observer on a thread of its own, from the start.
    let (tx, rx) = mpsc::channel();
    let watched = election.clone();
    std::thread::spawn(move || {
        for change in watched.observe() {
            if tx.send(change).is_err() {
                break;
            }
        }
    });
    let next = || {
        rx.recv_timeout(10 * SEC)
            .expect("a change")
            .expect("no error")
    };
    assert_eq!(next(), Leader::Nobody);
    let a = election
        .clone()
        .id("a")
        .campaign(Duration::ZERO)
        .unwrap()
        .unwrap();
    assert_eq!(leads(&next()), ("a".to_string(), a.term()));
    assert_eq!(leads(&election.leader().unwrap()), ("a".into(), a.term()));
    // b campaigns: it waits in the server's queue (no polling) until a
    // resigns, then leads at once with a higher term.
    let b_election = election.clone().id("b");
    let b = std::thread::spawn(move || b_election.campaign(30 * SEC).unwrap().unwrap());
    let mut c = server.conn();
    crate::common::server::wait_until(10 * SEC, "b queued", || {
        crate::common::waiters(&mut c, "leader") == 1
    });
    let first = a.term();
    assert!(a.resign().unwrap());
    let b = b.join().unwrap();
    assert!(b.term() > first, "terms rise: {} then {}", first, b.term());
    assert_eq!(leads(&next()), ("b".to_string(), b.term()));
    // The same candidate again is another term.
    let second = b.term();
    drop(b);
    assert_eq!(next(), Leader::Nobody);
    let again = election
        .clone()
        .id("b")
        .campaign(Duration::ZERO)
        .unwrap()
        .unwrap();
    assert!(again.term() > second);
    assert_eq!(leads(&next()), ("b".to_string(), again.term()));
}

#[test]
fn a_candidate_that_does_not_get_to_lead_in_time_gets_none() {
    let server = Server::start();
    let locker = Locker::new(&server.url()).unwrap();
    let election = locker.election("leader");
    let _a = election.campaign(Duration::ZERO).unwrap().unwrap();
    let t = Instant::now();
    assert!(election.campaign(ms(300)).unwrap().is_none());
    assert!(
        t.elapsed() >= ms(250),
        "waited in the queue: {:?}",
        t.elapsed()
    );
    assert!(election.campaign(Duration::ZERO).unwrap().is_none());
    assert!(matches!(
        election.clone().id("x/y").campaign(Duration::ZERO),
        Err(dlock_client::Error::Invalid(_))
    ));
}

/// An admin deletes the leader's lock: the leader learns it within a third
/// of its ttl (its next renewal), and the next candidate leads with a
/// higher term.
#[test]
fn a_leader_learns_of_its_loss_within_a_third_of_its_ttl() {
    let server = Server::start();
    // Sessions off: a DEL is seen by the leader's own renewal.
    let locker = Locker::new(&server.url()).unwrap().with_sessions(false);
    let ttl = 3 * SEC;
    let election = locker.election("leader").ttl(ttl);
    let lead = election
        .clone()
        .id("a")
        .campaign(Duration::ZERO)
        .unwrap()
        .unwrap();
    let lost = lead.lost_signal();
    let mut c = server.conn();
    let _: i64 = redis::cmd("DEL").arg("leader").query(&mut c).unwrap();
    let deleted = Instant::now();
    // A third of the ttl, and slack for a loaded machine's scheduling.
    lost.recv_timeout(ttl / 3 + SEC)
        .expect("the loss, within a third of the ttl");
    assert!(deleted.elapsed() <= ttl / 3 + SEC);
    assert!(lead.is_lost());
    let next = election
        .clone()
        .id("b")
        .campaign(Duration::ZERO)
        .unwrap()
        .unwrap();
    assert!(next.term() > lead.term());
    assert!(!lead.resign().unwrap(), "it led no more");
}
