//! `PRIORITY p` on `DLOCK.ACQUIRE` and `DLOCK.MACQUIRE`, aged by
//! `dlock.priority-aging-ms` (docs/waiting.md#priorities).
//!
//! No test depends on how fast the server runs: with an aging of an hour a
//! higher priority is always ahead of anything that queued within the
//! test; at the aging boundary only a lower bound on the time between two
//! arrivals is used (a sleep makes the gap at least that long, never at
//! most). Order is read from `DLOCK.WAITERS`/`DLOCK.POSITION` after each
//! waiter is seen queued, never from timing.
use crate::common::dump::digest;
use crate::common::lock::*;
use crate::common::waiter::Waiter;
use crate::common::*;
use redis::{Connection, Value};
use std::time::Duration;

mod mix;
mod turns;

const AN_HOUR_MS: u64 = 3_600_000;
const PRIORITY_ERR: &str = "ERR PRIORITY must be an integer from 0 to 1000";

fn set_aging(c: &mut Connection, ms: u64) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("dlock.priority-aging-ms")
        .arg(ms)
        .query(c)
        .expect("CONFIG SET dlock.priority-aging-ms");
}

/// `DLOCK.ACQUIRE res tok 60000 [PRIORITY p] [SHARED] WAIT 0`, blocked on a
/// thread of its own.
fn queue(s: &Server, res: &str, tok: &str, priority: Option<u16>, shared: bool) -> Waiter {
    let mut cmd = redis::cmd("DLOCK.ACQUIRE");
    cmd.arg(res).arg(tok).arg(60_000);
    if let Some(p) = priority {
        cmd.arg("PRIORITY").arg(p);
    }
    if shared {
        cmd.arg("SHARED");
    }
    cmd.arg("WAIT").arg(0);
    Waiter::send(s, cmd)
}

/// The tokens waiting on `res` (up to 1,000), head first, with their
/// priorities.
fn waiting(c: &mut Connection, res: &str) -> Vec<(String, i64)> {
    let page: Vec<Value> = redis::cmd("DLOCK.WAITERS")
        .arg(res)
        .arg("COUNT")
        .arg(1000)
        .query(c)
        .expect("DLOCK.WAITERS");
    page.into_iter()
        .map(|w| {
            let pairs: Vec<(String, Value)> = match w {
                Value::Map(pairs) => pairs
                    .into_iter()
                    .map(|(k, v)| (String::from_utf8_lossy(&as_bytes(&k)).into_owned(), v))
                    .collect(),
                Value::Array(flat) => flat
                    .chunks(2)
                    .map(|kv| {
                        let k = String::from_utf8_lossy(&as_bytes(&kv[0])).into_owned();
                        (k, kv[1].clone())
                    })
                    .collect(),
                other => panic!("a waiter is a map, got {other:?}"),
            };
            let field = |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_else(|| panic!("no {name} in {pairs:?}"))
            };
            let token = String::from_utf8_lossy(&as_bytes(&field("token"))).into_owned();
            (token, as_int(&field("priority")))
        })
        .collect()
}

fn position(c: &mut Connection, res: &str, tok: &str) -> Option<i64> {
    redis::cmd("DLOCK.POSITION")
        .arg(res)
        .arg(tok)
        .query(c)
        .expect("DLOCK.POSITION")
}

#[test]
fn a_higher_priority_is_granted_first_and_equal_ones_in_arrival_order() {
    let s = Server::start();
    let mut c = s.conn();
    set_aging(&mut c, AN_HOUR_MS);
    acquire(&mut c, "r", "h", 60_000);
    let a = queue(&s, "r", "a", None, false);
    wait_waiters(&mut c, "r", 1);
    let b = queue(&s, "r", "b", Some(0), false);
    wait_waiters(&mut c, "r", 2);
    let x = queue(&s, "r", "x", Some(5), false);
    wait_waiters(&mut c, "r", 3);
    let y = queue(&s, "r", "y", Some(5), false);
    wait_waiters(&mut c, "r", 4);
    let z = queue(&s, "r", "z", Some(7), false);
    wait_waiters(&mut c, "r", 5);
    assert_eq!(
        waiting(&mut c, "r"),
        [
            ("z".into(), 7),
            ("x".into(), 5),
            ("y".into(), 5),
            ("a".into(), 0),
            ("b".into(), 0)
        ]
    );
    assert_eq!(position(&mut c, "r", "a"), Some(4));
    // Granted in that order, one release at a time.
    release(&mut c, "r", "h");
    for (w, tok) in [(&z, "z"), (&x, "x"), (&y, "y"), (&a, "a")] {
        let (_, _) = w.granted();
        assert!(b.pending(), "b was granted before {tok}");
        release(&mut c, "r", tok);
    }
    let (_, _) = b.granted();
}

