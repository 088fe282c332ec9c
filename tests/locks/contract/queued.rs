//! DLOCK.QUEUED: the resources of the database that clients wait for, held
//! or not (a set's member reserved for a queued set has no key), filtered
//! by a `SCAN MATCH` glob; empty when nobody waits, the same inside
//! `MULTI` and a script, empty on a replica, and a bad call changes
//! nothing.
use super::*;
use common::waiter::Waiter;
use std::collections::BTreeSet;

fn queued(c: &mut Connection, pattern: Option<&str>) -> BTreeSet<String> {
    let mut cmd = redis::cmd("DLOCK.QUEUED");
    if let Some(p) = pattern {
        cmd.arg(p);
    }
    let names: Vec<String> = cmd.query(c).unwrap();
    let n = names.len();
    let set: BTreeSet<String> = names.into_iter().collect();
    assert_eq!(set.len(), n, "each name once: {set:?}");
    set
}

fn names(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn wait_cmd(res: &str, tok: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("DLOCK.ACQUIRE");
    cmd.arg(res).arg(tok).arg(LONG_TTL).arg("WAIT").arg(30_000);
    cmd
}

/// `{s}:a` held, and a set `{s}:a {s}:b` queued for it with `WAIT
/// wait_ms`: `{s}:b` is reserved for the set and has no key.
fn set_waits(s: &Server, c: &mut Connection, wait_ms: u64) -> Waiter {
    acquire(c, "{s}:a", "x", LONG_TTL).expect("free");
    let mut cmd = redis::cmd("DLOCK.MACQUIRE");
    cmd.arg(2)
        .arg("{s}:a")
        .arg("{s}:b")
        .arg("setter")
        .arg(LONG_TTL)
        .arg("WAIT")
        .arg(wait_ms);
    Waiter::send(s, cmd)
}

#[test]
fn lists_exactly_the_resources_waited_for_keyed_or_not() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(queued(&mut c, None), names(&[]));
    assert_eq!(queued(&mut c, Some("*")), names(&[]));

    // A plain lock with a waiter; a set waiting for a held member, the
    // other one reserved without a key; a held lock nobody waits for and
    // a key of another type, neither listed.
    acquire(&mut c, "job:held", "h", LONG_TTL).expect("free");
    let w1 = Waiter::send(&s, wait_cmd("job:held", "w1"));
    let set = set_waits(&s, &mut c, 0);
    acquire(&mut c, "job:idle", "i", LONG_TTL).expect("free");
    let _: () = redis::cmd("SET")
        .arg("job:str")
        .arg("x")
        .query(&mut c)
        .unwrap();
    wait_blocked_clients(&mut c, 2);
    assert!(!exists(&mut c, "{s}:b"), "the reserved member has no key");
    let all = names(&["job:held", "{s}:a", "{s}:b"]);
    assert_eq!(queued(&mut c, None), all);
    assert_eq!(queued(&mut c, Some("*")), all);
    // DLOCK.INFO shows what is listed: the reserved member and its waiter.
    let v: Value = redis::cmd("DLOCK.INFO").arg("{s}:b").query(&mut c).unwrap();
    assert_eq!(
        v,
        Value::Array(vec![
            Value::BulkString(b"token".to_vec()),
            Value::Nil,
            Value::BulkString(b"fence".to_vec()),
            Value::Int(0),
            Value::BulkString(b"ttl".to_vec()),
            Value::Int(-2),
            Value::BulkString(b"waiters".to_vec()),
            Value::Int(1),
        ])
    );

    // The pattern, as SCAN MATCH reads it.
    assert_eq!(queued(&mut c, Some("{s}:*")), names(&["{s}:a", "{s}:b"]));
    assert_eq!(queued(&mut c, Some("job:*")), names(&["job:held"]));
    assert_eq!(queued(&mut c, Some("*:b")), names(&["{s}:b"]));
    assert_eq!(queued(&mut c, Some("{s}:[^a]")), names(&["{s}:b"]));
    assert_eq!(queued(&mut c, Some("job:h?ld")), names(&["job:held"]));
    assert_eq!(queued(&mut c, Some("job:idle")), names(&[]));
    assert_eq!(queued(&mut c, Some("")), names(&[]));

    // The same inside MULTI/EXEC and a script, over RESP3 too.
    let replies = transaction(&mut c, &[redis::cmd("DLOCK.QUEUED")]);
    let Value::Array(in_multi) = &replies[0] else {
        panic!("{replies:?}")
    };
    assert_eq!(in_multi.len(), 3, "{replies:?}");
    let from_lua: Vec<String> = redis::cmd("EVAL")
        .arg("return redis.call('DLOCK.QUEUED', ARGV[1])")
        .arg(0)
        .arg("*:b")
        .query(&mut c)
        .unwrap();
    assert_eq!(from_lua, ["{s}:b"]);
    let mut c3 = s.conn_resp3();
    let v: Value = redis::cmd("DLOCK.QUEUED")
        .arg("{s}:b")
        .query(&mut c3)
        .unwrap();
    assert_eq!(v, Value::Array(vec![Value::BulkString(b"{s}:b".to_vec())]));

    // Another database has queues of its own.
    let mut c1 = redis::Client::open(format!("{}1", s.url()))
        .unwrap()
        .get_connection()
        .unwrap();
    assert_eq!(queued(&mut c1, None), names(&[]));
    let db1 = std::thread::spawn({
        let url = format!("{}1", s.url());
        move || {
            let mut w = redis::Client::open(url).unwrap().get_connection().unwrap();
            wait_cmd("db1:only", "w").query::<Option<i64>>(&mut w)
        }
    });
    acquire(&mut c1, "db1:only", "h", LONG_TTL).expect("free");
    wait_blocked_clients(&mut c, 3);
    assert_eq!(queued(&mut c1, None), names(&["db1:only"]));
    assert_eq!(queued(&mut c, None), all, "db 0 unchanged");

    // Served queues leave the list.
    assert_eq!(release(&mut c, "job:held", "h"), 1);
    assert!(w1.granted().0 > 0);
    assert_eq!(queued(&mut c, None), names(&["{s}:a", "{s}:b"]));
    assert_eq!(release(&mut c, "{s}:a", "x"), 1);
    assert!(set.granted().0 > 0);
    assert_eq!(release(&mut c1, "db1:only", "h"), 1);
    assert!(db1.join().unwrap().unwrap().is_some());
    assert_eq!(queued(&mut c, None), names(&[]));
    assert_eq!(queued(&mut c1, None), names(&[]));
}

