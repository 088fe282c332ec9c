//! `--priority P` on `acquire`, `exec` and `elect` waits at that priority
//! (`PRIORITY P`, docs/waiting.md#priorities), and `dlock list` shows the
//! priority of each queue's head; a priority above 1000 is a usage error.
//! Order is read from `DLOCK.WAITERS` once every waiter is seen queued,
//! with an aging of an hour: never from timing.
use crate::cli::{dlock, run, wait_until, Dir, Dlock, Server, SEC};
use crate::common::waiters;
use redis::Value;

/// `DLOCK.WAITERS res`: each waiter's token and priority, head first.
fn queue(c: &mut redis::Connection, res: &str) -> Vec<(String, i64)> {
    let page: Vec<Value> = redis::cmd("DLOCK.WAITERS").arg(res).query(c).unwrap();
    page.into_iter()
        .map(|w| {
            let Value::Array(flat) = w else {
                panic!("a waiter: {w:?}")
            };
            let mut token = String::new();
            let mut priority = -1;
            for kv in flat.chunks(2) {
                match (&kv[0], &kv[1]) {
                    (Value::BulkString(k), Value::BulkString(v)) if k == b"token" => {
                        token = String::from_utf8_lossy(v).into_owned()
                    }
                    (Value::BulkString(k), Value::Int(p)) if k == b"priority" => priority = *p,
                    _ => {}
                }
            }
            (token, priority)
        })
        .collect()
}

#[test]
fn acquire_exec_and_elect_wait_at_their_priority_and_list_shows_the_head() {
    let server = Server::start();
    let dir = Dir::new();
    let url = server.url();
    let mut c = server.conn();
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "dlock.priority-aging-ms", "3600000"][..])
        .query(&mut c)
        .unwrap();
    let _: i64 = redis::cmd("DLOCK.ACQUIRE")
        .arg(&["job", "h", "60000"][..])
        .query(&mut c)
        .unwrap();
    let mut spawned: Vec<Dlock> = Vec::new();
    let mut start = |args: &[&str], name: &str, n: i64| {
        spawned.push(Dlock::spawn(dlock(&url).args(args), &dir, name));
        wait_until(20 * SEC, name, || waiters(&mut c, "job") == n);
    };
    start(&["acquire", "--token", "low", "job"], "low", 1);
    start(
        &["acquire", "--priority", "7", "--token", "high", "job"],
        "high",
        2,
    );
    start(&["exec", "--priority", "3", "job", "--", "true"], "exec", 3);
    start(
        &["elect", "--priority=5", "--id", "cand", "job", "--", "true"],
        "elect",
        4,
    );
    let q = queue(&mut c, "job");
    assert_eq!(
        q.iter().map(|(_, p)| *p).collect::<Vec<_>>(),
        [7, 5, 3, 0],
        "{q:?}"
    );
    assert_eq!(q[0].0, "high");
    assert!(q[1].0.starts_with("cand/"), "{q:?}");
    assert_eq!(q[3].0, "low");

    // The head, at its priority, in the table and in JSON.
    let (code, table, err) = run(dlock(&url).args(["list", "job"]), &dir, 30 * SEC);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(lines[0][10..], ["PRIORITY", "NEXT"], "{table}");
    assert_eq!(lines[1][10..], ["7", "high"], "{table}");
    let (code, json, err) = run(dlock(&url).args(["list", "--json", "job"]), &dir, 30 * SEC);
    assert_eq!(code, 0, "{err}");
    assert!(
        json.contains(r#""next":"high","next_priority":7}"#),
        "{json}"
    );

    // Served in that order: high (acquire keeps it), then the candidate
    // and exec (each runs `true` and lets go), then low.
    let _: i64 = redis::cmd("DLOCK.RELEASE")
        .arg(&["job", "h"][..])
        .query(&mut c)
        .unwrap();
    assert_eq!(spawned[1].wait(20 * SEC), 0);
    assert!(spawned[1].stdout().starts_with("high "));
    assert!(
        spawned[0].try_code().is_none(),
        "low went before the others"
    );
    let _: i64 = redis::cmd("DLOCK.RELEASE")
        .arg(&["job", "high"][..])
        .query(&mut c)
        .unwrap();
    for (i, name) in [(3, "elect"), (2, "exec"), (0, "low")] {
        assert_eq!(
            spawned[i].wait(20 * SEC),
            0,
            "{name}: {}",
            spawned[i].stderr()
        );
    }
    assert!(spawned[0].stdout().starts_with("low "));
}

#[test]
fn a_priority_outside_0_to_1000_is_a_usage_error() {
    let dir = Dir::new();
    let url = crate::cli::dead_url();
    for args in [
        &["acquire", "--priority", "1001", "r"][..],
        &["acquire", "--priority", "-1", "r"],
        &["acquire", "--priority", "high", "r"],
        &["acquire", "--priority"],
        &["exec", "--priority", "70000", "r", "--", "true"],
        &["elect", "--priority", "1.5", "r", "--", "true"],
    ] {
        let (code, _, err) = run(dlock(&url).args(args), &dir, 20 * SEC);
        assert_eq!(code, 64, "{args:?}: {err}");
        assert!(
            err.contains("--priority") || err.contains("needs a value"),
            "{args:?}: {err}"
        );
    }
    // 1000 is the highest: refused only for the server being unreachable.
    let (code, _, err) = run(
        dlock(&url).args(["acquire", "--no-wait", "--priority", "1000", "r"]),
        &dir,
        30 * SEC,
    );
    assert_eq!(code, 69, "{err}");
}
