//! A refused command changes, propagates and publishes nothing: not to the
//! replica (`master_repl_offset`), not to the AOF (its files' size), not to
//! keyspace subscribers, not to the dirty counter.
use super::kinds::{Kinds, LIMIT3_ERR, TOKEN_IN_USE_ERR, UPGRADE_ERR};
use super::*;

/// Every AOF file's size, summed.
fn aof_bytes(s: &Server) -> u64 {
    std::fs::read_dir(s.dir().join("appendonlydir"))
        .expect("appendonlydir")
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

/// A connection subscribed to every keyspace and keyevent notification.
fn subscribe_all(s: &Server) -> Connection {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("KEAn")
        .query(&mut s.conn())
        .unwrap();
    let mut sub = s.conn();
    sub.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _: () = redis::cmd("PSUBSCRIBE")
        .arg("__key*__:*")
        .query(&mut sub)
        .unwrap();
    sub
}

/// The channel and message of the next notification.
fn next_event(sub: &mut Connection) -> (String, String) {
    match sub.recv_response().expect("a notification within 10 s") {
        Value::Array(p) if p.len() == 4 => (
            String::from_utf8(as_bytes(&p[2])).unwrap(),
            String::from_utf8(as_bytes(&p[3])).unwrap(),
        ),
        other => panic!("unexpected message {other:?}"),
    }
}

/// Every way a request against held multi-hold resources is refused.
fn refusals(c: &mut Connection, k: &Kinds) {
    let errors: [(&str, &str, &[&str], &str); 10] = [
        // The same token with another mode, owner or limit.
        (&k.shared, "r1", &[], TOKEN_IN_USE_ERR),
        (&k.down, "dw", &["SHARED", "OWNER", "D"], TOKEN_IN_USE_ERR),
        (&k.owner, "a1", &["OWNER", "B"], TOKEN_IN_USE_ERR),
        (&k.sem, "p1", &["LIMIT", "2"], TOKEN_IN_USE_ERR),
        // Another limit, or none, on a LIMIT 3 resource; WAIT changes nothing.
        (&k.sem, "p9", &["LIMIT", "2"], LIMIT3_ERR),
        (&k.sem, "p9", &[], LIMIT3_ERR),
        (&k.sem, "p9", &["LIMIT", "4", "WAIT", "1000"], LIMIT3_ERR),
        (
            &k.sem,
            "p9",
            &["SHARED", "LIMIT", "3"],
            "ERR SHARED cannot be combined with LIMIT above 1",
        ),
        // An upgrade beside another owner, with or without WAIT.
        ("up", "x2", &["OWNER", "X"], UPGRADE_ERR),
        ("up", "x2", &["OWNER", "X", "WAIT", "1000"], UPGRADE_ERR),
    ];
    for (key, tok, opts, want) in errors {
        assert_eq!(refused(c, key, tok, opts), want, "{key} {tok} {opts:?}");
    }
    // Refused without an error: busy, not the holder.
    busy(c, &k.shared, "w", &[]);
    busy(c, &k.owner, "b1", &["OWNER", "B"]);
    busy(c, &k.down, "x", &["SHARED"]);
    busy(c, "up", "w", &[]);
    for key in k.keys() {
        assert_eq!(release(c, &key, "nobody"), 0);
        assert_eq!(extend(c, &key, "nobody", 10_000), 0);
    }
}

#[test]
fn refused_commands_propagate_and_publish_nothing() {
    let (master, replica) = pair(&["--appendonly", "yes", "--appendfsync", "always"]);
    let (mut m, mut r) = (master.conn(), replica.conn());
    let k = Kinds::build(&mut m, "ref");
    take(&mut m, "up", "x1", 60_000, &["SHARED", "OWNER", "X"]);
    take(&mut m, "up", "y1", 60_000, &["SHARED", "OWNER", "Y"]);
    wait_replica(&mut m);
    let mut keys = k.keys();
    keys.push("up".into());
    let mut sub = subscribe_all(&master);
    let before = snapshots(&mut m, &keys);
    let offset = counter(&mut m, "replication", "master_repl_offset");
    let replica_offset = counter(&mut r, "replication", "master_repl_offset");
    let dirty = counter(&mut m, "persistence", "rdb_changes_since_last_save");
    let aof = aof_bytes(&master);

    refusals(&mut m, &k);

    assert_eq!(
        counter(&mut m, "replication", "master_repl_offset"),
        offset,
        "a refused command was propagated"
    );
    assert_eq!(aof_bytes(&master), aof, "a refused command reached the AOF");
    assert_eq!(
        counter(&mut m, "persistence", "rdb_changes_since_last_save"),
        dirty,
        "a refused command dirtied the dataset"
    );
    assert_same("after refusals", &before, &snapshots(&mut m, &keys));
    // The first notification after the refusals is the marker's own.
    let _: () = redis::cmd("SET")
        .arg("marker")
        .arg("1")
        .query(&mut m)
        .unwrap();
    let first = next_event(&mut sub);
    assert_eq!(
        first,
        ("__keyspace@0__:marker".to_string(), "new".to_string()),
        "a refused command published an event"
    );
    // The replica got nothing but the marker, and holds what it held.
    wait_replica(&mut m);
    assert!(counter(&mut r, "replication", "master_repl_offset") > replica_offset);
    assert_same("replica", &before, &snapshots(&mut r, &keys));
}
