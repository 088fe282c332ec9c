//! `WANTED` where two events meet in one turn, inside scripts, and over
//! many rounds.
use super::*;

#[test]
fn a_handoff_and_the_new_holders_extend_in_one_transaction() {
    let s = Server::start();
    let mut c = s.conn();
    acquire(&mut c, "res", "a", 60_000).unwrap();
    let w1 = queue(&s, "res", "w1", &[]);
    wait_waiters(&mut c, "res", 1);
    let w2 = queue(&s, "res", "w2", &[]);
    wait_waiters(&mut c, "res", 2);
    // The release hands the lock to w1 in the turn that w1's extend runs:
    // w1 holds it, w2 alone waits.
    let mut release = redis::cmd("DLOCK.RELEASE");
    release.arg("res").arg("a");
    let mut ext = redis::cmd("DLOCK.EXTEND");
    ext.arg("res").arg("w1").arg(60_000).arg("WANTED");
    let mut old = redis::cmd("DLOCK.EXTEND");
    old.arg("res").arg("a").arg(60_000).arg("WANTED");
    let replies = transaction(&mut c, &[release, ext, old]);
    assert_eq!(as_int(&replies[0]), 1, "{replies:?}");
    assert_eq!(wanted_reply(replies[1].clone()).0, 1, "{replies:?}");
    assert_eq!(as_int(&wanted_reply(replies[1].clone()).1), 1);
    assert_eq!(wanted_reply(replies[2].clone()).0, 0, "{replies:?}");
    w1.granted();
    assert!(w2.pending());
    assert_eq!(extend_wanted(&mut c, "res", "w1", 60_000), (1, 1));
}

#[test]
fn wanted_in_a_script_is_the_flat_form() {
    let s = Server::start();
    let mut c = s.conn();
    acquire(&mut c, "res", "a", 60_000).unwrap();
    let _w = queue(&s, "res", "w", &[]);
    wait_waiters(&mut c, "res", 1);
    let v: Value = redis::cmd("EVAL")
        .arg("return redis.call('DLOCK.EXTEND', KEYS[1], ARGV[1], '60000', 'WANTED')")
        .arg(1)
        .arg("res")
        .arg("a")
        .query(&mut c)
        .unwrap();
    let (extended, waiters) = wanted_reply(v);
    assert_eq!((extended, as_int(&waiters)), (1, 1));
}

#[test]
fn memory_stays_flat_over_thousands_of_extends_with_wanted() {
    let _quiet = crate::quiet();
    let s = Server::start();
    let mut c = s.conn();
    let set = ["{m}a", "{m}b", "{m}c"];
    let _: Option<i64> = redis::cmd("DLOCK.MACQUIRE")
        .arg(3)
        .arg(&set)
        .arg("t")
        .arg(60_000)
        .query(&mut c)
        .unwrap();
    acquire(&mut c, "res", "a", 60_000).unwrap();
    let _w = queue(&s, "res", "w", &[]);
    let _wa = queue(&s, "{m}a", "w", &[]);
    wait_waiters(&mut c, "res", 1);
    wait_waiters(&mut c, "{m}a", 1);
    let round = |c: &mut Connection| {
        let mut p = redis::pipe();
        for _ in 0..500 {
            p.cmd("DLOCK.EXTEND")
                .arg("res")
                .arg("a")
                .arg(60_000)
                .arg("WANTED")
                .ignore();
            p.cmd("DLOCK.MEXTEND")
                .arg(3)
                .arg(&set)
                .arg("t")
                .arg(60_000)
                .arg("WANTED")
                .ignore();
        }
        let () = p.query(c).unwrap();
    };
    round(&mut c);
    let before = used_memory_purged(&mut c);
    for _ in 0..10 {
        round(&mut c);
    }
    let after = used_memory_purged(&mut c);
    assert!(
        after - before < 64 * 1024,
        "used_memory grew by {} bytes over 10,000 extends",
        after - before
    );
    assert_eq!(extend_wanted(&mut c, "res", "a", 60_000), (1, 1));
    assert_eq!(
        mextend_wanted(&mut c, &set, "t", 60_000),
        (1, vec![1, 0, 0])
    );
}
