//! The reply of `DLOCK.WAITERS` field by field, paging, transactions,
//! scripts, a replica, and bad input.
use super::*;
use std::time::Instant;

fn open_session(c: &mut Connection, id: &str) {
    let _: i64 = redis::cmd("DLOCK.SESSION")
        .arg(&["OPEN", id, "60000"])
        .query(c)
        .unwrap();
}

/// Every field, in RESP2 and RESP3: owner and session only when named,
/// `waited` no more than the test has waited, `timeout` within the `WAIT`
/// (-1: forever).
#[test]
fn waiters_shows_every_field_of_each_request() {
    let s = Server::start();
    let mut c = s.conn();
    acquire(&mut c, "r", "h", LONG_TTL).expect("free");
    open_session(&mut c, "sess");
    let began = Instant::now();
    let _plain = join(&s, &mut c, wait_cmd("r", "plain", &[], 0), "r", 1);
    let _reader = join(
        &s,
        &mut c,
        wait_cmd("r", "reader", &["SHARED", "OWNER", "svc"], 50_000),
        "r",
        2,
    );
    let mut bound = redis::cmd("DLOCK.ACQUIRE");
    bound.arg(&["r", "bound", "0", "SESSION", "sess", "WAIT", "0"]);
    let _bound = join(&s, &mut c, bound, "r", 3);
    for mut conn in [s.conn(), s.conn_resp3()] {
        let page = waiters_page(&mut conn, "r", &[]);
        // The server counts whole milliseconds of its own clock: one more
        // than the test's truncated count is rounding, not time.
        let elapsed = began.elapsed().as_millis() as i64 + 1;
        assert_eq!(tokens(&page), ["plain", "reader", "bound"]);
        assert_eq!(positions(&page), [1, 2, 3]);
        fn keys(w: &Fields) -> Vec<&str> {
            let mut k: Vec<&str> = w.keys().map(String::as_str).collect();
            k.sort_unstable();
            k
        }
        assert_eq!(
            keys(&page[0]),
            ["limit", "mode", "position", "priority", "timeout", "token", "waited"]
        );
        assert_eq!(
            keys(&page[1]),
            ["limit", "mode", "owner", "position", "priority", "timeout", "token", "waited"]
        );
        assert_eq!(
            keys(&page[2]),
            ["limit", "mode", "position", "priority", "session", "timeout", "token", "waited"]
        );
        assert_eq!(as_bytes(&page[0]["mode"]), b"exclusive");
        assert_eq!(as_bytes(&page[1]["mode"]), b"shared");
        assert_eq!(as_bytes(&page[1]["owner"]), b"svc");
        assert_eq!(as_bytes(&page[2]["session"]), b"sess");
        for w in &page {
            assert_eq!(as_int(&w["limit"]), 1);
            assert_eq!(as_int(&w["priority"]), 0);
            let waited = as_int(&w["waited"]);
            assert!(
                (0..=elapsed).contains(&waited),
                "waited {waited} of {elapsed}"
            );
        }
        assert_eq!(as_int(&page[0]["timeout"]), -1);
        assert_eq!(as_int(&page[2]["timeout"]), -1);
        let left = as_int(&page[1]["timeout"]);
        assert!(left <= 50_000 && left >= 50_000 - elapsed, "timeout {left}");
        assert!(
            as_int(&page[0]["waited"]) >= as_int(&page[2]["waited"]),
            "the first waited longest"
        );
    }
    let mut c3 = s.conn_resp3();
    let v: Value = redis::cmd("DLOCK.WAITERS")
        .arg("r")
        .arg("COUNT")
        .arg(1)
        .query(&mut c3)
        .unwrap();
    let Value::Array(items) = v else { panic!() };
    assert!(matches!(items[..], [Value::Map(_)]), "RESP3: a map");
}

