//! Sessions: `DLOCK.SESSION OPEN|KEEPALIVE|CLOSE|KILL|INFO|LIST|HOLDS` and
//! holds and waits bound to a session with `SESSION id`
//! (docs/commands/dlock.session.md is the contract).
//!
//! - `contract.rs` — every subcommand, its replies and errors; `access.rs`
//!   — replicas, ACL, `COMMAND INFO`, `HELP`; `bound.rs` — `SESSION id` on
//!   `ACQUIRE`/`MACQUIRE` of every kind, retries, `EXTEND`, `RELEASE`;
//!   `paging.rs` — `LIST`/`HOLDS` pages.
//! - `ending.rs` — a session ends (ttl, `CLOSE`, `KILL`, its `BIND`
//!   connection): every hold released and handed on, bound waiters answered
//!   `NOSESSION`, the lock-delay, counters and events.
//! - `races.rs` — an end in the same event-loop turn as a grant, an
//!   `ACQUIRE`, a keep-alive or a connection's close.
//! - `durability.rs` — RDB, AOF, replicas, promotion, `DUMP`/`RESTORE`;
//!   `effects.rs` — the session effects written to the AOF.
//! - `memory.rs` — thousands of sessions ended each way: `used_memory` flat.
//! - `big.rs` — one session with 100,000 holds ended by `CLOSE`.
//! - `deadlock.rs` — a bound `WAIT` closing a cycle of sessions is refused;
//!   `moved.rs` — a bound hold restored where its session is not, renamed;
//!   `waits.rs` — `WAITS`, and the queues an ended session's waiters leave;
//!   `delay_and_loss.rs` — a lock-delay's hold is held by nobody; a restart
//!   that may have lost writes ends every session.
//!
//! A session ends in one command but its holds are released by later
//! event-loop turns, so every check of a release polls, with a deadline.
use crate::common;
use crate::quiet;

mod access;
mod big;
mod bound;
mod contract;
mod deadlock;
mod delay_and_loss;
mod durability;
mod effects;
mod ending;
mod memory;
mod moved;
mod paging;
mod races;
mod request;
mod session;
mod waits;

use common::lock::*;
use common::*;
use redis::{Connection, ConnectionLike, RedisResult, Value};
use request::*;
use session::*;
use std::sync::mpsc::{channel, Receiver, TryRecvError};
use std::time::{Duration, Instant};

const NOSESSION: &str =
    "NOSESSION no such session (it ended or was never opened): its holds are released";
const OTHER_SESSION: &str = "ERR the token holds this resource under another session (or none)";
const BOUND: &str =
    "ERR the hold is bound to a session: keep the session alive (DLOCK.SESSION KEEPALIVE)";
const READONLY: &str =
    "READONLY dlock: locks are granted, extended and released on the master only";
const ID_LENGTH: &str = "ERR session id must be 1 to 256 bytes";
const TTL_RANGE: &str = "ERR ttl_ms must be an integer from 1 to 140737488355328";
const LOCKDELAY_RANGE: &str = "ERR LOCKDELAY must be an integer from 0 to 60000";
const BIND_NEEDS_CLIENT: &str =
    "ERR BIND needs a client connection (not a script or MULTI from another client)";
const SYNTAX: &str = "ERR syntax error";
const ENDING: &str = "ERR the session with this id ended and its holds are still being released: open a session with a new id";
/// How long the release of an ended session's holds may take on a loaded
/// machine (it is bounded batches in later event-loop turns).
const RELEASED: Duration = Duration::from_secs(20);

fn connect(url: &str) -> Connection {
    connect_within(url, Duration::from_secs(10)).unwrap_or_else(|e| panic!("connect {url}: {e}"))
}

// ---------------------------------------------------------------- counters

/// `dlock_<name>` of `INFO dlock`.
fn stat(c: &mut Connection, name: &str) -> i64 {
    info_field(c, "dlock", &format!("dlock_{name}"))
        .unwrap_or_else(|| panic!("INFO dlock has no dlock_{name}"))
        .parse()
        .unwrap()
}

const END_COUNTERS: [&str; 5] = [
    "sessions_opened",
    "sessions_closed",
    "sessions_expired",
    "sessions_killed",
    "sessions_disconnected",
];

fn end_counters(c: &mut Connection) -> [i64; 5] {
    END_COUNTERS.map(|n| stat(c, n))
}

/// Polls until no session hold is bound or being released.
fn wait_no_session_holds(c: &mut Connection) {
    wait_until(RELEASED, "no session holds left", || {
        stat(c, "session_holds") == 0 && stat(c, "session_holds_ending") == 0
    });
}

/// A server whose restarts start no quarantine (tests that restart to see
/// what survives; the quarantine has tests of its own).
fn no_quarantine() -> ServerBuilder {
    Server::builder()
        .arg("--dlock.restart-quarantine")
        .arg("off")
}

/// `WAIT 1 5000` must report the replica.
fn wait_replica(m: &mut Connection) {
    let n: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(m).unwrap();
    assert_eq!(n, 1, "WAIT 1 5000");
}

/// A connection subscribed to the keyspace channels of `keys` in db 0,
/// with lock events (class `d`) on.
fn events(s: &Server, keys: &[&str]) -> Connection {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("Kd")
        .query(&mut s.conn())
        .unwrap();
    let mut sub = s.conn();
    sub.set_read_timeout(Some(SOON)).unwrap();
    let channels: Vec<String> = keys.iter().map(|k| format!("__keyspace@0__:{k}")).collect();
    let mut cmd = redis::cmd("SUBSCRIBE");
    cmd.arg(&channels);
    sub.send_packed_command(&cmd.get_packed_command()).unwrap();
    for _ in keys {
        let _confirm: Value = sub.recv_response().unwrap();
    }
    sub
}

/// The next event on a connection from `events`: (key, event).
fn next_event(sub: &mut Connection) -> (String, String) {
    match sub.recv_response().expect("an event within 5 s") {
        Value::Array(parts) | Value::Push { data: parts, .. } => {
            assert_eq!(parts.len(), 3, "{parts:?}");
            let channel = text(&parts[1]);
            let key = channel
                .strip_prefix("__keyspace@0__:")
                .unwrap_or_else(|| panic!("channel {channel}"))
                .to_string();
            (key, text(&parts[2]))
        }
        other => panic!("unexpected message {other:?}"),
    }
}

/// Events until `n` have come for `key` (events of other keys are kept
/// in order in the returned list too).
fn events_until(sub: &mut Connection, n: usize, key: &str) -> Vec<(String, String)> {
    let mut got = Vec::new();
    while got.iter().filter(|(k, _)| k == key).count() < n {
        got.push(next_event(sub));
        assert!(got.len() < 1000, "event flood: {got:?}");
    }
    got
}

/// The events of `key` in `got`.
fn of(got: &[(String, String)], key: &str) -> Vec<String> {
    got.iter()
        .filter(|(k, _)| k == key)
        .map(|(_, e)| e.clone())
        .collect()
}

/// The error text of an error inside a list of replies (`EXEC`'s).
fn value_err(v: &Value) -> String {
    match v {
        Value::ServerError(e) => match e.details() {
            Some(d) => format!("{} {d}", e.code()),
            None => e.code().to_string(),
        },
        other => panic!("expected an error, got {other:?}"),
    }
}
