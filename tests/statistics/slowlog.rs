//! `DLOCK.SLOWLOG`: holds and waits past their thresholds, with who held
//! or waited and from which client; bounded, configurable, resettable; a
//! replica logs nothing; bad input changes nothing.
use super::*;
use std::time::Duration;

fn set(c: &mut Connection, name: &str, value: &str) {
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query(c)
        .unwrap();
}

fn entries(c: &mut Connection, n: i64) -> Vec<Fields> {
    let v: Value = redis::cmd("DLOCK.SLOWLOG")
        .arg("GET")
        .arg(n)
        .query(c)
        .unwrap();
    let Value::Array(items) = v else {
        panic!("GET answered {v:?}")
    };
    items.iter().map(fields).collect()
}

fn text(e: &Fields, name: &str) -> Option<String> {
    e.get(name).map(|v| String::from_utf8(as_bytes(v)).unwrap())
}

fn len(c: &mut Connection) -> i64 {
    redis::cmd("DLOCK.SLOWLOG").arg("LEN").query(c).unwrap()
}

fn named_conn(s: &Server, name: &str) -> Connection {
    let mut c = s.conn();
    let () = redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg(name)
        .query(&mut c)
        .unwrap();
    c
}

#[test]
fn a_long_hold_is_logged_with_its_holder_and_client() {
    let s = Server::start();
    let mut c = named_conn(&s, "alice");
    set(&mut c, "dlock.slowlog-hold-ms", "200");
    acquire(&mut c, "long", "t-long", 60_000).expect("free");
    assert!(acq(&mut c, "rw", "t-rw", 60_000, &["SHARED", "OWNER", "svc"]).is_some());
    assert!(acq(&mut c, "sem", "t-sem", 60_000, &["LIMIT", "2"]).is_some());
    std::thread::sleep(Duration::from_millis(300));
    release(&mut c, "long", "t-long");
    release(&mut c, "rw", "t-rw");
    release(&mut c, "sem", "t-sem");
    // Granted and released in one turn: far below the threshold.
    let () = redis::pipe()
        .atomic()
        .cmd("DLOCK.ACQUIRE")
        .arg("short")
        .arg("t")
        .arg(60_000)
        .ignore()
        .cmd("DLOCK.RELEASE")
        .arg("short")
        .arg("t")
        .ignore()
        .query(&mut c)
        .unwrap();
    let log = entries(&mut c, -1);
    assert_eq!(log.len(), 3, "{log:?}");
    let (sem, rw, long) = (&log[0], &log[1], &log[2]);
    assert_eq!(text(sem, "token").as_deref(), Some("t-sem"));
    assert_eq!(text(sem, "owner"), None, "a hold without OWNER names none");
    assert!(as_int(&rw["id"]) > as_int(&long["id"]), "newest first");
    assert_eq!(text(long, "type").as_deref(), Some("hold"));
    assert_eq!(text(long, "ended").as_deref(), Some("released"));
    assert_eq!(text(long, "resource").as_deref(), Some("long"));
    assert_eq!(text(long, "token").as_deref(), Some("t-long"));
    assert_eq!(text(long, "client_name").as_deref(), Some("alice"));
    assert!(text(long, "client_addr").unwrap().starts_with("127.0.0.1:"));
    assert!(as_int(&long["duration"]) >= 300_000 - 1000);
    assert_eq!(text(long, "owner"), None);
    assert_eq!(text(rw, "owner").as_deref(), Some("svc"));
    assert_eq!(text(rw, "resource").as_deref(), Some("rw"));
}

