use crate::common::{holder, ms, Server, SEC};
use crate::lock::proxy::{Frame, Proxy};
use dlock_client::{Error, Locker};
use std::time::{Duration, Instant};

fn dlock_writes(args: &[Vec<u8>]) -> bool {
    let name = args
        .first()
        .map(|a| a.to_ascii_uppercase())
        .unwrap_or_default();
    matches!(
        name.as_slice(),
        b"DLOCK.ACQUIRE" | b"DLOCK.EXTEND" | b"DLOCK.RELEASE"
    )
}

#[test]
fn lost_replies_are_retried_with_the_same_token_and_leave_no_orphan() {
    let server = Server::start();
    let proxy = Proxy::start(server.port(), 13, 300, dlock_writes);
    let locker = Locker::new(&proxy.url()).unwrap().with_retry_for(10 * SEC);
    let mut c = server.conn();
    for i in 0..60 {
        let g = locker
            .try_lock("res", 30 * SEC)
            .unwrap()
            .expect("free: granted");
        // The lock the server holds is this guard's: a lost reply was
        // retried with the same token, not a new one.
        assert_eq!(
            holder(&mut c, "res"),
            Some((g.token().to_string(), g.fence())),
            "cycle {i}"
        );
        assert!(g.extend(30 * SEC).unwrap(), "cycle {i}");
        assert!(
            g.release().unwrap(),
            "cycle {i}: released, whether or not a reply was lost"
        );
        assert_eq!(holder(&mut c, "res"), None, "cycle {i}");
    }
    let dropped = proxy.dropped();
    let acquires: Vec<_> = dropped
        .iter()
        .filter(|d| d.arg(0).eq_ignore_ascii_case(b"DLOCK.ACQUIRE"))
        .collect();
    assert!(
        acquires.len() >= 5,
        "too few lost ACQUIRE replies to prove anything: {}",
        acquires.len()
    );
    assert!(dropped
        .iter()
        .any(|d| d.arg(0).eq_ignore_ascii_case(b"DLOCK.RELEASE")));
    // Every lost grant was a grant (a fence), later answered again.
    assert!(acquires.iter().all(|d| matches!(d.reply, Frame::Int(_))));
}

#[test]
fn an_unreachable_server_is_an_error_after_the_retry_budget() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let locker = Locker::new(&format!("redis://127.0.0.1:{port}/"))
        .unwrap()
        .with_retry_for(ms(500));
    let t = Instant::now();
    let e = locker.try_lock("res", SEC).unwrap_err();
    assert!(matches!(e, Error::Unavailable(_)), "{e}");
    assert!(t.elapsed() < 5 * SEC, "{:?}", t.elapsed());
}

#[test]
fn min_replicas_confirms_grants_and_refuses_unconfirmed_ones() {
    let master = Server::start();
    let mut replica = Server::builder().replica_of(&master).start();
    replica.wait_for_sync(20 * SEC);
    // An honest margin for the acknowledgement on a loaded machine; the
    // refusals below use a short timeout (no acknowledgement can come).
    let locker = Locker::new(&master.url())
        .unwrap()
        .with_min_replicas(1, 5 * SEC);
    let short = Locker::new(&master.url())
        .unwrap()
        .with_min_replicas(1, ms(300));
    let mut m = master.conn();
    let g = locker
        .try_lock("res", 30 * SEC)
        .unwrap()
        .expect("confirmed by the replica");
    let mut r = replica.conn();
    assert_eq!(
        holder(&mut r, "res"),
        Some((g.token().to_string(), g.fence())),
        "the replica has it"
    );
    assert!(g.extend(30 * SEC).unwrap());

    replica.kill9();
    let e = short.try_lock("other", 30 * SEC).unwrap_err();
    assert!(
        matches!(
            e,
            Error::TooFewReplicas {
                acked: 0,
                wanted: 1
            }
        ),
        "{e}"
    );
    assert_eq!(
        holder(&mut m, "other"),
        None,
        "an unconfirmed grant is released"
    );
    // A renewal without acknowledgement keeps the last acknowledged budget.
    let before = g.valid_until();
    let e = g.extend(60 * SEC).unwrap_err();
    assert!(matches!(e, Error::TooFewReplicas { .. }), "{e}");
    assert_eq!(g.valid_until(), before);
    assert!(!g.is_lost());
}

#[test]
fn a_waiting_acquire_does_not_delay_another_guards_renewal() {
    let server = Server::start();
    let locker = Locker::new(&server.url()).unwrap();
    let other = Locker::new(&server.url()).unwrap();
    let _busy = other.try_lock("b", 30 * SEC).unwrap().unwrap();
    let a = locker.try_lock("a", 30 * SEC).unwrap().unwrap();
    let l2 = locker.clone();
    let waiter =
        std::thread::spawn(move || l2.request("b").ttl(SEC).wait(4 * SEC).acquire().unwrap());
    let mut c = server.conn();
    crate::common::server::wait_until(10 * SEC, "the waiter queued", || {
        crate::common::waiters(&mut c, "b") == 1
    });
    let t = Instant::now();
    assert!(a.extend(30 * SEC).unwrap());
    assert!(a.release().unwrap());
    assert!(
        t.elapsed() < SEC,
        "queued behind the waiting acquire: {:?}",
        t.elapsed()
    );
    assert!(!waiter.is_finished(), "the waiter is still waiting");
    assert!(waiter.join().unwrap().is_none(), "its wait ran out");
}

#[test]
fn a_paused_server_costs_at_most_the_io_timeout() {
    let server = Server::start();
    let locker = Locker::new(&server.url())
        .unwrap()
        .with_io_timeout(ms(300))
        .with_retry_for(ms(300));
    server.stop();
    let t = Instant::now();
    let r = locker.try_lock("res", 10 * SEC);
    let took = t.elapsed();
    server.cont();
    assert!(matches!(r, Err(Error::Unavailable(_))), "{r:?}");
    // The handshake of a new connection is bounded too (2 s connect timeout).
    assert!(took < 4 * SEC, "{took:?}");
}

