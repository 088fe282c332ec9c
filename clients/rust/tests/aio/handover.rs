//! `hand_over` and `prefer` through the async API: the candidates wait
//! through the blocking API on threads of their own.

use super::runtime;
use crate::common::{server::wait_until, waiters, Server, SEC};
use dlock_client::aio::Locker;
use std::time::Duration;

/// Candidate `id` campaigning on a thread of its own (blocking API).
fn candidate(url: &str, id: &str) -> std::thread::JoinHandle<dlock_client::Leadership> {
    let (url, id) = (url.to_string(), id.to_string());
    std::thread::spawn(move || {
        let l = dlock_client::Locker::new(&url).unwrap();
        let e = l.election("leader").id(id).ttl(10 * SEC);
        e.campaign(30 * SEC).unwrap().unwrap()
    })
}

#[test]
fn an_async_lead_is_handed_over_and_a_preferred_candidate_gets_it() {
    let server = Server::start();
    let mut c = server.conn();
    let url = server.url();
    runtime().block_on(async {
        let locker = Locker::new(&url).unwrap();
        let election = locker.election("leader").ttl(3 * SEC);
        let a = election.clone().id("a").campaign(Duration::ZERO).await;
        let a = a.unwrap().unwrap();
        let b = candidate(&url, "b");
        wait_until(SEC * 5, "b queued", || waiters(&mut c, "leader") == 1);
        let p = candidate(&url, "p");
        wait_until(SEC * 5, "p queued", || waiters(&mut c, "leader") == 2);
        assert!(!a.hand_over("nobody").await.unwrap());
        assert!(!a.is_lost());
        assert!(a.hand_over("x/y").await.is_err());
        assert!(a.hand_over("p").await.unwrap());
        assert!(a.is_lost());
        let p = tokio::task::spawn_blocking(move || p.join().unwrap())
            .await
            .unwrap();
        assert!(p.term() > a.term());
        drop(a);
        assert!(p.resign().unwrap());
        let b = tokio::task::spawn_blocking(move || b.join().unwrap())
            .await
            .unwrap();
        // b leads now, preferring q: q's campaign takes the lead from it.
        drop(b);
        let pref = election.clone().id("c").prefer("q");
        let lead = pref.campaign(Duration::ZERO).await.unwrap().unwrap();
        let q = candidate(&url, "q");
        tokio::time::timeout(10 * SEC, lead.lost())
            .await
            .expect("the lead went to q");
        let q = tokio::task::spawn_blocking(move || q.join().unwrap())
            .await
            .unwrap();
        assert!(q.term() > lead.term());
        assert!(lead.resign().await.is_ok());
        assert!(!q.is_lost());
    });
}
