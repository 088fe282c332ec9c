//! Sets of resources (`DLOCK.MACQUIRE`, `MRELEASE`, `MEXTEND`)
//! through everything that copies or rebuilds a lock: replicas after every
//! way a set is granted (at once, from the queue after a release, after an
//! expiry, after a revoked grant), the AOF (every set's effects in one
//! `MULTI`/`EXEC`), AOF replay and RDB restarts, a real cluster (key specs,
//! `CROSSSLOT`, hash tags, a set split by resharding), ACL key patterns, and
//! the server's memory over thousands of queued sets.
//!
//! Every member of a set is compared exactly: its `DUMP` payload (token,
//! fence and, for shared holds, every hold's absolute deadline), `DEBUG
//! DIGEST-VALUE` and `PEXPIRETIME`; and the set as clients see it: one
//! fence on every member, and one absolute deadline (`DLOCK.INFO` of every
//! member read in one `MULTI`). Every wait has a deadline; leases are long
//! enough never to end during a test unless a test ends them on purpose.
use crate::common;

mod acl;
mod aof;
mod failed;
mod in_cluster;
mod memory;
mod replicas;
mod restart;
mod transaction;
mod view;

use common::lock::*;
use common::*;
use redis::{Connection, ConnectionLike, RedisResult, Value};
use std::time::Duration;
use view::*;

const SYNC: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------- commands

/// `DLOCK.MACQUIRE numkeys members... tok ttl <opts...>`.
fn macquire_cmd(members: &[&str], tok: &str, ttl: u64, opts: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd("DLOCK.MACQUIRE");
    cmd.arg(members.len())
        .arg(members)
        .arg(tok)
        .arg(ttl)
        .arg(opts);
    cmd
}

fn try_macquire(
    c: &mut impl ConnectionLike,
    members: &[&str],
    tok: &str,
    ttl: u64,
    opts: &[&str],
) -> RedisResult<Option<i64>> {
    macquire_cmd(members, tok, ttl, opts).query(c)
}

/// `try_macquire` that must be granted; the set's fence.
fn macquire(
    c: &mut impl ConnectionLike,
    members: &[&str],
    tok: &str,
    ttl: u64,
    opts: &[&str],
) -> i64 {
    match try_macquire(c, members, tok, ttl, opts) {
        Ok(Some(f)) => f,
        other => panic!("MACQUIRE {members:?} {tok} {ttl} {opts:?}: {other:?}"),
    }
}

fn try_mrelease(c: &mut impl ConnectionLike, members: &[&str], tok: &str) -> RedisResult<i64> {
    redis::cmd("DLOCK.MRELEASE")
        .arg(members.len())
        .arg(members)
        .arg(tok)
        .query(c)
}

/// `DLOCK.MRELEASE`: how many members `tok` held.
fn mrelease(c: &mut impl ConnectionLike, members: &[&str], tok: &str) -> i64 {
    try_mrelease(c, members, tok).unwrap_or_else(|e| panic!("MRELEASE {members:?} {tok}: {e}"))
}

fn try_mextend(
    c: &mut impl ConnectionLike,
    members: &[&str],
    tok: &str,
    ttl: u64,
) -> RedisResult<i64> {
    redis::cmd("DLOCK.MEXTEND")
        .arg(members.len())
        .arg(members)
        .arg(tok)
        .arg(ttl)
        .query(c)
}

/// `DLOCK.MEXTEND`: 1 when every member was extended, else 0.
fn mextend(c: &mut impl ConnectionLike, members: &[&str], tok: &str, ttl: u64) -> i64 {
    try_mextend(c, members, tok, ttl)
        .unwrap_or_else(|e| panic!("MEXTEND {members:?} {tok} {ttl}: {e}"))
}

fn counter(c: &mut Connection, section: &str, field: &str) -> i64 {
    info_field(c, section, field)
        .unwrap_or_else(|| panic!("INFO {section} has no {field}"))
        .parse()
        .unwrap()
}

