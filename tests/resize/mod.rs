//! `DLOCK.RESIZE resource n`: a held semaphore's limit changed while its
//! permits are held (docs/commands/dlock.resize.md, docs/lock-kinds.md
//! "Resizing a semaphore").
//!
//! - `contract.rs` — up grants the queued requests that fit in the same
//!   command, down keeps every hold and grants nobody until they fit, nil
//!   on a free resource, the resized mark (`DLOCK.INFO`'s `resized`) and
//!   the requests it lets join, `PERMITS` against the new limit, the mark
//!   forgotten with the last permit, every bad argument a clear error that
//!   changes nothing.
//! - `races.rs` — a release and a resize, a resize and an acquire, in one
//!   `MULTI`/`EXEC` turn.
//! - `durability.rs` — `DEBUG RELOAD`, a replica, the AOF (its effects and
//!   a rewrite): each holds exactly what the master holds.
use crate::common;

mod contract;
mod durability;
mod races;

use common::dump::digest;
use common::lock::*;
use common::waiter::Waiter;
use common::*;
use redis::{Connection, Value};

/// `DLOCK.ACQUIRE res token 60000 LIMIT n [extra...]`.
fn permit(res: &str, token: &str, n: u32, extra: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd("DLOCK.ACQUIRE");
    cmd.arg(res)
        .arg(token)
        .arg(60_000)
        .arg("LIMIT")
        .arg(n)
        .arg(extra);
    cmd
}

fn resize_cmd(res: &str, n: i64) -> redis::Cmd {
    let mut cmd = redis::cmd("DLOCK.RESIZE");
    cmd.arg(res).arg(n);
    cmd
}

/// `DLOCK.RESIZE res n`: the previous limit, or None.
fn resize(c: &mut Connection, res: &str, n: i64) -> Option<i64> {
    resize_cmd(res, n)
        .query(c)
        .unwrap_or_else(|e| panic!("DLOCK.RESIZE {res} {n}: {e}"))
}

fn try_fence(c: &mut Connection, cmd: &redis::Cmd) -> Option<i64> {
    let what = String::from_utf8_lossy(&cmd.get_packed_command()).into_owned();
    cmd.query(c).unwrap_or_else(|e| panic!("{what}: {e}"))
}

fn fence_of(c: &mut Connection, cmd: &redis::Cmd) -> i64 {
    try_fence(c, cmd).expect("granted")
}

fn refused(c: &mut Connection, cmd: &redis::Cmd) -> String {
    err_of(cmd.query::<Value>(c))
}

fn text(v: &Value) -> String {
    match v {
        Value::Int(n) => n.to_string(),
        other => String::from_utf8(as_bytes(other)).unwrap(),
    }
}

/// A field of `DLOCK.INFO res`'s list form (RESP2; `None`: not shown).
fn field(c: &mut Connection, res: &str, name: &str) -> Option<String> {
    let v: Vec<Value> = redis::cmd("DLOCK.INFO").arg(res).query(c).unwrap();
    v.chunks(2)
        .find(|p| text(&p[0]) == name)
        .map(|p| text(&p[1]))
}

/// The tokens holding `res`, in grant order.
fn holders(c: &mut Connection, res: &str) -> Vec<String> {
    let v: Vec<Value> = redis::cmd("DLOCK.INFO").arg(res).query(c).unwrap();
    let Some(Value::Array(holds)) = v
        .chunks(2)
        .find(|p| text(&p[0]) == "holds")
        .map(|p| p[1].clone())
    else {
        panic!("{res}: not the list form: {v:?}");
    };
    holds
        .iter()
        .map(|h| match h {
            Value::Array(kv) => kv
                .chunks(2)
                .find(|p| text(&p[0]) == "token")
                .map(|p| text(&p[1]))
                .unwrap(),
            other => panic!("hold: {other:?}"),
        })
        .collect()
}

/// Polls until `n` requests are queued on `res`.
fn wait_queued(c: &mut Connection, res: &str, n: usize) {
    let want = n.to_string();
    wait_until(SOON, &format!("{n} queued on {res}"), || {
        field(c, res, "waiters").as_deref() == Some(want.as_str())
    });
}
