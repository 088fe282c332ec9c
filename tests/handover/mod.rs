//! `DLOCK.RELEASE resource token TO waiter_token`: a hold handed over to
//! one queued request out of turn, in the same step as the release
//! (docs/commands/dlock.release.md, docs/waiting.md "Handing over").
//!
//! - `contract.rs` — a deep target granted while the head keeps its place,
//!   its fence the next one drawn, readers that fit granted in the same
//!   step, a semaphore permit handed over, the `handovers` counter, a
//!   release of nothing and every error changing nothing.
//! - `races.rs` — in one `MULTI`/`EXEC` turn: the target's `WAIT` running
//!   out before the release (`DEBUG SLEEP`), the target's client
//!   killed after it (the grant revoked, the head granted), and the
//!   target's token made a holder by a `COPY` before it (`NOTWAITING`).
//! - `durability.rs` — a replica and the AOF (replayed, and rewritten)
//!   hold exactly what the master holds after handovers of every kind.
//!
//! Order is read from `DLOCK.WAITERS` after each waiter is seen queued,
//! never from timing.
use crate::common;

mod contract;
mod durability;
mod races;

use common::lock::*;
use common::waiter::Waiter;
use common::*;
use redis::{Connection, Value};

/// `DLOCK.ACQUIRE res tok 60000 [opts...] WAIT wait_ms`, blocked on a
/// thread of its own, seen queued (the queue of `res` is `queued_before`
/// long before it).
fn queue(s: &Server, c: &mut Connection, res: &str, tok: &str, opts: &[&str]) -> Waiter {
    queue_for(s, c, res, tok, opts, 0)
}

fn queue_for(
    s: &Server,
    c: &mut Connection,
    res: &str,
    tok: &str,
    opts: &[&str],
    wait_ms: u64,
) -> Waiter {
    let before = waiting(c, res).len();
    let mut cmd = redis::cmd("DLOCK.ACQUIRE");
    cmd.arg(res).arg(tok).arg(60_000).arg(opts);
    cmd.arg("WAIT").arg(wait_ms);
    let w = Waiter::send(s, cmd);
    wait_until(SOON, &format!("{tok} queued on {res}"), || {
        waiting(c, res).len() > before
    });
    w
}

/// `DLOCK.RELEASE res tok TO to`.
fn release_to_cmd(res: &str, tok: &str, to: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("DLOCK.RELEASE");
    cmd.arg(res).arg(tok).arg("TO").arg(to);
    cmd
}

fn release_to(c: &mut Connection, res: &str, tok: &str, to: &str) -> i64 {
    release_to_cmd(res, tok, to)
        .query(c)
        .unwrap_or_else(|e| panic!("RELEASE {res} {tok} TO {to}: {e}"))
}

fn text(v: &Value) -> String {
    String::from_utf8_lossy(&as_bytes(v)).into_owned()
}

/// The fields of one map (RESP3) or flat array (RESP2) reply.
fn pairs(v: &Value) -> Vec<(String, Value)> {
    match v {
        Value::Map(pairs) => pairs.iter().map(|(k, v)| (text(k), v.clone())).collect(),
        Value::Array(flat) => flat
            .chunks(2)
            .map(|kv| (text(&kv[0]), kv[1].clone()))
            .collect(),
        other => panic!("expected a map, got {other:?}"),
    }
}

fn field(pairs: &[(String, Value)], name: &str) -> Value {
    pairs
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("no {name} in {pairs:?}"))
}

/// The tokens waiting on `res`, head first.
fn waiting(c: &mut Connection, res: &str) -> Vec<String> {
    let page: Vec<Value> = redis::cmd("DLOCK.WAITERS")
        .arg(res)
        .query(c)
        .expect("DLOCK.WAITERS");
    page.iter()
        .map(|w| text(&field(&pairs(w), "token")))
        .collect()
}

/// Who holds `res` and under which fence, in grant order, whatever form
/// `DLOCK.INFO` answers in.
fn holders(c: &mut Connection, res: &str) -> Vec<(String, i64)> {
    let v: Value = redis::cmd("DLOCK.INFO").arg(res).query(c).unwrap();
    if v == Value::Nil {
        return Vec::new();
    }
    let top = pairs(&v);
    if top.iter().any(|(k, _)| k == "holds") {
        let Value::Array(holds) = field(&top, "holds") else {
            panic!("holds: {top:?}");
        };
        return holds
            .iter()
            .map(|h| {
                let h = pairs(h);
                (text(&field(&h, "token")), as_int(&field(&h, "fence")))
            })
            .collect();
    }
    match field(&top, "token") {
        Value::Nil => Vec::new(),
        t => vec![(text(&t), as_int(&field(&top, "fence")))],
    }
}

/// A counter of `INFO dlock` (`dlock_` left out).
fn counter(c: &mut Connection, name: &str) -> i64 {
    info_field(c, "dlock", &format!("dlock_{name}"))
        .unwrap_or_else(|| panic!("no dlock_{name} in INFO dlock"))
        .parse()
        .unwrap()
}

/// The counters a refused handover must leave as they were.
const COUNTERS: [&str; 8] = [
    "grants",
    "handoffs",
    "handovers",
    "releases",
    "contended",
    "revoked_grants",
    "waiters",
    "last_fence",
];
