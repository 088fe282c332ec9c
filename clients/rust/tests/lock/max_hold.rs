//! `max_hold`: the server's `MAXHOLD` cap. The watchdog's renewal past the
//! cap is refused, and the guard is lost with that reason; a manual
//! `extend` past it gets the refusal as its error.

use crate::common::{holder, ms, pttl, Server, SEC};
use dlock_client::{Error, Locker};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[test]
fn the_watchdog_reports_the_cap_as_the_loss_with_its_reason() {
    let server = Server::start();
    let mut c = server.conn();
    let locker = Locker::new(&server.url()).unwrap();
    let called = Arc::new(AtomicBool::new(false));
    let flag = called.clone();
    // Renewed every 200 ms by 600 ms: the renewal after the first must
    // pass the cap at 900 ms, and is refused.
    let g = locker
        .request("res")
        .ttl(ms(600))
        .max_hold(ms(900))
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
    assert!(called.load(Ordering::SeqCst));
    assert!(g.is_lost());
    let why = g.loss_reason().expect("a reason");
    assert!(
        why.starts_with("MAXHOLD the hold may live ")
            && why.ends_with("ms more: it cannot be extended past its MAXHOLD"),
        "{why}"
    );
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
