//! Handing an election's lead to a chosen candidate against a real server:
//! `Leadership::hand_over` (the candidate deep in the queue leads at once,
//! this lead ends; a candidate that does not wait changes nothing) and
//! `Election::prefer` (the lead goes to the preferred candidate as soon
//! as it waits, and stays with it).

use crate::common::{Server, SEC};
use dlock_client::{Leader, Locker};
use std::time::Duration;

fn waiting(c: &mut redis::Connection, n: i64) {
    crate::common::server::wait_until(10 * SEC, "candidates queued", || {
        crate::common::waiters(c, "leader") == n
    });
}

#[test]
fn a_lead_is_handed_over_to_a_candidate_deep_in_the_queue() {
    let server = Server::start();
    let locker = Locker::new(&server.url()).unwrap();
    let election = locker.election("leader").ttl(10 * SEC);
    let a = election
        .clone()
        .id("a")
        .campaign(Duration::ZERO)
        .unwrap()
        .unwrap();
    let mut c = server.conn();
    let b_election = election.clone().id("b");
    let b = std::thread::spawn(move || b_election.campaign(30 * SEC).unwrap().unwrap());
    waiting(&mut c, 1);
    let p_election = election.clone().id("p");
    let p = std::thread::spawn(move || p_election.campaign(30 * SEC).unwrap().unwrap());
    waiting(&mut c, 2);
    // Nobody by that id waits: nothing changes, a still leads.
    assert!(!a.hand_over("nobody").unwrap());
    assert!(!a.is_lost());
    assert!(a.hand_over("a/x").is_err(), "an id with '/' is refused");
    assert!(a.hand_over("").is_err());
    let first = a.term();
    assert!(a.hand_over("p").unwrap());
    assert!(a.is_lost(), "the lead ended");
    assert!(a.guard().loss_reason().unwrap().contains("handed over"));
    let p = p.join().unwrap();
    assert!(p.term() > first);
    match election.leader().unwrap() {
        Leader::Leads { id, term, .. } => assert_eq!((id.as_str(), term), ("p", p.term())),
        other => panic!("{other:?}"),
    }
    // b kept its place: it leads once p resigns. a's drop releases nothing.
    drop(a);
    assert_eq!(crate::common::waiters(&mut c, "leader"), 1);
    assert!(p.resign().unwrap());
    let b = b.join().unwrap();
    assert!(!b.is_lost());
}

#[test]
fn a_preferred_candidate_gets_the_lead_as_soon_as_it_waits() {
    let server = Server::start();
    let locker = Locker::new(&server.url()).unwrap();
    let election = locker.election("leader").ttl(3 * SEC).prefer("p");
    let a = election
        .clone()
        .id("a")
        .campaign(Duration::ZERO)
        .unwrap()
        .unwrap();
    let mut c = server.conn();
    // Another candidate waits: a keeps leading.
    let b_election = election.clone().id("b");
    let b = std::thread::spawn(move || b_election.campaign(30 * SEC));
    waiting(&mut c, 1);
    assert!(!a.is_lost());
    // The preferred one campaigns: within a renewal period it leads, and
    // keeps its lead (it is the one preferred).
    let p_election = election.clone().id("p");
    let p = p_election.campaign(30 * SEC).unwrap().unwrap();
    assert!(a.wait_lost(10 * SEC), "a handed its lead over");
    assert!(a.guard().loss_reason().unwrap().contains("handed over"));
    assert!(!p.wait_lost(2 * SEC), "p keeps its lead");
    assert_eq!(crate::common::waiters(&mut c, "leader"), 1);
    drop(p);
    let b = b.join().unwrap().unwrap().unwrap();
    assert!(!b.is_lost());
}

