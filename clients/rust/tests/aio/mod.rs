//! The async API (feature `tokio`) against a real server.

use crate::common;

mod guarded;
mod handover;
mod position;
mod session;
mod wanted;

use common::{holder, ms, pttl, Server, SEC};
use dlock_client::aio::Locker;
use std::time::Instant;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn try_lock_extend_release_and_busy() {
    let server = Server::start();
    let mut c = server.conn();
    runtime().block_on(async {
        let locker = Locker::new(&server.url()).unwrap();
        let g = locker
            .try_lock("res", 5 * SEC)
            .await
            .unwrap()
            .expect("free");
        assert_eq!(
            holder(&mut c, "res"),
            Some((g.token().to_string(), g.fence()))
        );
        assert!(g.valid_until() <= Instant::now() + 5 * SEC);
        assert!(locker.try_lock("res", SEC).await.unwrap().is_none());
        assert!(g.extend(60 * SEC).await.unwrap());
        assert!(pttl(&mut c, "res") > 50_000);
        assert!(g.release().await.unwrap());
        assert_eq!(holder(&mut c, "res"), None);
    });
}

#[test]
fn a_waiting_lock_is_handed_over_and_does_not_block_other_commands() {
    let server = Server::start();
    let mut c = server.conn();
    runtime().block_on(async {
        let locker = Locker::new(&server.url()).unwrap();
        let first = locker.try_lock("res", 30 * SEC).await.unwrap().unwrap();
        let other = locker.try_lock("other", 30 * SEC).await.unwrap().unwrap();
        let l2 = locker.clone();
        let waiter = tokio::spawn(async move {
            l2.request("res")
                .ttl(5 * SEC)
                .wait(10 * SEC)
                .acquire()
                .await
        });
        while common::waiters(&mut c, "res") != 1 {
            tokio::time::sleep(ms(20)).await;
        }
        // The shared connection is free while the waiter blocks.
        let t = Instant::now();
        assert!(other.extend(30 * SEC).await.unwrap());
        assert!(t.elapsed() < SEC);
        let fence = first.fence();
        assert!(first.release().await.unwrap());
        let g = tokio::time::timeout(10 * SEC, waiter)
            .await
            .unwrap()
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(g.fence() > fence);
        assert!(g.valid_until() > Instant::now() + 4 * SEC);
        g.release().await.unwrap();
        other.release().await.unwrap();
    });
}

#[test]
fn the_watchdog_renews_and_signals_loss() {
    let server = Server::start();
    let mut c = server.conn();
    runtime().block_on(async {
        // Sessions off: the guard's own watchdog (a DEL, a shorter lease).
        let locker = Locker::new(&server.url()).unwrap().with_sessions(false);
        let g = locker
            .request("res")
            .ttl(ms(600))
            .watchdog()
            .acquire()
            .await
            .unwrap()
            .unwrap();
        tokio::time::sleep(ms(2500)).await;
        assert_eq!(
            holder(&mut c, "res"),
            Some((g.token().to_string(), g.fence()))
        );
        assert!(!g.is_lost());
        let _: i64 = redis::cmd("DEL").arg("res").query(&mut c).unwrap();
        tokio::time::timeout(ms(200 + 700), g.lost())
            .await
            .expect("loss within ttl/3");
        assert!(g.is_lost());
        assert!(!g.release().await.unwrap());
    });
}

#[test]
fn dropping_a_guard_releases_it_on_a_task() {
    let server = Server::start();
    let mut c = server.conn();
    runtime().block_on(async {
        let locker = Locker::new(&server.url()).unwrap();
        drop(locker.try_lock("res", 30 * SEC).await.unwrap().unwrap());
        let end = Instant::now() + 5 * SEC;
        while holder(&mut c, "res").is_some() {
            assert!(Instant::now() < end, "not released after drop");
            tokio::time::sleep(ms(20)).await;
        }
    });
}

