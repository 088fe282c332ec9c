//! The server's memory over thousands of sessions: each round opens a batch
//! of sessions with bound holds and a bound waiter each, ends them all one
//! way (ttl, `CLOSE`, `KILL`, `BIND` connection closed) and waits until
//! every hold is released and every waiter answered; `used_memory` after
//! `MEMORY PURGE` stays flat (the style of tests/ops/memory.rs).
use super::*;

const BATCH: usize = 50;
const ROUNDS: usize = 40;
/// Each session has two holds and a waiter (a blocked client of the
/// server's own, whose handle leaks tens of KB if never unblocked).
const SLACK_PER_SESSION: i64 = 1024;

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
            ]
        }),
    );
    assert!(
        grants.iter().all(|v| matches!(v, Value::Int(_))),
        "{grants:?}"
    );
    // Waiter i is bound to session i+1 and queues on p<i>, held by session i.
    let mut waiters = Vec::with_capacity(BATCH);
    for i in 0..BATCH {
        let mut w = s.conn();
        let cmd = req(&format!("p{i}"), &format!("w{round}"))
            .wait(0)
            .session(&ids[(i + 1) % BATCH])
            .cmd();
        w.send_packed_command(&cmd.get_packed_command()).unwrap();
        waiters.push(w);
    }
    wait_until(Duration::from_secs(10), "the waiters to queue", || {
        stat(c, "waiters") == BATCH as i64
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
    for (i, mut w) in waiters.into_iter().enumerate() {
        // Answered NOSESSION when its session ended first, or granted when
        // p<i> was released first (and then released by its own session).
        match w.recv_response() {
            Ok(Value::Int(_)) => {}
            Ok(Value::ServerError(e)) if e.code() == "NOSESSION" => {}
            Err(e) if e.code() == Some("NOSESSION") => {}
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
                && dbsize(c) == 0
        },
    );
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
