//! The server's own heap. valgrind (`make check-memory`) sees only the
//! module's allocations; the blocked-client handle and the two temporary
//! clients the server allocates for every waiter are freed only when the
//! module unblocks that waiter, whichever way it ends. Here every way a
//! waiter can end runs a thousand times, and `used_memory` (after
//! `MEMORY PURGE`) must stay flat within 1 KB per waiter.
use crate::common;

use common::lock::*;
use common::*;
use redis::{Connection, Value};
use std::time::Duration;

/// Waiters blocked at once, and rounds of them, per way of ending.
const BATCH: usize = 50;
const ROUNDS: usize = 40;
const SLACK_PER_WAITER: i64 = 1024;

#[derive(Clone, Copy, Debug)]
enum End {
    Granted,
    Timeout,
    Disconnect,
    ClientKill,
    Unblock,
    UnblockError,
    Demotion,
    FlushAll,
    DelHandoff,
}

fn client_id(c: &mut Connection) -> i64 {
    redis::cmd("CLIENT").arg("ID").query(c).unwrap()
}

fn dlock_waiters(c: &mut Connection) -> i64 {
    info_field(c, "dlock", "dlock_waiters")
        .unwrap()
        .parse()
        .unwrap()
}

/// One round: BATCH waiters queue behind held locks, then all end `how`.
fn round(s: &Server, c: &mut Connection, how: End, round: usize) {
    let wait = match how {
        End::Timeout => 1,
        _ => 0,
    };
    let mut waiters = Vec::with_capacity(BATCH);
    for i in 0..BATCH {
        let res = format!("res{i}");
        let _: Option<i64> = try_acquire(c, &res, "holder", 60_000).unwrap();
        let mut w = connect_within(&s.url(), Duration::from_secs(10)).unwrap();
        let id = client_id(&mut w);
        let cmd = redis::cmd("DLOCK.ACQUIRE")
            .arg(&res)
            .arg(format!("w{round}-{i}"))
            .arg(60_000)
            .arg("WAIT")
            .arg(wait)
            .get_packed_command();
        w.send_packed_command(&cmd).unwrap();
        waiters.push((w, id, res));
    }
    if !matches!(how, End::Timeout) {
        wait_until(Duration::from_secs(10), "waiters to queue", || {
            dlock_waiters(c) == BATCH as i64
        });
    }
    match how {
        End::Granted => {
            for (_, _, res) in &waiters {
                release(c, res, "holder");
            }
        }
        End::Timeout => {}
        End::Disconnect => {
            for (w, _, _) in waiters.drain(..) {
                drop(w);
            }
        }
        End::ClientKill | End::Unblock | End::UnblockError => {
            for (_, id, _) in &waiters {
                let mut cmd = redis::cmd("CLIENT");
                match how {
                    End::ClientKill => cmd.arg("KILL").arg("ID").arg(*id),
                    End::Unblock => cmd.arg("UNBLOCK").arg(*id),
                    _ => cmd.arg("UNBLOCK").arg(*id).arg("ERROR"),
                };
                let n: i64 = cmd.query(c).unwrap();
                assert_eq!(n, 1, "{how:?} found its waiter");
            }
        }
        End::Demotion => {
            // A master of no one: the demotion alone unblocks every waiter.
            let _: () = redis::cmd("REPLICAOF")
                .arg("127.0.0.1")
                .arg(1)
                .query(c)
                .unwrap();
            let _: () = redis::cmd("REPLICAOF")
                .arg("NO")
                .arg("ONE")
                .query(c)
                .unwrap();
        }
        End::FlushAll => {
            let _: () = redis::cmd("FLUSHALL").arg("SYNC").query(c).unwrap();
        }
        End::DelHandoff => {
            for (_, _, res) in &waiters {
                let _: i64 = redis::cmd("DEL").arg(res).query(c).unwrap();
            }
        }
    }
    for (mut w, _, res) in waiters {
        if matches!(how, End::ClientKill) {
            continue;
        }
        let reply: redis::RedisResult<Value> = w.recv_response();
        match (how, reply) {
            (End::Granted | End::FlushAll | End::DelHandoff, Ok(Value::Int(_))) => {}
            (End::Timeout | End::Unblock, Ok(Value::Nil)) => {}
            (End::UnblockError | End::Demotion, Err(_) | Ok(Value::ServerError(_))) => {}
            (how, other) => panic!("{how:?} on {res}: {other:?}"),
        }
    }
    let _: () = redis::cmd("FLUSHALL").arg("SYNC").query(c).unwrap();
    wait_until(Duration::from_secs(10), "every waiter gone", || {
        dlock_waiters(c) == 0 && blocked_clients(c) == 0
    });
}

fn flat_memory(how: End) {
    // Quarantine off: each demotion + promotion would start one otherwise.
    let s = Server::builder()
        .module_arg("restart-quarantine")
        .module_arg("off")
        .start();
    let mut c = s.conn();
    // Warm up: the server's pools, dict sizes and client buffers settle.
    round(&s, &mut c, how, 0);
    round(&s, &mut c, how, 1);
    let before = used_memory_purged(&mut c);
    for r in 0..ROUNDS {
        round(&s, &mut c, how, r + 2);
    }
    let after = used_memory_purged(&mut c);
    let waiters = (ROUNDS * BATCH) as i64;
    let growth = after - before;
    eprintln!(
        "{how:?}: used_memory {before} -> {after} over {waiters} waiters ({} B each)",
        growth / waiters
    );
    assert!(
        growth < waiters * SLACK_PER_WAITER,
        "{how:?}: used_memory grew {growth} B over {waiters} waiters"
    );
}

#[test]
fn granted_waiters_leave_no_server_memory() {
    flat_memory(End::Granted);
}

#[test]
fn timed_out_waiters_leave_no_server_memory() {
    flat_memory(End::Timeout);
}

#[test]
fn disconnected_waiters_leave_no_server_memory() {
    flat_memory(End::Disconnect);
}

#[test]
fn killed_waiters_leave_no_server_memory() {
    flat_memory(End::ClientKill);
}

#[test]
fn unblocked_waiters_leave_no_server_memory() {
    flat_memory(End::Unblock);
}

#[test]
fn unblocked_with_error_waiters_leave_no_server_memory() {
    flat_memory(End::UnblockError);
}

#[test]
fn waiters_ended_by_demotion_leave_no_server_memory() {
    flat_memory(End::Demotion);
}

#[test]
fn waiters_granted_after_flushall_leave_no_server_memory() {
    flat_memory(End::FlushAll);
}

#[test]
fn waiters_granted_after_del_leave_no_server_memory() {
    flat_memory(End::DelHandoff);
}
