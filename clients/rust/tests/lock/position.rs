//! `Locker::position` and `Locker::waiters` (`DLOCK.POSITION`,
//! `DLOCK.WAITERS`) against a real server: places follow the queue as
//! waiters are granted and leave, every field comes through, bad
//! arguments are refused before anything is sent.

use crate::common::{server::wait_until, waiters, Server, SEC};
use dlock_client::{Error, Locker};
use std::time::Duration;

#[test]
fn positions_and_waiters_follow_the_queue() {
    let server = Server::start();
    let locker = Locker::new(&server.url()).unwrap();
    let mut c = server.conn();
    assert_eq!(locker.position("job", "a").unwrap(), None);
    assert!(locker.waiters("job", 0, 10).unwrap().is_empty());
    let holder = locker.try_lock("job", 30 * SEC).unwrap().unwrap();
    let mut threads = Vec::new();
    for (i, (token, shared, wait)) in [("a", false, 0), ("b", true, 40)].into_iter().enumerate() {
        let url = server.url();
        threads.push(std::thread::spawn(move || {
            let l = Locker::new(&url).unwrap();
            let mut r = l.request("job").token(token).ttl(30 * SEC);
            r = if wait == 0 {
                r.wait(Duration::from_secs(3600))
            } else {
                r.wait(Duration::from_secs(wait))
            };
            if shared {
                r = r.shared().owner("svc");
            }
            r.acquire().unwrap().map(|g| g.release().unwrap())
        }));
        wait_until(SEC * 5, "queued", || waiters(&mut c, "job") == i as i64 + 1);
    }
    assert_eq!(locker.position("job", "a").unwrap(), Some(1));
    assert_eq!(locker.position("job", "b").unwrap(), Some(2));
    assert_eq!(locker.position("job", holder.token()).unwrap(), None);
    let page = locker.waiters("job", 0, 10).unwrap();
    assert_eq!(page.len(), 2);
    assert_eq!((page[0].position, page[0].token.as_str()), (1, "a"));
    assert!(!page[0].shared && page[0].owner.is_none() && page[0].set.is_none());
    assert_eq!((page[1].position, page[1].token.as_str()), (2, "b"));
    assert!(page[1].shared);
    assert_eq!(page[1].owner.as_deref(), Some("svc"));
    assert_eq!(page[1].limit, 1);
    assert!(page[1]
        .timeout
        .is_some_and(|t| t <= Duration::from_secs(40)));
    // A page read later: the same waiter, its clocks moved on.
    let later = locker.waiters("job", 1, 1).unwrap();
    assert_eq!(later.len(), 1);
    let still = |w: &dlock_client::Waiter| {
        let mut w = w.clone();
        (w.waited, w.timeout) = (Duration::ZERO, None);
        w
    };
    assert_eq!(still(&later[0]), still(&page[1]));
    assert!(later[0].waited >= page[1].waited);
    assert!(locker.waiters("job", 2, 1000).unwrap().is_empty());

    holder.release().unwrap();
    // `a` is granted and releases at once; then `b`.
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(locker.position("job", "b").unwrap(), None);
    assert!(locker.waiters("job", 0, 10).unwrap().is_empty());
}

/// A semaphore's waiter asking for 3 permits shows `permits` 3; one that
/// names no `PERMITS` shows 1 (the server sends no field for it).
#[test]
fn waiters_show_the_permits_asked_for() {
    let server = Server::start();
    let locker = Locker::new(&server.url()).unwrap();
    let mut c = server.conn();
    let holder = locker
        .request("pool")
        .limit(5)
        .permits(5)
        .ttl(30 * SEC)
        .acquire()
        .unwrap()
        .expect("all 5 permits free");
    let mut threads = Vec::new();
    for (i, permits) in [3, 1].into_iter().enumerate() {
        let url = server.url();
        threads.push(std::thread::spawn(move || {
            let l = Locker::new(&url).unwrap();
            let mut r = l.request("pool").limit(5).ttl(30 * SEC);
            if permits > 1 {
                r = r.permits(permits);
            }
            let guard = r.wait(Duration::from_secs(3600)).acquire().unwrap();
            guard.expect("granted").release().unwrap();
        }));
        wait_until(SEC * 5, "queued", || {
            waiters(&mut c, "pool") == i as i64 + 1
        });
    }
    let page = locker.waiters("pool", 0, 10).unwrap();
    let asked: Vec<(u64, u32, u32)> = page
        .iter()
        .map(|w| (w.position, w.limit, w.permits))
        .collect();
    assert_eq!(asked, [(1, 5, 3), (2, 5, 1)]);
    holder.release().unwrap();
    for t in threads {
        t.join().unwrap();
    }
    assert!(locker.waiters("pool", 0, 10).unwrap().is_empty());
}

#[test]
fn bad_arguments_are_refused_before_sending() {
    let server = Server::start();
    let locker = Locker::new(&server.url()).unwrap();
    for r in [
        locker.position("", "t").map(|_| ()),
        locker.position("r", "").map(|_| ()),
        locker.waiters("r", 0, 0).map(|_| ()),
        locker.waiters("r", 0, 1001).map(|_| ()),
        locker.waiters("r", u64::MAX, 10).map(|_| ()),
        locker.waiters("", 0, 10).map(|_| ()),
    ] {
        assert!(matches!(r, Err(Error::Invalid(_))), "{r:?}");
    }
}
