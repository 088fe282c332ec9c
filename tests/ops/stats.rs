//! The operator's view: exact INFO counters and lock events delivered as
//! keyspace notifications to a real subscriber.
use crate::common;

use common::lock::*;
use common::*;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

fn int_cmd(c: &mut redis::Connection, cmd: &str, args: &[&str]) -> i64 {
    let mut r = redis::cmd(cmd);
    for a in args {
        r.arg(*a);
    }
    r.query(c).unwrap()
}

fn stat(c: &mut redis::Connection, name: &str) -> u64 {
    info_field(c, "dlock", &format!("dlock_{name}"))
        .unwrap_or_else(|| panic!("no dlock_{name} in INFO"))
        .parse()
        .unwrap()
}

/// Blocks a waiter in a thread; returns its reply through the channel.
fn waiter(s: &Server, res: &str, tok: &str, wait_ms: u64) -> mpsc::Receiver<Option<i64>> {
    let (tx, rx) = mpsc::channel();
    let (url, res, tok) = (s.url(), res.to_string(), tok.to_string());
    thread::spawn(move || {
        let mut w = connect_within(&url, Duration::from_secs(5)).unwrap();
        let r = acquire_wait(&mut w, &res, &tok, 10_000, wait_ms).unwrap();
        tx.send(r).unwrap();
    });
    rx
}

fn wait_queued(c: &mut redis::Connection, n: u64) {
    wait_until(Duration::from_secs(5), "waiter queued", || {
        stat(c, "waiters") == n
    });
}

#[test]
fn info_counters_are_exact() {
    // FLUSHALL frees the values in a background thread, as by default on
    // Valkey 8: dlock_locks settles after the reply (checked below).
    let s = Server::builder()
        .arg("--lazyfree-lazy-user-flush")
        .arg("yes")
        .start();
    let mut c = s.conn();
    for name in [
        "locks",
        "grants",
        "refreshes",
        "contended",
        "releases",
        "extends",
        "expired_locks",
        "handoffs",
        "wait_timeouts",
        "waiters",
        "evicted_locks",
    ] {
        assert_eq!(stat(&mut c, name), 0, "{name} at start");
    }
    // 3 grants, 1 refresh, 2 contended tries.
    for res in ["a", "b", "c"] {
        assert!(acquire(&mut c, res, "owner", 60_000).is_some());
    }
    assert!(acquire(&mut c, "a", "owner", 60_000).is_some());
    assert_eq!(acquire(&mut c, "b", "other", 60_000), None);
    assert_eq!(acquire(&mut c, "b", "other", 60_000), None);
    // 1 release (a failed one does not count), 1 extend (likewise).
    assert_eq!(int_cmd(&mut c, "DLOCK.RELEASE", &["a", "owner"]), 1);
    assert_eq!(int_cmd(&mut c, "DLOCK.RELEASE", &["b", "nope"]), 0);
    assert_eq!(int_cmd(&mut c, "DLOCK.EXTEND", &["c", "owner", "60000"]), 1);
    assert_eq!(int_cmd(&mut c, "DLOCK.EXTEND", &["c", "nope", "60000"]), 0);
    // 1 expiry (a grant).
    assert!(acquire(&mut c, "short", "owner", 50).is_some());
    wait_until(Duration::from_secs(5), "expiry", || {
        stat(&mut c, "expired_locks") == 1
    });
    // 1 waiter timeout (a contended try).
    let rx = waiter(&s, "b", "late", 100);
    assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), None);
    // 1 handoff (a grant, a contended try, a release).
    let rx = waiter(&s, "c", "next", 5000);
    wait_queued(&mut c, 1);
    assert_eq!(int_cmd(&mut c, "DLOCK.RELEASE", &["c", "owner"]), 1);
    assert!(rx.recv_timeout(Duration::from_secs(5)).unwrap().is_some());

    let expect = [
        ("grants", 5),
        ("refreshes", 1),
        ("contended", 4),
        ("releases", 2),
        ("extends", 1),
        ("expired_locks", 1),
        ("handoffs", 1),
        ("wait_timeouts", 1),
        ("waiters", 0),
        ("evicted_locks", 0),
    ];
    for (name, want) in expect {
        assert_eq!(stat(&mut c, name), want, "{name}");
    }
    // b and c are held: exactly the lock keys there are.
    let dbsize = int_cmd(&mut c, "DBSIZE", &[]);
    assert_eq!(stat(&mut c, "locks"), 2);
    assert_eq!(dbsize, 2);
    let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
    wait_until(
        Duration::from_secs(5),
        "FLUSHALL to free every lock",
        || stat(&mut c, "locks") == 0,
    );
    assert!(stat(&mut c, "last_fence") > 0);
}

