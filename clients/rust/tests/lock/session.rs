//! Sessions (`DLOCK.SESSION`, issue 38) from the blocking `Locker`: renewed
//! guards bound to one session per server and ttl, its keep-alive instead
//! of an `EXTEND` per guard, its end signalled to every guard, its close.
//! Every test but the first needs a server with sessions and says so when
//! it skips (run them with the filter `session`); the first checks the
//! fallback on a server without them.

use crate::common::{has_sessions, holder, ms, session_field, Server, SEC};
use dlock_client::Locker;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// A field of `INFO stats`.
fn stat(c: &mut redis::Connection, field: &str) -> i64 {
    let info: String = redis::cmd("INFO").arg("stats").query(c).unwrap();
    let prefix = format!("{field}:");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0, |v| v.trim().parse().unwrap())
}

/// The error replies a server sent from now on, less those of each new
/// connection's handshake (the `redis` crate's `CLIENT SETINFO`, refused
/// by a Redis older than 7.2).
struct Errors {
    per_connection: i64,
    errors: i64,
    connections: i64,
}

impl Errors {
    fn new(server: &Server, c: &mut redis::Connection) -> Errors {
        let (errors, connections) = Errors::now(c);
        drop(server.conn());
        let (e, n) = Errors::now(c);
        let per_connection = (e - errors) / (n - connections).max(1);
        let (errors, connections) = Errors::now(c);
        Errors {
            per_connection,
            errors,
            connections,
        }
    }

    fn now(c: &mut redis::Connection) -> (i64, i64) {
        (
            stat(c, "total_error_replies"),
            stat(c, "total_connections_received"),
        )
    }

    fn since(&self, c: &mut redis::Connection) -> i64 {
        let (e, n) = Errors::now(c);
        e - self.errors - self.per_connection * (n - self.connections)
    }
}

fn calls(c: &mut redis::Connection, command: &str) -> i64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(c).unwrap();
    let prefix = format!("cmdstat_{command}:");
    info.lines()
        .find(|l| l.starts_with(&prefix))
        .and_then(|l| l.split("calls=").nth(1))
        .and_then(|v| v.split(',').next())
        .map_or(0, |v| v.parse().unwrap())
}

/// Skips (true) on a server without sessions, saying so.
fn skip(c: &mut redis::Connection) -> bool {
    let skip = !has_sessions(c);
    if skip {
        eprintln!("skipped: the server has no sessions (DLOCK.SESSION)");
    }
    skip
}

#[test]
fn without_sessions_on_the_server_each_guard_keeps_a_watchdog_and_the_server_is_asked_once() {
    let server = Server::start();
    let mut c = server.conn();
    if has_sessions(&mut c) {
        eprintln!("skipped: the server has sessions");
        return;
    }
    let errors = Errors::new(&server, &mut c);
    let locker = Locker::new(&server.url()).unwrap();
    let guards: Vec<_> = ["a", "b", "c"]
        .into_iter()
        .map(|r| {
            locker
                .request(r)
                .ttl(ms(600))
                .watchdog()
                .acquire()
                .unwrap()
                .unwrap()
        })
        .collect();
    assert_eq!(
        errors.since(&mut c),
        1,
        "one DLOCK.SESSION OPEN refused, its answer kept for the server"
    );
    assert!(guards.iter().all(|g| g.session().is_none()));
    // Two ttls: the guards' own watchdogs renew them.
    std::thread::sleep(ms(1200));
    for g in &guards {
        assert_eq!(
            holder(&mut c, g.resource()),
            Some((g.token().to_string(), g.fence()))
        );
    }
    assert!(calls(&mut c, "dlock.extend") >= 3);
    for g in guards {
        assert!(g.release().unwrap());
    }
}

#[test]
fn session_renewed_guards_share_one_session_kept_alive_without_extend() {
    let server = Server::start();
    let mut c = server.conn();
    if skip(&mut c) {
        return;
    }
    let locker = Locker::new(&server.url()).unwrap();
    let a = locker
        .request("a")
        .ttl(ms(600))
        .watchdog()
        .acquire()
        .unwrap()
        .unwrap();
    let b = locker
        .request_set(["{s}b", "{s}c"])
        .ttl(ms(600))
        .watchdog()
        .acquire()
        .unwrap()
        .unwrap();
    let id = a.session().expect("bound").to_string();
    assert_eq!(b.session(), Some(id.as_str()), "one session per ttl");
    // A guard that is not renewed keeps its own lease.
    let plain = locker.try_lock("plain", 10 * SEC).unwrap().unwrap();
    assert_eq!(plain.session(), None);
    // A hold per resource: the set's two and `a`.
    assert_eq!(session_field(&mut c, &id, "holds"), Some(3));
    // Five ttls: the session's keep-alives keep both.
    std::thread::sleep(ms(3000));
    assert!(!a.is_lost() && !b.is_lost());
    assert_eq!(
        holder(&mut c, "a"),
        Some((a.token().to_string(), a.fence()))
    );
    assert_eq!(
        calls(&mut c, "dlock.extend"),
        0,
        "no EXTEND of a bound hold"
    );
    assert!(a.remaining() > ms(0) && a.remaining() <= ms(600));
    assert!(a.release().unwrap());
    assert!(b.release().unwrap());
    assert_eq!(session_field(&mut c, &id, "holds"), Some(0));
    assert!(plain.release().unwrap());
}