#[test]
fn a_durability_wait_does_not_block_another_guards_release() {
    // `WAIT n timeout` blocks the connection it is sent on, like a
    // waiting ACQUIRE: on the shared multiplexed connection, every other
    // guard's command would queue behind it.
    let master = Server::start();
    let mut replica = Server::builder().replica_of(&master).start();
    replica.wait_for_sync(20 * SEC);
    let mut c = master.conn();
    runtime().block_on(async {
        let locker = Locker::new(&master.url())
            .unwrap()
            .with_min_replicas(1, ms(1500));
        let a = locker.try_lock("a", 30 * SEC).await.unwrap().unwrap();
        let b = locker.try_lock("b", 30 * SEC).await.unwrap().unwrap();
        replica.kill9();
        let extending = tokio::spawn(async move {
            let r = a.extend(30 * SEC).await;
            (a, r)
        });
        tokio::time::sleep(ms(200)).await;
        let t = Instant::now();
        assert!(b.release().await.unwrap());
        let took = t.elapsed();
        let (a, r) = extending.await.unwrap();
        assert!(r.is_err(), "no replica acknowledged the renewal");
        assert!(
            took < ms(500),
            "the release queued behind another guard's WAIT: {took:?}"
        );
        assert!(a.release().await.unwrap());
    });
    assert_eq!(holder(&mut c, "b"), None);
}

#[test]
fn min_replicas_set_after_cloning_is_not_lost() {
    let master = Server::start();
    runtime().block_on(async {
        let base = Locker::new(&master.url()).unwrap();
        let _clone = base.clone();
        // No replica: one acknowledgement can never come.
        let durable = base.with_min_replicas(1, ms(200));
        let e = durable.try_lock("res", 5 * SEC).await.unwrap_err();
        assert!(
            matches!(
                e,
                dlock_client::Error::TooFewReplicas {
                    acked: 0,
                    wanted: 1
                }
            ),
            "{e}"
        );
        let mut c = master.conn();
        assert_eq!(
            holder(&mut c, "res"),
            None,
            "the unconfirmed grant was released"
        );
    });
}

/// Without a watchdog, `lost()` resolves and `on_lost` runs when the
/// budget runs out; after a shortened `extend`, the watchdog renews on the
/// new schedule.
#[test]
fn loss_and_renewal_follow_the_deadline() {
    let server = Server::start();
    let mut c = server.conn();
    runtime().block_on(async {
        // Sessions off: the guard's own watchdog (a DEL, a shorter lease).
        let locker = Locker::new(&server.url()).unwrap().with_sessions(false);
        let called = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = called.clone();
        let g = locker
            .request("plain")
            .ttl(ms(500))
            .on_lost(move || flag.store(true, std::sync::atomic::Ordering::SeqCst))
            .acquire()
            .await
            .unwrap()
            .unwrap();
        let t = Instant::now();
        tokio::time::timeout(5 * SEC, g.lost())
            .await
            .expect("lost when the budget ran out");
        assert!(t.elapsed() < ms(500 + 700), "{:?}", t.elapsed());
        // The task marks it lost too; give it a moment to run the callback.
        tokio::time::sleep(ms(100)).await;
        assert!(called.load(std::sync::atomic::Ordering::SeqCst));

        let w = locker
            .request("dog")
            .ttl(30 * SEC)
            .watchdog()
            .acquire()
            .await
            .unwrap()
            .unwrap();
        tokio::time::sleep(ms(200)).await;
        assert!(w.extend(ms(900)).await.unwrap());
        tokio::time::sleep(ms(2700)).await;
        assert_eq!(
            holder(&mut c, "dog"),
            Some((w.token().to_string(), w.fence())),
            "renewed on the 900 ms schedule"
        );
        assert!(w.release().await.unwrap());
    });
}

/// A restart without persistence loses the lock: release says so.
#[test]
fn a_release_after_a_server_restart_reports_the_loss() {
    let mut server = Server::start();
    let rt = runtime();
    let locker = Locker::new(&server.url()).unwrap();
    let g = rt
        .block_on(locker.try_lock("res", 30 * SEC))
        .unwrap()
        .unwrap();
    let mut c = server.crash_and_restart();
    assert_eq!(holder(&mut c, "res"), None);
    assert!(!rt.block_on(g.release()).unwrap());
}

/// A down server: a waiting request ends after `retry_for` of connection
/// errors, not after its wait, and the error names the server.
#[test]
fn an_outage_ends_a_waiting_request_and_names_the_server() {
    let url = common::dead_url();
    runtime().block_on(async {
        let e = outage_ends_the_wait(&url, ms(1500)).await;
        let port = url.trim_end_matches('/').rsplit(':').next().unwrap();
        assert!(e.to_string().contains(&format!("127.0.0.1:{port}")), "{e}");
    });
}

