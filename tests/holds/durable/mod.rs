//! Multi-hold resources (`SHARED`, `LIMIT`, `OWNER`) through
//! everything that copies, moves or rebuilds a lock value: RDB (`SAVE` +
//! restart, `DEBUG RELOAD`), AOF replay of the per-hold effects
//! (`DLOCK.ADDHOLD`/`MOVEHOLD`/`DROPHOLD`), AOF rewrites with and without
//! the RDB preamble, replicas after every path that changes holds, a
//! promoted replica, `DUMP`/`RESTORE` (corrupt payloads too), `COPY`,
//! `MIGRATE`, cluster resharding, and the server's memory over thousands of
//! cycles. Refused commands and forged effects change and send nothing.
//!
//! Holds are compared exactly: each key's stored value is decoded from its
//! `DUMP` (token, owner, fence, mode and absolute deadline of every hold,
//! see `value.rs`), alongside `DEBUG DIGEST-VALUE` (which covers every
//! hold's deadline) and `PEXPIRETIME` (the latest hold deadline). Every
//! wait has a deadline; leases are long enough never to end during a test
//! unless a test ends them on purpose.
use crate::common;

mod admin_ttl;
mod corrupt;
mod internal;
mod kinds;
mod memory;
mod payloads;
mod promotion;
mod refused;
mod replicas;
mod resharding;
mod restart;
mod transitions;
pub(crate) mod value;

use common::dump::*;
use common::lock::*;
use common::*;
use redis::{Connection, ConnectionLike, RedisResult, Value};
use std::time::Duration;

const SYNC: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------- helpers

/// `DLOCK.ACQUIRE key tok ttl <opts...>`.
fn try_take(
    c: &mut impl ConnectionLike,
    key: &str,
    tok: &str,
    ttl: u64,
    opts: &[&str],
) -> RedisResult<Option<i64>> {
    redis::cmd("DLOCK.ACQUIRE")
        .arg(key)
        .arg(tok)
        .arg(ttl)
        .arg(opts)
        .query(c)
}

/// `try_take` that must be granted; the fence.
fn take(c: &mut impl ConnectionLike, key: &str, tok: &str, ttl: u64, opts: &[&str]) -> i64 {
    match try_take(c, key, tok, ttl, opts) {
        Ok(Some(f)) => f,
        other => panic!("ACQUIRE {key} {tok} {ttl} {opts:?}: {other:?}"),
    }
}

/// `try_take` that must be refused with nil.
fn busy(c: &mut impl ConnectionLike, key: &str, tok: &str, opts: &[&str]) {
    let r = try_take(c, key, tok, 10_000, opts);
    assert!(matches!(r, Ok(None)), "{key} {tok} {opts:?}: {r:?}");
}

/// `try_take` that must fail; the error text.
fn refused(c: &mut impl ConnectionLike, key: &str, tok: &str, opts: &[&str]) -> String {
    match try_take(c, key, tok, 10_000, opts) {
        Err(e) => err_text(&e),
        Ok(v) => panic!("{key} {tok} {opts:?}: expected an error, got {v:?}"),
    }
}

fn pexpiretime(c: &mut impl ConnectionLike, key: &str) -> i64 {
    redis::cmd("PEXPIRETIME").arg(key).query(c).unwrap()
}

fn counter(c: &mut Connection, section: &str, field: &str) -> i64 {
    info_field(c, section, field)
        .unwrap_or_else(|| panic!("INFO {section} has no {field}"))
        .parse()
        .unwrap()
}

/// `WAIT 1 10000` on the connection that made the writes: the replica has
/// everything this connection propagated.
fn wait_replica(c: &mut Connection) {
    let n: i64 = redis::cmd("WAIT").arg(1).arg(10_000).query(c).unwrap();
    assert_eq!(n, 1, "WAIT 1 10000: the replica did not acknowledge");
}

/// A write on `c`, then `WAIT 1`: for effects the master sent from a timer
/// (not counted as `c`'s writes), which precede the marker in the stream.
fn sync_replica(c: &mut Connection) {
    let _: i64 = redis::cmd("INCR").arg("sync-marker").query(c).unwrap();
    wait_replica(c);
}

/// A master (with `master_args`) and a replica in sync. No periodic PING
/// into the stream, so `master_repl_offset` moves only with writes.
fn pair(master_args: &[&str]) -> (Server, Server) {
    let mut b = Server::builder()
        .arg("--repl-ping-replica-period")
        .arg("3600");
    for a in master_args {
        b = b.arg(*a);
    }
    let master = b.start();
    let replica = Server::builder().replica_of(&master).start();
    replica.wait_for_sync(SYNC);
    (master, replica)
}

/// What a key is, exactly: stored value, digest and key expiry.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Snapshot {
    key: String,
    value: Option<value::Stored>,
    digest: String,
    expires_at: i64,
}

fn snapshot(c: &mut Connection, key: &str) -> Snapshot {
    Snapshot {
        key: key.to_string(),
        value: value::stored(c, key),
        digest: common::dump::digest(c, key),
        expires_at: pexpiretime(c, key),
    }
}

fn snapshots(c: &mut Connection, keys: &[String]) -> Vec<Snapshot> {
    keys.iter().map(|k| snapshot(c, k)).collect()
}

/// The same keys on two connections (or before and after) are identical.
fn assert_same(what: &str, a: &[Snapshot], b: &[Snapshot]) {
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x, y, "{what}: {} differs", x.key);
    }
    assert_eq!(a.len(), b.len());
}

use common::waiter::Waiter;

impl Waiter {
    /// A client blocked in `DLOCK.ACQUIRE key tok 60000 <opts> WAIT <wait_ms>`.
    fn start(s: &Server, key: &str, tok: &str, opts: &[&str], wait_ms: u64) -> Waiter {
        let mut cmd = redis::cmd("DLOCK.ACQUIRE");
        cmd.arg(key)
            .arg(tok)
            .arg(60_000)
            .arg(opts)
            .arg("WAIT")
            .arg(wait_ms);
        Waiter::send(s, cmd)
    }

    /// Starts a waiter and returns once `key` has `queued` waiters.
    fn queue(
        s: &Server,
        c: &mut Connection,
        key: &str,
        tok: &str,
        opts: &[&str],
        queued: i64,
    ) -> Waiter {
        let w = Waiter::start(s, key, tok, opts, 30_000);
        wait_until(SOON, &format!("{queued} waiters on {key}"), || {
            value::waiters_of(c, key) == queued
        });
        w
    }
}