#[test]
fn a_priority_passes_only_within_its_window() {
    // One level per ms: a request of priority 10 arriving at least 20 ms
    // after one of priority 0 ranks behind it (10 ms of head start is
    // less than 20 ms of waiting). The sleep bounds the gap from below
    // only, so a slow machine only widens it.
    let s = Server::start();
    let mut c = s.conn();
    set_aging(&mut c, 1);
    acquire(&mut c, "r", "h", 60_000);
    let a = queue(&s, "r", "a", None, false);
    wait_waiters(&mut c, "r", 1);
    std::thread::sleep(Duration::from_millis(20));
    let b = queue(&s, "r", "b", Some(10), false);
    wait_waiters(&mut c, "r", 2);
    assert_eq!(waiting(&mut c, "r"), [("a".into(), 0), ("b".into(), 10)]);
    release(&mut c, "r", "h");
    let (_, _) = a.granted();
    assert!(b.pending());
    release(&mut c, "r", "a");
    let (_, _) = b.granted();
}

/// What an error must leave as it was: the value, its info, the queue.
fn snapshot(c: &mut Connection, keys: &[&str]) -> Vec<String> {
    keys.iter()
        .flat_map(|k| {
            // The lease's ttl left ticks down: token, fence and waiters.
            let shown = info(c, k).map(|i| (i.token, i.fence, i.waiters));
            [
                digest(c, k),
                format!("{shown:?}"),
                format!("{:?}", waiting(c, k)),
            ]
        })
        .collect()
}

#[test]
fn a_bad_priority_is_refused_and_changes_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    acquire(&mut c, "r", "h", 60_000);
    acquire(&mut c, "q", "h", 60_000);
    let _w = queue(&s, "r", "w", Some(3), false);
    wait_waiters(&mut c, "r", 1);
    let before = snapshot(&mut c, &["r", "q"]);
    let stats = info_field(&mut c, "dlock", "dlock_contended");
    let acquire_with = |c: &mut Connection, opts: &[&str]| {
        let mut cmd = redis::cmd("DLOCK.ACQUIRE");
        cmd.arg("r").arg("n").arg(1000).arg(opts);
        err_of(cmd.query(c))
    };
    let macquire_with = |c: &mut Connection, opts: &[&str]| {
        let mut cmd = redis::cmd("DLOCK.MACQUIRE");
        cmd.arg(2).arg("r").arg("q").arg("n").arg(1000).arg(opts);
        err_of(cmd.query(c))
    };
    for bad in ["-1", "1001", "x", "", "1e3", "18446744073709551617"] {
        for opts in [vec!["PRIORITY", bad], vec!["PRIORITY", bad, "WAIT", "10"]] {
            assert_eq!(acquire_with(&mut c, &opts), PRIORITY_ERR, "{opts:?}");
            assert_eq!(macquire_with(&mut c, &opts), PRIORITY_ERR, "{opts:?}");
        }
    }
    for opts in [vec!["PRIORITY"], vec!["PRIORITY", "1", "PRIORITY", "1"]] {
        assert_eq!(acquire_with(&mut c, &opts), "ERR syntax error", "{opts:?}");
        assert_eq!(macquire_with(&mut c, &opts), "ERR syntax error", "{opts:?}");
    }
    assert_eq!(snapshot(&mut c, &["r", "q"]), before);
    assert_eq!(info_field(&mut c, "dlock", "dlock_contended"), stats);
    // The bounds themselves are accepted (nil: held).
    for p in ["0", "1000"] {
        let got: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
            .arg("r")
            .arg("n")
            .arg(1000)
            .arg("PRIORITY")
            .arg(p)
            .query(&mut c)
            .unwrap();
        assert_eq!(got, None);
    }
}

