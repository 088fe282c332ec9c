//! Evicted locks: counted, logged, and their waiters are not granted before
//! the evicted lease's deadline (its holder still believes it holds it).
use crate::common;

use common::lock::*;
use common::*;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

fn used_memory(c: &mut redis::Connection) -> u64 {
    info_field(c, "memory", "used_memory")
        .unwrap()
        .parse()
        .unwrap()
}

fn evicted_locks(c: &mut redis::Connection) -> u64 {
    info_field(c, "dlock", "dlock_evicted_locks")
        .unwrap()
        .parse()
        .unwrap()
}

fn evicted_keys(c: &mut redis::Connection) -> u64 {
    info_field(c, "stats", "evicted_keys")
        .unwrap()
        .parse()
        .unwrap()
}

/// Makes the server evict: `volatile-ttl` with every key sampled picks the
/// key closest to expiry first, which the test arranges to be the lock.
/// `used_memory` as INFO reports it includes INFO's own reply being built,
/// so a limit just under it may already be met when the next command runs:
/// the limit goes down (a wider margin each time) until something was
/// evicted. Whatever the margin, the key closest to expiry goes first.
fn evict_shortest_ttl(c: &mut redis::Connection) {
    let before = evicted_keys(c);
    let mut margin = 64;
    wait_until(Duration::from_secs(5), "an eviction", || {
        let used = used_memory(c);
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory")
            .arg(used.saturating_sub(margin))
            .query(c)
            .unwrap();
        margin *= 2;
        // Any command now runs eviction first.
        let _: String = redis::cmd("PING").query(c).unwrap();
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory")
            .arg(0)
            .query(c)
            .unwrap();
        evicted_keys(c) > before
    });
}

fn server() -> Server {
    Server::builder()
        .arg("--maxmemory-policy")
        .arg("volatile-ttl")
        .arg("--maxmemory-samples")
        .arg("64")
        .start()
}

fn fill(c: &mut redis::Connection) {
    for i in 0..40 {
        let _: () = redis::cmd("SET")
            .arg(format!("filler:{i}"))
            .arg("x".repeat(64))
            .arg("EX")
            .arg(3600)
            .query(c)
            .unwrap();
    }
}

#[test]
fn evicted_lock_is_counted_and_logged() {
    let s = server();
    let mut c = s.conn();
    assert_eq!(
        info_field(&mut c, "dlock", "dlock_eviction_can_free_locks").as_deref(),
        Some("1")
    );
    fill(&mut c);
    grant(&mut c, "res", "holder", 30_000);
    assert_eq!(evicted_locks(&mut c), 0);
    evict_shortest_ttl(&mut c);
    let info: Option<redis::Value> = redis::cmd("DLOCK.INFO").arg("res").query(&mut c).unwrap();
    assert_eq!(info, None, "the lock was the key closest to expiry");
    assert_eq!(
        evicted_locks(&mut c),
        1,
        "strings evicted with it are not locks"
    );
    wait_until(Duration::from_secs(5), "eviction logged", || {
        s.log()
            .contains("held lock 'res' evicted by maxmemory-policy")
    });
}

/// A lock deleted with DEL, then a string under the same name evicted: no
/// lock was evicted (the unlink callback saw the lock leave, and no
/// `evicted` event followed it). A lock evicted the same way still counts.
#[test]
fn a_string_evicted_after_a_deleted_lock_is_not_a_lock() {
    let s = server();
    let mut c = s.conn();
    fill(&mut c);
    grant(&mut c, "res", "holder", 30_000);
    let n: i64 = redis::cmd("DEL").arg("res").query(&mut c).unwrap();
    assert_eq!(n, 1);
    let _: () = redis::cmd("SET")
        .arg("res")
        .arg("v")
        .arg("PX")
        .arg(30_000)
        .query(&mut c)
        .unwrap();
    evict_shortest_ttl(&mut c);
    let exists: i64 = redis::cmd("EXISTS").arg("res").query(&mut c).unwrap();
    assert_eq!(exists, 0, "the string was the key closest to expiry");
    assert_eq!(evicted_locks(&mut c), 0, "a string counted as a lock");

    // The eviction may have taken fillers too.
    fill(&mut c);
    grant(&mut c, "res", "holder", 30_000);
    evict_shortest_ttl(&mut c);
    let info: Option<redis::Value> = redis::cmd("DLOCK.INFO").arg("res").query(&mut c).unwrap();
    assert_eq!(info, None, "the lock was the key closest to expiry");
    assert_eq!(evicted_locks(&mut c), 1);
}

#[test]
fn waiters_of_an_evicted_lock_wait_for_its_deadline() {
    let s = server();
    let mut c = s.conn();
    fill(&mut c);
    let granted_at = Instant::now();
    let fence = grant(&mut c, "res", "holder", 1500);
    let url = s.url();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut w = connect_within(&url, Duration::from_secs(5)).unwrap();
        let r = acquire_wait(&mut w, "res", "waiter", 10_000, 10_000).unwrap();
        tx.send((r, Instant::now())).unwrap();
    });
    wait_until(Duration::from_secs(5), "waiter queued", || {
        let v: Vec<redis::Value> = redis::cmd("DLOCK.INFO").arg("res").query(&mut c).unwrap();
        v.last() == Some(&redis::Value::Int(1))
    });
    evict_shortest_ttl(&mut c);
    assert_eq!(evicted_locks(&mut c), 1);
    // A newcomer cannot take the evicted resource either.
    let barger = acquire(&mut c, "res", "barger", 1000);
    assert_eq!(barger, None);
    let (r, at) = rx
        .recv_timeout(Duration::from_secs(8))
        .expect("waiter answered");
    let after = at - granted_at;
    eprintln!("evicted 1500 ms lease: waiter granted {after:?} after the holder's grant");
    assert!(r.expect("granted") > fence);
    assert!(
        after >= Duration::from_millis(1450),
        "granted at {after:?}, before the evicted lease's deadline"
    );
    assert!(after < Duration::from_millis(4000), "late: {after:?}");
}
