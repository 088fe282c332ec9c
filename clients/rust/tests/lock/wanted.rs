//! `on_wanted`: a held lock hears, from its renewals, that someone waits.

use crate::common::{waiters, Server, SEC};
use dlock_client::{Locker, Wanted};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Polls until `n` requests wait on `res` (bounded).
fn wait_for_waiters(c: &mut redis::Connection, res: &str, n: i64) {
    let end = Instant::now() + 10 * SEC;
    while waiters(c, res) != n {
        assert!(Instant::now() < end, "{n} waiters on {res} within 10 s");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn an_extend_tells_the_hook_when_someone_starts_waiting() {
    let server = Server::start();
    let locker = Locker::new(&server.url()).unwrap();
    let mut c = server.conn();
    let (tx, rx) = mpsc::channel();
    let g = locker
        .request("res")
        .ttl(30 * SEC)
        .on_wanted(move |w| tx.send(w).unwrap())
        .acquire()
        .unwrap()
        .unwrap();
    // Nobody waits: extended, nothing told.
    assert!(g.extend(30 * SEC).unwrap());
    let url = server.url();
    let waiter = std::thread::spawn(move || {
        let other = Locker::new(&url).unwrap();
        let g = other.request("res").wait(30 * SEC).acquire().unwrap();
        g.map(|g| g.fence())
    });
    wait_for_waiters(&mut c, "res", 1);
    assert!(g.extend(30 * SEC).unwrap());
    assert_eq!(rx.recv_timeout(10 * SEC).unwrap(), Wanted::Waiters(1));
    // Still wanted: told once per change, not per renewal.
    assert!(g.extend(30 * SEC).unwrap());
    // Yield.
    let fence = g.fence();
    assert!(g.release().unwrap());
    assert!(waiter.join().unwrap().unwrap() > fence);
    assert!(
        rx.recv_timeout(10 * SEC).is_err(),
        "one event, then the hook ended"
    );
}

#[test]
fn the_watchdog_tells_the_hook_and_the_guard_is_not_bound_to_a_session() {
    let server = Server::start();
    // Sessions on (the default): a hooked guard still renews its own lease.
    let locker = Locker::new(&server.url()).unwrap();
    let mut c = server.conn();
    let (tx, rx) = mpsc::channel();
    let g = locker
        .request("res")
        .ttl(SEC)
        .watchdog()
        .on_wanted(move |w| tx.send(w).unwrap())
        .acquire()
        .unwrap()
        .unwrap();
    assert_eq!(g.session(), None);
    let url = server.url();
    let waiter = std::thread::spawn(move || {
        let other = Locker::new(&url).unwrap();
        other
            .request("res")
            .wait(30 * SEC)
            .acquire()
            .unwrap()
            .is_some()
    });
    wait_for_waiters(&mut c, "res", 1);
    assert_eq!(rx.recv_timeout(10 * SEC).unwrap(), Wanted::Waiters(1));
    assert!(!g.is_lost());
    assert!(g.release().unwrap());
    assert!(waiter.join().unwrap());
}