#[test]
fn the_aging_config_has_a_range_and_a_default() {
    let s = Server::builder()
        .module_arg("priority-aging-ms")
        .module_arg("250")
        .start();
    let mut c = s.conn();
    let got: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("dlock.priority-aging-ms")
        .query(&mut c)
        .unwrap();
    assert_eq!(got, ["dlock.priority-aging-ms", "250"]);
    for bad in ["0", "3600001", "x"] {
        let r: redis::RedisResult<()> = redis::cmd("CONFIG")
            .arg("SET")
            .arg("dlock.priority-aging-ms")
            .arg(bad)
            .query(&mut c);
        assert!(r.is_err(), "CONFIG SET {bad} accepted");
    }
    set_aging(&mut c, AN_HOUR_MS);
    let default = Server::start();
    let got: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("dlock.priority-aging-ms")
        .query(&mut default.conn())
        .unwrap();
    assert_eq!(got, ["dlock.priority-aging-ms", "1000"]);
}

#[test]
fn a_set_request_is_passed_on_one_member_only() {
    let s = Server::start();
    let mut c = s.conn();
    set_aging(&mut c, AN_HOUR_MS);
    acquire(&mut c, "{s}1", "h", 60_000);
    acquire(&mut c, "{s}2", "h", 60_000);
    let set = Waiter::send(
        &s,
        redis::cmd("DLOCK.MACQUIRE")
            .arg(2)
            .arg("{s}1")
            .arg("{s}2")
            .arg("set")
            .arg(60_000)
            .arg("WAIT")
            .arg(0)
            .clone(),
    );
    wait_waiters(&mut c, "{s}2", 1);
    let x = queue(&s, "{s}1", "x", Some(4), false);
    wait_waiters(&mut c, "{s}1", 2);
    // Ahead of the set on its member, and only there.
    assert_eq!(position(&mut c, "{s}1", "x"), Some(1));
    assert_eq!(position(&mut c, "{s}1", "set"), Some(2));
    assert_eq!(position(&mut c, "{s}2", "set"), Some(1));
    release(&mut c, "{s}1", "h");
    let (_, _) = x.granted();
    release(&mut c, "{s}2", "h");
    assert!(set.pending(), "the set was granted a member x holds");
    release(&mut c, "{s}1", "x");
    let (_, _) = set.granted();
    assert_eq!(held(&mut c, "{s}1").token, b"set");
    assert_eq!(held(&mut c, "{s}2").token, b"set");
}

#[test]
fn a_reader_that_outranks_a_waiting_writer_joins_the_readers() {
    let s = Server::start();
    let mut c = s.conn();
    set_aging(&mut c, AN_HOUR_MS);
    let shared = |c: &mut Connection, tok: &str, p: Option<u16>| -> Option<i64> {
        let mut cmd = redis::cmd("DLOCK.ACQUIRE");
        cmd.arg("r").arg(tok).arg(60_000).arg("SHARED");
        if let Some(p) = p {
            cmd.arg("PRIORITY").arg(p);
        }
        cmd.query(c).unwrap()
    };
    assert!(shared(&mut c, "r1", None).is_some());
    let writer = queue(&s, "r", "w", None, false);
    wait_until(Duration::from_secs(10), "the writer queued", || {
        waiting(&mut c, "r").len() == 1
    });
    // Behind the writer at the same priority: nil.
    assert_eq!(shared(&mut c, "r2", None), None);
    // Ahead of it: granted beside the reader that holds.
    assert!(shared(&mut c, "r3", Some(1)).is_some());
    assert!(writer.pending());
    assert_eq!(waiting(&mut c, "r"), [("w".into(), 0)]);
    release(&mut c, "r", "r1");
    assert!(writer.pending());
    release(&mut c, "r", "r3");
    let (_, _) = writer.granted();
}

mod info;