/// A semaphore's waiter asking for `PERMITS 3` shows `permits` 3; one
/// asking for a single permit (no `PERMITS`) shows no `permits` at all, so
/// the reply of every request that names none is as it was. RESP2 and
/// RESP3.
#[test]
fn waiters_shows_the_permits_a_request_asks_for() {
    let s = Server::start();
    let mut c = s.conn();
    let mut all = redis::cmd("DLOCK.ACQUIRE");
    all.arg(&["pool", "h", "60000", "LIMIT", "5", "PERMITS", "5"]);
    let fence: Option<i64> = all.query(&mut c).unwrap();
    assert!(fence.is_some(), "all 5 permits held");
    // Queued one after the other (`join` reads a plain lock's `DLOCK.INFO`).
    let mut queue = |token: &str, extra: &[&str]| {
        let w = Waiter::send(&s, wait_cmd("pool", token, extra, 0));
        wait_until(SOON, &format!("{token} queued"), || {
            position(&mut c, "pool", token).is_some()
        });
        w
    };
    let big = queue("big", &["LIMIT", "5", "PERMITS", "3"]);
    let one = queue("one", &["LIMIT", "5"]);
    for mut conn in [s.conn(), s.conn_resp3()] {
        let page = waiters_page(&mut conn, "pool", &[]);
        assert_eq!(tokens(&page), ["big", "one"]);
        assert_eq!(as_int(&page[0]["limit"]), 5);
        assert_eq!(page[0].get("permits").map(as_int), Some(3));
        assert_eq!(as_int(&page[1]["limit"]), 5);
        assert!(
            !page[1].contains_key("permits"),
            "one permit: {:?}",
            page[1]
        );
    }
    let _: i64 = redis::cmd("DLOCK.RELEASE")
        .arg("pool")
        .arg("h")
        .query(&mut c)
        .unwrap();
    assert!(big.granted().0 > 0 && one.granted().0 > 0, "3 + 1 of 5 fit");
    assert!(waiters_page(&mut c, "pool", &[]).is_empty());
}

/// `OFFSET` skips, `COUNT` bounds (10 unless given), past the end is empty.
#[test]
fn waiters_pages_through_a_long_queue() {
    let s = Server::start();
    let mut c = s.conn();
    acquire(&mut c, "r", "h", LONG_TTL).expect("free");
    let line: Vec<String> = (1..=25).map(|i| format!("w{i:02}")).collect();
    let _waiters: Vec<Waiter> = line
        .iter()
        .enumerate()
        .map(|(i, t)| join(&s, &mut c, wait_cmd("r", t, &[], 0), "r", i as i64 + 1))
        .collect();
    let page = |c: &mut Connection, args: &[&str]| tokens(&waiters_page(c, "r", args));
    assert_eq!(page(&mut c, &[]), line[..10]);
    assert_eq!(page(&mut c, &["OFFSET", "10"]), line[10..20]);
    assert_eq!(page(&mut c, &["offset", "20", "count", "1000"]), line[20..]);
    assert_eq!(page(&mut c, &["COUNT", "3", "OFFSET", "22"]), line[22..]);
    assert_eq!(
        positions(&waiters_page(&mut c, "r", &["OFFSET", "7", "COUNT", "2"])),
        [8, 9]
    );
    assert!(page(&mut c, &["OFFSET", "25"]).is_empty());
    assert!(page(&mut c, &["OFFSET", "9223372036854775807"]).is_empty());
    assert_eq!(page(&mut c, &["COUNT", "1000"]), line);
    for (i, t) in line.iter().enumerate() {
        assert_eq!(position(&mut c, "r", t), Some(i as i64 + 1));
    }
}

/// Inside `MULTI`/`EXEC` and a script both read the queue as it stands;
/// a `RELEASE` earlier in the same transaction has handed the lock to the
/// head, which no longer waits.
#[test]
fn transactions_and_scripts_read_the_queue() {
    let s = Server::start();
    let mut c = s.conn();
    acquire(&mut c, "r", "h", LONG_TTL).expect("free");
    let a = join(&s, &mut c, wait_cmd("r", "a", &[], 0), "r", 1);
    let _b = join(&s, &mut c, wait_cmd("r", "b", &[], 0), "r", 2);
    let mut pos = redis::cmd("DLOCK.POSITION");
    pos.arg("r").arg("b");
    let mut list = redis::cmd("DLOCK.WAITERS");
    list.arg("r").arg("COUNT").arg(1);
    let replies = transaction(&mut c, &[pos, list]);
    assert_eq!(replies[0], Value::Int(2));
    assert_eq!(tokens(&parse_page(replies[1].clone())), ["a"]);
    let from_lua: i64 = redis::cmd("EVAL")
        .arg("return redis.call('DLOCK.POSITION', KEYS[1], ARGV[1])")
        .arg(1)
        .arg("r")
        .arg("b")
        .query(&mut c)
        .unwrap();
    assert_eq!(from_lua, 2);
    let listed: Value = redis::cmd("EVAL")
        .arg("return redis.call('DLOCK.WAITERS', KEYS[1])")
        .arg(1)
        .arg("r")
        .query(&mut c)
        .unwrap();
    assert_eq!(tokens(&parse_page(listed)), ["a", "b"]);

    let mut release = redis::cmd("DLOCK.RELEASE");
    release.arg("r").arg("h");
    let mut pos_a = redis::cmd("DLOCK.POSITION");
    pos_a.arg("r").arg("a");
    let mut pos_b = redis::cmd("DLOCK.POSITION");
    pos_b.arg("r").arg("b");
    let mut list = redis::cmd("DLOCK.WAITERS");
    list.arg("r");
    let replies = transaction(&mut c, &[release, pos_a, pos_b, list]);
    assert_eq!(replies[..3], [Value::Int(1), Value::Nil, Value::Int(1)]);
    assert_eq!(tokens(&parse_page(replies[3].clone())), ["b"]);
    assert!(a.granted().0 > 0);
}

