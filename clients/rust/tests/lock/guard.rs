use crate::common::{holder, ms, pttl, Server, SEC};
use dlock_client::Locker;
use std::time::{Duration, Instant};

#[test]
fn try_lock_grants_refuses_and_releases() {
    let server = Server::start();
    let locker = Locker::new(&server.url()).unwrap();
    let mut c = server.conn();
    let g = locker
        .try_lock("res", 10 * SEC)
        .unwrap()
        .expect("free: granted");
    assert_eq!(g.token().len(), 32);
    assert_eq!(
        holder(&mut c, "res"),
        Some((g.token().to_string(), g.fence()))
    );
    assert!(locker.try_lock("res", 10 * SEC).unwrap().is_none(), "busy");
    assert!(g.release().unwrap());
    assert_eq!(holder(&mut c, "res"), None);
    let g2 = locker.try_lock("res", 10 * SEC).unwrap().unwrap();
    assert!(g2.fence() > 0);
}

#[test]
fn dropping_a_guard_releases_it() {
    let server = Server::start();
    let locker = Locker::new(&server.url()).unwrap();
    let mut c = server.conn();
    {
        let _g = locker.try_lock("res", 10 * SEC).unwrap().unwrap();
        assert!(holder(&mut c, "res").is_some());
    }
    assert_eq!(holder(&mut c, "res"), None);
}

#[test]
fn extend_moves_the_deadline_and_a_deleted_lock_is_lost() {
    let server = Server::start();
    let locker = Locker::new(&server.url()).unwrap();
    let mut c = server.conn();
    let g = locker.try_lock("res", 2 * SEC).unwrap().unwrap();
    assert!(pttl(&mut c, "res") <= 2000);
    let before = Instant::now();
    assert!(g.extend(60 * SEC).unwrap());
    assert!(pttl(&mut c, "res") > 50_000);
    // The budget counts from the extend's send time: never later than the
    // server's deadline.
    assert!(g.valid_until() <= Instant::now() + 60 * SEC);
    assert!(g.valid_until() >= before + 60 * SEC);
    let _: i64 = redis::cmd("DEL").arg("res").query(&mut c).unwrap();
    assert!(!g.extend(SEC).unwrap(), "EXTEND answered 0");
    assert!(g.is_lost());
    assert!(!g.release().unwrap(), "nothing left to release");
}

#[test]
fn the_lease_budget_never_outlasts_the_server() {
    let server = Server::start();
    let locker = Locker::new(&server.url()).unwrap();
    let mut c = server.conn();
    let g = locker.try_lock("res", 5 * SEC).unwrap().unwrap();
    let server_deadline = Instant::now() + ms(pttl(&mut c, "res") as u64);
    assert!(
        g.valid_until() <= server_deadline + ms(2),
        "budget beyond the server's deadline"
    );
    assert!(g.remaining() > 4 * SEC);
}

#[test]
fn lock_waits_in_the_servers_queue_and_refreshes_its_budget() {
    let server = Server::start();
    let locker = Locker::new(&server.url()).unwrap();
    let first = locker.try_lock("res", 30 * SEC).unwrap().unwrap();
    let l2 = locker.clone();
    let waiter = std::thread::spawn(move || {
        let g = l2
            .request("res")
            .ttl(5 * SEC)
            .wait(10 * SEC)
            .acquire()
            .unwrap()
            .expect("granted by handoff");
        (g.fence(), g.valid_until(), Instant::now(), g)
    });
    let mut c = server.conn();
    crate::common::server::wait_until(10 * SEC, "the waiter queued", || {
        crate::common::waiters(&mut c, "res") == 1
    });
    let fence1 = first.fence();
    std::thread::sleep(ms(300));
    assert!(first.release().unwrap());
    let (fence2, until, got_at, g) = waiter.join().unwrap();
    assert!(fence2 > fence1);
    // Counted from the refresh, sent after the grant: close to a full ttl.
    assert!(until > got_at + 4 * SEC, "budget too short");
    assert!(until <= Instant::now() + 5 * SEC);
    drop(g);
}

#[test]
fn lock_gives_up_when_the_wait_runs_out() {
    let server = Server::start();
    let locker = Locker::new(&server.url()).unwrap();
    let _held = locker.try_lock("res", 30 * SEC).unwrap().unwrap();
    let t = Instant::now();
    assert!(locker
        .request("res")
        .ttl(SEC)
        .wait(ms(300))
        .acquire()
        .unwrap()
        .is_none());
    let took = t.elapsed();
    assert!(took >= ms(290) && took < 5 * SEC, "{took:?}");
}

#[test]
fn sets_and_holds_use_their_commands() {
    let server = Server::start();
    let locker = Locker::new(&server.url()).unwrap();
    let mut c = server.conn();
    let set = locker
        .request_set(["a", "b", "c"])
        .ttl(10 * SEC)
        .acquire()
        .unwrap()
        .unwrap();
    assert_eq!(set.resources(), ["a", "b", "c"]);
    for r in ["a", "b", "c"] {
        assert_eq!(
            holder(&mut c, r),
            Some((set.token().to_string(), set.fence()))
        );
    }
    assert!(locker.try_lock("b", SEC).unwrap().is_none());
    assert!(set.extend(20 * SEC).unwrap());
    assert!(pttl(&mut c, "c") > 15_000);
    assert!(set.release().unwrap());
    assert_eq!(holder(&mut c, "a"), None);

    let r1 = locker.request("rw").shared().acquire().unwrap().unwrap();
    let r2 = locker.request("rw").shared().acquire().unwrap().unwrap();
    assert!(
        locker.try_lock("rw", SEC).unwrap().is_none(),
        "readers hold it"
    );
    let p1 = locker.request("sem").limit(2).acquire().unwrap().unwrap();
    let _p2 = locker.request("sem").limit(2).acquire().unwrap().unwrap();
    assert!(locker.request("sem").limit(2).acquire().unwrap().is_none());
    assert!(p1.extend(5 * SEC).unwrap());
    drop((r1, r2, p1));
    assert!(locker.request("sem").limit(2).acquire().unwrap().is_some());
}

#[test]
fn invalid_requests_ask_no_server() {
    // Nothing listens there: an invalid request must fail before connecting.
    let locker = Locker::new("redis://127.0.0.1:1/").unwrap();
    let e = locker.request_set(["a", "a"]).acquire().unwrap_err();
    assert!(matches!(e, dlock_client::Error::Invalid(_)), "{e}");
    let e = locker.try_lock("a", Duration::ZERO).unwrap_err();
    assert!(matches!(e, dlock_client::Error::Invalid(_)), "{e}");
}

#[test]
fn a_zero_wait_is_a_plain_try_never_a_wait_forever() {
    let server = Server::start();
    let locker = Locker::new(&server.url()).unwrap();
    let _held = locker.try_lock("res", 30 * SEC).unwrap().unwrap();
    let t = Instant::now();
    // The server's WAIT 0 waits forever; the client must not send it.
    assert!(locker
        .request("res")
        .ttl(SEC)
        .wait(Duration::ZERO)
        .acquire()
        .unwrap()
        .is_none());
    assert!(locker
        .request("res")
        .ttl(SEC)
        .wait(Duration::from_micros(300))
        .acquire()
        .unwrap()
        .is_none());
    assert!(t.elapsed() < 2 * SEC, "{:?}", t.elapsed());
}
