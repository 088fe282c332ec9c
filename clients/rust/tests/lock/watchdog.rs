//! The watchdog of one guard (sessions off: a guard bound to a session is
//! kept by the session's keep-alive instead, see `lock::session`).

use crate::common::{holder, ms, Server, SEC};
use dlock_client::Locker;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

fn extend_calls(c: &mut redis::Connection) -> i64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(c).unwrap();
    info.lines()
        .find(|l| l.starts_with("cmdstat_dlock.extend:"))
        .and_then(|l| l.split("calls=").nth(1))
        .and_then(|v| v.split(',').next())
        .map_or(0, |v| v.parse().unwrap())
}

#[test]
fn the_watchdog_renews_across_several_ttls() {
    let server = Server::start();
    let locker = Locker::new(&server.url()).unwrap().with_sessions(false);
    let mut c = server.conn();
    let g = locker
        .request("res")
        .ttl(ms(600))
        .watchdog()
        .acquire()
        .unwrap()
        .unwrap();
    // Five ttls: without renewal the lock would be gone after the first.
    std::thread::sleep(ms(3000));
    assert_eq!(
        holder(&mut c, "res"),
        Some((g.token().to_string(), g.fence()))
    );
    assert!(!g.is_lost());
    assert!(g.remaining() > ms(0));
    assert!(extend_calls(&mut c) >= 4, "renewed at about ttl/3");
    assert!(g.release().unwrap());
}

#[test]
fn the_watchdog_signals_loss_within_a_third_of_the_ttl_after_an_admin_del() {
    let server = Server::start();
    let locker = Locker::new(&server.url()).unwrap().with_sessions(false);
    let mut c = server.conn();
    let called = Arc::new(AtomicBool::new(false));
    let flag = called.clone();
    let ttl = 3 * SEC;
    let g = locker
        .request("res")
        .ttl(ttl)
        .watchdog()
        .on_lost(move || flag.store(true, Ordering::SeqCst))
        .acquire()
        .unwrap()
        .unwrap();
    let lost = g.lost_signal();
    let _: i64 = redis::cmd("DEL").arg("res").query(&mut c).unwrap();
    let deleted = Instant::now();
    // The next renewal (within ttl/3) is answered 0; slack for a loaded CI.
    lost.recv_timeout(ttl / 3 + ms(700))
        .expect("loss signalled");
    assert!(deleted.elapsed() <= ttl / 3 + ms(700));
    assert!(g.is_lost());
    assert!(called.load(Ordering::SeqCst), "callback ran");
    // Lost for good: nobody else's lock is touched, release answers false.
    let other = locker.try_lock("res", 10 * SEC).unwrap().unwrap();
    assert!(!g.release().unwrap());
    assert_eq!(
        holder(&mut c, "res"),
        Some((other.token().to_string(), other.fence()))
    );
}

#[test]
fn the_watchdog_never_renews_after_release() {
    let server = Server::start();
    let locker = Locker::new(&server.url()).unwrap().with_sessions(false);
    let mut c = server.conn();
    let g = locker
        .request("res")
        .ttl(ms(300))
        .watchdog()
        .acquire()
        .unwrap()
        .unwrap();
    std::thread::sleep(ms(500));
    assert!(g.release().unwrap());
    let calls = extend_calls(&mut c);
    assert!(calls >= 1);
    std::thread::sleep(ms(800));
    assert_eq!(extend_calls(&mut c), calls, "an EXTEND after release");
    assert_eq!(holder(&mut c, "res"), None);
}

#[test]
fn a_dropped_guard_stops_its_watchdog_and_releases() {
    let server = Server::start();
    let locker = Locker::new(&server.url()).unwrap().with_sessions(false);
    let mut c = server.conn();
    let g = locker
        .request("res")
        .ttl(ms(300))
        .watchdog()
        .acquire()
        .unwrap()
        .unwrap();
    std::thread::sleep(ms(400));
    drop(g);
    assert_eq!(holder(&mut c, "res"), None);
    let calls = extend_calls(&mut c);
    std::thread::sleep(ms(500));
    assert_eq!(extend_calls(&mut c), calls);
}

#[test]
fn a_watchdog_guard_is_lost_once_its_budget_passes_even_while_a_renewal_hangs() {
    // The server pauses (or the network drops): the watchdog's EXTEND hangs
    // for up to io_timeout per attempt, retried for retry_for. Once the
    // budget has passed, is_lost() must say so at once (the lease may have
    // ended on the server, and another client may hold it), not only when
    // the hanging renewal gives up seconds later.
    let server = Server::start();
    let locker = Locker::new(&server.url())
        .unwrap()
        .with_sessions(false)
        .with_io_timeout(ms(1500))
        .with_retry_for(2 * SEC);
    let g = locker
        .request("res")
        .ttl(ms(900))
        .watchdog()
        .acquire()
        .unwrap()
        .unwrap();
    server.stop();
    let until = g.valid_until();
    std::thread::sleep(until.saturating_duration_since(Instant::now()) + ms(150));
    let lost = g.is_lost();
    let remaining = g.remaining();
    let waited = g.wait_lost(ms(100));
    server.cont();
    assert_eq!(remaining, ms(0), "the budget has passed");
    assert!(lost, "is_lost() after the budget passed");
    assert!(waited, "wait_lost() after the budget passed");
    let _ = g.release();
}
