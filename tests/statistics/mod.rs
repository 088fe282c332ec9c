//! `DLOCK.STATS` and `DLOCK.SLOWLOG` against real servers: what each path counts, the
//! distributions' bounds, the hot tables, reset, the config, replicas,
//! bad input, and the memory bound over 1,000,000 resources.
//!
//! - `counts.rs` — grants, waits, holds, expirations, timeouts per kind.
//! - `contract.rs` — reply shapes (RESP2 and RESP3), RESET, `dlock.stats`,
//!   a replica, transactions, bad input with nothing changed.
//! - `memory.rs` — the statistics' memory over 1,000,000 resources.
//! - `slowlog.rs` — `DLOCK.SLOWLOG`: what is logged, with which client,
//!   bounded, configured, reset; a replica; bad input.
use crate::common;

use common::lock::*;
use common::*;
use redis::{Connection, Value};
use std::collections::HashMap;

mod contract;
mod counts;
mod memory;
mod slowlog;

/// A reply map (RESP3) or flat field/value array (RESP2), by field.
type Fields = HashMap<String, Value>;

fn fields(v: &Value) -> Fields {
    let pairs: Vec<(Value, Value)> = match v {
        Value::Map(pairs) => pairs.clone(),
        Value::Array(flat) => {
            assert_eq!(flat.len() % 2, 0, "pairs: {flat:?}");
            flat.chunks(2)
                .map(|p| (p[0].clone(), p[1].clone()))
                .collect()
        }
        other => panic!("a map, not {other:?}"),
    };
    let n = pairs.len();
    let f: Fields = pairs
        .into_iter()
        .map(|(k, v)| (String::from_utf8(as_bytes(&k)).unwrap(), v))
        .collect();
    assert_eq!(f.len(), n, "each field once");
    f
}

/// `DLOCK.STATS` read into its fields.
fn stats(c: &mut Connection) -> Fields {
    fields(&redis::cmd("DLOCK.STATS").query::<Value>(c).unwrap())
}

/// One figure of one kind (`total`, `lock`, `shared`, `semaphore`).
fn figure(s: &Fields, kind: &str, name: &str) -> i64 {
    as_int(&fields(&s[kind])[name])
}

/// One value of a kind's distribution (`wait` or `hold`).
fn dist(s: &Fields, kind: &str, which: &str, name: &str) -> i64 {
    as_int(&fields(&fields(&s[kind])[which])[name])
}

/// `DLOCK.STATS HOT BY by COUNT n`, each entry by field.
fn hot(c: &mut Connection, by: &str, n: usize) -> Vec<Fields> {
    let v: Value = redis::cmd("DLOCK.STATS")
        .arg("HOT")
        .arg("BY")
        .arg(by)
        .arg("COUNT")
        .arg(n)
        .query(c)
        .unwrap();
    let Value::Array(items) = v else {
        panic!("HOT answered {v:?}")
    };
    items.iter().map(fields).collect()
}

fn name_of(e: &Fields) -> String {
    String::from_utf8(as_bytes(&e["resource"])).unwrap()
}

/// `DLOCK.ACQUIRE res tok ttl extra...`: the fence, or nil.
fn acq(c: &mut Connection, res: &str, tok: &str, ttl: u64, extra: &[&str]) -> Option<i64> {
    redis::cmd("DLOCK.ACQUIRE")
        .arg(res)
        .arg(tok)
        .arg(ttl)
        .arg(extra)
        .query(c)
        .unwrap()
}
