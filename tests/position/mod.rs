//! `DLOCK.POSITION` and `DLOCK.WAITERS`: where a request stands in a
//! resource's wait queue, and who waits there, against real servers.
//!
//! - `moves.rs` — positions through joins, grants, `CLIENT UNBLOCK`, a
//!   closed connection, a `WAIT` that ends, a token queued twice, and set
//!   requests (their place in each member's queue).
//! - `memory.rs` — `used_memory` flat over 2,000 requests that join, are
//!   read and leave.
//! - `contract.rs` — every field of `DLOCK.WAITERS` in RESP2 and RESP3,
//!   paging, `MULTI`/`EXEC` and scripts, a replica, and bad input refused
//!   with nothing changed.
use crate::common;

use common::lock::*;
use common::waiter::Waiter;
use common::*;
use redis::{Connection, Value};
use std::collections::HashMap;

mod contract;
mod memory;
mod moves;

const LONG_TTL: u64 = 60_000;

/// `DLOCK.POSITION res token`.
fn position(c: &mut Connection, res: &str, token: &str) -> Option<i64> {
    redis::cmd("DLOCK.POSITION")
        .arg(res)
        .arg(token)
        .query(c)
        .unwrap()
}

/// One waiter of a `DLOCK.WAITERS` reply, by field name.
type Fields = HashMap<String, Value>;

/// `DLOCK.WAITERS res args...`, each map (RESP3) or flat array (RESP2)
/// read into its fields.
fn waiters_page(c: &mut Connection, res: &str, args: &[&str]) -> Vec<Fields> {
    let v: Value = redis::cmd("DLOCK.WAITERS")
        .arg(res)
        .arg(args)
        .query(c)
        .unwrap();
    parse_page(v)
}

fn parse_page(v: Value) -> Vec<Fields> {
    let Value::Array(items) = v else {
        panic!("DLOCK.WAITERS answered {v:?}")
    };
    items.into_iter().map(parse_waiter).collect()
}

fn parse_waiter(v: Value) -> Fields {
    let pairs: Vec<(Value, Value)> = match v {
        Value::Map(pairs) => pairs,
        Value::Array(flat) => {
            assert_eq!(flat.len() % 2, 0, "pairs: {flat:?}");
            let mut it = flat.into_iter();
            std::iter::from_fn(|| Some((it.next()?, it.next()?))).collect()
        }
        other => panic!("a waiter is a map, not {other:?}"),
    };
    let n = pairs.len();
    let fields: Fields = pairs
        .into_iter()
        .map(|(k, v)| (String::from_utf8(as_bytes(&k)).unwrap(), v))
        .collect();
    assert_eq!(fields.len(), n, "each field once");
    fields
}

/// The tokens of a page, in its order.
fn tokens(page: &[Fields]) -> Vec<String> {
    page.iter()
        .map(|w| String::from_utf8(as_bytes(&w["token"])).unwrap())
        .collect()
}

/// The positions of a page, in its order.
fn positions(page: &[Fields]) -> Vec<i64> {
    page.iter().map(|w| as_int(&w["position"])).collect()
}

/// `DLOCK.ACQUIRE res token ttl [extra...] WAIT wait_ms`.
fn wait_cmd(res: &str, token: &str, extra: &[&str], wait_ms: u64) -> redis::Cmd {
    let mut cmd = redis::cmd("DLOCK.ACQUIRE");
    cmd.arg(res)
        .arg(token)
        .arg(LONG_TTL)
        .arg(extra)
        .arg("WAIT")
        .arg(wait_ms);
    cmd
}

/// Queues `cmd` on a connection of its own and waits until the queue of
/// `res` holds `queued` requests, so that the order of joins is the order
/// of the calls.
fn join(s: &Server, c: &mut Connection, cmd: redis::Cmd, res: &str, queued: i64) -> Waiter {
    let w = Waiter::send(s, cmd);
    wait_waiters(c, res, queued);
    w
}