/// Queues live where clients wait: a replica answers both commands from
/// its own, empty, queues.
#[test]
fn a_replica_answers_from_its_own_queues() {
    let master = Server::start();
    let replica = Server::builder().replica_of(&master).start();
    replica.wait_for_sync(std::time::Duration::from_secs(20));
    let mut m = master.conn();
    acquire(&mut m, "r", "h", LONG_TTL).expect("free");
    let _a = join(&master, &mut m, wait_cmd("r", "a", &[], 0), "r", 1);
    assert_eq!(position(&mut m, "r", "a"), Some(1));
    let mut r = replica.conn();
    wait_until(SOON, "the hold replicated", || exists(&mut r, "r"));
    assert_eq!(position(&mut r, "r", "a"), None);
    assert!(waiters_page(&mut r, "r", &[]).is_empty());
}

/// What a bad call could change: the `INFO dlock` section (counters), the
/// lock's value, its queue as listed, and the keyspace.
fn snapshot(c: &mut Connection) -> (String, Value, Vec<String>, i64) {
    let info: String = redis::cmd("INFO").arg("dlock").query(c).unwrap();
    // The value itself, its deadline included (DLOCK.INFO's ttl runs).
    let lock: Value = redis::cmd("DEBUG")
        .arg("DIGEST-VALUE")
        .arg("r")
        .query(c)
        .unwrap();
    let line = tokens(&waiters_page(c, "r", &["COUNT", "1000"]));
    (info, lock, line, dbsize(c))
}

/// Every bad call is refused with its error and changes nothing.
#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    acquire(&mut c, "r", "h", LONG_TTL).expect("free");
    let _a = join(&s, &mut c, wait_cmd("r", "a", &[], 0), "r", 1);
    let _: () = redis::cmd("SET").arg("str").arg("x").query(&mut c).unwrap();
    let before = snapshot(&mut c);
    let arity = |cmd: &str| format!("ERR wrong number of arguments for '{cmd}' command");
    let count = "ERR COUNT must be an integer from 1 to 1000";
    let offset = "ERR OFFSET must be an integer from 0 to 9223372036854775807";
    let long_token = "x".repeat((1 << 20) + 1);
    let cases: Vec<(Vec<&str>, String)> = vec![
        (vec!["DLOCK.POSITION", "r"], arity("dlock.position")),
        (
            vec!["DLOCK.POSITION", "r", "a", "b"],
            arity("dlock.position"),
        ),
        (
            vec!["DLOCK.POSITION", "r", ""],
            "ERR token must not be empty".into(),
        ),
        (
            vec!["DLOCK.POSITION", "r", &long_token],
            "ERR token is longer than 1048576 bytes".into(),
        ),
        (
            vec!["DLOCK.POSITION", "str", "a"],
            "WRONGTYPE Operation against a key holding the wrong kind of value".into(),
        ),
        (vec!["DLOCK.WAITERS"], arity("dlock.waiters")),
        (vec!["DLOCK.WAITERS", "r", "COUNT", "0"], count.into()),
        (vec!["DLOCK.WAITERS", "r", "COUNT", "1001"], count.into()),
        (vec!["DLOCK.WAITERS", "r", "COUNT", "-1"], count.into()),
        (vec!["DLOCK.WAITERS", "r", "COUNT", "1.5"], count.into()),
        (vec!["DLOCK.WAITERS", "r", "OFFSET", "-1"], offset.into()),
        (
            vec!["DLOCK.WAITERS", "r", "OFFSET", "9223372036854775808"],
            offset.into(),
        ),
        (
            vec!["DLOCK.WAITERS", "r", "COUNT"],
            "ERR syntax error".into(),
        ),
        (
            vec!["DLOCK.WAITERS", "r", "COUNT", "1", "COUNT", "2"],
            "ERR syntax error".into(),
        ),
        (
            vec!["DLOCK.WAITERS", "r", "LIMIT", "2"],
            "ERR syntax error".into(),
        ),
        (
            vec!["DLOCK.WAITERS", "str"],
            "WRONGTYPE Operation against a key holding the wrong kind of value".into(),
        ),
    ];
    for (args, expected) in cases {
        let mut cmd = redis::cmd(args[0]);
        cmd.arg(&args[1..]);
        let err = cmd.query::<Value>(&mut c).expect_err(args[0]);
        assert_eq!(err_text(&err), expected, "{:?}", &args[..args.len().min(3)]);
        assert_eq!(
            snapshot(&mut c),
            before,
            "{:?} changed something",
            args.get(..2)
        );
    }
}
