//! `on_wanted` on the async API: the renewals tell the hook that someone
//! waits, off the runtime.

use super::runtime;
use crate::common::{waiters, Server, SEC};
use dlock_client::aio::Locker;
use dlock_client::Wanted;
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[test]
fn an_async_extend_and_the_watchdog_tell_the_hook() {
    let server = Server::start();
    let mut c = server.conn();
    runtime().block_on(async {
        let locker = Locker::new(&server.url()).unwrap();
        let (tx, rx) = mpsc::channel();
        let g = locker
            .request("res")
            .ttl(30 * SEC)
            .on_wanted(move |w| tx.send(w).unwrap())
            .acquire()
            .await
            .unwrap()
            .unwrap();
        assert!(g.extend(30 * SEC).await.unwrap());
        let other = locker.clone();
        let waiter = tokio::spawn(async move {
            let g = other.request("res").wait(30 * SEC).acquire().await;
            g.unwrap().map(|g| g.fence())
        });
        let end = Instant::now() + 10 * SEC;
        while waiters(&mut c, "res") != 1 {
            assert!(Instant::now() < end, "a waiter queued");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(g.extend(30 * SEC).await.unwrap());
        assert_eq!(rx.recv_timeout(10 * SEC).unwrap(), Wanted::Waiters(1));
        let fence = g.fence();
        assert!(g.release().await.unwrap());
        assert!(waiter.await.unwrap().unwrap() > fence);

        // The watchdog (sessions on: a hooked guard still renews itself).
        let (tx, rx) = mpsc::channel();
        let g = locker
            .request("w")
            .ttl(SEC)
            .watchdog()
            .on_wanted(move |w| tx.send(w).unwrap())
            .acquire()
            .await
            .unwrap()
            .unwrap();
        assert_eq!(g.session(), None);
        let other = locker.clone();
        let waiter = tokio::spawn(async move { other.request("w").wait(30 * SEC).acquire().await });
        let got = tokio::task::spawn_blocking(move || rx.recv_timeout(10 * SEC))
            .await
            .unwrap();
        assert_eq!(got.unwrap(), Wanted::Waiters(1));
        assert!(g.release().await.unwrap());
        assert!(waiter.await.unwrap().unwrap().is_some());
    });
}
