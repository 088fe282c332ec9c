//! When a lease is lost, the guard says so: a release never reports a lost
//! lease as released, a changed deadline reschedules renewal and the loss
//! signal, and the loss signal fires when the budget runs out without a
//! watchdog too.

use crate::common::{holder, ms, Server, SEC};
use dlock_client::Locker;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// The server closes the guard's idle pooled connection (`timeout 1`), an
/// admin deletes the lock and another client takes it: the first `RELEASE`
/// goes out on a connection the server had already closed, so it cannot
/// have released anything, and the retry's 0 means the lease was lost.
#[test]
fn a_release_over_a_connection_closed_while_idle_reports_the_loss() {
    let server = Server::start();
    let mut c = server.conn();
    let locker = Locker::new(&server.url()).unwrap().with_sessions(false);
    let g = locker.try_lock("res", 30 * SEC).unwrap().unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("timeout")
        .arg("1")
        .query(&mut c)
        .unwrap();
    // Our own connection must stay: keep it busy while the guard's idles.
    let start = Instant::now();
    while start.elapsed() < ms(2500) {
        let _: () = redis::cmd("PING").query(&mut c).unwrap();
        std::thread::sleep(ms(200));
    }
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("timeout")
        .arg("0")
        .query(&mut c)
        .unwrap();
    let _: i64 = redis::cmd("DEL").arg("res").query(&mut c).unwrap();
    let other = Locker::new(&server.url()).unwrap();
    let taken = other.try_lock("res", 30 * SEC).unwrap().unwrap();
    assert!(
        !g.release().unwrap(),
        "the lease was lost, not released by this guard"
    );
    assert_eq!(
        holder(&mut c, "res"),
        Some((taken.token().to_string(), taken.fence()))
    );
}

/// The server restarts without persistence while the lock is held: the
/// lock is gone, and release says so.
#[test]
fn a_release_after_a_server_restart_reports_the_loss() {
    let mut server = Server::start();
    let locker = Locker::new(&server.url()).unwrap().with_sessions(false);
    let g = locker.try_lock("res", 30 * SEC).unwrap().unwrap();
    let mut c = server.crash_and_restart();
    assert_eq!(holder(&mut c, "res"), None, "no persistence: gone");
    assert!(!g.release().unwrap());
}

/// A 30 s lease with a watchdog, running on its schedule (200 ms in); the
/// lockers here keep sessions off: a bound guard has no lease of its own to
/// shorten, and learns of a DEL only when released.
fn watched(locker: &Locker) -> dlock_client::Guard {
    let g = locker
        .request("res")
        .ttl(30 * SEC)
        .watchdog()
        .acquire()
        .unwrap()
        .unwrap();
    std::thread::sleep(ms(200));
    g
}

/// A guard with a watchdog whose lease is shortened by `extend` is renewed
/// on the new schedule (ttl/3 of the new ttl), not the old one.
#[test]
fn a_shortened_lease_is_renewed_on_its_new_schedule() {
    let server = Server::start();
    let mut c = server.conn();
    let locker = Locker::new(&server.url()).unwrap().with_sessions(false);
    // The watchdog is running on the 30 s schedule when the lease shrinks.
    let g = watched(&locker);
    assert!(g.extend(ms(900)).unwrap());
    // Three new ttls: on the old schedule (first renewal at 10 s) the lock
    // would have expired after the first.
    std::thread::sleep(ms(2700));
    assert_eq!(
        holder(&mut c, "res"),
        Some((g.token().to_string(), g.fence())),
        "renewed every 300 ms"
    );
    assert!(!g.is_lost());
    assert!(g.remaining() <= ms(900));
    assert!(g.release().unwrap());
}

/// After a shortened lease is taken away, the loss is signalled within a
/// third of the new ttl (plus slack), not at the old schedule's renewal.
#[test]
fn the_loss_of_a_shortened_lease_is_signalled_on_its_new_schedule() {
    let server = Server::start();
    let mut c = server.conn();
    let locker = Locker::new(&server.url()).unwrap().with_sessions(false);
    // The watchdog is running on the 30 s schedule when the lease shrinks.
    let g = watched(&locker);
    let lost = g.lost_signal();
    assert!(g.extend(ms(1500)).unwrap());
    let _: i64 = redis::cmd("DEL").arg("res").query(&mut c).unwrap();
    let deleted = Instant::now();
    lost.recv_timeout(4 * SEC)
        .expect("loss signalled within the new ttl");
    assert!(
        deleted.elapsed() < ms(1500) + ms(700),
        "{:?}",
        deleted.elapsed()
    );
    assert!(g.is_lost());
}

/// `wait_lost` on another thread wakes at the new, earlier deadline after
/// the lease was shortened meanwhile.
#[test]
fn wait_lost_follows_a_shortened_deadline() {
    let server = Server::start();
    let locker = Locker::new(&server.url()).unwrap().with_sessions(false);
    let g = Arc::new(locker.try_lock("res", 30 * SEC).unwrap().unwrap());
    let g2 = g.clone();
    let start = Instant::now();
    let waiter = std::thread::spawn(move || g2.wait_lost(20 * SEC));
    std::thread::sleep(ms(200));
    assert!(g.extend(ms(500)).unwrap());
    assert!(waiter.join().unwrap(), "lost: the budget ran out");
    assert!(start.elapsed() < 3 * SEC, "{:?}", start.elapsed());
}

