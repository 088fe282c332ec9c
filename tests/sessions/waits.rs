//! `DLOCK.SESSION WAITS`: a session's waiting requests, paged.

use std::time::Duration;

use crate::common::waiter::Waiter;
use crate::common::{wait_until, Server};

fn open(c: &mut redis::Connection, id: &str) {
    let _: i64 = redis::cmd("DLOCK.SESSION")
        .arg(&["OPEN", id, "60000"])
        .query(c)
        .unwrap();
}

fn hold(c: &mut redis::Connection, res: &str, token: &str, session: &str) {
    let f: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
        .arg(&[res, token, "0", "SESSION", session])
        .query(c)
        .unwrap();
    assert!(f.is_some());
}

fn bound_wait(res: &str, token: &str, session: &str, ms: u64) -> redis::Cmd {
    let mut cmd = redis::cmd("DLOCK.ACQUIRE");
    cmd.arg(&[res, token, "0", "SESSION", session, "WAIT"])
        .arg(ms);
    cmd
}

/// Waits until `res` has `n` waiters.
fn queued(c: &mut redis::Connection, res: &str, n: i64) {
    wait_until(Duration::from_secs(10), "the waiter queued", || {
        let q: Vec<Vec<u8>> = redis::cmd("DLOCK.QUEUED").arg(res).query(c).unwrap();
        (q.len() as i64) >= n.min(1)
    });
}

#[test]
fn a_sessions_waits_are_listed_with_their_members() {
    let s = Server::start();
    let mut c = s.conn();
    open(&mut c, "A");
    open(&mut c, "B");
    hold(&mut c, "x", "a1", "A");
    hold(&mut c, "y", "a2", "A");
    let _one = Waiter::send(&s, bound_wait("x", "b1", "B", 20_000));
    queued(&mut c, "x", 1);
    let mut set = redis::cmd("DLOCK.MACQUIRE");
    set.arg(&["2", "x", "y", "b2", "0", "SESSION", "B", "WAIT", "20000"]);
    let _two = Waiter::send(&s, set);
    queued(&mut c, "y", 1);
    let page: redis::Value = redis::cmd("DLOCK.SESSION")
        .arg(&["WAITS", "B", "COUNT", "1"])
        .query(&mut c)
        .unwrap();
    let (next, first): (Option<i64>, Vec<(String, Vec<redis::Value>)>) =
        redis::from_redis_value(&page).unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].0, "b1");
    assert_eq!(first[0].1.len(), 2, "one member: db and resource");
    let page: redis::Value = redis::cmd("DLOCK.SESSION")
        .arg(&["WAITS", "B", "AFTER"])
        .arg(next.expect("a second page"))
        .query(&mut c)
        .unwrap();
    let (done, rest): (Option<i64>, Vec<(String, Vec<redis::Value>)>) =
        redis::from_redis_value(&page).unwrap();
    assert_eq!(done, None);
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].0, "b2");
    assert_eq!(rest[0].1.len(), 4, "two members");
    let none: Option<i64> = redis::cmd("DLOCK.SESSION")
        .arg(&["WAITS", "nobody"])
        .query(&mut c)
        .unwrap();
    assert_eq!(none, None);
}

#[test]
fn a_reader_behind_a_bound_writer_whose_session_ends_is_granted() {
    let s = Server::start();
    let mut c = s.conn();
    let f: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
        .arg(&["rs", "r1", "10000", "SHARED"])
        .query(&mut c)
        .unwrap();
    assert!(f.is_some());
    open(&mut c, "W");
    let writer = Waiter::send(&s, bound_wait("rs", "writer", "W", 0));
    queued(&mut c, "rs", 1);
    let mut read = redis::cmd("DLOCK.ACQUIRE");
    read.arg(&["rs", "r2", "5000", "SHARED", "WAIT", "0"]);
    let reader = Waiter::send(&s, read);
    std::thread::sleep(Duration::from_millis(50));
    assert!(reader.pending(), "the reader waits behind the writer");
    let _: i64 = redis::cmd("DLOCK.SESSION")
        .arg(&["CLOSE", "W"])
        .query(&mut c)
        .unwrap();
    let (reply, _) = writer.reply();
    assert!(format!("{:?}", reply.unwrap_err()).contains("NOSESSION"));
    reader.granted();
}