#[test]
fn a_handover_the_server_refuses_changes_nothing_and_the_guard_still_holds() {
    // A reader hands over to a writer while another reader stays:
    // NOTREADY, answered false, nothing changed.
    let server = Server::start();
    let locker = Locker::new(&server.url()).unwrap();
    let reader = |t: &str| {
        let r = locker.request("res").token(t).shared().ttl(30 * SEC);
        r.acquire().unwrap().unwrap()
    };
    let (r1, _r2) = (reader("r1"), reader("r2"));
    let url = server.url();
    let w = std::thread::spawn(move || {
        let l = Locker::new(&url).unwrap();
        let r = l.request("res").token("p/w").ttl(30 * SEC).wait(30 * SEC);
        r.acquire().unwrap().map(|g| g.release().unwrap())
    });
    let mut c = server.conn();
    crate::common::server::wait_until(10 * SEC, "the writer queued", || {
        crate::common::waiters(&mut c, "res") == 1
    });
    assert!(!locker.hand_over(&r1, "p").unwrap());
    assert!(!r1.is_lost());
    assert!(r1.extend(30 * SEC).unwrap(), "r1 still holds");
    assert_eq!(crate::common::waiters(&mut c, "res"), 1);
    drop(_r2);
    assert!(locker.hand_over(&r1, "p").unwrap());
    assert!(r1.is_lost());
    assert_eq!(w.join().unwrap(), Some(true));
}

static SYNC_DROPPED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
#[cfg(feature = "tokio")]
static ASYNC_DROPPED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn is_handover(args: &[Vec<u8>]) -> bool {
    args.len() > 3
        && args[0].eq_ignore_ascii_case(b"DLOCK.RELEASE")
        && args[3].eq_ignore_ascii_case(b"TO")
}

/// Proxy filters: the first handover's reply only (one per test).
fn first_sync_handover(args: &[Vec<u8>]) -> bool {
    is_handover(args) && !SYNC_DROPPED.swap(true, std::sync::atomic::Ordering::SeqCst)
}
#[cfg(feature = "tokio")]
fn first_async_handover(args: &[Vec<u8>]) -> bool {
    is_handover(args) && !ASYNC_DROPPED.swap(true, std::sync::atomic::Ordering::SeqCst)
}

/// Candidate `p` campaigning directly on the server, on a thread.
fn campaign_p(server: &Server) -> std::thread::JoinHandle<dlock_client::Leadership> {
    let url = server.url();
    std::thread::spawn(move || {
        let l = Locker::new(&url).unwrap();
        let e = l.election("leader").id("p").ttl(10 * SEC);
        e.campaign(30 * SEC).unwrap().unwrap()
    })
}

#[test]
fn a_handover_whose_reply_is_lost_is_sent_again_and_ends_the_lead() {
    // The handover runs on the server but its reply never arrives: sent
    // again, it finds the lead handed over already (0), so the leader
    // knows its lead ended instead of believing it still leads (a lead
    // kept by a session never hears otherwise).
    let server = Server::start();
    let proxy = crate::lock::proxy::Proxy::start(server.port(), 1, 1000, first_sync_handover);
    let locker = Locker::new(&proxy.url()).unwrap();
    let election = locker.election("leader").ttl(10 * SEC);
    let a = election.id("a").campaign(Duration::ZERO).unwrap().unwrap();
    let mut c = server.conn();
    let p = campaign_p(&server);
    waiting(&mut c, 1);
    assert!(!a.hand_over("p").unwrap());
    assert!(a.is_lost());
    assert_eq!(proxy.dropped().len(), 1);
    let p = p.join().unwrap();
    assert!(p.term() > a.term());
    assert!(p.resign().unwrap());
}

#[cfg(feature = "tokio")]
#[test]
fn an_async_handover_whose_reply_is_lost_is_sent_again_and_ends_the_lead() {
    let server = Server::start();
    let proxy = crate::lock::proxy::Proxy::start(server.port(), 1, 1000, first_async_handover);
    let url = proxy.url();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut c = server.conn();
    let (term, p) = rt.block_on(async {
        let locker = dlock_client::aio::Locker::new(&url).unwrap();
        let election = locker.election("leader").ttl(10 * SEC);
        let a = election.id("a").campaign(Duration::ZERO).await;
        let a = a.unwrap().unwrap();
        let p = campaign_p(&server);
        waiting(&mut c, 1);
        assert!(!a.hand_over("p").await.unwrap());
        assert!(a.is_lost());
        (a.term(), p)
    });
    assert_eq!(proxy.dropped().len(), 1);
    let p = p.join().unwrap();
    assert!(p.term() > term);
    assert!(p.resign().unwrap());
}