/// Without a watchdog, the budget running out is a loss like any other:
/// `on_lost` runs and `lost_signal` fires, also when asked for afterwards.
#[test]
fn without_a_watchdog_the_loss_signal_fires_when_the_lease_runs_out() {
    let server = Server::start();
    let locker = Locker::new(&server.url()).unwrap().with_sessions(false);
    let called = Arc::new(AtomicBool::new(false));
    let flag = called.clone();
    let g = locker
        .request("res")
        .ttl(ms(600))
        .on_lost(move || flag.store(true, Ordering::SeqCst))
        .acquire()
        .unwrap()
        .unwrap();
    let early = g.lost_signal();
    let start = Instant::now();
    early
        .recv_timeout(5 * SEC)
        .expect("loss signalled when the budget ran out");
    assert!(start.elapsed() < ms(600) + ms(700), "{:?}", start.elapsed());
    // The signal is sent before the callback runs (on the watchdog's
    // thread): give it a moment.
    let by = Instant::now() + SEC;
    while !called.load(Ordering::SeqCst) && Instant::now() < by {
        std::thread::sleep(ms(5));
    }
    assert!(called.load(Ordering::SeqCst), "on_lost ran");
    assert!(g.is_lost());
    // Someone else holds it now (once the server's deadline, a little
    // after the budget, has passed); a signal asked for after the loss
    // fires at once.
    let other = locker
        .request("res")
        .ttl(10 * SEC)
        .wait(5 * SEC)
        .acquire()
        .unwrap()
        .unwrap();
    g.lost_signal()
        .recv_timeout(ms(100))
        .expect("fires at once after the loss");
    assert!(!g.release().unwrap());
    drop(other);
}

/// A loss signal asked for only after the budget passed (nobody noticed
/// the loss before) fires at once.
#[test]
fn a_loss_signal_asked_for_after_the_budget_passed_fires_at_once() {
    let server = Server::start();
    let locker = Locker::new(&server.url()).unwrap().with_sessions(false);
    let g = locker.try_lock("res", ms(200)).unwrap().unwrap();
    std::thread::sleep(ms(400));
    g.lost_signal()
        .recv_timeout(ms(100))
        .expect("fires at once");
}

/// Forwards to `upstream` at once, but holds every reply back by the
/// current `delay` (ms): the server runs a command when it arrives, and
/// the client hears of it late.
pub fn reply_delaying_proxy(upstream: u16, delay: Arc<std::sync::atomic::AtomicU64>) -> u16 {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(mut client) = client else { return };
            let Ok(mut server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                return;
            };
            let (mut c2, mut s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut c2, &mut s2);
            });
            let delay = delay.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 16384];
                while let Ok(n) = server.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    std::thread::sleep(ms(delay.load(Ordering::SeqCst)));
                    if client.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    port
}

/// A manual `extend` whose reply comes back only after the budget passed
/// never revives the guard: like the watchdog's renewal (and the async
/// guard's extend), it reports the loss, and `is_lost` never goes from
/// true back to false.
#[test]
fn an_extend_answered_after_the_budget_passed_never_revives_the_guard() {
    let server = Server::start();
    let delay = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let port = reply_delaying_proxy(server.port(), delay.clone());
    let locker = Locker::new(&format!("redis://127.0.0.1:{port}")).unwrap();
    let g = locker.try_lock("res", ms(400)).unwrap().unwrap();
    let lost = g.lost_signal();
    std::thread::sleep(ms(150));
    delay.store(600, Ordering::SeqCst);
    let extended = std::thread::scope(|s| {
        let seen_lost = s.spawn(|| {
            std::thread::sleep(ms(400));
            g.is_lost()
        });
        let extended = g.extend(10 * SEC).unwrap();
        assert!(
            seen_lost.join().unwrap(),
            "lost while the reply was held back"
        );
        extended
    });
    assert!(lost.try_recv().is_ok(), "the loss was signalled");
    assert!(g.is_lost(), "a guard reported lost stays lost");
    assert!(!extended, "extend reports the passed budget");
}

/// An error reply (here `READONLY`, from a server demoted to a replica)
/// means the `RELEASE` was not run: when the retry, on the server promoted
/// back with a dataset without the lease, answers 0, the lease was lost,
/// never released by this guard.
#[test]
fn a_release_refused_with_an_error_reply_then_answered_0_reports_the_loss() {
    let server = Server::start();
    let other = Server::start();
    let locker = Locker::new(&server.url()).unwrap().with_retry_for(5 * SEC);
    let g = locker.try_lock("res", 30 * SEC).unwrap().unwrap();
    let promote = crate::common::demote_then_promote(&server, &other, ms(500));
    assert_eq!(
        holder(&mut server.conn(), "res"),
        None,
        "replaced by the master's data"
    );
    let released = g.release().unwrap();
    promote.join().unwrap();
    assert!(!released, "the lease was lost, not released by this guard");
}
