//! How `DLOCK.INFO` shows the highest priority queued: a last field
//! `priority`, only while a request queued there named one above 0, in
//! the plain lock's map and in the list form alike; the shapes without
//! priorities stay as they were, and `DLOCK.QUEUED` names resources only
//! (docs/commands/dlock.info.md, "Priorities").
use super::{queue, set_aging, AN_HOUR_MS};
use crate::common::lock::*;
use crate::common::*;
use redis::Value;

/// `DLOCK.INFO res` as RESP2 sends it: the flat array of fields and values.
fn flat(c: &mut redis::Connection, res: &str) -> Vec<Value> {
    match redis::cmd("DLOCK.INFO")
        .arg(res)
        .query(c)
        .expect("DLOCK.INFO")
    {
        Value::Array(items) => items,
        other => panic!("DLOCK.INFO {res}: {other:?}"),
    }
}

fn names(fields: &[Value]) -> Vec<String> {
    fields
        .iter()
        .step_by(2)
        .map(|k| String::from_utf8_lossy(&as_bytes(k)).into_owned())
        .collect()
}

#[test]
fn the_plain_map_ends_with_the_highest_priority_only_while_one_is_queued() {
    let s = Server::start();
    let mut c = s.conn();
    set_aging(&mut c, AN_HOUR_MS);
    acquire(&mut c, "r", "h", 60_000);
    let plain = ["token", "fence", "ttl", "waiters"];
    assert_eq!(names(&flat(&mut c, "r")), plain);
    let a = queue(&s, "r", "a", None, false);
    wait_waiters(&mut c, "r", 1);
    // A waiter without PRIORITY: the map of four fields, as always.
    assert_eq!(names(&flat(&mut c, "r")), plain);
    let x = queue(&s, "r", "x", Some(5), false);
    wait_waiters(&mut c, "r", 2);
    let y = queue(&s, "r", "y", Some(2), false);
    wait_waiters(&mut c, "r", 3);
    let f = flat(&mut c, "r");
    assert_eq!(names(&f), ["token", "fence", "ttl", "waiters", "priority"]);
    assert_eq!((as_int(&f[7]), as_int(&f[9])), (3, 5));
    // The other fields where they were: a reader by position is unmoved.
    assert_eq!(as_bytes(&f[1]), b"h");
    // x (5) is granted; y (2) is now the highest queued.
    release(&mut c, "r", "h");
    let _ = x.granted();
    let f = flat(&mut c, "r");
    assert_eq!((as_bytes(&f[1]), as_int(&f[9])), (b"x".to_vec(), 2));
    // y granted: only a, without PRIORITY, waits: no field.
    release(&mut c, "r", "x");
    let _ = y.granted();
    assert_eq!(names(&flat(&mut c, "r")), plain);
    release(&mut c, "r", "y");
    let _ = a.granted();
    assert_eq!(names(&flat(&mut c, "r")), plain);
    // Names only, priorities or not.
    let queued: Vec<Value> = redis::cmd("DLOCK.QUEUED").query(&mut c).unwrap();
    assert!(queued.is_empty());
}

#[test]
fn the_list_form_and_resp3_end_with_it_too() {
    let s = Server::start();
    let mut c = s.conn();
    set_aging(&mut c, AN_HOUR_MS);
    let _: i64 = redis::cmd("DLOCK.ACQUIRE")
        .arg("rw")
        .arg("reader")
        .arg(60_000)
        .arg("SHARED")
        .query(&mut c)
        .unwrap();
    let w = queue(&s, "rw", "writer", Some(3), false);
    // The list form: waited for by its blocked client.
    wait_blocked_clients(&mut c, 1);
    let f = flat(&mut c, "rw");
    assert_eq!(
        names(&f),
        ["kind", "limit", "waiters", "holds", "priority"],
        "{f:?}"
    );
    assert_eq!(as_int(&f[9]), 3);
    // DLOCK.QUEUED still answers names.
    let queued: Vec<Vec<u8>> = redis::cmd("DLOCK.QUEUED").query(&mut c).unwrap();
    assert_eq!(queued, [b"rw".to_vec()]);
    let mut c3 = s.conn_resp3();
    let Value::Map(pairs) = redis::cmd("DLOCK.INFO").arg("rw").query(&mut c3).unwrap() else {
        panic!("RESP3: a map");
    };
    let priority = pairs
        .iter()
        .find(|(k, _)| as_bytes(k) == b"priority")
        .map(|(_, v)| as_int(v));
    assert_eq!(priority, Some(3));
    release(&mut c, "rw", "reader");
    let _ = w.granted();
    assert_eq!(
        names(&flat(&mut c, "rw")),
        ["token", "fence", "ttl", "waiters"]
    );
}
