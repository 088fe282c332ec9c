//! The memory figures of docs/operations.md#sizing, measured on a real
//! server: `used_memory` after `MEMORY PURGE`, before and after thousands of
//! locks, shared holds, waiters and observers, divided by their number.
//! Each figure must stay at or below the bound the page states: a change
//! that makes a lock, a hold, a waiter or an observer cost more fails here
//! until the page says so.
//!
//! Waiters and observers are connections of their own; what the server
//! keeps for the connections themselves (`clients.normal` of `MEMORY
//! STATS`: buffers that the server sizes and shrinks on its own schedule)
//! is left out of their figure and stated apart on the page.
use crate::common;

use common::*;
use redis::{Connection, Value};
use std::time::Duration;

/// Items per measurement.
const LOCKS: usize = 20_000;
const HOLDS: usize = 20_000;
const WAITERS: usize = 10_000;
const OBSERVERS: usize = 10_000;

/// The bounds docs/operations.md#sizing states, in bytes per item (names
/// of 17 bytes, tokens of 16).
const LOCK_BOUND: f64 = 210.0;
const HOLD_BOUND: f64 = 260.0;
const WAITER_BOUND: f64 = 52_000.0;
const OBSERVER_BOUND: f64 = 16_000.0;

fn name(i: usize) -> String {
    format!("lock:{i:012}")
}

fn token(i: usize) -> String {
    format!("tok:{i:012}")
}

/// `used_memory` without what the server keeps for client connections.
fn memory_beyond_clients(c: &mut Connection) -> f64 {
    let (used, clients) = memory(c);
    used - clients
}

/// `used_memory` (after `MEMORY PURGE`), and what of it the server keeps
/// for client connections (`clients.normal` of `MEMORY STATS`).
fn memory(c: &mut Connection) -> (f64, f64) {
    let used = used_memory_purged(c) as f64;
    let stats: Value = redis::cmd("MEMORY").arg("STATS").query(c).unwrap();
    let Value::Array(items) = stats else {
        panic!("MEMORY STATS: {stats:?}")
    };
    let clients = items
        .chunks(2)
        .find_map(|kv| match (&kv[0], &kv[1]) {
            (Value::BulkString(k), Value::Int(v)) if k == b"clients.normal" => Some(*v),
            _ => None,
        })
        .expect("MEMORY STATS has clients.normal");
    (used, clients as f64)
}

/// Runs `cmds` pipelined, a thousand at a time, each expected to succeed.
fn pipelined(c: &mut Connection, cmds: impl Iterator<Item = redis::Cmd>) {
    let cmds: Vec<redis::Cmd> = cmds.collect();
    for chunk in cmds.chunks(1000) {
        let mut p = redis::pipe();
        for cmd in chunk {
            p.add_command(cmd.clone());
        }
        let replies: Vec<Value> = p.query(c).unwrap();
        for r in replies {
            assert!(!matches!(r, Value::Nil | Value::ServerError(_)), "{r:?}");
        }
    }
}

fn acquire(resource: &str, token: &str, extra: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd("DLOCK.ACQUIRE");
    cmd.arg(resource).arg(token).arg(600_000).arg(extra);
    cmd
}

fn count(c: &mut Connection, field: &str) -> usize {
    info_field(c, "dlock", field).unwrap().parse().unwrap()
}

/// Opens `n` connections, each sending the command `blocked(i)` that
/// blocks, and waits until `field` of `INFO dlock` counts them all.
fn block(
    s: &Server,
    c: &mut Connection,
    n: usize,
    field: &str,
    blocked: impl Fn(usize) -> redis::Cmd,
) -> Vec<Connection> {
    let mut clients = Vec::with_capacity(n);
    for i in 0..n {
        let mut w = connect_within(&s.url(), Duration::from_secs(10)).unwrap();
        w.send_packed_command(&blocked(i).get_packed_command())
            .unwrap();
        clients.push(w);
    }
    wait_until(Duration::from_secs(60), field, || count(c, field) == n);
    clients
}