fn dlock_counter(c: &mut Connection, name: &str) -> i64 {
    counter(c, "dlock", &format!("dlock_{name}"))
}

fn client_id(c: &mut Connection) -> i64 {
    redis::cmd("CLIENT").arg("ID").query(c).unwrap()
}

fn strings(ks: &[&str]) -> Vec<String> {
    ks.iter().map(|k| k.to_string()).collect()
}

// ---------------------------------------------------------------- replicas

/// `WAIT 1 10000` on the connection that made the writes: the replica has
/// everything this connection propagated.
fn wait_replica(c: &mut Connection) {
    let n: i64 = redis::cmd("WAIT").arg(1).arg(10_000).query(c).unwrap();
    assert_eq!(n, 1, "WAIT 1 10000: the replica did not acknowledge");
}

/// A write on `c`, then `WAIT 1`: for effects the master sent from a timer
/// or a callback (not counted as `c`'s writes), which precede the marker in
/// the replication stream.
fn sync_replica(c: &mut Connection) {
    let _: i64 = redis::cmd("INCR").arg("sync-marker").query(c).unwrap();
    wait_replica(c);
}

/// A master and a replica in sync. No periodic PING into the stream.
fn pair() -> (Server, Server) {
    let master = Server::builder()
        .arg("--repl-ping-replica-period")
        .arg("3600")
        .start();
    let replica = Server::builder().replica_of(&master).start();
    replica.wait_for_sync(SYNC);
    (master, replica)
}

// ---------------------------------------------------------------- snapshots

/// What a key is, exactly: its `DUMP` payload (nil when absent), digest
/// and key expiry (`PEXPIRETIME`, -2 when absent).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Snapshot {
    key: String,
    dump: Option<Vec<u8>>,
    digest: String,
    expires_at: i64,
}

fn snapshot(c: &mut Connection, key: &str) -> Snapshot {
    let dump: Option<Vec<u8>> = redis::cmd("DUMP").arg(key).query(c).unwrap();
    let digest: Vec<String> = redis::cmd("DEBUG")
        .arg("DIGEST-VALUE")
        .arg(key)
        .query(c)
        .unwrap();
    let expires_at: i64 = redis::cmd("PEXPIRETIME").arg(key).query(c).unwrap();
    Snapshot {
        key: key.to_string(),
        dump,
        digest: digest[0].clone(),
        expires_at,
    }
}

fn snapshots(c: &mut Connection, keys: &[String]) -> Vec<Snapshot> {
    keys.iter().map(|k| snapshot(c, k)).collect()
}

/// The same keys on two connections (or before and after) are identical.
fn assert_same(what: &str, a: &[Snapshot], b: &[Snapshot]) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x, y, "{what}: {} differs", x.key);
    }
}

// ---------------------------------------------------------------- waiters

use common::waiter::Waiter;

impl Waiter {
    /// `MACQUIRE members tok 60000 opts WAIT 30000`, returned once the
    /// first member has `n` requests queued.
    fn set(
        s: &Server,
        c: &mut Connection,
        members: &[&str],
        tok: &str,
        opts: &[&str],
        n: i64,
    ) -> Waiter {
        let mut cmd = macquire_cmd(members, tok, 60_000, opts);
        cmd.arg("WAIT").arg(30_000);
        let w = Waiter::send(s, cmd);
        wait_queued(c, members[0], n);
        w
    }

    /// `ACQUIRE key tok 60000 WAIT 30000`, returned once `key` has `n`
    /// requests queued.
    fn single(s: &Server, c: &mut Connection, key: &str, tok: &str, n: i64) -> Waiter {
        let mut cmd = redis::cmd("DLOCK.ACQUIRE");
        cmd.arg(key).arg(tok).arg(60_000).arg("WAIT").arg(30_000);
        let w = Waiter::send(s, cmd);
        wait_queued(c, key, n);
        w
    }
}
