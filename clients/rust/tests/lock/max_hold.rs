//! `max_hold`: the server's `MAXHOLD` cap. The client's commands for a
//! capped hold (the acquire's refresh after a wait, the watchdog's
//! renewals) stay short of the cap, so the server never refuses them, and
//! the guard is lost at the cap with that reason; a manual `extend` past it
//! gets the server's refusal as its error.

use crate::common::{holder, maxhold_refusals, ms, pttl, Server, SEC};
use dlock_client::{Error, Locker};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

#[test]
fn the_watchdog_renews_up_to_the_cap_and_reports_it_as_the_loss() {
    let server = Server::start();
    let mut c = server.conn();
    let locker = Locker::new(&server.url()).unwrap();
    let called = Arc::new(AtomicBool::new(false));
    let flag = called.clone();
    // A ttl close to the cap: the renewal a third of the way in asks for
    // what is left to the cap, not the ttl (which the server would refuse).
    let started = Instant::now();
    let g = locker
        .request("res")
        .ttl(ms(2700))
        .max_hold(ms(3000))
        .watchdog()
        .on_lost(move || flag.store(true, Ordering::SeqCst))
        .acquire()
        .unwrap()
        .expect("free");
    // A capped hold is shown in INFO's list form, with its cap.
    let info: Vec<redis::Value> = redis::cmd("DLOCK.INFO").arg("res").query(&mut c).unwrap();
    assert!(format!("{info:?}").contains("maxhold"), "{info:?}");
    assert_eq!(g.loss_reason(), None, "held");
    let lost = g.lost_signal();
    lost.recv_timeout(10 * SEC).expect("lost at the cap");
    let held = started.elapsed();
    // Kept well past a third of the cap (a loaded machine only makes the
    // loss later), and lost by the cap with a generous slack.
    assert!(held >= ms(1500), "lost after {held:?}");
    assert!(held <= ms(5000), "lost after {held:?}");
    assert!(called.load(Ordering::SeqCst));
    assert!(g.is_lost());
    let why = g.loss_reason().expect("a reason");
    assert!(why.starts_with("MAXHOLD "), "{why}");
    assert_eq!(maxhold_refusals(&mut c), 0, "no renewal was refused");
}

#[test]
fn a_waiting_acquire_with_max_hold_within_its_ttl_is_granted_and_ends_by_the_cap() {
    let server = Server::start();
    let mut c = server.conn();
    let locker = Locker::new(&server.url()).unwrap();
    // Held by another for a moment: the request waits, and its grant is
    // refreshed with the same token.
    let other = locker.try_lock("res", ms(300)).unwrap().expect("free");
    let started = Instant::now();
    let g = locker
        .request("res")
        .ttl(ms(4000))
        .max_hold(ms(2000))
        .wait(10 * SEC)
        .acquire()
        .unwrap()
        .expect("granted after the wait");
    drop(other);
    assert!(pttl(&mut c, "res") <= 2000);
    assert!(
        g.valid_until() <= Instant::now() + ms(2000),
        "the budget counts the cap"
    );
    assert!(g.wait_lost(10 * SEC), "lost by the cap");
    assert!(started.elapsed() <= ms(2000) + 2 * SEC);
    assert!(g.loss_reason().expect("a reason").starts_with("MAXHOLD "));
    assert_eq!(maxhold_refusals(&mut c), 0, "the refresh was not refused");
}

#[test]
fn a_wait_longer_than_the_cap_is_granted_until_the_cap_counted_from_the_grant() {
    let server = Server::start();
    let mut c = server.conn();
    let locker = Locker::new(&server.url()).unwrap();
    // Held by another for longer than the request's cap: its grant comes
    // (at the other's deadline) after a wait past max_hold, and the cap
    // counts from that grant.
    let other = locker.try_lock("res", ms(1500)).unwrap().expect("free");
    let g = locker
        .request("res")
        .ttl(ms(1000))
        .max_hold(ms(1000))
        .wait(20 * SEC)
        .acquire()
        .unwrap()
        .expect("granted after the wait");
    let granted = Instant::now();
    assert!(!g.is_lost(), "a grant after a wait past max_hold is held");
    assert!(g.valid_until() > granted, "its budget lies ahead");
    // The server holds it for this guard (a capped hold is shown in
    // INFO's list form).
    let info: redis::Value = redis::cmd("DLOCK.INFO").arg("res").query(&mut c).unwrap();
    assert!(format!("{info:?}").contains(g.token()), "{info:?}");
    assert!(g.wait_lost(10 * SEC), "lost by the cap");
    assert!(granted.elapsed() <= ms(1000) + 2 * SEC);
    assert!(g.loss_reason().expect("a reason").starts_with("MAXHOLD "));
    // The refresh asked for the whole ttl once, to learn where the cap
    // is: at most that one command was refused.
    assert!(maxhold_refusals(&mut c) <= 1);
    drop(other);
}

#[test]
fn the_lease_is_the_smaller_of_ttl_and_max_hold_and_extend_past_it_fails() {
    let server = Server::start();
    let mut c = server.conn();
    let locker = Locker::new(&server.url()).unwrap();
    let g = locker
        .request("res")
        .ttl(60 * SEC)
        .max_hold(30 * SEC)
        .acquire()
        .unwrap()
        .expect("free");
    assert!(pttl(&mut c, "res") <= 30_000);
    assert!(
        g.valid_until() <= std::time::Instant::now() + 30 * SEC,
        "the budget counts the cap"
    );
    assert!(g.extend(10 * SEC).unwrap(), "within the cap");
    match g.extend(31 * SEC) {
        Err(Error::MaxHold(why)) => assert!(why.starts_with("MAXHOLD "), "{why}"),
        other => panic!("expected the MAXHOLD refusal, got {other:?}"),
    }
    assert!(g.is_lost(), "the critical section ends as for any loss");
    assert!(g.loss_reason().is_some());
    // The server still holds it until the cap: release gives it back.
    assert!(g.release().is_ok());
}

#[test]
fn a_bad_max_hold_is_refused_before_any_server_is_asked() {
    let server = Server::start();
    let locker = Locker::new(&server.url()).unwrap();
    for bad in [ms(0), std::time::Duration::from_millis((1 << 47) + 1)] {
        let r = locker.request("res").max_hold(bad).acquire();
        assert!(matches!(r, Err(Error::Invalid(_))), "{bad:?}: {r:?}");
    }
    let mut c = server.conn();
    assert_eq!(holder(&mut c, "res"), None);
}
