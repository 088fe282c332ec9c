//! Admin frees wake the head waiter (DEL, UNLINK, FLUSHDB, FLUSHALL [ASYNC]),
//! and SWAPDB with a lock, nothing or a string in the other database.
use super::*;

/// Holder + waiters A and B; `free` removes the key; A must be granted
/// within milliseconds and B must keep waiting.
fn check_admin_free_wakes_head(what: &str, free: impl FnOnce(&mut Connection)) {
    let s = Server::start();
    let mut c = s.conn();
    let hf = hold(&mut c, "res", "holder");
    let a = Waiter::queue(&mut c, &s.url(), "res", "A", 1);
    let b = Waiter::queue(&mut c, &s.url(), "res", "B", 2);
    let t0 = Instant::now();
    free(&mut c);
    let oa = a.granted();
    let took = oa.at - t0;
    eprintln!("{what}: head waiter granted after {took:?}");
    assert!(took < Duration::from_secs(1), "{what}: grant took {took:?}");
    let fa = oa.fence();
    assert!(fa > hf, "{what}: fence {fa} must exceed {hf}");
    let i = assert_owner(&mut c, "res", "A", fa);
    assert_eq!(i.waiters, 1, "{what}: B must still be queued");
    b.assert_pending();
    assert_eq!(release(&mut c, "res", "A"), 1);
    let fb = b.granted().fence();
    assert!(fb > fa);
    assert_owner(&mut c, "res", "B", fb);
    assert_eq!(blocked_clients(&mut c), 0);
}

#[test]
fn del_wakes_head_waiter() {
    check_admin_free_wakes_head("DEL", |c| {
        let n: i64 = redis::cmd("DEL").arg("res").query(c).unwrap();
        assert_eq!(n, 1);
    });
}

#[test]
fn unlink_wakes_head_waiter() {
    check_admin_free_wakes_head("UNLINK", |c| {
        let n: i64 = redis::cmd("UNLINK").arg("res").query(c).unwrap();
        assert_eq!(n, 1);
    });
}

#[test]
fn flushdb_wakes_head_waiter() {
    check_admin_free_wakes_head("FLUSHDB", |c| {
        let _: () = redis::cmd("FLUSHDB").query(c).unwrap();
    });
}

#[test]
fn flushall_wakes_head_waiter() {
    check_admin_free_wakes_head("FLUSHALL", |c| {
        let _: () = redis::cmd("FLUSHALL").query(c).unwrap();
    });
}

#[test]
fn flushall_async_wakes_head_waiter() {
    check_admin_free_wakes_head("FLUSHALL ASYNC", |c| {
        let _: () = redis::cmd("FLUSHALL").arg("ASYNC").query(c).unwrap();
    });
}

#[test]
fn swapdb_with_lock_in_other_db_keeps_waiting() {
    let s = Server::start();
    let mut c = s.conn();
    let mut c1 = s.conn();
    select(&mut c1, 1);
    hold(&mut c, "res", "holder0");
    let f1 = hold(&mut c1, "res", "holder1");
    let a = Waiter::queue(&mut c, &s.url(), "res", "A", 1);
    swapdb(&mut c);
    // db0 now holds db1's lock; A keeps waiting on it.
    let i = assert_owner(&mut c, "res", "holder1", f1);
    assert_eq!(i.waiters, 1, "A must still be queued on db0 res");
    assert_eq!(blocked_clients(&mut c), 1);
    // Not granted a moment later either (a re-evaluation must not grant).
    thread::sleep(Duration::from_millis(100));
    a.assert_pending();
    assert_eq!(release(&mut c, "res", "holder1"), 1);
    let fa = a.granted().fence();
    assert!(fa > f1);
    assert_owner(&mut c, "res", "A", fa);
    // db1 now has the old db0 lock, untouched.
    assert_eq!(info(&mut c1, "res").unwrap().token, b"holder0");
}

#[test]
fn swapdb_with_empty_other_db_grants_waiter() {
    let s = Server::start();
    let mut c = s.conn();
    let hf = hold(&mut c, "res", "holder0");
    let a = Waiter::queue(&mut c, &s.url(), "res", "A", 1);
    let b = Waiter::queue(&mut c, &s.url(), "res", "B", 2);
    swapdb(&mut c);
    let fa = a.granted().fence();
    assert!(fa > hf);
    let i = assert_owner(&mut c, "res", "A", fa);
    assert_eq!(i.waiters, 1);
    b.assert_pending();
    let mut c1 = s.conn();
    select(&mut c1, 1);
    assert_owner(&mut c1, "res", "holder0", hf);
    assert_eq!(release(&mut c, "res", "A"), 1);
    let fb = b.granted().fence();
    assert_owner(&mut c, "res", "B", fb);
}

#[test]
fn swapdb_with_string_in_other_db_gives_wrongtype() {
    let s = Server::start();
    let mut c = s.conn();
    let mut c1 = s.conn();
    select(&mut c1, 1);
    let _: () = redis::cmd("SET")
        .arg("res")
        .arg("x")
        .query(&mut c1)
        .unwrap();
    hold(&mut c, "res", "holder0");
    let a = Waiter::queue(&mut c, &s.url(), "res", "A", 1);
    swapdb(&mut c);
    assert_eq!(a.outcome(SOON).error(), WRONGTYPE_ERR);
    wait_blocked_clients(&mut c, 0);
}