#[test]
fn session_kill_signals_every_guard_and_releases_their_holds() {
    let server = Server::start();
    let mut c = server.conn();
    if skip(&mut c) {
        return;
    }
    let locker = Locker::new(&server.url()).unwrap();
    let told = Arc::new(AtomicUsize::new(0));
    let ttl = 3 * SEC;
    let guards: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|r| {
            let told = told.clone();
            locker
                .request(r)
                .ttl(ttl)
                .watchdog()
                .on_lost(move || {
                    told.fetch_add(1, Ordering::SeqCst);
                })
                .acquire()
                .unwrap()
                .unwrap()
        })
        .collect();
    let signals: Vec<_> = guards.iter().map(|g| g.lost_signal()).collect();
    let id = guards[0].session().unwrap().to_string();
    let killed: i64 = redis::cmd("DLOCK.SESSION")
        .arg("KILL")
        .arg(&id)
        .query(&mut c)
        .unwrap();
    assert_eq!(killed, 1);
    let at = Instant::now();
    // The next keep-alive (within ttl/3) is answered NOSESSION; slack for
    // a loaded machine.
    for s in &signals {
        s.recv_timeout(ttl / 3 + SEC).expect("the loss signalled");
    }
    assert!(at.elapsed() <= ttl / 3 + SEC);
    assert_eq!(told.load(Ordering::SeqCst), 2, "every on_lost ran");
    crate::common::server::wait_until(5 * SEC, "the holds released", || {
        crate::common::is_free(&mut c, "a") && crate::common::is_free(&mut c, "b")
    });
    for g in guards {
        assert!(g.is_lost());
        assert!(!g.release().unwrap(), "lost: nothing to release");
    }
    // A new session for the next renewed guard.
    let g = locker
        .request("a")
        .ttl(ttl)
        .watchdog()
        .acquire()
        .unwrap()
        .unwrap();
    assert!(g.session().is_some_and(|s| s != id));
}

#[test]
fn session_closed_by_close_and_by_dropping_the_locker_and_its_guards() {
    let server = Server::start();
    let mut c = server.conn();
    if skip(&mut c) {
        return;
    }
    let locker = Locker::new(&server.url()).unwrap();
    let g = locker
        .request("a")
        .ttl(10 * SEC)
        .watchdog()
        .acquire()
        .unwrap()
        .unwrap();
    let id = g.session().unwrap().to_string();
    let lost = g.lost_signal();
    locker.close();
    lost.recv_timeout(SEC).expect("close marks the guard lost");
    assert_eq!(session_field(&mut c, &id, "ttl"), None, "closed");
    crate::common::server::wait_until(5 * SEC, "the hold released", || {
        crate::common::is_free(&mut c, "a")
    });
    drop(g);

    // The locker dropped first: its guard keeps the session until it goes.
    let g = Locker::new(&server.url())
        .unwrap()
        .request("b")
        .ttl(10 * SEC)
        .watchdog()
        .acquire()
        .unwrap()
        .unwrap();
    let id = g.session().unwrap().to_string();
    assert!(session_field(&mut c, &id, "ttl").is_some());
    assert!(!g.is_lost());
    drop(g);
    assert!(crate::common::is_free(&mut c, "b"));
    assert_eq!(
        session_field(&mut c, &id, "ttl"),
        None,
        "closed with its guard"
    );
}

#[test]
fn session_extend_of_a_bound_guard_keeps_the_session_alive() {
    let server = Server::start();
    let mut c = server.conn();
    if skip(&mut c) {
        return;
    }
    let locker = Locker::new(&server.url())
        .unwrap()
        .with_session_ttl(20 * SEC);
    let g = locker
        .request("a")
        .ttl(ms(500))
        .watchdog()
        .acquire()
        .unwrap()
        .unwrap();
    let id = g.session().unwrap().to_string();
    assert_eq!(session_field(&mut c, &id, "session-ttl"), Some(20_000));
    let keepalives = calls(&mut c, "dlock.session|keepalive");
    let before = Instant::now();
    assert!(g.extend(SEC).unwrap(), "a keep-alive, not an EXTEND");
    assert_eq!(calls(&mut c, "dlock.extend"), 0);
    assert!(calls(&mut c, "dlock.session|keepalive") > keepalives);
    // The budget is the session's (20 s from the keep-alive's send).
    assert!(g.valid_until() >= before + 20 * SEC);
    assert!(g.release().unwrap());
}

