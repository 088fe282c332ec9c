//! `priority` in the `WANTED` reply: the highest `PRIORITY` queued, shown
//! only when a request queued there named one above 0.
use super::*;

/// Aging of an hour: a later request of a higher priority always ranks
/// ahead, however slowly the test runs.
fn slow_aging(c: &mut Connection) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("dlock.priority-aging-ms")
        .arg(3_600_000)
        .query(c)
        .unwrap();
}

/// The fields of a `WANTED` reply, integers (or arrays of them) by name.
fn ints(v: Value) -> Vec<(String, Vec<i64>)> {
    fields(v)
        .into_iter()
        .map(|(k, v)| match v {
            Value::Array(a) => (k, a.iter().map(as_int).collect()),
            one => (k, vec![as_int(&one)]),
        })
        .collect()
}

fn extend_ints(c: &mut Connection, res: &str, tok: &str) -> Vec<(String, Vec<i64>)> {
    let v: Value = redis::cmd("DLOCK.EXTEND")
        .arg(res)
        .arg(tok)
        .arg(60_000)
        .arg("WANTED")
        .query(c)
        .unwrap();
    ints(v)
}

fn expect(fields: &[(&str, &[i64])]) -> Vec<(String, Vec<i64>)> {
    fields
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_vec()))
        .collect()
}

#[test]
fn wanted_names_the_highest_priority_queued_when_above_0() {
    let s = Server::start();
    let mut c = s.conn();
    let mut c3 = s.conn_resp3();
    slow_aging(&mut c);
    acquire(&mut c, "res", "a", 60_000).unwrap();
    let _w0 = queue(&s, "res", "w0", &[]);
    wait_waiters(&mut c, "res", 1);
    // Only priority 0 queued: the reply has no `priority`.
    assert_eq!(extend_wanted(&mut c, "res", "a", 60_000), (1, 1));
    let w7 = queue(&s, "res", "w7", &["PRIORITY", "7"]);
    wait_waiters(&mut c, "res", 2);
    let w3 = queue(&s, "res", "w3", &["PRIORITY", "3"]);
    wait_waiters(&mut c, "res", 3);
    let top7 = expect(&[("extended", &[1]), ("waiters", &[3]), ("priority", &[7])]);
    assert_eq!(extend_ints(&mut c, "res", "a"), top7);
    assert_eq!(extend_ints(&mut c3, "res", "a"), top7, "RESP3");
    // A non-holder learns it too, and changes nothing.
    let before = common::dump::digest(&mut c, "res");
    let other = expect(&[("extended", &[0]), ("waiters", &[3]), ("priority", &[7])]);
    assert_eq!(extend_ints(&mut c, "res", "other"), other);
    assert_eq!(common::dump::digest(&mut c, "res"), before);
    // Priority 7 is granted first; then 3 is the highest left.
    assert_eq!(release(&mut c, "res", "a"), 1);
    let (_, _) = w7.granted();
    let top3 = expect(&[("extended", &[1]), ("waiters", &[2]), ("priority", &[3])]);
    assert_eq!(extend_ints(&mut c, "res", "w7"), top3);
    // Only priority 0 left: the field is gone again.
    assert_eq!(release(&mut c, "res", "w7"), 1);
    let (_, _) = w3.granted();
    assert_eq!(extend_wanted(&mut c, "res", "w3", 60_000), (1, 1));
}

#[test]
fn mextend_wanted_names_each_members_highest_priority_when_any_is_above_0() {
    let s = Server::start();
    let mut c = s.conn();
    let mut c3 = s.conn_resp3();
    slow_aging(&mut c);
    let set = ["{s}a", "{s}b", "{s}c"];
    let f: Option<i64> = redis::cmd("DLOCK.MACQUIRE")
        .arg(set.len())
        .arg(&set)
        .arg("t")
        .arg(60_000)
        .query(&mut c)
        .unwrap();
    assert!(f.is_some());
    let _a0 = queue(&s, "{s}a", "a0", &[]);
    wait_waiters(&mut c, "{s}a", 1);
    assert_eq!(
        mextend_wanted(&mut c, &set, "t", 60_000),
        (1, vec![1, 0, 0])
    );
    let _c5 = queue(&s, "{s}c", "c5", &["PRIORITY", "5"]);
    wait_waiters(&mut c, "{s}c", 1);
    let v = |conn: &mut Connection, keys: &[&str]| -> Vec<(String, Vec<i64>)> {
        let v: Value = redis::cmd("DLOCK.MEXTEND")
            .arg(keys.len())
            .arg(keys)
            .arg("t")
            .arg(60_000)
            .arg("WANTED")
            .query(conn)
            .unwrap();
        ints(v)
    };
    let want = expect(&[
        ("extended", &[1]),
        ("waiters", &[1, 0, 1]),
        ("priority", &[0, 0, 5]),
    ]);
    assert_eq!(v(&mut c, &set), want);
    assert_eq!(v(&mut c3, &set), want, "RESP3");
    let reversed = ["{s}c", "{s}b", "{s}a"];
    let want = expect(&[
        ("extended", &[1]),
        ("waiters", &[1, 0, 1]),
        ("priority", &[5, 0, 0]),
    ]);
    assert_eq!(v(&mut c, &reversed), want, "in the order named");
}