#[test]
fn lock_events_reach_a_keyspace_subscriber() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sub = subscribe_key(&s, "res");

    assert!(acquire(&mut c, "res", "a", 60_000).is_some());
    assert_eq!(int_cmd(&mut c, "DLOCK.EXTEND", &["res", "a", "60000"]), 1);
    let rx = waiter(&s, "res", "b", 5000);
    wait_queued(&mut c, 1);
    assert_eq!(int_cmd(&mut c, "DLOCK.RELEASE", &["res", "a"]), 1);
    assert!(rx.recv_timeout(Duration::from_secs(5)).unwrap().is_some());
    assert_eq!(int_cmd(&mut c, "DLOCK.RELEASE", &["res", "b"]), 1);
    assert!(acquire(&mut c, "res", "c", 50).is_some());
    // Nothing for failed commands.
    assert_eq!(acquire(&mut c, "res", "d", 50), None);

    let mut got = vec![];
    while got.len() < 7 {
        got.push(next_event(&mut sub));
    }
    assert_eq!(
        got,
        [
            "dlock.acquired",
            "dlock.extended",
            "dlock.released",
            "dlock.handoff",
            "dlock.released",
            "dlock.acquired",
            "dlock.expired",
        ]
    );
}

/// An ACQUIRE that finds a lock freed where no handoff ran (DEL, inside a
/// MULTI so no timer runs first) completes the handoff before its own
/// outcome: the handoff is counted and published first, then the command's
/// own refresh (the head's token) or its refusal (another token).
#[test]
fn an_acquire_completing_a_handoff_counts_and_publishes_it_first() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sub = subscribe_key(&s, "res");
    assert!(acquire(&mut c, "res", "holder", 60_000).is_some());
    assert_eq!(next_event(&mut sub), "dlock.acquired");
    let rx = waiter(&s, "res", "head", 10_000);
    wait_queued(&mut c, 1);
    let names = ["grants", "handoffs", "refreshes", "contended"];
    let before: Vec<u64> = names.iter().map(|n| stat(&mut c, n)).collect();
    let v: Vec<redis::Value> = redis::pipe()
        .atomic()
        .cmd("DEL")
        .arg("res")
        .cmd("DLOCK.ACQUIRE")
        .arg("res")
        .arg("head")
        .arg(5000)
        .cmd("DLOCK.ACQUIRE")
        .arg("res")
        .arg("other")
        .arg(5000)
        .query(&mut c)
        .unwrap();
    let fence = rx
        .recv_timeout(Duration::from_secs(5))
        .unwrap()
        .expect("head granted");
    assert_eq!(
        v,
        [
            redis::Value::Int(1),
            redis::Value::Int(fence),
            redis::Value::Nil
        ],
        "MULTI replies"
    );
    let after: Vec<u64> = names.iter().map(|n| stat(&mut c, n)).collect();
    let delta: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    assert_eq!(
        delta,
        [1, 1, 1, 1],
        "{names:?}: one handoff, its refresh, one refusal"
    );
    let got: Vec<String> = (0..2).map(|_| next_event(&mut sub)).collect();
    assert_eq!(got, ["dlock.handoff", "dlock.acquired"]);
}

/// Subscribes to `__keyspace@0__:<key>` with lock events (class `d`) on.
fn subscribe_key(s: &Server, key: &str) -> redis::Connection {
    s.lock_events(key, Duration::from_secs(5))
}

/// The next lock event on a subscribed connection (5 s at most).
fn next_event(sub: &mut redis::Connection) -> String {
    next_lock_event(sub).expect("event within 5 s")
}

/// A lock deleted with DEL, then a string under the same name that expires:
/// no lock expired. The unlink callback saw the lock leave, and no
/// `expired` event followed it; the string's `expired` event must not be
/// taken for the lock's.
#[test]
fn a_string_expiring_after_a_deleted_lock_is_not_a_lock_expiry() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sub = subscribe_key(&s, "k");
    assert!(acquire(&mut c, "k", "owner", 60_000).is_some());
    assert_eq!(next_event(&mut sub), "dlock.acquired");
    assert_eq!(int_cmd(&mut c, "DEL", &["k"]), 1);
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .arg("PX")
        .arg(20)
        .query(&mut c)
        .unwrap();
    // Expired by the server's own cycle or by this lookup, whichever first.
    wait_until(Duration::from_secs(5), "the string to expire", || {
        int_cmd(&mut c, "EXISTS", &["k"]) == 0
    });
    assert_eq!(
        stat(&mut c, "expired_locks"),
        0,
        "a string counted as a lock"
    );
    // The next event on k is this grant's, not a `dlock.expired`.
    assert!(acquire(&mut c, "k", "owner", 50).is_some());
    assert_eq!(next_event(&mut sub), "dlock.acquired");
    // And a real expiry still counts and is published.
    assert_eq!(next_event(&mut sub), "dlock.expired");
    assert_eq!(stat(&mut c, "expired_locks"), 1);
}
