//! `LIMIT n PERMITS k`: one hold counting as k of a semaphore's permits
//! (docs/commands/dlock.acquire.md, docs/lock-kinds.md "Weighted permits").
//!
//! - `contract.rs` — all k granted at once or none, `DLOCK.INFO`'s `used`
//!   and `permits`, release and extend of the hold as one, a retry naming
//!   the same k (and another k refused), every bad argument a clear error
//!   that changes nothing.
//! - `fairness.rs` — a big request at the head is not passed by a stream of
//!   k=1 requests, and is granted as soon as enough permits come back
//!   (a fixed sequence of commands, nothing timed).
//! - `durability.rs` — `DEBUG RELOAD`, a replica, the AOF (its effects and
//!   a rewrite): each holds exactly what the master holds; layout 4 only
//!   while a hold counts as several permits; memory flat over thousands of
//!   weighted holds.
use crate::common;

mod contract;
mod durability;
mod fairness;

use common::dump::digest;
use common::lock::*;
use common::*;
use redis::{Connection, Value};

const MISMATCH: &str = "ERR token already holds this resource with another PERMITS";

/// `DLOCK.ACQUIRE res token ttl LIMIT n PERMITS k [extra...]`.
fn weighted(res: &str, token: &str, n: u32, k: u32, extra: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd("DLOCK.ACQUIRE");
    cmd.arg(res)
        .arg(token)
        .arg(60_000)
        .arg("LIMIT")
        .arg(n)
        .arg("PERMITS")
        .arg(k)
        .arg(extra);
    cmd
}

/// The reply of `cmd`, which must not be an error: the fence, or None.
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
    String::from_utf8(as_bytes(v)).unwrap()
}

/// (field, value) pairs, integers shown as text.
type Fields = Vec<(String, String)>;

/// `DLOCK.INFO res` in its list form (RESP2): the value's fields, and each
/// hold's as (field, value) pairs with integers shown as text.
fn fields(c: &mut Connection, res: &str) -> (Fields, Vec<Fields>) {
    let v: Vec<Value> = redis::cmd("DLOCK.INFO").arg(res).query(c).unwrap();
    let show = |x: &Value| match x {
        Value::Int(n) => n.to_string(),
        Value::Array(_) => "[..]".to_string(),
        other => text(other),
    };
    let top = v.chunks(2).map(|p| (text(&p[0]), show(&p[1]))).collect();
    let holds = v
        .chunks(2)
        .find(|p| text(&p[0]) == "holds")
        .map(|p| match &p[1] {
            Value::Array(hs) => hs
                .iter()
                .map(|h| match h {
                    Value::Array(kv) => kv.chunks(2).map(|p| (text(&p[0]), show(&p[1]))).collect(),
                    other => panic!("hold: {other:?}"),
                })
                .collect(),
            other => panic!("holds: {other:?}"),
        })
        .unwrap_or_default();
    (top, holds)
}

/// A value field of `DLOCK.INFO res` (`None`: not shown).
fn value_field(c: &mut Connection, res: &str, name: &str) -> Option<String> {
    fields(c, res)
        .0
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
}

/// Polls `DLOCK.INFO res` (its list form) until `n` requests are queued.
fn wait_queued(c: &mut Connection, res: &str, n: usize) {
    let want = n.to_string();
    wait_until(SOON, &format!("{n} queued on {res}"), || {
        value_field(c, res, "waiters").as_deref() == Some(want.as_str())
    });
}

/// `token`'s `permits` in `DLOCK.INFO res` (`None`: not shown).
fn permits_shown(c: &mut Connection, res: &str, token: &str) -> Option<String> {
    let (_, holds) = fields(c, res);
    let hold = holds
        .iter()
        .find(|h| h.iter().any(|(k, v)| k == "token" && v == token))
        .unwrap_or_else(|| panic!("{token} holds no {res}: {holds:?}"));
    hold.iter()
        .find(|(k, _)| k == "permits")
        .map(|(_, v)| v.clone())
}

const COUNTERS: [&str; 6] = [
    "grants",
    "extends",
    "releases",
    "refreshes",
    "handoffs",
    "contended",
];

fn stat(c: &mut Connection, name: &str) -> i64 {
    info_field(c, "dlock", &format!("dlock_{name}"))
        .unwrap_or_else(|| panic!("INFO dlock_{name}"))
        .parse()
        .unwrap()
}

/// What a refusal must leave as it was: the values' digests, what INFO
/// shows but the ttls, the counters.
#[derive(Debug, PartialEq)]
struct Snapshot {
    digests: Vec<Option<String>>,
    shown: Vec<Vec<Vec<(String, String)>>>,
    counters: Vec<i64>,
}

fn snapshot(c: &mut Connection, resources: &[&str]) -> Snapshot {
    let no_ttl = |h: Vec<(String, String)>| h.into_iter().filter(|(k, _)| k != "ttl").collect();
    Snapshot {
        digests: resources
            .iter()
            .map(|r| exists(c, *r).then(|| digest(c, r)))
            .collect(),
        shown: resources
            .iter()
            .map(|r| {
                if exists(c, *r) {
                    fields(c, r).1.into_iter().map(no_ttl).collect()
                } else {
                    Vec::new()
                }
            })
            .collect(),
        counters: COUNTERS.iter().map(|n| stat(c, n)).collect(),
    }
}
