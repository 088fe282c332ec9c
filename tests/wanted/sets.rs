//! `DLOCK.MEXTEND ... WANTED`: one count per member, in the order named.
use super::*;

fn macquire(c: &mut Connection, keys: &[&str], tok: &str) -> Option<i64> {
    redis::cmd("DLOCK.MACQUIRE")
        .arg(keys.len())
        .arg(keys)
        .arg(tok)
        .arg(60_000)
        .query(c)
        .unwrap()
}

#[test]
fn mextend_wanted_counts_each_members_queue_in_the_order_named() {
    let s = Server::start();
    let mut c = s.conn();
    let set = ["{s}a", "{s}b", "{s}c"];
    assert!(macquire(&mut c, &set, "t").is_some());
    assert_eq!(
        mextend_wanted(&mut c, &set, "t", 60_000),
        (1, vec![0, 0, 0])
    );
    let _a1 = queue(&s, "{s}a", "a1", &[]);
    let _a2 = queue(&s, "{s}a", "a2", &[]);
    // A set request waits on each of its members: counted on both.
    let mut cmd = redis::cmd("DLOCK.MACQUIRE");
    cmd.arg(2)
        .arg("{s}a")
        .arg("{s}c")
        .arg("ac")
        .arg(60_000)
        .arg("WAIT")
        .arg(30_000);
    let _ac = Waiter::send(&s, cmd);
    wait_waiters(&mut c, "{s}a", 3);
    wait_waiters(&mut c, "{s}c", 1);
    let mut c3 = s.conn_resp3();
    for conn in [&mut c, &mut c3] {
        assert_eq!(mextend_wanted(conn, &set, "t", 60_000), (1, vec![3, 0, 1]));
        let reversed = ["{s}c", "{s}b", "{s}a"];
        assert_eq!(
            mextend_wanted(conn, &reversed, "t", 60_000),
            (1, vec![1, 0, 3])
        );
    }
    let t = pttl(&mut c, "{s}b");
    assert!(t > 50_000, "extended: PTTL {t}");
    // Without WANTED: the integer.
    let n: i64 = redis::cmd("DLOCK.MEXTEND")
        .arg(3)
        .arg(&set)
        .arg("t")
        .arg(60_000)
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 1);
    // A lost member: 0, the counts, and nothing changed on any member.
    let _: i64 = redis::cmd("DEL").arg("{s}b").query(&mut c).unwrap();
    let before: Vec<String> = ["{s}a", "{s}c"]
        .iter()
        .map(|k| common::dump::digest(&mut c, k))
        .collect();
    assert_eq!(mextend_wanted(&mut c, &set, "t", 1), (0, vec![3, 0, 1]));
    let after: Vec<String> = ["{s}a", "{s}c"]
        .iter()
        .map(|k| common::dump::digest(&mut c, k))
        .collect();
    assert_eq!(after, before);
}

#[test]
fn a_bad_mextend_wanted_is_an_error_and_changes_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    let set = ["{s}a", "{s}b"];
    assert!(macquire(&mut c, &set, "t").is_some());
    let _w = queue(&s, "{s}a", "w", &[]);
    wait_waiters(&mut c, "{s}a", 1);
    let digests = |c: &mut Connection| -> Vec<String> {
        set.iter().map(|k| common::dump::digest(c, k)).collect()
    };
    let before = (digests(&mut c), counters(&mut c));
    let cases: &[&[&str]] = &[
        &["WANTED", "WANTED"],
        &["WANTED", "x"],
        &["x"],
        &["x", "WANTED"],
    ];
    for tail in cases {
        let r: redis::RedisResult<Value> = redis::cmd("DLOCK.MEXTEND")
            .arg(2)
            .arg(&set)
            .arg("t")
            .arg(60_000)
            .arg(*tail)
            .query(&mut c);
        assert_eq!(err_of(r), "ERR syntax error", "{tail:?}");
    }
    let r: redis::RedisResult<Value> = redis::cmd("DLOCK.MEXTEND")
        .arg(2)
        .arg(&set)
        .arg("t")
        .arg(0)
        .arg("WANTED")
        .query(&mut c);
    assert_eq!(
        err_of(r),
        "ERR ttl_ms must be an integer from 1 to 140737488355328"
    );
    assert_eq!((digests(&mut c), counters(&mut c)), before);
    assert_eq!(waiters(&mut c, "{s}a"), 1);
}