/// A set whose wait runs out leaves every queue: its reserved member is
/// no longer listed, nor the held one.
#[test]
fn a_waiter_that_leaves_takes_its_resources_off_the_list() {
    let s = Server::start();
    let mut c = s.conn();
    let set = set_waits(&s, &mut c, 300);
    wait_blocked_clients(&mut c, 1);
    assert_eq!(queued(&mut c, None), names(&["{s}:a", "{s}:b"]));
    assert!(matches!(set.reply(), (Ok(None), _)), "timed out with nil");
    wait_until(SOON, "the queues emptied", || {
        queued(&mut c, None).is_empty()
    });
    let v: Value = redis::cmd("DLOCK.INFO").arg("{s}:b").query(&mut c).unwrap();
    assert_eq!(v, Value::Nil, "free again");
}

/// A bad call is refused (the server's arity error, or a pattern too long)
/// and changes nothing: the lock, its waiter and the list stay as they
/// were.
#[test]
fn bad_patterns_are_refused_and_change_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    let held = hold(&mut c, b"res", b"owner");
    let w = Waiter::send(&s, wait_cmd("res", "w"));
    wait_blocked_clients(&mut c, 1);
    for args in [
        &["DLOCK.QUEUED", "a", "b"][..],
        &["DLOCK.QUEUED", "*", "*", "*"],
    ] {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        assert_eq!(expect_err(&mut c, &args), arity_err("dlock.queued"));
    }
    // A pattern past 256 bytes is refused; up to it, the worst case of a
    // backtracking matcher (`*r*r...*x`, every star a choice) answers.
    let too_long = "*".repeat(257);
    assert_eq!(
        expect_err(&mut c, &[b"DLOCK.QUEUED", too_long.as_bytes()]),
        "ERR pattern is longer than 256 bytes"
    );
    let stars = "*r".repeat(127);
    assert_eq!(queued(&mut c, Some(&format!("{stars}x"))), names(&[]));
    let longest = format!("r*e*s{}", "*".repeat(251));
    assert_eq!(longest.len(), 256);
    assert_eq!(queued(&mut c, Some(&longest)), names(&["res"]));
    assert_eq!(queued(&mut c, Some(&"*".repeat(256))), names(&["res"]));
    held.assert_unchanged_ttl_only(&mut c);
    assert_eq!(waiters(&mut c, "res"), 1);
    assert!(w.pending());
    assert_eq!(queued(&mut c, None), names(&["res"]));
    assert_eq!(dbsize(&mut c), 1);
}

/// Queues live where clients wait: a replica, which accepts no `WAIT`,
/// lists none while its master has some.
#[test]
fn a_replica_lists_no_queue_of_its_master() {
    let master = Server::start();
    let replica = Server::builder().replica_of(&master).start();
    replica.wait_for_sync(Duration::from_secs(20));
    let mut m = master.conn();
    let set = set_waits(&master, &mut m, 0);
    wait_blocked_clients(&mut m, 1);
    assert_eq!(queued(&mut m, None), names(&["{s}:a", "{s}:b"]));
    let mut r = replica.conn();
    wait_until(SOON, "the hold replicated", || exists(&mut r, "{s}:a"));
    assert_eq!(queued(&mut r, None), names(&[]));
    assert_eq!(release(&mut m, "{s}:a", "x"), 1);
    assert!(set.granted().0 > 0);
}
