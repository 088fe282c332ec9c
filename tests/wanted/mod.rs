//! `WANTED` on `DLOCK.EXTEND` and `DLOCK.MEXTEND`: the renewal tells the
//! holder how many requests wait for what it holds.
//!
//! - `contract.rs` — the reply (RESP2 and RESP3) on a plain lock, shared
//!   holds and a semaphore; a non-holder's; without `WANTED` nothing
//!   changes; every error changes nothing (value, queue, counters, what
//!   replicas receive); what a replica and an AOF-reloaded server hold.
//! - `sets.rs` — `MEXTEND ... WANTED`: one count per member in the order
//!   named, a lost member, errors.
//! - `ranks.rs` — `priority` in the reply: the highest `PRIORITY` queued,
//!   only when above 0 (per member for `MEXTEND`).
//! - `turns.rs` — a handoff and the extend in one turn (`MULTI`), Lua,
//!   memory flat over thousands of extends.
use crate::common;

mod contract;
mod ranks;
mod sets;
mod turns;

use common::lock::*;
use common::waiter::Waiter;
use common::*;
use redis::{Connection, Value};

/// A reply's fields by name: a RESP3 map or a RESP2 flat array.
fn fields(v: Value) -> Vec<(String, Value)> {
    match v {
        Value::Map(pairs) => pairs.into_iter().map(|(k, v)| (text(&k), v)).collect(),
        Value::Array(flat) => {
            assert!(flat.len() % 2 == 0, "an odd flat map: {flat:?}");
            let mut it = flat.into_iter();
            let mut out = Vec::new();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                out.push((text(&k), v));
            }
            out
        }
        other => panic!("expected a map, got {other:?}"),
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        other => panic!("expected a string, got {other:?}"),
    }
}

/// `extended` and `waiters` of an `EXTEND ... WANTED` reply, checking that
/// they are its only fields, in this order.
fn wanted_reply(v: Value) -> (i64, Value) {
    let f = fields(v);
    let names: Vec<&str> = f.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(names, ["extended", "waiters"], "{f:?}");
    let mut it = f.into_iter().map(|(_, v)| v);
    let extended = as_int(&it.next().unwrap());
    (extended, it.next().unwrap())
}

/// `DLOCK.EXTEND res tok ttl WANTED` -> (extended, waiters).
fn extend_wanted(c: &mut Connection, res: &str, tok: &str, ttl: u64) -> (i64, i64) {
    let v: Value = redis::cmd("DLOCK.EXTEND")
        .arg(res)
        .arg(tok)
        .arg(ttl)
        .arg("WANTED")
        .query(c)
        .unwrap_or_else(|e| panic!("EXTEND {res} {tok} WANTED: {e}"));
    let (extended, waiters) = wanted_reply(v);
    (extended, as_int(&waiters))
}

/// `DLOCK.MEXTEND ... WANTED` -> (extended, waiters per member).
fn mextend_wanted(c: &mut Connection, keys: &[&str], tok: &str, ttl: u64) -> (i64, Vec<i64>) {
    let v: Value = redis::cmd("DLOCK.MEXTEND")
        .arg(keys.len())
        .arg(keys)
        .arg(tok)
        .arg(ttl)
        .arg("WANTED")
        .query(c)
        .unwrap_or_else(|e| panic!("MEXTEND {keys:?} {tok} WANTED: {e}"));
    let (extended, waiters) = wanted_reply(v);
    match waiters {
        Value::Array(w) => (extended, w.iter().map(as_int).collect()),
        other => panic!("expected an array of waiters, got {other:?}"),
    }
}

/// An `ACQUIRE res tok 60000 WAIT 30000 [options]` queued on its own
/// connection.
fn queue(s: &Server, res: &str, tok: &str, options: &[&str]) -> Waiter {
    let mut cmd = redis::cmd("DLOCK.ACQUIRE");
    cmd.arg(res)
        .arg(tok)
        .arg(60_000)
        .arg(options)
        .arg("WAIT")
        .arg(30_000);
    Waiter::send(s, cmd)
}

/// Requests queued on `res`, whatever form `DLOCK.INFO` answers in.
fn queued(c: &mut Connection, res: &str) -> i64 {
    let v: Value = redis::cmd("DLOCK.INFO").arg(res).query(c).unwrap();
    if v == Value::Nil {
        return 0;
    }
    let f = fields(v);
    f.iter()
        .find(|(k, _)| k == "waiters")
        .map_or_else(|| panic!("no waiters in {f:?}"), |(_, v)| as_int(v))
}

/// Polls `DLOCK.INFO res` until `n` requests are queued.
fn wait_queued(c: &mut Connection, res: &str, n: i64) {
    wait_until(SOON, &format!("{n} queued on {res}"), || {
        queued(c, res) == n
    });
}

/// `INFO dlock`'s counters, to prove an error changed none.
fn counters(c: &mut Connection) -> Vec<(String, String)> {
    let all: String = redis::cmd("INFO").arg("dlock").query(c).unwrap();
    all.lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(k, _)| !k.contains("time") && !k.contains("_ms") && !k.contains("uptime"))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}
