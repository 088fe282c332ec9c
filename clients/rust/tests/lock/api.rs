//! The API's promises about its arguments and its time: every `Duration`
//! is valid (no panic), a call ends by its wait, the budget counts the
//! whole milliseconds the server got, the scoped `run`, `on_retry`, and
//! errors that name the server.

use crate::common::{dead_url, holder, ms, pttl, waiters, Server, SEC};
use dlock_client::{Error, Locker, Redlock};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `Duration::MAX` ("forever") anywhere the API takes a duration: no
/// panic; a ttl the server cannot take is refused before connecting.
#[test]
fn forever_is_a_valid_duration_everywhere() {
    let server = Server::start();
    let locker = Locker::new(&server.url())
        .unwrap()
        .with_io_timeout(Duration::MAX)
        .with_retry_for(Duration::MAX)
        .with_min_replicas(0, Duration::MAX);
    let g = locker
        .request("res")
        .ttl(5 * SEC)
        .wait(Duration::MAX)
        .retry_for(Duration::MAX)
        .min_replicas(0, Duration::MAX)
        .acquire()
        .unwrap()
        .expect("free: granted at once");
    assert!(!g.wait_lost(ms(1)));
    let e = g.extend(Duration::MAX).unwrap_err();
    assert!(matches!(e, Error::Invalid(_)), "{e}");
    let e = locker.try_lock("other", Duration::MAX).unwrap_err();
    assert!(matches!(e, Error::Invalid(_)), "{e}");
    // A lease that ends: wait_lost(forever) returns when it does.
    assert!(g.extend(ms(300)).unwrap());
    assert!(g.wait_lost(Duration::MAX));
    let rl = Redlock::new(&[server.url()])
        .unwrap()
        .with_node_timeout(Duration::MAX);
    let r = rl
        .request("red")
        .ttl(5 * SEC)
        .wait(Duration::MAX)
        .acquire()
        .unwrap()
        .expect("granted");
    assert!(r.release().unwrap());
}

/// The wait bounds the whole call: against a server that is down, a
/// request that may wait 3 s (and retry as long) returns within the wait
/// and a reply's margin, not seconds later.
#[test]
fn the_wait_bounds_the_whole_call_against_a_down_server() {
    let locker = Locker::new(&dead_url()).unwrap();
    let t = Instant::now();
    let r = locker
        .request("res")
        .ttl(30 * SEC)
        .wait(3 * SEC)
        .retry_for(60 * SEC)
        .acquire();
    let took = t.elapsed();
    assert!(matches!(r, Err(Error::Unavailable(_))), "{r:?}");
    assert!(took < ms(3400), "{took:?}");
    assert!(took >= ms(2500), "retried while the wait lasted: {took:?}");
}

/// `retry_for` bounds a run of connection errors, waiting or not, and
/// `on_retry` is told about each retry; the error names the server.
#[test]
fn retry_for_bounds_an_outage_and_on_retry_tells_of_it() {
    let url = dead_url();
    let locker = Locker::new(&url).unwrap();
    let retries = Arc::new(AtomicUsize::new(0));
    let seen = retries.clone();
    let t = Instant::now();
    let e = locker
        .request("res")
        .wait(60 * SEC)
        .retry_for(ms(800))
        .on_retry(move |e| {
            assert!(matches!(e, Error::Unavailable(_)), "{e}");
            seen.fetch_add(1, Ordering::SeqCst);
        })
        .acquire()
        .unwrap_err();
    let took = t.elapsed();
    assert!(took < ms(1500), "{took:?}");
    assert!(retries.load(Ordering::SeqCst) >= 2);
    let port = url.trim_end_matches('/').rsplit(':').next().unwrap();
    assert!(
        e.to_string().contains(&format!("127.0.0.1:{port}")),
        "names the server: {e}"
    );
}

/// The budget counts only the whole milliseconds the server got: a ttl of
/// 1000.9 ms is a 1000 ms lease on the server.
#[test]
fn the_budget_counts_whole_milliseconds() {
    let server = Server::start();
    let locker = Locker::new(&server.url()).unwrap();
    let mut c = server.conn();
    let before = Instant::now();
    let g = locker
        .try_lock("res", Duration::from_micros(1_000_900))
        .unwrap()
        .unwrap();
    let after = Instant::now();
    assert!(pttl(&mut c, "res") <= 1000);
    assert!(g.valid_until() >= before + ms(1000));
    assert!(
        g.valid_until() <= after + ms(1000),
        "budget beyond the server's ms"
    );
}

