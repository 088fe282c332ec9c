//! `DLOCK.EXTEND ... WANTED`: the reply, errors that change nothing, what
//! replicas and the AOF receive.
use super::*;
use common::repl_stream::ReplStream;
use std::time::Duration;

const SYNTAX: &str = "ERR syntax error";

#[test]
fn wanted_counts_the_requests_queued_on_a_plain_lock() {
    let s = Server::start();
    let mut c = s.conn();
    let mut c3 = s.conn_resp3();
    let fence = acquire(&mut c, "res", "a", 5_000).unwrap();
    assert_eq!(extend_wanted(&mut c, "res", "a", 60_000), (1, 0));
    let t = pttl(&mut c, "res");
    assert!(t > 50_000 && t <= 60_000, "the lease moved: PTTL {t}");
    let w1 = queue(&s, "res", "w1", &[]);
    wait_waiters(&mut c, "res", 1);
    let w2 = queue(&s, "res", "w2", &[]);
    wait_waiters(&mut c, "res", 2);
    assert_eq!(extend_wanted(&mut c, "res", "a", 60_000), (1, 2));
    assert_eq!(extend_wanted(&mut c3, "res", "a", 60_000), (1, 2), "RESP3");
    // A non-holder learns the count too, and changes nothing.
    let before = common::dump::digest(&mut c, "res");
    assert_eq!(extend_wanted(&mut c, "res", "other", 1), (0, 2));
    assert_eq!(common::dump::digest(&mut c, "res"), before);
    assert_eq!(held(&mut c, "res").fence, fence);
    // Without WANTED the reply is the integer, as it always was.
    assert_eq!(extend(&mut c, "res", "a", 60_000), 1);
    // The head is granted: the new holder is asked for by one.
    assert_eq!(release(&mut c, "res", "a"), 1);
    let (_, _) = w1.granted();
    assert_eq!(extend_wanted(&mut c, "res", "w1", 60_000), (1, 1));
    assert_eq!(release(&mut c, "res", "w1"), 1);
    let (_, _) = w2.granted();
    assert_eq!(extend_wanted(&mut c, "res", "w2", 60_000), (1, 0));
    // A free resource: nothing extended, nobody waits.
    assert_eq!(extend_wanted(&mut c, "free", "w2", 60_000), (0, 0));
    assert!(!exists(&mut c, "free"));
}

#[test]
fn wanted_counts_the_queue_of_shared_holds_and_of_a_semaphore() {
    let s = Server::start();
    let mut c = s.conn();
    // A semaphore of 2, both permits held, one request waiting.
    let args = |tok: &str| {
        let mut cmd = redis::cmd("DLOCK.ACQUIRE");
        cmd.arg("sem").arg(tok).arg(60_000).arg("LIMIT").arg(2);
        cmd
    };
    for tok in ["p1", "p2"] {
        let f: Option<i64> = args(tok).query(&mut c).unwrap();
        assert!(f.is_some(), "{tok} granted");
    }
    let _w = queue(&s, "sem", "p3", &["LIMIT", "2"]);
    wait_queued(&mut c, "sem", 1);
    assert_eq!(extend_wanted(&mut c, "sem", "p1", 60_000), (1, 1));
    assert_eq!(extend_wanted(&mut c, "sem", "p2", 60_000), (1, 1));
    assert_eq!(extend_wanted(&mut c, "sem", "nobody", 60_000), (0, 1));
    // Readers hold, a writer waits for all of them.
    for tok in ["r1", "r2"] {
        let f: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
            .arg("rw")
            .arg(tok)
            .arg(60_000)
            .arg("SHARED")
            .query(&mut c)
            .unwrap();
        assert!(f.is_some(), "{tok} granted");
    }
    let _writer = queue(&s, "rw", "writer", &[]);
    wait_queued(&mut c, "rw", 1);
    assert_eq!(extend_wanted(&mut c, "rw", "r1", 60_000), (1, 1));
    assert_eq!(extend_wanted(&mut c, "rw", "r2", 60_000), (1, 1));
}

/// Everything an error could have changed: the values, the queues, the
/// counters.
fn state(c: &mut Connection) -> (Vec<String>, Vec<i64>, Vec<(String, String)>) {
    let keys = ["res", "sem", "bound", "str"];
    let digests = keys.iter().map(|k| common::dump::digest(c, k)).collect();
    let queues = ["res", "sem"].iter().map(|k| queued(c, k)).collect();
    (digests, queues, counters(c))
}