#[test]
fn session_a_waiting_acquire_is_bound_once_granted() {
    let server = Server::start();
    let mut c = server.conn();
    if skip(&mut c) {
        return;
    }
    let locker = Locker::new(&server.url()).unwrap();
    let first = locker
        .request("a")
        .ttl(2 * SEC)
        .watchdog()
        .acquire()
        .unwrap()
        .unwrap();
    let id = first.session().unwrap().to_string();
    let waiter = {
        let locker = locker.clone();
        std::thread::spawn(move || {
            locker
                .request("a")
                .ttl(2 * SEC)
                .wait(20 * SEC)
                .watchdog()
                .acquire()
        })
    };
    crate::common::server::wait_until(10 * SEC, "the waiter queued", || {
        crate::common::waiters(&mut c, "a") == 1
    });
    assert_eq!(session_field(&mut c, &id, "waits"), Some(1));
    assert!(first.release().unwrap());
    let second = waiter.join().unwrap().unwrap().expect("granted");
    assert_eq!(second.session(), Some(id.as_str()));
    assert_eq!(
        holder(&mut c, "a"),
        Some((second.token().to_string(), second.fence()))
    );
    assert_eq!(session_field(&mut c, &id, "holds"), Some(1));
    assert_eq!(calls(&mut c, "dlock.extend"), 0);
    assert!(second.release().unwrap());
}

#[test]
fn session_bound_to_its_connection_ends_with_it() {
    let server = Server::start();
    let mut c = server.conn();
    if skip(&mut c) {
        return;
    }
    let ttl = 3 * SEC;
    let locker = Locker::new(&server.url())
        .unwrap()
        .with_session_bind(true)
        .with_session_lock_delay(ms(0));
    let g = locker
        .request("a")
        .ttl(ttl)
        .watchdog()
        .acquire()
        .unwrap()
        .unwrap();
    let id = g.session().unwrap().to_string();
    assert_eq!(session_field(&mut c, &id, "bound"), Some(1));
    let lost = g.lost_signal();
    // Every other client's connection, the session's among them.
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .arg("SKIPME")
        .arg("yes")
        .query(&mut c)
        .unwrap();
    crate::common::server::wait_until(5 * SEC, "the session ended", || {
        session_field(&mut c, &id, "ttl").is_none()
    });
    assert!(
        crate::common::is_free(&mut c, "a"),
        "released with the session"
    );
    // The next keep-alive finds the connection closed.
    lost.recv_timeout(ttl / 3 + SEC)
        .expect("the guard told of the loss");
    assert!(!g.release().unwrap());
}

#[test]
fn session_off_keeps_a_watchdog_per_guard() {
    let server = Server::start();
    let mut c = server.conn();
    if skip(&mut c) {
        return;
    }
    let locker = Locker::new(&server.url()).unwrap().with_sessions(false);
    let g = locker
        .request("a")
        .ttl(ms(600))
        .watchdog()
        .acquire()
        .unwrap()
        .unwrap();
    assert_eq!(g.session(), None);
    let on = Locker::new(&server.url()).unwrap();
    let h = on
        .request("b")
        .ttl(ms(600))
        .watchdog()
        .session(false)
        .acquire()
        .unwrap()
        .unwrap();
    assert_eq!(h.session(), None, "off for one request");
    std::thread::sleep(ms(1200));
    assert!(calls(&mut c, "dlock.extend") >= 2);
    assert!(g.release().unwrap() && h.release().unwrap());
}

/// A loss callback runs with no lock of the session held: it may `extend`
/// another guard of the same session (which then learns of the end too).
#[test]
fn session_a_loss_callback_may_extend_another_guard_of_the_session() {
    let server = Server::start();
    let mut c = server.conn();
    if skip(&mut c) {
        return;
    }
    let locker = Locker::new(&server.url()).unwrap();
    let other: Arc<std::sync::Mutex<Option<dlock_client::Guard>>> = Arc::default();
    let (tx, rx) = std::sync::mpsc::channel();
    let in_callback = other.clone();
    let a = locker
        .request("a")
        .ttl(3 * SEC)
        .watchdog()
        .on_lost(move || {
            let b = in_callback.lock().unwrap();
            let extended = b.as_ref().map(|b| b.extend(SEC));
            let _ = tx.send(extended.map(|r| r.ok()));
        })
        .acquire()
        .unwrap()
        .unwrap();
    let b = locker
        .request("b")
        .ttl(3 * SEC)
        .watchdog()
        .acquire()
        .unwrap()
        .unwrap();
    let id = a.session().unwrap().to_string();
    *other.lock().unwrap() = Some(b);
    let _: i64 = redis::cmd("DLOCK.SESSION")
        .arg("KILL")
        .arg(&id)
        .query(&mut c)
        .unwrap();
    let extended = rx
        .recv_timeout(3 * SEC)
        .expect("the callback ran to its end");
    assert_eq!(extended, Some(Some(false)), "b's extend: the session ended");
    assert!(a.is_lost());
    let b = other.lock().unwrap().take().unwrap();
    assert!(b.is_lost());
}