#[test]
fn min_replicas_with_a_zero_timeout_never_sends_wait_0() {
    // Redis's `WAIT n 0` blocks forever: a zero (or sub-millisecond)
    // durability timeout must not become one. Without replicas the grant
    // is refused at once as TooFewReplicas, not after the io timeout and
    // the retries as Unavailable.
    let server = Server::start();
    let locker = Locker::new(&server.url())
        .unwrap()
        .with_min_replicas(1, Duration::ZERO);
    let mut c = server.conn();
    let t = Instant::now();
    let e = locker.try_lock("res", 30 * SEC).unwrap_err();
    let took = t.elapsed();
    assert!(
        matches!(
            e,
            Error::TooFewReplicas {
                acked: 0,
                wanted: 1
            }
        ),
        "{e}"
    );
    assert!(took < SEC, "{took:?}");
    assert_eq!(holder(&mut c, "res"), None, "the grant was released");
}

/// A lease held by token alone (another process's, a script's): extended
/// and released by token, with true/false as `Guard` answers them.
#[test]
fn extend_token_and_release_token() {
    let server = Server::start();
    let locker = Locker::new(&server.url()).unwrap();
    let mut c = server.conn();
    let g = locker.try_lock("job", 10 * SEC).unwrap().unwrap();
    let token = g.token().to_string();
    std::mem::forget(g);
    assert!(locker.extend_token("job", &token, 60 * SEC).unwrap());
    assert!(crate::common::pttl(&mut c, "job") > 30_000);
    assert!(!locker
        .extend_token("job", "someone-else", 60 * SEC)
        .unwrap());
    assert!(!locker.release_token("job", "someone-else").unwrap());
    assert!(locker.release_token("job", &token).unwrap());
    assert_eq!(holder(&mut c, "job"), None);
    assert!(!locker.release_token("job", &token).unwrap());
    assert!(!locker.extend_token("job", &token, SEC).unwrap());
    for e in [
        locker.extend_token("job", "", SEC).unwrap_err(),
        locker
            .extend_token("job", &token, Duration::ZERO)
            .unwrap_err(),
        locker.release_token("", &token).unwrap_err(),
    ] {
        assert!(matches!(e, Error::Invalid(_)), "{e}");
    }
}

#[test]
fn extend_token_and_release_token_give_up_on_a_paused_server() {
    let server = Server::start();
    let locker = Locker::new(&server.url())
        .unwrap()
        .with_io_timeout(ms(300))
        .with_retry_for(ms(300));
    let g = locker.try_lock("job", 60 * SEC).unwrap().unwrap();
    let token = g.token().to_string();
    std::mem::forget(g);
    server.stop();
    let t = Instant::now();
    let extended = locker.extend_token("job", &token, 60 * SEC);
    let took_extend = t.elapsed();
    let t = Instant::now();
    let released = locker.release_token("job", &token);
    let took_release = t.elapsed();
    server.cont();
    assert!(
        matches!(extended, Err(Error::Unavailable(_))),
        "{extended:?}"
    );
    assert!(
        matches!(released, Err(Error::Unavailable(_))),
        "{released:?}"
    );
    // The io timeout and the retries, with room for a loaded machine.
    assert!(took_extend < 2 * SEC, "{took_extend:?}");
    assert!(took_release < 2 * SEC, "{took_release:?}");
}

/// The server's LIMIT maximum (2^20) is checked before any server is asked.
#[test]
fn a_limit_above_the_servers_maximum_asks_no_server() {
    let locker = Locker::new("redis://127.0.0.1:1/").unwrap();
    let e = locker
        .request("sem")
        .limit(1 << 20 | 1)
        .acquire()
        .unwrap_err();
    assert!(matches!(e, Error::Invalid(_)), "{e}");
    assert_eq!(dlock_client::MAX_LIMIT, 1 << 20);
}

/// A server without the module, a wrong password and an ACL denial are
/// told apart from other server errors, with the server's address.
#[test]
fn missing_module_and_refused_logins_name_the_server() {
    let plain = Server::builder().without_module().start();
    let addr = format!("127.0.0.1:{}", plain.port());
    let locker = Locker::new(&plain.url()).unwrap();
    let e = locker
        .request("r")
        .token("sekret-token")
        .acquire()
        .unwrap_err();
    assert!(matches!(&e, Error::ModuleMissing(a) if *a == addr), "{e:?}");
    assert!(!e.to_string().contains("sekret-token"), "{e}");
    let e = locker.info("r").unwrap_err();
    assert!(matches!(&e, Error::ModuleMissing(a) if *a == addr), "{e:?}");

    let server = Server::start();
    let addr = format!("127.0.0.1:{}", server.port());
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "reader", "on", ">pw", "~*", "&*", "+@all"][..])
        .arg("-dlock.acquire")
        .query(&mut server.conn())
        .unwrap();
    let wrong = Locker::new(&format!("redis://reader:nope@{addr}/")).unwrap();
    let e = wrong.try_lock("r", SEC).unwrap_err();
    assert!(
        matches!(&e, Error::Denied { addr: a, .. } if *a == addr),
        "{e:?}"
    );
    let reader = Locker::new(&format!("redis://reader:pw@{addr}/")).unwrap();
    assert!(reader.info("r").is_ok());
    let e = reader.try_lock("r", SEC).unwrap_err();
    assert!(
        matches!(&e, Error::Denied { addr: a, .. } if *a == addr),
        "{e:?}"
    );
}