#[test]
fn a_bad_extend_wanted_is_an_error_and_changes_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    acquire(&mut c, "res", "a", 60_000).unwrap();
    let _w = queue(&s, "res", "w", &[]);
    let f: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
        .arg("sem")
        .arg("p1")
        .arg(60_000)
        .arg("LIMIT")
        .arg(3)
        .query(&mut c)
        .unwrap();
    assert!(f.is_some());
    let _: () = redis::cmd("DLOCK.SESSION")
        .arg("OPEN")
        .arg("s1")
        .arg(60_000)
        .query(&mut c)
        .unwrap();
    let f: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
        .arg("bound")
        .arg("b")
        .arg(0)
        .arg("SESSION")
        .arg("s1")
        .query(&mut c)
        .unwrap();
    assert!(f.is_some());
    let _: () = redis::cmd("SET").arg("str").arg("x").query(&mut c).unwrap();
    wait_waiters(&mut c, "res", 1);
    let mut stream = ReplStream::attach(&s);
    let before = state(&mut c);
    let bound = "ERR the hold is bound to a session: keep the session alive (DLOCK.SESSION \
KEEPALIVE)";
    let ttl = "ERR ttl_ms must be an integer from 1 to 140737488355328";
    let cases: &[(&[&str], &str)] = &[
        (&["res", "a", "1000", "WANTED", "WANTED"], SYNTAX),
        (&["res", "a", "1000", "WANTED", "1"], SYNTAX),
        (&["res", "a", "1000", "x"], SYNTAX),
        (&["res", "a", "1000", "x", "WANTED"], SYNTAX),
        (&["res", "a", "1000", "WANTEDX"], SYNTAX),
        (&["sem", "p1", "1000", "WANTED", ""], SYNTAX),
        (&["res", "a", "0", "WANTED"], ttl),
        (&["res", "a", "-1", "WANTED"], ttl),
        (
            &["res", "", "1000", "WANTED"],
            "ERR token must not be empty",
        ),
        (
            &["str", "a", "1000", "WANTED"],
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ),
        (&["bound", "b", "1000", "WANTED"], bound),
    ];
    for (args, want) in cases {
        let r: redis::RedisResult<Value> = redis::cmd("DLOCK.EXTEND").arg(*args).query(&mut c);
        assert_eq!(err_of(r), *want, "{args:?}");
    }
    assert_eq!(state(&mut c), before, "an error changed something");
    let sent = stream.commands(&mut c);
    // The marker's SELECT and the master's pings only.
    assert!(
        sent.iter().all(|cmd| ["SELECT", "PING"]
            .iter()
            .any(|n| cmd[0].eq_ignore_ascii_case(n))),
        "an error propagated something: {sent:?}"
    );
}

#[test]
fn extend_wanted_sends_replicas_and_the_aof_what_extend_sends() {
    let mut m = Server::builder().aof("always").start();
    let r = Server::builder().replica_of(&m).start();
    r.wait_for_sync(Duration::from_secs(20));
    let mut c = m.conn();
    acquire(&mut c, "res", "a", 5_000).unwrap();
    let _: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
        .arg("sem")
        .arg("p1")
        .arg(5_000)
        .arg("LIMIT")
        .arg(2)
        .query(&mut c)
        .unwrap();
    let _w = queue(&m, "res", "w", &[]);
    wait_waiters(&mut c, "res", 1);
    let mut stream = ReplStream::attach(&m);
    assert_eq!(extend_wanted(&mut c, "res", "a", 60_000), (1, 1));
    assert_eq!(extend_wanted(&mut c, "sem", "p1", 60_000), (1, 0));
    assert_eq!(extend_wanted(&mut c, "res", "nobody", 60_000), (0, 1));
    let sent = stream.commands(&mut c);
    let names: Vec<String> = sent.iter().map(|c| c[0].to_uppercase()).collect();
    let names: Vec<&str> = names
        .iter()
        .map(String::as_str)
        // The framing, and the longest ttl's fact for a restart.
        .filter(|n| !matches!(*n, "MULTI" | "EXEC" | "SELECT" | "PING" | "DLOCK.META"))
        .collect();
    assert_eq!(names, ["PEXPIREAT", "DLOCK.MOVEHOLD"], "{sent:?}");
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut c).unwrap();
    assert_eq!(acked, 1);
    let mut rc = r.conn();
    for key in ["res", "sem"] {
        let want = common::dump::digest(&mut c, key);
        assert_eq!(common::dump::digest(&mut rc, key), want, "replica: {key}");
    }
    let want: Vec<String> = ["res", "sem"]
        .iter()
        .map(|k| common::dump::digest(&mut c, k))
        .collect();
    drop(c);
    let mut c = m.crash_and_restart();
    let got: Vec<String> = ["res", "sem"]
        .iter()
        .map(|k| common::dump::digest(&mut c, k))
        .collect();
    assert_eq!(got, want, "the AOF-reloaded server");
}