fn check(what: &str, measured: f64, bound: f64) {
    eprintln!("{what}: {measured:.1} bytes each (the page states at most {bound})");
    assert!(
        measured <= bound,
        "{what} costs {measured:.1} bytes each, above the {bound} bytes docs/operations.md#sizing states"
    );
}

/// Clients the server takes (`maxclients`): the waiters or the observers,
/// and room for the harness.
const MAX_CLIENTS: u64 = 12_000;

/// A server for `MAX_CLIENTS` clients. This process opens as many
/// connections, and the server inherits its limit on open files: the soft
/// limit (often 1024) is raised to what both need, as far as the hard
/// limit allows, else the test stops saying so (not with a server that
/// resets connections past its lowered `maxclients`).
fn server() -> Server {
    let need = MAX_CLIENTS + 200;
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write `limit`.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        if limit.rlim_cur < need && limit.rlim_max >= need {
            limit.rlim_cur = need;
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
        }
    }
    assert!(
        limit.rlim_cur >= need,
        "this test needs {need} open files; the hard limit is {} (raise it: ulimit -Hn {need})",
        limit.rlim_max
    );
    Server::builder()
        .arg("--maxclients")
        .arg(MAX_CLIENTS.to_string())
        .start()
}

#[test]
fn a_lock_and_a_shared_hold_cost_at_most_what_the_page_states() {
    let s = server();
    let mut c = s.conn();
    let before = memory_beyond_clients(&mut c);
    pipelined(
        &mut c,
        (0..LOCKS).map(|i| acquire(&name(i), &token(i), &[])),
    );
    let after = memory_beyond_clients(&mut c);
    check("a lock", (after - before) / LOCKS as f64, LOCK_BOUND);

    let before = memory_beyond_clients(&mut c);
    pipelined(
        &mut c,
        (0..HOLDS).map(|i| acquire("lock:shared00000", &token(i), &["SHARED"])),
    );
    let after = memory_beyond_clients(&mut c);
    check("a shared hold", (after - before) / HOLDS as f64, HOLD_BOUND);
}

#[test]
fn a_waiter_and_an_observer_cost_at_most_what_the_page_states() {
    let s = server();
    let mut c = s.conn();
    c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    pipelined(
        &mut c,
        (0..WAITERS).map(|i| acquire(&name(i), "holder", &[])),
    );

    // A waiter on each held lock: each lock gets its queue.
    let before = memory(&mut c);
    let waiters = block(&s, &mut c, WAITERS, "dlock_waiters", |i| {
        acquire(&name(i), &token(i), &["WAIT", "0"])
    });
    let after = memory(&mut c);
    // The connections' own share varies with the server's buffer sizing:
    // stated on the page as the server's, not bounded here.
    eprintln!(
        "a waiting client's connection: {:.1} bytes each (clients.normal)",
        (after.1 - before.1) / WAITERS as f64
    );
    let beyond = (after.0 - after.1) - (before.0 - before.1);
    check("a waiter", beyond / WAITERS as f64, WAITER_BOUND);
    drop(waiters);
    wait_until(Duration::from_secs(60), "waiters gone", || {
        count(&mut c, "dlock_waiters") == 0
    });

    // An observer of each held lock, waiting for it to change.
    let versions: Vec<Vec<u8>> = (0..OBSERVERS)
        .map(|i| {
            let reply: Value = redis::cmd("DLOCK.OBSERVE")
                .arg(name(i))
                .query(&mut c)
                .unwrap();
            match reply {
                Value::Array(v) => match &v[0] {
                    Value::BulkString(b) => b.clone(),
                    other => panic!("version: {other:?}"),
                },
                other => panic!("DLOCK.OBSERVE: {other:?}"),
            }
        })
        .collect();
    let before = memory_beyond_clients(&mut c);
    let observers = block(&s, &mut c, OBSERVERS, "dlock_observers", |i| {
        let mut cmd = redis::cmd("DLOCK.OBSERVE");
        cmd.arg(name(i))
            .arg("SINCE")
            .arg(&versions[i])
            .arg("WAIT")
            .arg(0);
        cmd
    });
    let after = memory_beyond_clients(&mut c);
    check(
        "an observer",
        (after - before) / OBSERVERS as f64,
        OBSERVER_BOUND,
    );
    drop(observers);
}
