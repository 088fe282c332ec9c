//! Guarded writes and the sequencer check: `DLOCK.GUARD` and `DLOCK.CHECK`
//! (docs/commands/dlock.guard.md and dlock.check.md are the contract).
//!
//! - `contract.rs` — every kind of hold proves itself by token and by
//!   fence; a stale proof runs nothing; replies pass through; `CHECK`.
//! - `refusals.rs` — bad arguments, refused inner commands, ACL, OOM,
//!   `WRONGTYPE`, huge batches: a clear error and nothing written.
//! - `undo.rs` — a batch that fails part-way is undone, every kind of value
//!   with its expiry; replicas and the AOF end where the master ends, and
//!   receive the writes, never the guard.
//! - `races.rs` — a guard in the same event-loop turn as a release, a
//!   handoff, a session's end, an expiry (`MULTI`/`EXEC`, scripts).
//! - `access.rs` — the keys a guard declares (`COMMAND GETKEYS`, ACL key
//!   patterns), replicas, `COMMAND INFO`.
//! - `memory.rs` — thousands of guarded batches, undone and not:
//!   `used_memory` flat.
use crate::common;

mod access;
mod contract;
mod memory;
mod races;
mod refusals;
mod undo;

use common::lock::*;
use common::*;
use redis::{Connection, RedisResult, Value};

const NOTHELD: &str =
    "NOTHELD dlock: that token or fence is not a live hold on the resource; nothing was run";

/// `DLOCK.GUARD res <proof> args...`.
fn guard_cmd(res: &str, proof: &[&str], args: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd("DLOCK.GUARD");
    cmd.arg(res).arg(proof).arg(args);
    cmd
}

fn guard(c: &mut Connection, res: &str, proof: &[&str], args: &[&str]) -> RedisResult<Value> {
    guard_cmd(res, proof, args).query(c)
}

/// `DLOCK.GUARD res <proof> BATCH n argc cmd... ...`.
fn batch(
    c: &mut Connection,
    res: &str,
    proof: &[&str],
    commands: &[&[&str]],
) -> RedisResult<Value> {
    let mut cmd = redis::cmd("DLOCK.GUARD");
    cmd.arg(res).arg(proof).arg("BATCH").arg(commands.len());
    for inner in commands {
        cmd.arg(inner.len()).arg(*inner);
    }
    cmd.query(c)
}

fn check(c: &mut Connection, res: &str, proof: &[&str]) -> i64 {
    redis::cmd("DLOCK.CHECK")
        .arg(res)
        .arg(proof)
        .query(c)
        .unwrap()
}

fn token(t: &str) -> [&str; 2] {
    ["TOKEN", t]
}

/// `FENCE <fence>` as owned strings.
fn fence(f: u64) -> [String; 2] {
    ["FENCE".into(), f.to_string()]
}

fn get(c: &mut Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(c).unwrap()
}

fn set(c: &mut Connection, key: &str, v: &str) {
    let _: () = redis::cmd("SET").arg(key).arg(v).query(c).unwrap();
}

/// The whole dataset's digest (`DEBUG DIGEST`): equal digests, equal data.
fn digest(c: &mut Connection) -> String {
    redis::cmd("DEBUG").arg("DIGEST").query(c).unwrap()
}
