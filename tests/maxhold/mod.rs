//! `MAXHOLD ms`: a cap on how long a hold may live across its extends
//! (docs/commands/dlock.acquire.md, docs/lock-kinds.md "A cap on holding").
//!
//! - `contract.rs` — the lease granted, `DLOCK.INFO`'s `maxhold`, `EXTEND`
//!   and same-token retries refused past the cap (and passing within it),
//!   every bad argument a clear error that changes nothing, a waiter's cap
//!   counted from its grant, a hold ending at its cap.
//! - `sets.rs` — `MACQUIRE ... MAXHOLD`, `MEXTEND` refused whole, with and
//!   without someone waiting.
//! - `durability.rs` — `DEBUG RELOAD`, a replica, the AOF (its effect and a
//!   rewrite): each holds exactly what the master holds; a value without a
//!   cap is written as before.
//! - `races.rs` — refusals and grants in one `MULTI`/`EXEC` turn; memory
//!   flat over thousands of capped holds.
use crate::common;

mod contract;
mod durability;
mod races;
mod sets;

use common::dump::digest;
use common::lock::*;
use common::*;
use redis::{Connection, Value};

/// The refusal past a cap, for `ms_left` ms to it.
fn refusal(ms_left: i64) -> String {
    format!("MAXHOLD the hold may live {ms_left} ms more: it cannot be extended past its MAXHOLD")
}

/// The ms a refusal says are left to the cap (panics on any other error).
fn ms_left(err: &str) -> i64 {
    let n = err
        .strip_prefix("MAXHOLD the hold may live ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not a MAXHOLD refusal: {err}"));
    assert_eq!(err, refusal(n));
    n
}

const MISMATCH: &str = "ERR token already holds this resource with another MAXHOLD (or none)";

/// One hold as `DLOCK.INFO`'s list form shows it.
#[derive(Debug, Clone, PartialEq)]
struct Shown {
    token: String,
    fence: i64,
    ttl: i64,
    mode: String,
    maxhold: Option<i64>,
    fields: Vec<String>,
}

fn text(v: &Value) -> String {
    String::from_utf8(as_bytes(v)).unwrap()
}

/// The holds of `res` (RESP2 list form; panics on the plain form).
fn shown(c: &mut Connection, res: &str) -> Vec<Shown> {
    let v: Vec<Value> = redis::cmd("DLOCK.INFO").arg(res).query(c).unwrap();
    let at = v
        .iter()
        .position(|x| matches!(x, Value::BulkString(b) if b == b"holds"))
        .unwrap_or_else(|| panic!("{res}: not the list form: {v:?}"));
    let Value::Array(holds) = &v[at + 1] else {
        panic!("holds: {v:?}");
    };
    holds
        .iter()
        .map(|h| {
            let Value::Array(kv) = h else {
                panic!("hold: {h:?}")
            };
            let get = |k: &str| {
                kv.chunks(2)
                    .find(|p| text(&p[0]) == k)
                    .map(|p| p[1].clone())
            };
            Shown {
                token: text(&get("token").unwrap()),
                fence: as_int(&get("fence").unwrap()),
                ttl: as_int(&get("ttl").unwrap()),
                mode: text(&get("mode").unwrap()),
                maxhold: get("maxhold").map(|m| as_int(&m)),
                fields: kv.chunks(2).map(|p| text(&p[0])).collect(),
            }
        })
        .collect()
}

/// `res`'s one hold, shown.
fn only(c: &mut Connection, res: &str) -> Shown {
    let mut h = shown(c, res);
    assert_eq!(h.len(), 1, "{res}: {h:?}");
    h.remove(0)
}

/// `DLOCK.ACQUIRE res token ttl [extra...] MAXHOLD ms`.
fn capped(res: &str, token: &str, ttl: u64, ms: u64, extra: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd("DLOCK.ACQUIRE");
    cmd.arg(res)
        .arg(token)
        .arg(ttl)
        .arg(extra)
        .arg("MAXHOLD")
        .arg(ms);
    cmd
}

fn fence_of(c: &mut Connection, cmd: &redis::Cmd) -> i64 {
    let what = String::from_utf8_lossy(&cmd.get_packed_command()).into_owned();
    let f: Option<i64> = cmd.query(c).unwrap_or_else(|e| panic!("{what}: {e}"));
    f.unwrap_or_else(|| panic!("{what}: nil"))
}

fn refused(c: &mut Connection, cmd: &redis::Cmd) -> String {
    err_of(cmd.query::<Value>(c))
}

fn extend_cmd(res: &str, token: &str, ttl: u64) -> redis::Cmd {
    let mut cmd = redis::cmd("DLOCK.EXTEND");
    cmd.arg(res).arg(token).arg(ttl);
    cmd
}

fn stat(c: &mut Connection, name: &str) -> i64 {
    info_field(c, "dlock", &format!("dlock_{name}"))
        .unwrap_or_else(|| panic!("INFO dlock_{name}"))
        .parse()
        .unwrap()
}

/// What a refusal must leave as it was: the value's digest, what INFO
/// shows but the times, the key's existence, the counters.
#[derive(Debug, PartialEq)]
struct Snapshot {
    digests: Vec<Option<String>>,
    holds: Vec<Vec<(String, i64, String)>>,
    counters: Vec<i64>,
}

const COUNTERS: [&str; 6] = [
    "grants",
    "extends",
    "releases",
    "refreshes",
    "handoffs",
    "contended",
];

fn snapshot(c: &mut Connection, resources: &[&str]) -> Snapshot {
    Snapshot {
        digests: resources
            .iter()
            .map(|r| exists(c, *r).then(|| digest(c, r)))
            .collect(),
        holds: resources
            .iter()
            .map(|r| {
                if exists(c, *r) {
                    shown(c, r)
                        .into_iter()
                        .map(|h| (h.token, h.fence, h.mode))
                        .collect()
                } else {
                    Vec::new()
                }
            })
            .collect(),
        counters: COUNTERS.iter().map(|n| stat(c, n)).collect(),
    }
}
