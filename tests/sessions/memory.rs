//! The server's memory over thousands of sessions: each round opens a batch
//! of sessions, each with two bound holds, a bound waiter and a plain
//! waiter, ends them all one way (ttl, `CLOSE`, `KILL`, `BIND` connection
//! closed) and waits until every hold is released and every waiter
//! answered; `used_memory` after `MEMORY PURGE` stays flat (the style of
//! tests/ops/memory.rs).
use super::*;

const BATCH: usize = 50;
const ROUNDS: usize = 40;
/// Far below what one leaked session, hold or blocked-client handle costs
/// (a handle never unblocked leaks tens of KB), far above the allocator's
/// noise over 2,000 sessions.
const SLACK_PER_SESSION: i64 = 512;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    Ttl,
    Close,
    Kill,
    Disconnect,
}

/// Every command of `cmds` in one pipeline; the replies.
fn pipeline(c: &mut Connection, cmds: impl IntoIterator<Item = redis::Cmd>) -> Vec<Value> {
    let mut p = redis::pipe();
    for cmd in cmds {
        p.add_command(cmd);
    }
    p.query(c).unwrap()
}

fn one_round(s: &Server, c: &mut Connection, how: End, round: usize) {
    let ids: Vec<String> = (0..BATCH).map(|i| format!("s{round}-{i}")).collect();
    let mut owners = Vec::new();
    if how == End::Disconnect {
        for id in &ids {
            let mut o = s.conn();
            assert_eq!(open_with(&mut o, id, 60_000, &["BIND"]), 1);
            owners.push(o);
        }
    } else {
        let opened = pipeline(c, ids.iter().map(|id| session_cmd("OPEN", &[id, "60000"])));
        assert!(opened.iter().all(|v| *v == Value::Int(1)), "{opened:?}");
    }
    let tok = format!("t{round}");
    let grants = pipeline(
        c,
        ids.iter().enumerate().flat_map(|(i, id)| {
            [
                req(&format!("p{i}"), &tok).session(id).cmd(),
                req(&format!("sh{i}"), &tok).shared().session(id).cmd(),
                req(&format!("q{i}"), "holder").ttl("60000").cmd(),
            ]
        }),
    );
    assert!(
        grants.iter().all(|v| matches!(v, Value::Int(_))),
        "{grants:?}"
    );
    // Per session: a waiter bound to it queued on q<i> (held by another,
    // so no cycle of sessions), and a plain waiter queued on p<i>.
    let mut bound_waiters = Vec::with_capacity(BATCH);
    let mut plain_waiters = Vec::with_capacity(BATCH);
    for (i, id) in ids.iter().enumerate() {
        let bound = req(&format!("q{i}"), &format!("b{round}"))
            .wait(0)
            .session(id);
        let plain = req(&format!("p{i}"), &format!("w{round}"))
            .ttl("60000")
            .wait(0);
        for (r, list) in [(bound, &mut bound_waiters), (plain, &mut plain_waiters)] {
            let mut w = s.conn();
            w.send_packed_command(&r.cmd().get_packed_command())
                .unwrap();
            list.push(w);
        }
    }
    wait_until(Duration::from_secs(10), "the waiters to queue", || {
        stat(c, "waiters") == 2 * BATCH as i64
    });
    match how {
        End::Ttl => {
            pipeline(c, ids.iter().map(|id| session_cmd("KEEPALIVE", &[id, "1"])));
        }
        End::Close => {
            let v = pipeline(c, ids.iter().map(|id| session_cmd("CLOSE", &[id])));
            assert!(v.iter().all(|v| *v == Value::Int(1)), "{v:?}");
        }
        End::Kill => {
            let v = pipeline(c, ids.iter().map(|id| session_cmd("KILL", &[id])));
            assert!(v.iter().all(|v| *v == Value::Int(1)), "{v:?}");
        }
        End::Disconnect => drop(owners),
    }
    for (i, mut w) in bound_waiters.into_iter().enumerate() {
        match w.recv_response() {
            Ok(Value::ServerError(e)) if e.code() == "NOSESSION" => {}
            Err(e) if e.code() == Some("NOSESSION") => {}
            other => panic!("{how:?}, round {round}, bound waiter {i}: {other:?}"),
        }
    }
    for (i, mut w) in plain_waiters.into_iter().enumerate() {
        match w.recv_response() {
            Ok(Value::Int(_)) => {}
            other => panic!("{how:?}, round {round}, waiter {i}: {other:?}"),
        }
    }
    wait_until(
        RELEASED,
        "every session gone and its holds released",
        || {
            stat(c, "sessions") == 0
                && stat(c, "session_holds") == 0
                && stat(c, "session_holds_ending") == 0
                && stat(c, "waiters") == 0
        },
    );
    // Left: the plain waiters' grants and q<i>.
    assert_eq!(dbsize(c), 2 * BATCH as i64);
    let _: () = redis::cmd("FLUSHALL").arg("SYNC").query(c).unwrap();
    wait_blocked_clients(c, 0);
}

fn flat_memory(how: End) {
    let _quiet = quiet();
    let s = Server::start();
    let mut c = s.conn();
    // Warm up: the server's pools, dict sizes and client buffers settle.
    one_round(&s, &mut c, how, 0);
    one_round(&s, &mut c, how, 1);
    let before = used_memory_purged(&mut c);
    for r in 0..ROUNDS {
        one_round(&s, &mut c, how, r + 2);
    }
    let after = used_memory_purged(&mut c);
    let sessions = (ROUNDS * BATCH) as i64;
    let growth = after - before;
    eprintln!(
        "{how:?}: used_memory {before} -> {after} over {sessions} sessions ({} B each)",
        growth / sessions
    );
    assert!(
        growth < sessions * SLACK_PER_SESSION,
        "{how:?}: used_memory grew {growth} B over {sessions} sessions"
    );
    let ended = match how {
        End::Close => "sessions_closed",
        End::Ttl => "sessions_expired",
        End::Kill => "sessions_killed",
        End::Disconnect => "sessions_disconnected",
    };
    assert_eq!(stat(&mut c, ended), ((ROUNDS + 2) * BATCH) as i64);
}

#[test]
fn sessions_that_expire_leave_no_server_memory() {
    flat_memory(End::Ttl);
}

#[test]
fn closed_sessions_leave_no_server_memory() {
    flat_memory(End::Close);
}

#[test]
fn killed_sessions_leave_no_server_memory() {
    flat_memory(End::Kill);
}

#[test]
fn sessions_whose_connection_closes_leave_no_server_memory() {
    flat_memory(End::Disconnect);
}