/// As the blocking API: a `RELEASE` answered with an error reply
/// (`READONLY`) was not run, so a retry's 0 (the server promoted back
/// with a dataset without the lease) is a loss, not a release.
#[test]
fn a_release_refused_with_an_error_reply_then_answered_0_reports_the_loss() {
    let server = Server::start();
    let other = Server::start();
    runtime().block_on(async {
        let locker = Locker::new(&server.url()).unwrap().with_retry_for(5 * SEC);
        let g = locker.try_lock("res", 30 * SEC).await.unwrap().unwrap();
        let promote = common::demote_then_promote(&server, &other, ms(500));
        assert_eq!(holder(&mut server.conn(), "res"), None);
        let released = g.release().await.unwrap();
        promote.join().unwrap();
        assert!(!released, "the lease was lost, not released by this guard");
    });
}

/// A server that answers every attempt with a retryable error reply
/// (`READONLY`: it became a replica) is an outage like a dead one: a
/// waiting request ends after `retry_for`, not after its wait.
#[test]
fn a_server_answering_only_readonly_ends_a_wait_after_retry_for() {
    let server = Server::start();
    let other = Server::start();
    server.replica_of(&other);
    server.wait_for_sync(10 * SEC);
    runtime().block_on(outage_ends_the_wait(&server.url(), 2 * SEC));
}

/// A request that may wait 60 s, against a server at `url` that does not
/// serve locks, with a 600 ms `retry_for`: `Unavailable` within `bound`.
async fn outage_ends_the_wait(url: &str, bound: std::time::Duration) -> dlock_client::Error {
    let locker = Locker::new(url).unwrap().with_retry_for(ms(600));
    let t = Instant::now();
    let e = locker
        .request("res")
        .wait(60 * SEC)
        .acquire()
        .await
        .unwrap_err();
    assert!(t.elapsed() < bound, "{:?}", t.elapsed());
    assert!(matches!(e, dlock_client::Error::Unavailable(_)), "{e}");
    e
}

#[test]
fn an_async_election_campaigns_observes_and_cancels_cleanly() {
    use dlock_client::Leader;
    let server = Server::start();
    let mut c = server.conn();
    runtime().block_on(async {
        let locker = Locker::new(&server.url()).unwrap();
        let election = locker.election("leader").ttl(10 * SEC);
        let mut changes = election.observe();
        assert_eq!(changes.next_leader().await.unwrap(), Leader::Nobody);
        let a = election
            .clone()
            .id("a")
            .campaign(std::time::Duration::ZERO)
            .await
            .unwrap()
            .unwrap();
        match changes.next_leader().await.unwrap() {
            Leader::Leads { id, term, .. } => assert_eq!((id.as_str(), term), ("a", a.term())),
            other => panic!("{other:?}"),
        }
        // A campaign cancelled while it waits leaves no waiter behind.
        let b = election.clone().id("b");
        let waiting = b.campaign(60 * SEC);
        let cancelled = tokio::time::timeout(ms(300), waiting).await;
        assert!(cancelled.is_err(), "still waiting when cancelled");
        common::server::wait_until(10 * SEC, "no waiter left", || {
            common::waiters(&mut c, "leader") == 0
        });
        assert!(a.resign().await.unwrap());
        assert_eq!(changes.next_leader().await.unwrap(), Leader::Nobody);
        assert_eq!(
            holder(&mut c, "leader"),
            None,
            "the cancelled candidate holds nothing"
        );
    });
}

#[test]
fn the_watchdog_reports_the_cap_as_the_loss_with_its_reason() {
    let server = Server::start();
    runtime().block_on(async {
        let locker = Locker::new(&server.url()).unwrap();
        // A ttl close to the cap: renewed up to the cap, never refused.
        let started = Instant::now();
        let g = locker
            .request("res")
            .ttl(ms(2700))
            .max_hold(ms(3000))
            .watchdog()
            .acquire()
            .await
            .unwrap()
            .expect("free");
        assert_eq!(g.loss_reason(), None);
        tokio::time::timeout(10 * SEC, g.lost())
            .await
            .expect("lost at the cap");
        let held = started.elapsed();
        assert!(held >= ms(1500) && held <= ms(5000), "lost after {held:?}");
        let why = g.loss_reason().expect("a reason");
        assert!(why.starts_with("MAXHOLD "), "{why}");
        let mut c = server.conn();
        assert_eq!(common::maxhold_refusals(&mut c), 0);
        assert!(!g.extend(SEC).await.unwrap(), "a lost guard stays lost");
    });
}
