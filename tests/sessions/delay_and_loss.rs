//! A lock-delay's hold is held by nobody (its token can release it, never
//! extend or take it back), and sessions do not outlive a restart or a
//! promotion that may have lost what they did.

use std::time::Duration;

use crate::common::waiter::Waiter;
use crate::common::{info_field, wait_until, Server};

fn session(c: &mut redis::Connection, args: &[&str]) -> redis::RedisResult<redis::Value> {
    redis::cmd("DLOCK.SESSION").arg(args).query(c)
}

#[test]
fn a_delayed_hold_cannot_be_extended_or_taken_back_by_its_token() {
    let s = Server::start();
    let mut c = s.conn();
    session(&mut c, &["OPEN", "kd", "60000", "LOCKDELAY", "1500"]).unwrap();
    let f: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
        .arg(&["r", "t", "0", "SESSION", "kd"])
        .query(&mut c)
        .unwrap();
    assert!(f.is_some());
    let waiter = Waiter::send(&s, {
        let mut w = redis::cmd("DLOCK.ACQUIRE");
        w.arg(&["r", "next", "10000", "WAIT", "20000"]);
        w
    });
    session(&mut c, &["KILL", "kd"]).unwrap();
    wait_until(Duration::from_secs(10), "the delay starts", || {
        let t: i64 = redis::cmd("PTTL").arg("r").query(&mut c).unwrap();
        t > 0
    });
    let e = redis::cmd("DLOCK.EXTEND")
        .arg(&["r", "t", "600000"])
        .query::<i64>(&mut c)
        .unwrap_err();
    assert!(format!("{e}").contains("bound to a session"), "{e}");
    for session_arg in [&[][..], &["SESSION", "kd"][..]] {
        let e = redis::cmd("DLOCK.ACQUIRE")
            .arg(&["r", "t", "600000"])
            .arg(session_arg)
            .query::<Option<i64>>(&mut c);
        assert!(e.is_err(), "a retry takes the delayed hold back: {e:?}");
    }
    let t: i64 = redis::cmd("PTTL").arg("r").query(&mut c).unwrap();
    assert!(t <= 1500, "the delay was stretched to {t} ms");
    assert!(waiter.pending());
    waiter.granted();
}

#[test]
fn a_restart_that_may_have_lost_writes_ends_every_session() {
    let mut s = Server::builder().aof("everysec").start();
    let mut c = s.conn();
    session(&mut c, &["OPEN", "s", "3000"]).unwrap();
    let f: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
        .arg(&["x", "t", "0", "SESSION", "s"])
        .query(&mut c)
        .unwrap();
    assert!(f.is_some());
    // Let everysec reach the disk, then crash: the restart is quarantined.
    std::thread::sleep(Duration::from_millis(1200));
    s.kill9();
    s.restart();
    let mut c = s.conn();
    wait_until(Duration::from_secs(10), "the session ends", || {
        info_field(&mut c, "dlock", "dlock_sessions").as_deref() == Some("0")
    });
    let e = session(&mut c, &["KEEPALIVE", "s"]).unwrap_err();
    assert!(format!("{e}").contains("NOSESSION"), "{e}");
    assert_eq!(
        info_field(&mut c, "dlock", "dlock_sessions_lost").as_deref(),
        Some("1")
    );
}

#[test]
fn a_clean_restart_keeps_the_sessions() {
    let mut s = Server::builder().aof("everysec").start();
    let mut c = s.conn();
    session(&mut c, &["OPEN", "s", "60000"]).unwrap();
    s.shutdown();
    s.restart();
    let mut c = s.conn();
    let left: i64 = redis::cmd("DLOCK.SESSION")
        .arg(&["KEEPALIVE", "s"])
        .query(&mut c)
        .unwrap();
    assert_eq!(left, 60000);
}
