//! All or none: a batch whose command fails part-way is undone — every
//! kind of value, its expiry, keys it created or deleted — and replicas and
//! the AOF end where the master ends, having received the writes (and
//! their undoing), never the guard.
use super::*;
use common::repl_stream::ReplStream;

/// A value of every kind, some with an expiry.
fn fill(c: &mut Connection) {
    let now = now_ms();
    for cmd in [
        vec![
            "SET".to_string(),
            "s".into(),
            "text".into(),
            "PXAT".into(),
            (now + 600_000).to_string(),
        ],
        vec!["SET".into(), "n".into(), "41".into()],
        vec![
            "HSET".into(),
            "h".into(),
            "f".into(),
            "v".into(),
            "g".into(),
            "w".into(),
        ],
        vec![
            "RPUSH".into(),
            "l".into(),
            "a".into(),
            "b".into(),
            "c".into(),
        ],
        vec!["SADD".into(), "st".into(), "x".into(), "y".into()],
        vec![
            "ZADD".into(),
            "z".into(),
            "1".into(),
            "one".into(),
            "2".into(),
            "two".into(),
        ],
        vec![
            "XADD".into(),
            "x".into(),
            "1-1".into(),
            "k".into(),
            "v".into(),
        ],
        vec!["PEXPIREAT".into(), "h".into(), (now + 900_000).to_string()],
        vec!["SET".into(), "notint".into(), "abc".into()],
    ] {
        let _: Value = redis::cmd(&cmd[0]).arg(&cmd[1..]).query(c).unwrap();
    }
}

/// Every key's value and absolute expiry.
fn snapshot(c: &mut Connection) -> Vec<(String, Value, i64)> {
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(c).unwrap();
    keys.sort();
    keys.into_iter()
        .filter(|k| k != "r")
        .map(|k| {
            let digest: Value = redis::cmd("DEBUG")
                .arg(&["DIGEST-VALUE", &k])
                .query(c)
                .unwrap();
            let at: i64 = redis::cmd("PEXPIRETIME").arg(&k).query(c).unwrap();
            (k, digest, at)
        })
        .collect()
}

/// Writes to every kind (changing, creating, deleting, expiring), then a
/// command that fails.
fn failing_batch() -> Vec<Vec<&'static str>> {
    vec![
        vec!["SET", "s", "replaced"],
        vec!["INCR", "n"],
        vec!["HDEL", "h", "f"],
        vec!["LPOP", "l"],
        vec!["SPOP", "st"],
        vec!["ZINCRBY", "z", "5", "one"],
        vec!["XADD", "x", "2-1", "k", "w"],
        vec!["SET", "created", "new"],
        vec!["DEL", "s"],
        vec!["PERSIST", "h"],
        vec!["EXPIRE", "n", "100"],
        vec!["RENAME", "l", "renamed"],
        vec!["INCR", "notint"],
    ]
}

fn run_failing(c: &mut Connection) -> String {
    let commands = failing_batch();
    let commands: Vec<&[&str]> = commands.iter().map(|c| &c[..]).collect();
    err_of(batch(c, "r", &token("t"), &commands))
}

#[test]
fn a_batch_that_fails_part_way_leaves_every_kind_of_value_as_it_was() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "r", "t", 60_000);
    fill(&mut c);
    let before = snapshot(&mut c);
    let e = run_failing(&mut c);
    assert_eq!(
        e,
        "ERR dlock: command 13 of 13 failed, so the BATCH was undone and nothing written: \
         value is not an integer or out of range"
    );
    assert_eq!(snapshot(&mut c), before);
    let undone = info_field(&mut c, "dlock", "dlock_guard_batches_undone");
    assert_eq!(undone.as_deref(), Some("1"));
    // The same commands without the failing one all take effect.
    let mut ok = failing_batch();
    ok.pop();
    let ok: Vec<&[&str]> = ok.iter().map(|c| &c[..]).collect();
    let v = batch(&mut c, "r", &token("t"), &ok).unwrap();
    assert!(matches!(v, Value::Array(ref a) if a.len() == 12), "{v:?}");
    assert_ne!(snapshot(&mut c), before);
    assert_eq!(get(&mut c, "created").as_deref(), Some("new"));
}

#[test]
fn replicas_and_the_aof_end_where_the_master_ends() {
    let mut m = Server::builder().aof("always").start();
    let r = Server::builder().replica_of(&m).start();
    r.wait_for_sync(SOON);
    let mut mc = m.conn();
    grant(&mut mc, "r", "t", 600_000);
    fill(&mut mc);
    let _ = run_failing(&mut mc);
    // Effects that differ from the command (SPOP propagates as SREM).
    guard(&mut mc, "r", &token("t"), &["SPOP", "st"]).unwrap();
    let _ = batch(
        &mut mc,
        "r",
        &token("t"),
        &[&["HSET", "h", "k", "1"], &["EXPIRE", "h", "1000"]],
    )
    .unwrap();
    let _: i64 = redis::cmd("WAIT").arg(&[1, 5000]).query(&mut mc).unwrap();
    let master = digest(&mut mc);
    let mut rc = r.conn();
    assert_eq!(
        digest(&mut rc),
        master,
        "the replica holds what the master holds"
    );
    let mut mc = m.crash_and_restart();
    assert_eq!(digest(&mut mc), master, "the AOF replays to the same data");
}

#[test]
fn replicas_receive_the_writes_never_the_guard() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "r", "t", 60_000);
    set(&mut c, "d", "1");
    let mut stream = ReplStream::attach(&s);
    let _ = guard(&mut c, "r", &token("t"), &["SET", "d", "2"]).unwrap();
    let _ = guard(&mut c, "r", &token("x"), &["SET", "d", "3"]);
    let _ = guard(&mut c, "r", &token("t"), &["INCR", "h:missing-is-fine"]).unwrap();
    let got = stream.commands(&mut c);
    let names: Vec<String> = got.iter().map(|c| c[0].to_uppercase()).collect();
    assert!(!names.iter().any(|n| n.starts_with("DLOCK.")), "{got:?}");
    assert!(got.iter().any(|c| c == &["SET", "d", "2"]), "{got:?}");
    assert!(
        !got.iter()
            .any(|c| c.get(2).map(String::as_str) == Some("3")),
        "{got:?}"
    );
    // A failed batch: its writes and their undoing, in one transaction.
    set(&mut c, "n", "abc");
    let _ = stream.commands(&mut c);
    let e = err_of(batch(
        &mut c,
        "r",
        &token("t"),
        &[&["SET", "d", "4"], &["INCR", "n"]],
    ));
    assert!(e.contains("undone"), "{e}");
    let got = stream.commands(&mut c);
    let names: Vec<String> = got.iter().map(|c| c[0].to_uppercase()).collect();
    assert_eq!(names, ["MULTI", "SET", "RESTORE", "EXEC"], "{got:?}");
    assert_eq!(get(&mut c, "d").as_deref(), Some("2"));
}
