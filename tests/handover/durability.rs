//! Handovers through a replica and the AOF: no new effect, the release and
//! the grant in one transaction, so each holds exactly what the master
//! holds, plain lock, shared holds and permits alike.
use super::*;
use crate::common::dump::{digest, dump};
use std::time::Duration;

const KEYS: [&str; 3] = ["p", "rw", "sem"];

/// Handovers of a plain lock (twice, deep and at the head), of a writer
/// to a reader that other readers join, of a permit; and one refused.
fn populate(s: &Server, c: &mut Connection) -> Vec<Waiter> {
    let mut waiters = Vec::new();
    grant(c, "p", "h", 60_000);
    waiters.push(queue(s, c, "p", "a", &[]));
    waiters.push(queue(s, c, "p", "t", &[]));
    assert_eq!(release_to(c, "p", "h", "t"), 1);
    assert_eq!(release_to(c, "p", "t", "a"), 1);
    grant(c, "rw", "w", 60_000);
    for (tok, opts) in [("r1", &["SHARED"][..]), ("w2", &[]), ("r3", &["SHARED"])] {
        waiters.push(queue(s, c, "rw", tok, opts));
    }
    assert_eq!(release_to(c, "rw", "w", "r3"), 1);
    for t in ["x", "y"] {
        let mut cmd = redis::cmd("DLOCK.ACQUIRE");
        cmd.arg("sem").arg(t).arg(60_000).arg("LIMIT").arg(2);
        let _: i64 = cmd.query(c).unwrap();
    }
    waiters.push(queue(s, c, "sem", "b", &["LIMIT", "2"]));
    assert_eq!(release_to(c, "sem", "y", "b"), 1);
    let refused = err_of(release_to_cmd("sem", "x", "nobody").query(c));
    assert!(refused.starts_with("NOTWAITING "), "{refused}");
    assert_eq!(counter(c, "handovers"), 4);
    waiters
}

/// Each key exactly: its value (`DUMP`), digest and expiry.
fn exactly(c: &mut Connection) -> Vec<(Vec<u8>, String, i64)> {
    KEYS.iter()
        .map(|k| {
            let at: i64 = redis::cmd("PEXPIRETIME").arg(*k).query(c).unwrap();
            (dump(c, k), digest(c, k), at)
        })
        .collect()
}

#[test]
fn a_replica_holds_exactly_what_the_master_holds() {
    let master = Server::start();
    let mut m = master.conn();
    let replica = Server::builder().replica_of(&master).start();
    replica.wait_for_sync(Duration::from_secs(30));
    let _waiters = populate(&master, &mut m);
    let n: i64 = redis::cmd("WAIT").arg(1).arg(10_000).query(&mut m).unwrap();
    assert_eq!(n, 1);
    let mut r = replica.conn();
    assert_eq!(exactly(&mut r), exactly(&mut m));
    let held = |c: &mut Connection| KEYS.map(|k| holders(c, k));
    assert_eq!(held(&mut r), held(&mut m));
    assert_eq!(holders(&mut m, "p")[0].0, "a");
}

#[test]
fn the_aof_replays_and_rewrites_exactly_what_the_master_holds() {
    // Without the RDB preamble a rewrite writes each value as an effect.
    let mut s = Server::builder()
        .aof("always")
        .arg("--aof-use-rdb-preamble")
        .arg("no")
        .start();
    let mut c = s.conn();
    let waiters = populate(&s, &mut c);
    let before = exactly(&mut c);
    drop(waiters);
    s.restart();
    let mut c = s.conn();
    assert_eq!(exactly(&mut c), before, "replayed from the effects");
    rewrite_aof(&mut c);
    s.restart();
    let mut c = s.conn();
    assert_eq!(exactly(&mut c), before, "replayed from a rewrite");
}
