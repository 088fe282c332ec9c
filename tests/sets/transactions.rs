//! A transaction of `DLOCK.INFO`s is one instant: what the load tests'
//! snapshots rely on. Redis itself freezes its clock for a whole `EXEC`
//! (keys do not expire half-way through one, blocked clients do not time
//! out in it). Inside a transaction `DLOCK.INFO` only reads (a `WAIT` that
//! runs out between two commands of one `EXEC` changes nothing until its
//! timer runs), and it judges hold deadlines by the server's frozen time
//! where the module API offers it (Redis 7.2+, Valkey). `DEBUG SLEEP`
//! inside the transaction makes it deterministic.
use super::*;

/// `MULTI` + `DLOCK.INFO first` + `DEBUG SLEEP secs` + `DLOCK.INFO` of
/// `then` + `EXEC`: the replies, the sleep's left out.
fn across_a_sleep(c: &mut Connection, first: &str, secs: f64, then: &[&str]) -> Vec<Shown> {
    let mut p = redis::pipe();
    p.atomic().cmd("DLOCK.INFO").arg(first);
    p.cmd("DEBUG").arg("SLEEP").arg(secs).ignore();
    for r in then {
        p.cmd("DLOCK.INFO").arg(*r);
    }
    let vs: Vec<Value> = p.query(c).expect("MULTI/EXEC");
    vs.iter().map(parse_shown).collect()
}

/// G = {B, C} waits for C (held) with a short `WAIT`; S = {A, B} waits for
/// B behind G. When G's wait runs out, S gets A and B. A transaction that
/// reads A, sleeps past G's deadline and reads A and B again must read one
/// state: S granted in all three replies, or in none.
#[test]
fn a_transaction_reads_one_instant_of_a_set() {
    let _quiet = quiet();
    let s = Server::start();
    let (mut c, url) = (s.conn(), s.url());
    one("C", "hc").grant(&mut c);
    let gp = set(&["B", "C"], "G").wait(1500).spawn(&url);
    wait_queue(&mut c, "B", 1);
    let sp = set(&["A", "B"], "S").wait(LONG_WAIT).spawn(&url);
    wait_queue(&mut c, "B", 2);
    assert_eq!(shown(&mut c, "A"), Shown::Reserved { waiters: 1 });
    let seen = across_a_sleep(&mut c, "A", 2.0, &["A", "B"]);
    assert_eq!(
        seen[0],
        Shown::Reserved { waiters: 1 },
        "the transaction began before G's deadline (a slow machine?)"
    );
    assert_eq!(
        seen[1], seen[0],
        "A changed inside one transaction: {seen:?}"
    );
    assert!(seen[2].fence_of("S").is_none(), "{seen:?}");
    assert!(matches!(gp.outcome(SOON).reply, Ok(None)), "G timed out");
    let (f, mut sc) = sp.granted();
    shown(&mut c, "A").assert_owner("S", f);
    set(&["A", "B"], "S").release(&mut sc);
}

/// L = {A, B} waits for A (held) with a short `WAIT`. A transaction that
/// reads A, sleeps past L's deadline and reads B must see L queued on both
/// or on neither.
#[test]
fn a_transaction_reads_one_instant_of_a_set_that_leaves() {
    let _quiet = quiet();
    let s = Server::start();
    let (mut c, url) = (s.conn(), s.url());
    one("A", "ha").grant(&mut c);
    let lp = set(&["A", "B"], "L").wait(1500).spawn(&url);
    wait_queue(&mut c, "B", 1);
    let seen = across_a_sleep(&mut c, "A", 2.0, &["B"]);
    assert_eq!(
        seen[0].waiters(),
        1,
        "the transaction began before L's deadline (a slow machine?)"
    );
    assert_eq!(
        seen[1].waiters(),
        seen[0].waiters(),
        "L left B's queue but not A's inside one transaction: {seen:?}"
    );
    assert!(matches!(lp.outcome(SOON).reply, Ok(None)), "L timed out");
    assert_eq!(shown(&mut c, "A").waiters(), 0);
}

/// A `SHARED` set's members end at one absolute deadline. A transaction
/// that reads A, sleeps past that deadline and reads B must see the set
/// on both or on neither (Redis's own expiry is frozen for the `EXEC`;
/// the module's check of a shared hold's deadline is not).
#[test]
fn a_transaction_reads_one_instant_of_a_shared_set_that_ends() {
    let _quiet = quiet();
    let s = Server::start();
    let mut c = s.conn();
    if !has_frozen_module_clock(&mut c) {
        // Redis 7.0 offers modules no frozen clock: a shared hold's deadline
        // is judged live (docs/compatibility.md#what-differs-between-servers).
        eprintln!("skipped: this server has no RedisModule_CachedMicroseconds");
        return;
    }
    let r = Req {
        ttl: 1500,
        ..set(&["A", "B"], "R")
    };
    let f = r.shared().grant(&mut c);
    let seen = across_a_sleep(&mut c, "A", 2.0, &["B"]);
    assert_eq!(
        seen[0].fence_of("R"),
        Some(f),
        "the transaction began before the set's deadline (a slow machine?)"
    );
    assert_eq!(
        seen[1].fence_of("R"),
        seen[0].fence_of("R"),
        "the set ended on B but not on A inside one transaction: {seen:?}"
    );
}

/// Whether the server offers `RedisModule_CachedMicroseconds` (Redis 7.2+,
/// Valkey 8), from its version (Valkey reports its own beside 7.2.4).
fn has_frozen_module_clock(c: &mut Connection) -> bool {
    if info_field(c, "server", "valkey_version").is_some() {
        return true;
    }
    let v = info_field(c, "server", "redis_version").expect("redis_version");
    let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) >= (7, 2)
}
