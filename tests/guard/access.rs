//! What a guard declares: its keys (`COMMAND GETKEYS`, the key spec), its
//! flags; replicas refuse it and answer the check.
use super::*;

#[test]
fn the_resource_and_every_inner_key_are_declared() {
    let s = Server::start();
    let mut c = s.conn();
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg(&["GETKEYS", "DLOCK.GUARD", "lk", "TOKEN", "t", "BATCH", "3"])
        .arg(&[
            "3", "SET", "a", "1", "5", "MSET", "b", "1", "c", "2", "3", "RENAME", "d", "e",
        ])
        .query(&mut c)
        .unwrap();
    assert_eq!(keys, ["lk", "a", "b", "c", "d", "e"]);
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg(&[
            "GETKEYS",
            "DLOCK.GUARD",
            "lk",
            "FENCE",
            "1",
            "HSET",
            "h",
            "f",
            "v",
        ])
        .query(&mut c)
        .unwrap();
    assert_eq!(keys, ["lk", "h"]);
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg(&["GETKEYS", "DLOCK.CHECK", "lk", "FENCE", "1"])
        .query(&mut c)
        .unwrap();
    assert_eq!(keys, ["lk"]);
    let info: Value = redis::cmd("COMMAND")
        .arg(&["INFO", "dlock.guard"])
        .query(&mut c)
        .unwrap();
    let text = format!("{info:?}");
    assert!(
        text.contains("movablekeys") && text.contains("write"),
        "{text}"
    );
    assert!(!text.contains("denyoom"), "{text}");
}

#[test]
fn a_replica_refuses_the_guard_and_answers_the_check() {
    let m = Server::start();
    let r = Server::builder().replica_of(&m).start();
    r.wait_for_sync(SOON);
    let mut mc = m.conn();
    let f = grant(&mut mc, "lk", "t", 60_000);
    let _: i64 = redis::cmd("WAIT").arg(&[1, 5000]).query(&mut mc).unwrap();
    let mut rc = r.conn();
    let e = err_of(guard(&mut rc, "lk", &token("t"), &["SET", "d", "x"]));
    assert!(e.starts_with("READONLY"), "{e}");
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "replica-read-only", "no"])
        .query(&mut rc)
        .unwrap();
    let e = err_of(guard(&mut rc, "lk", &token("t"), &["SET", "d", "x"]));
    assert_eq!(
        e,
        "READONLY dlock: locks are granted, extended and released on the master only"
    );
    assert_eq!(check(&mut rc, "lk", &["FENCE", &f.to_string()]), 1);
    assert_eq!(get(&mut rc, "d"), None);
}
