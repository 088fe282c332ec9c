//! Lowering the longest TTL the restart quarantine uses (`CONFIG SET
//! dlock.longest-ttl`, docs/safety.md#lowering-the-longest-ttl): never below
//! what a live lock on the node still has (in any database, a hold's own
//! deadline too), never raised, refused on a replica, and a crash after a
//! save quarantines for the lowered value.
use crate::common;

use common::lock::*;
use common::*;
use redis::Connection;
use std::time::Duration;

const YEAR_MS: i64 = 31_536_000_000;

fn longest(c: &mut Connection) -> i64 {
    info_field(c, "dlock", "dlock_longest_ttl")
        .expect("dlock_longest_ttl")
        .parse()
        .unwrap()
}

fn config_get(c: &mut Connection) -> i64 {
    let (_, v): (String, String) = redis::cmd("CONFIG")
        .arg("GET")
        .arg("dlock.longest-ttl")
        .query(c)
        .unwrap();
    v.parse().unwrap()
}

fn lower(c: &mut Connection, ms: i64) -> redis::RedisResult<()> {
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("dlock.longest-ttl")
        .arg(ms)
        .query(c)
}

fn shared(c: &mut Connection, key: &str, tok: &str, ttl: i64) {
    let f: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
        .arg(key)
        .arg(tok)
        .arg(ttl)
        .arg("SHARED")
        .query(c)
        .unwrap();
    assert!(f.is_some(), "{key} {tok}");
}

#[test]
fn lowering_keeps_what_live_locks_still_have_and_a_crash_quarantines_for_it() {
    let mut s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "yearly", "y", YEAR_MS as u64);
    assert_eq!(release(&mut c, "yearly", "y"), 1);
    assert_eq!(longest(&mut c), YEAR_MS);
    assert_eq!(config_get(&mut c), YEAR_MS);

    // The lock that ends last is in another database, a resource with
    // several holds whose key an operator made persistent: its latest
    // hold's own deadline counts.
    grant(&mut c, "plain", "p", 60_000);
    let _: () = redis::cmd("SELECT").arg(3).query(&mut c).unwrap();
    shared(&mut c, "rw", "r1", 120_000);
    shared(&mut c, "rw", "r2", 90_000);
    let persisted: i64 = redis::cmd("PERSIST").arg("rw").query(&mut c).unwrap();
    assert_eq!(persisted, 1);
    let _: () = redis::cmd("SELECT").arg(0).query(&mut c).unwrap();

    lower(&mut c, 0).expect("CONFIG SET dlock.longest-ttl 0");
    let lowered = longest(&mut c);
    assert!(
        60_000 < lowered && lowered <= 120_000,
        "lowered to {lowered}: not what the shared hold in db 3 still has"
    );
    assert_eq!(config_get(&mut c), lowered);

    // Asking for more changes nothing; asking for less than a live lock
    // has keeps that lock's time.
    lower(&mut c, YEAR_MS).unwrap();
    assert_eq!(longest(&mut c), lowered, "never raised");
    lower(&mut c, 1000).unwrap();
    assert!(longest(&mut c) > 60_000);

    // An RDB saved now carries the lowered value: a crash of this lossy
    // run (no AOF) quarantines for it, not for a year.
    let _: () = redis::cmd("SAVE").query(&mut c).unwrap();
    let mut c = s.crash_and_restart();
    assert_eq!(
        info_field(&mut c, "dlock", "dlock_quarantine_reason").as_deref(),
        Some("restart")
    );
    let left: i64 = info_field(&mut c, "dlock", "dlock_quarantine_ms_left")
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        0 < left && left <= lowered,
        "quarantine of {left} ms after lowering to {lowered}"
    );
}

#[test]
fn a_replica_refuses_to_lower_its_longest_ttl() {
    let master = Server::start();
    let replica = Server::builder().replica_of(&master).start();
    replica.wait_for_sync(Duration::from_secs(20));
    let mut c = master.conn();
    grant(&mut c, "yearly", "y", YEAR_MS as u64);
    assert_eq!(release(&mut c, "yearly", "y"), 1);
    let n: i64 = redis::cmd("WAIT").arg(1).arg(10_000).query(&mut c).unwrap();
    assert_eq!(n, 1);
    let mut rc = replica.conn();
    assert_eq!(longest(&mut rc), YEAR_MS);
    let e = lower(&mut rc, 0).expect_err("a replica lowered its longest TTL");
    assert!(
        err_text(&e).contains("lowered on a master"),
        "{}",
        err_text(&e)
    );
    assert_eq!(longest(&mut rc), YEAR_MS);
    // The master may.
    lower(&mut c, 0).unwrap();
    assert_eq!(longest(&mut c), 0);
}

#[test]
fn a_value_given_at_startup_is_range_checked_and_lowers_nothing() {
    // The data brings the longest TTL: a config-file value, read before
    // the data loads, is no floor that would outlive it.
    let s = Server::builder()
        .arg("--dlock.longest-ttl")
        .arg("60000")
        .module_arg("longest-ttl")
        .module_arg("60000")
        .start();
    let mut c = s.conn();
    assert_eq!(longest(&mut c), 0);
    grant(&mut c, "r", "t", 5000);
    assert_eq!(config_get(&mut c), 5000);

    let refused = Server::builder()
        .module_arg("longest-ttl")
        .module_arg("-1")
        .try_start();
    assert!(
        refused.is_err(),
        "a bad loadmodule argument must fail the load"
    );
}
