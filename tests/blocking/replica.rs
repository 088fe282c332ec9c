//! Handoffs reach the replica (same owner and fence), and queues are per
//! database.
use super::*;

// ---------------------------------------------------------------- replication

fn replica_wait(conn: &mut Connection) -> i64 {
    redis::cmd("WAIT")
        .arg(1)
        .arg(2000)
        .query(conn)
        .expect("WAIT 1 2000")
}

/// After the handoff: WAIT 1 on the waiter's own connection reaches the
/// replica, and the replica shows the same owner and fence.
fn check_replica(o: Outcome, replica: &Server, res: &str, tok: &str, what: &str) {
    let f = o.fence();
    let mut wc = o.conn.expect("waiter connection");
    assert_eq!(replica_wait(&mut wc), 1, "{what}: WAIT 1 after the grant");
    let mut rc = replica.conn();
    let i = info(&mut rc, res).unwrap_or_else(|| panic!("{what}: replica has no lock"));
    assert_eq!(
        (i.token.as_slice(), i.fence),
        (tok.as_bytes(), f),
        "{what}: replica"
    );
}

#[test]
fn replica_in_sync_after_handoffs() {
    let m = Server::start();
    let r = Server::builder().replica_of(&m).start();
    r.wait_for_sync(Duration::from_secs(10));
    let mut c = m.conn();

    // By release.
    hold(&mut c, "rel", "holder");
    let w = Waiter::queue(&mut c, &m.url(), "rel", "w-rel", 1);
    assert_eq!(release(&mut c, "rel", "holder"), 1);
    check_replica(w.granted(), &r, "rel", "w-rel", "release");

    // By expiry.
    hold(&mut c, "exp", "holder");
    let w = Waiter::queue(&mut c, &m.url(), "exp", "w-exp", 1);
    assert_eq!(extend(&mut c, "exp", "holder", 200), 1);
    check_replica(w.outcome(SOON), &r, "exp", "w-exp", "expiry");

    // By DEL.
    hold(&mut c, "del", "holder");
    let w = Waiter::queue(&mut c, &m.url(), "del", "w-del", 1);
    let n: i64 = redis::cmd("DEL").arg("del").query(&mut c).unwrap();
    assert_eq!(n, 1);
    check_replica(w.granted(), &r, "del", "w-del", "DEL");

    // And the master agrees.
    let mut rc = r.conn();
    for res in ["rel", "exp", "del"] {
        let (mi, ri) = (info(&mut c, res).unwrap(), info(&mut rc, res).unwrap());
        assert_eq!((mi.token, mi.fence), (ri.token, ri.fence), "{res}");
    }
}

/// Queues are per database: a waiter on `res` in db 2 is not woken by a
/// release of `res` in db 0, and is handed the lock by a release in db 2.
#[test]
fn queues_are_per_database() {
    let s = Server::start();
    let mut c0 = s.conn();
    let mut c2 = s.conn();
    select(&mut c2, 2);
    hold(&mut c0, "res", "holder0");
    let h2 = hold(&mut c2, "res", "holder2");
    let w = Waiter::start(&format!("{}2", s.url()), "res", "w2", 10_000, 10_000);
    wait_waiters(&mut c2, "res", 1);
    assert_eq!(waiters(&mut c0, "res"), 0, "db0 res has no waiters");
    assert_eq!(release(&mut c0, "res", "holder0"), 1);
    assert_eq!(info(&mut c0, "res"), None, "db0: nobody granted");
    thread::sleep(Duration::from_millis(50));
    w.assert_pending();
    assert_eq!(release(&mut c2, "res", "holder2"), 1);
    let f = w.granted().fence();
    assert!(f > h2);
    assert_owner(&mut c2, "res", "w2", f);
}