/// `run`: the closure runs under the lock (renewed by a watchdog past the
/// ttl), the lock is released after it, and busy means it does not run.
#[test]
fn run_holds_the_lock_for_the_closure() {
    let server = Server::start();
    // Sessions off: the DEL below is seen by the guard's own renewal (a
    // guard bound to a session would see it only at its release).
    let locker = Locker::new(&server.url()).unwrap().with_sessions(false);
    let mut c = server.conn();
    let out = locker
        .request("res")
        .ttl(ms(600))
        .run(|g| {
            std::thread::sleep(ms(1500));
            assert_eq!(
                holder(&mut server.conn(), "res"),
                Some((g.token().to_string(), g.fence()))
            );
            7
        })
        .unwrap();
    assert_eq!(out, Some(7));
    assert_eq!(holder(&mut c, "res"), None, "released after the closure");
    let _held = locker.try_lock("res", 30 * SEC).unwrap().unwrap();
    let ran = locker.request("res").run(|_| ()).unwrap();
    assert_eq!(ran, None, "busy: the closure did not run");
    // Lost while the closure ran: an error, whatever it returned.
    drop(_held);
    let r = locker.request("res").ttl(ms(600)).run(|_| {
        let _: i64 = redis::cmd("DEL").arg("res").query(&mut c).unwrap();
        std::thread::sleep(ms(600));
        1
    });
    assert!(matches!(r, Err(Error::Lost)), "{r:?}");
}

/// The refresh after a grant handed over while waiting stays within the
/// call's bound: a server whose `EXTEND` replies never come (every one is
/// lost) costs the wait and a reply's margin, not `retry_for` on top.
#[test]
fn the_refresh_after_a_waiting_grant_stays_within_the_call() {
    fn extend(args: &[Vec<u8>]) -> bool {
        args.first()
            .is_some_and(|a| a.eq_ignore_ascii_case(b"DLOCK.EXTEND"))
    }
    let server = Server::start();
    let proxy = crate::lock::proxy::Proxy::start(server.port(), 7, 1000, extend);
    let held = Locker::new(&server.url())
        .unwrap()
        .try_lock("res", 30 * SEC)
        .unwrap()
        .unwrap();
    // A long retry budget: the bound must come from the call, not from it.
    let locker = Locker::new(&proxy.url()).unwrap().with_retry_for(6 * SEC);
    let waiter = std::thread::spawn(move || {
        let t = Instant::now();
        let r = locker.request("res").ttl(30 * SEC).wait(ms(1500)).acquire();
        // Before a guard, if any, is dropped (its release is not the call).
        let took = t.elapsed();
        (r.map(|g| g.is_some()), took)
    });
    let mut c = server.conn();
    crate::common::server::wait_until(10 * SEC, "the waiter queued", || {
        crate::common::waiters(&mut c, "res") == 1
    });
    assert!(held.release().unwrap());
    let (r, took) = waiter.join().unwrap();
    // The wait, the refresh's margin, the undo's margin, and slack (far
    // below the 6 s of retries the refresh alone took when it had the
    // retry budget to itself).
    assert!(took < ms(1500 + 250 + 250 + 1200), "{took:?}: {r:?}");
    assert!(r.is_err(), "no refresh, no lease: {r:?}");
    assert!(proxy.drop_count() >= 1, "the refresh's reply was lost");
}

/// A URL that names no server is refused with the accepted forms and the
/// password masked, by every constructor.
#[test]
fn bad_urls_are_explained_without_the_password() {
    let bad = "redis://u:pw@h:notaport/";
    let errors = [
        Locker::new(bad).err(),
        Locker::cluster(&[bad]).err(),
        Redlock::new(&[bad]).err(),
    ];
    for e in errors {
        let e = e.expect("refused").to_string();
        assert!(e.contains(dlock_client::URL_FORMS), "{e}");
        assert!(e.contains("u:***@h") && !e.contains("pw"), "{e}");
    }
}