#[test]
fn long_waits_granted_or_given_up_name_the_waiting_client() {
    let s = Server::start();
    let mut c = s.conn();
    set(&mut c, "dlock.slowlog-wait-ms", "100");
    acquire(&mut c, "w", "h", 60_000).expect("free");
    let mut bob = named_conn(&s, "bob");
    assert_eq!(
        acquire_wait(&mut bob, "w", "gives-up", 60_000, 150).unwrap(),
        None
    );
    let url = s.url();
    let waiter = std::thread::spawn(move || {
        let mut carol = redis::Client::open(url).unwrap().get_connection().unwrap();
        let () = redis::cmd("CLIENT")
            .arg("SETNAME")
            .arg("carol")
            .query(&mut carol)
            .unwrap();
        acquire_wait(&mut carol, "w", "waits", 60_000, 30_000).unwrap()
    });
    wait_waiters(&mut c, "w", 1);
    std::thread::sleep(Duration::from_millis(200));
    release(&mut c, "w", "h");
    assert!(waiter.join().unwrap().is_some());
    wait_until(
        Duration::from_secs(10),
        "the grant's reply named carol",
        || {
            entries(&mut c, 1)
                .first()
                .is_some_and(|e| text(e, "client_name").as_deref() == Some("carol"))
        },
    );
    let log = entries(&mut c, 10);
    assert_eq!(log.len(), 2, "{log:?}");
    let (granted, gave_up) = (&log[0], &log[1]);
    assert_eq!(text(granted, "type").as_deref(), Some("wait"));
    assert_eq!(text(granted, "ended").as_deref(), Some("granted"));
    assert_eq!(text(granted, "token").as_deref(), Some("waits"));
    assert!(as_int(&granted["duration"]) >= 200_000 - 1000);
    assert_eq!(text(gave_up, "ended").as_deref(), Some("gave-up"));
    assert_eq!(text(gave_up, "token").as_deref(), Some("gives-up"));
    assert_eq!(text(gave_up, "client_name").as_deref(), Some("bob"));
}

#[test]
fn a_lease_that_ran_out_is_logged_without_a_client() {
    let s = Server::start();
    let mut c = s.conn();
    set(&mut c, "dlock.slowlog-hold-ms", "10");
    acquire(&mut c, "e", "t-e", 30).expect("free");
    wait_until(Duration::from_secs(10), "the expiry was logged", || {
        len(&mut c) == 1
    });
    let e = &entries(&mut c, 1)[0];
    assert_eq!(text(e, "ended").as_deref(), Some("expired"));
    assert_eq!(text(e, "token").as_deref(), Some("t-e"));
    assert_eq!(
        (text(e, "client_addr"), text(e, "client_name")),
        (None, None)
    );
}

/// The log keeps the newest `dlock.slowlog-max-len`; RESET empties it and
/// ids go on; a threshold of 0 logs nothing; `used_memory` stays flat over
/// thousands of entries.
#[test]
fn the_log_is_bounded_configurable_and_resettable() {
    let s = Server::start();
    let mut c = s.conn();
    set(&mut c, "dlock.slowlog-wait-ms", "0");
    set(&mut c, "dlock.slowlog-hold-ms", "1");
    set(&mut c, "dlock.slowlog-max-len", "5");
    let cycle = |c: &mut Connection, i: usize| {
        let name = format!("r{i}");
        acquire(c, name.as_str(), "t", 60_000).expect("free");
        std::thread::sleep(Duration::from_millis(2));
        release(c, name.as_str(), "t");
    };
    for i in 0..8 {
        cycle(&mut c, i);
    }
    assert_eq!(len(&mut c), 5);
    let ids: Vec<i64> = entries(&mut c, -1)
        .iter()
        .map(|e| as_int(&e["id"]))
        .collect();
    assert_eq!(ids, [7, 6, 5, 4, 3]);
    set(&mut c, "dlock.slowlog-max-len", "2");
    assert_eq!(len(&mut c), 2);
    let ok: String = redis::cmd("DLOCK.SLOWLOG")
        .arg("RESET")
        .query(&mut c)
        .unwrap();
    assert_eq!(ok, "OK");
    assert_eq!(len(&mut c), 0);
    cycle(&mut c, 8);
    assert_eq!(as_int(&entries(&mut c, 1)[0]["id"]), 8);
    set(&mut c, "dlock.slowlog-hold-ms", "0");
    cycle(&mut c, 9);
    assert_eq!(len(&mut c), 1);

    set(&mut c, "dlock.slowlog-hold-ms", "1");
    set(&mut c, "dlock.slowlog-max-len", "100");
    let (long, token) = ("x".repeat(4000), "y".repeat(500));
    let round = |c: &mut Connection, from: usize| {
        for i in from..from + 200 {
            let name = format!("{long}{i}");
            acquire(c, name.as_str(), token.as_str(), 60_000).expect("free");
            std::thread::sleep(Duration::from_millis(2));
            release(c, name.as_str(), token.as_str());
        }
    };
    round(&mut c, 0);
    let used = used_memory_purged(&mut c);
    for r in 1..10 {
        round(&mut c, r * 200);
    }
    assert_eq!(len(&mut c), 100);
    let e = &entries(&mut c, 1)[0];
    assert_eq!(as_bytes(&e["resource"]).len(), 256, "names are cut");
    assert_eq!(as_bytes(&e["token"]).len(), 256, "tokens are cut");
    let grown = used_memory_purged(&mut c) - used;
    assert!(grown < 32 * 1024, "used_memory grew {grown} bytes");
}

