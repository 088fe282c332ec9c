//! The server's heap (the module allocates through it) over thousands of
//! cycles: shared, semaphore and reentrant holds taken and released, and
//! queued shared or semaphore waiters granted or timing out. `used_memory`
//! after `MEMORY PURGE` must stay flat (the method of tests/ops/memory.rs).
use super::*;

fn quiet_server() -> Server {
    // Quarantine off: nothing here restarts, but no grant may be refused.
    Server::builder()
        .module_arg("restart-quarantine")
        .module_arg("off")
        .start()
}

/// Growth of `used_memory` over `rounds` calls of `round` (after two to
/// warm up the server's pools and dicts), checked against `slack` bytes.
fn flat(
    c: &mut Connection,
    what: &str,
    rounds: usize,
    slack: i64,
    mut round: impl FnMut(&mut Connection, usize),
) {
    round(c, 0);
    round(c, 1);
    let before = used_memory_purged(c);
    for r in 0..rounds {
        round(c, r + 2);
    }
    let after = used_memory_purged(c);
    eprintln!(
        "{what}: used_memory {before} -> {after} ({} B)",
        after - before
    );
    assert!(
        after - before < slack,
        "{what}: used_memory grew {} B",
        after - before
    );
}

/// Cycles of 8 holds taken and released (16 commands each).
const CYCLES: usize = 10_000;
/// 240 KB in all, several times the noise seen (about 50 KB either way):
/// one leaked hold, or any allocation of 24 bytes or more, per cycle fails.
const SLACK_PER_CYCLE: i64 = 24;

#[test]
fn hold_cycles_leave_no_server_memory() {
    let s = quiet_server();
    let mut c = s.conn();
    let cycle = |c: &mut Connection, i: usize| {
        let (r, p, o) = (
            format!("r{}", i % 16),
            format!("s{}", i % 16),
            format!("o{}", i % 16),
        );
        let mut pipe = redis::pipe();
        for t in ["a", "b", "c"] {
            pipe.cmd("DLOCK.ACQUIRE")
                .arg(&r)
                .arg(t)
                .arg(60_000)
                .arg("SHARED");
            pipe.cmd("DLOCK.ACQUIRE")
                .arg(&p)
                .arg(t)
                .arg(60_000)
                .arg("LIMIT")
                .arg(3);
        }
        for t in ["a", "b"] {
            pipe.cmd("DLOCK.ACQUIRE")
                .arg(&o)
                .arg(t)
                .arg(60_000)
                .arg("OWNER")
                .arg("A");
        }
        for (key, toks) in [
            (&r, &["a", "b", "c"][..]),
            (&p, &["a", "b", "c"]),
            (&o, &["a", "b"]),
        ] {
            for t in toks {
                pipe.cmd("DLOCK.RELEASE").arg(key).arg(*t);
            }
        }
        let replies: Vec<Option<i64>> = pipe.query(c).unwrap();
        assert!(
            replies.iter().all(|r| r.is_some_and(|v| v > 0)),
            "{replies:?}"
        );
    };
    flat(
        &mut c,
        "hold cycles",
        CYCLES / 100,
        CYCLES as i64 * SLACK_PER_CYCLE,
        |c, r| {
            for i in 0..100 {
                cycle(c, r * 100 + i);
            }
        },
    );
    assert_eq!(dbsize(&mut c), 0, "every hold released");
}

/// Waiters per round: half shared (two runs), half on semaphores.
const BATCH: usize = 40;
const ROUNDS: usize = 50;
/// As tests/ops/memory.rs: within 1 KB per waiter.
const SLACK_PER_WAITER: i64 = 1024;

/// One round: BATCH waiters queue behind held resources, then are all
/// granted (the holders release) or all time out.
fn waiter_round(c: &mut Connection, waiters: &mut [Connection], granted: bool, round: usize) {
    let wait = if granted { 0 } else { 1 };
    for (j, key) in ["run0", "run1"].iter().enumerate() {
        take(c, key, &format!("w{j}"), 60_000, &[]);
    }
    for (j, key) in ["sem0", "sem1"].iter().enumerate() {
        for p in 0..BATCH / 4 {
            take(c, key, &format!("p{j}-{p}"), 60_000, &["LIMIT", "10"]);
        }
    }
    for (i, w) in waiters.iter_mut().enumerate() {
        let mut cmd = redis::cmd("DLOCK.ACQUIRE");
        let tok = format!("q{round}-{i}");
        match i % 4 {
            0 | 1 => cmd
                .arg(format!("run{}", i % 2))
                .arg(&tok)
                .arg(60_000)
                .arg("SHARED"),
            _ => cmd
                .arg(format!("sem{}", i % 2))
                .arg(&tok)
                .arg(60_000)
                .arg("LIMIT")
                .arg(10),
        };
        w.send_packed_command(&cmd.arg("WAIT").arg(wait).get_packed_command())
            .unwrap();
    }
    if granted {
        wait_until(SOON, "every waiter queued", || {
            counter(c, "dlock", "dlock_waiters") == BATCH as i64
        });
        let mut pipe = redis::pipe();
        for j in 0..2 {
            pipe.cmd("DLOCK.RELEASE")
                .arg(format!("run{j}"))
                .arg(format!("w{j}"));
            for p in 0..BATCH / 4 {
                pipe.cmd("DLOCK.RELEASE")
                    .arg(format!("sem{j}"))
                    .arg(format!("p{j}-{p}"));
            }
        }
        let _: Vec<i64> = pipe.query(c).unwrap();
    }
    for (i, w) in waiters.iter_mut().enumerate() {
        match (granted, w.recv_response()) {
            (true, Ok(Value::Int(f))) if f > 0 => {}
            (false, Ok(Value::Nil)) => {}
            (_, other) => panic!("round {round} waiter {i}: {other:?}"),
        }
    }
    let _: () = redis::cmd("FLUSHALL").arg("SYNC").query(c).unwrap();
    wait_until(SOON, "every waiter gone", || {
        counter(c, "dlock", "dlock_waiters") == 0 && blocked_clients(c) == 0
    });
}

fn waiters_flat(granted: bool) {
    let s = quiet_server();
    let mut c = s.conn();
    let mut waiters: Vec<Connection> = (0..BATCH).map(|_| s.conn()).collect();
    let what = if granted {
        "granted waiters"
    } else {
        "timed-out waiters"
    };
    let slack = (ROUNDS * BATCH) as i64 * SLACK_PER_WAITER;
    flat(&mut c, what, ROUNDS, slack, |c, r| {
        waiter_round(c, &mut waiters, granted, r)
    });
}

#[test]
fn granted_shared_and_semaphore_waiters_leave_no_server_memory() {
    waiters_flat(true);
}

#[test]
fn timed_out_shared_and_semaphore_waiters_leave_no_server_memory() {
    waiters_flat(false);
}