/// `.priority(p)`: a waiter of higher priority that queued later is
/// granted first (an aging of an hour: no timing involved); a priority the
/// server would refuse is refused before it is asked.
#[test]
fn a_higher_priority_waiter_is_granted_first() {
    let server = Server::start();
    let mut c = server.conn();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("dlock.priority-aging-ms")
        .arg(3_600_000)
        .query(&mut c)
        .unwrap();
    let locker = Locker::new(&server.url()).unwrap();
    let first = locker
        .request("res")
        .ttl(30 * SEC)
        .acquire()
        .unwrap()
        .expect("free: granted at once");
    let (tx, rx) = std::sync::mpsc::channel();
    let mut threads = Vec::new();
    for (i, p) in [(1, 0u16), (2, 9)] {
        let (locker, tx) = (locker.clone(), tx.clone());
        threads.push(std::thread::spawn(move || {
            let g = locker
                .request("res")
                .ttl(30 * SEC)
                .wait(60 * SEC)
                .priority(p)
                .acquire()
                .unwrap()
                .expect("granted within the wait");
            tx.send(p).unwrap();
            g.release().unwrap();
        }));
        let deadline = Instant::now() + 10 * SEC;
        while waiters(&mut c, "res") < i {
            assert!(Instant::now() < deadline, "waiter {i} never queued");
            std::thread::sleep(ms(5));
        }
    }
    assert!(first.release().unwrap());
    let order: Vec<u16> = (0..2).map(|_| rx.recv_timeout(30 * SEC).unwrap()).collect();
    assert_eq!(order, [9, 0]);
    for t in threads {
        t.join().unwrap();
    }
    let e = locker.request("res").priority(1001).acquire().unwrap_err();
    assert!(matches!(e, Error::Invalid(_)), "{e}");
}

/// `.permits(k)`: one guard holding k of a semaphore's permits, given back
/// whole on release; k out of range is refused before the server is asked.
#[test]
fn a_weighted_guard_holds_all_of_its_permits() {
    let server = Server::start();
    let locker = Locker::new(&server.url()).unwrap();
    let request = |k: u32| locker.request("pool").ttl(30 * SEC).limit(4).permits(k);
    let big = request(3)
        .acquire()
        .unwrap()
        .expect("free: granted at once");
    assert!(
        request(2).acquire().unwrap().is_none(),
        "3 + 2 of 4: none now"
    );
    let one = request(1).acquire().unwrap().expect("3 + 1 of 4");
    assert!(big.release().unwrap());
    let again = request(3).acquire().unwrap().expect("all 3 given back");
    assert!(one.release().unwrap() && again.release().unwrap());
    for (limit, k) in [(4, 5), (4, 0), (1, 1)] {
        let e = locker
            .request("pool")
            .limit(limit)
            .permits(k)
            .acquire()
            .unwrap_err();
        assert!(matches!(e, Error::Invalid(_)), "{limit} {k}: {e}");
    }
    let e = locker.request("pool").permits(2).acquire().unwrap_err();
    assert!(matches!(e, Error::Invalid(_)), "no limit: {e}");
}

/// `resize`: growing a held semaphore lets one more permit in, the
/// previous limit back; nothing held answers `None`; a limit out of range
/// is refused before the server is asked.
#[test]
fn resize_grows_a_held_semaphore() {
    let server = Server::start();
    let locker = Locker::new(&server.url()).unwrap();
    let request = || locker.request("pool").ttl(30 * SEC).limit(2);
    let a = request().acquire().unwrap().expect("free");
    let b = request().acquire().unwrap().expect("2 of 2");
    assert!(request().acquire().unwrap().is_none(), "full");
    assert_eq!(locker.resize("pool", 3).unwrap(), Some(2));
    let c = request()
        .acquire()
        .unwrap()
        .expect("3 of 3, under the old limit");
    assert_eq!(locker.resize("free", 3).unwrap(), None);
    for n in [0, 1, dlock_client::MAX_LIMIT + 1] {
        let e = locker.resize("pool", n).unwrap_err();
        assert!(matches!(e, Error::Invalid(_)), "{n}: {e}");
    }
    assert!(a.release().unwrap() && b.release().unwrap() && c.release().unwrap());
}