#[test]
fn bad_input_is_refused_and_a_replica_logs_nothing() {
    let m = Server::start();
    let r = Server::builder().replica_of(&m).start();
    r.wait_for_sync(Duration::from_secs(30));
    let mut c = m.conn();
    let mut rc = r.conn();
    for conn in [&mut c, &mut rc] {
        set(conn, "dlock.slowlog-hold-ms", "1");
    }
    acquire(&mut c, "a", "t", 60_000).expect("free");
    std::thread::sleep(Duration::from_millis(5));
    release(&mut c, "a", "t");
    let _: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut c).unwrap();
    assert_eq!(len(&mut c), 1);
    assert_eq!(len(&mut rc), 0);
    let before = entries(&mut c, -1);
    for (args, want) in [
        (
            &[][..],
            "ERR wrong number of arguments for 'dlock.slowlog' command",
        ),
        (
            &["GET", "x"],
            "ERR count must be an integer from 0 to 10000",
        ),
        (
            &["GET", "-2"],
            "ERR count must be an integer from 0 to 10000",
        ),
        (&["GET", "1", "2"], "ERR syntax error"),
        (&["LEN", "1"], "ERR syntax error"),
        (&["TOP"], "ERR syntax error"),
    ] {
        let r: redis::RedisResult<Value> = redis::cmd("DLOCK.SLOWLOG").arg(args).query(&mut c);
        assert_eq!(err_of(r), want, "{args:?}");
    }
    let r: redis::RedisResult<()> = redis::cmd("CONFIG")
        .arg("SET")
        .arg("dlock.slowlog-max-len")
        .arg("10001")
        .query(&mut c);
    assert!(r.is_err());
    assert_eq!(entries(&mut c, -1), before);
}

/// A set request's wait is one entry, named after its client; a later
/// waiter's entry is named after its own.
#[test]
fn a_set_wait_is_one_entry_and_later_waiters_keep_their_names() {
    let s = Server::start();
    let mut c = s.conn();
    set(&mut c, "dlock.slowlog-wait-ms", "1");
    acquire(&mut c, "{s}x", "h", 60_000).expect("free");
    let url = s.url();
    let setwaiter = std::thread::spawn(move || {
        let mut w = redis::Client::open(url).unwrap().get_connection().unwrap();
        let () = redis::cmd("CLIENT")
            .arg("SETNAME")
            .arg("setwaiter")
            .query(&mut w)
            .unwrap();
        redis::cmd("DLOCK.MACQUIRE")
            .arg(3)
            .arg(&["{s}x", "{s}y", "{s}z"][..])
            .arg("mt")
            .arg(60_000)
            .arg("WAIT")
            .arg(30_000)
            .query::<Option<i64>>(&mut w)
            .unwrap()
    });
    wait_waiters(&mut c, "{s}x", 1);
    std::thread::sleep(Duration::from_millis(20));
    release(&mut c, "{s}x", "h");
    assert!(setwaiter.join().unwrap().is_some());
    for i in 0..3 {
        acquire(&mut c, "later", "h", 60_000).expect("free");
        let url = s.url();
        let name = format!("later{i}");
        let w = std::thread::spawn(move || {
            let mut w = redis::Client::open(url).unwrap().get_connection().unwrap();
            let () = redis::cmd("CLIENT")
                .arg("SETNAME")
                .arg(&name)
                .query(&mut w)
                .unwrap();
            acquire_wait(&mut w, "later", &format!("w{i}"), 60_000, 30_000).unwrap()
        });
        wait_waiters(&mut c, "later", 1);
        std::thread::sleep(Duration::from_millis(5));
        release(&mut c, "later", "h");
        let fence = w.join().unwrap().expect("granted");
        release(&mut c, "later", &format!("w{i}"));
        assert!(fence > 0);
    }
    wait_until(
        Duration::from_secs(10),
        "every reply named its client",
        || {
            entries(&mut c, -1)
                .iter()
                .all(|e| e.contains_key("client_name"))
        },
    );
    let log = entries(&mut c, -1);
    let named: Vec<(String, String)> = log
        .iter()
        .map(|e| (text(e, "token").unwrap(), text(e, "client_name").unwrap()))
        .collect();
    assert_eq!(
        named,
        [
            ("w2".to_string(), "later2".to_string()),
            ("w1".into(), "later1".into()),
            ("w0".into(), "later0".into()),
            ("mt".into(), "setwaiter".into()),
        ]
    );
}
