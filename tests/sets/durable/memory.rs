//! The server's heap over thousands of queued sets. A set request waits in
//! the queue of every member (here three, overlapping the next requests'
//! sets, so the queues form one component); each way it can end runs two
//! thousand times: granted from the queue (and released, which hands the
//! next sets over), `WAIT` timed out, `CLIENT UNBLOCK`ed, connection killed.
//! `used_memory` after `MEMORY PURGE` must stay flat within 1 KB per request
//! (the method of tests/ops/memory.rs), and `blocked_clients` must be back to 0
//! after every round.
use super::*;

/// Set requests per round, and rounds (after two to warm up), per way.
const BATCH: usize = 50;
const ROUNDS: usize = 40;
const SLACK_PER_WAITER: i64 = 1024;
/// Resources: every request's three members exist.
const RESOURCES: usize = BATCH + 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    Granted,
    Timeout,
    Unblock,
    Kill,
}

fn names(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("m:{}", i % RESOURCES)).collect()
}

/// Request `j`'s set: three resources, each shared with the next
/// requests'; every third request is `SHARED`.
fn request(j: usize, tok: &str, wait_ms: u64) -> redis::Cmd {
    let members = names(j..j + 3);
    let members: Vec<&str> = members.iter().map(|m| m.as_str()).collect();
    let opts: &[&str] = if j.is_multiple_of(3) {
        &["SHARED"]
    } else {
        &[]
    };
    let mut cmd = macquire_cmd(&members, tok, 60_000, opts);
    cmd.arg("WAIT").arg(wait_ms);
    cmd
}

fn holder_set() -> Vec<String> {
    names(0..RESOURCES)
}

fn dlock_waiters(c: &mut Connection) -> i64 {
    dlock_counter(c, "waiters")
}

/// One round: BATCH set requests queue behind one set holding every
/// resource, then all end `how`.
fn round(c: &mut Connection, conns: &mut [Connection], how: End, r: usize) {
    let all = holder_set();
    let all: Vec<&str> = all.iter().map(|m| m.as_str()).collect();
    macquire(c, &all, "holder", 60_000, &[]);
    if how == End::Granted {
        // Each request releases its set once granted, which hands the
        // next ones over: every grant comes from a queue.
        let handoffs = dlock_counter(c, "handoffs");
        std::thread::scope(|scope| {
            let mut threads = Vec::new();
            for (j, w) in conns.iter_mut().enumerate() {
                threads.push(scope.spawn(move || {
                    let tok = format!("w{r}-{j}");
                    let f: Option<i64> = request(j, &tok, 0).query(w).unwrap();
                    assert!(f.is_some_and(|f| f > 0), "request {j}: {f:?}");
                    let members = names(j..j + 3);
                    let members: Vec<&str> = members.iter().map(|m| m.as_str()).collect();
                    assert_eq!(mrelease(w, &members, &tok), 3);
                }));
            }
            wait_until(SOON, "every request queued", || {
                dlock_waiters(c) == BATCH as i64
            });
            assert_eq!(mrelease(c, &all, "holder"), RESOURCES as i64);
            for t in threads {
                t.join().expect("a request failed");
            }
        });
        assert_eq!(dlock_counter(c, "handoffs"), handoffs + BATCH as i64);
    } else {
        let wait = if how == End::Timeout { 1 } else { 0 };
        let mut ids = Vec::with_capacity(BATCH);
        for (j, w) in conns.iter_mut().enumerate() {
            ids.push(client_id(w));
            let cmd = request(j, &format!("w{r}-{j}"), wait);
            w.send_packed_command(&cmd.get_packed_command()).unwrap();
        }
        if how != End::Timeout {
            wait_until(SOON, "every request queued", || {
                dlock_waiters(c) == BATCH as i64
            });
        }
        for id in ids {
            let mut cmd = redis::cmd("CLIENT");
            match how {
                End::Unblock => cmd.arg("UNBLOCK").arg(id),
                End::Kill => cmd.arg("KILL").arg("ID").arg(id),
                _ => continue,
            };
            let n: i64 = cmd.query(c).unwrap();
            assert_eq!(n, 1, "{how:?} found request {id}");
        }
        if how != End::Kill {
            for (j, w) in conns.iter_mut().enumerate() {
                let reply = w.recv_response();
                assert!(
                    matches!(reply, Ok(Value::Nil)),
                    "{how:?} request {j}: {reply:?}"
                );
            }
        }
        assert_eq!(mrelease(c, &all, "holder"), RESOURCES as i64);
    }
    assert_eq!(dbsize(c), 0, "every set released");
    wait_until(SOON, "every request gone", || {
        dlock_waiters(c) == 0 && blocked_clients(c) == 0
    });
}

fn flat(how: End) {
    // The slow log would fill with the holder's MRELEASE of every resource
    // (50 queued sets to decide) as the rounds go by: bounded, but growth
    // that is not the module's.
    let s = Server::builder()
        .arg("--slowlog-log-slower-than")
        .arg("-1")
        .start();
    let mut c = s.conn();
    // Fresh connections every round: a client's buffers shrink while it
    // lives (clientsCron), which would move the measure.
    let run = |c: &mut Connection, r: usize| {
        let mut conns: Vec<Connection> = (0..BATCH).map(|_| s.conn()).collect();
        round(c, &mut conns, how, r);
    };
    run(&mut c, 0);
    run(&mut c, 1);
    let before = used_memory_purged(&mut c);
    for r in 0..ROUNDS {
        run(&mut c, r + 2);
    }
    let after = used_memory_purged(&mut c);
    let requests = (ROUNDS * BATCH) as i64;
    let growth = after - before;
    eprintln!(
        "{how:?}: used_memory {before} -> {after} over {requests} set requests ({} B each)",
        growth / requests
    );
    assert!(
        growth < requests * SLACK_PER_WAITER,
        "{how:?}: used_memory grew {growth} B over {requests} set requests"
    );
}

#[test]
fn granted_set_requests_leave_no_server_memory() {
    flat(End::Granted);
}

#[test]
fn timed_out_set_requests_leave_no_server_memory() {
    flat(End::Timeout);
}

#[test]
fn unblocked_set_requests_leave_no_server_memory() {
    flat(End::Unblock);
}

#[test]
fn killed_set_requests_leave_no_server_memory() {
    flat(End::Kill);
}
