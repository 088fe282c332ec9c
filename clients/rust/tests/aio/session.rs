//! Sessions from the async `Locker`: renewed guards bound to one session,
//! its end signalled to each, its close. A server without sessions: the
//! guards keep a watchdog each (the first test); the others need sessions
//! and say so when they skip (run them with the filter `session`).

use crate::common::{has_sessions, holder, ms, session_field, Server, SEC};
use dlock_client::aio::Locker;
use std::time::Instant;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn without_sessions_on_the_server_each_async_guard_keeps_a_watchdog() {
    let server = Server::start();
    let mut c = server.conn();
    if has_sessions(&mut c) {
        eprintln!("skipped: the server has sessions");
        return;
    }
    runtime().block_on(async {
        let locker = Locker::new(&server.url()).unwrap();
        let g = locker
            .request("a")
            .ttl(ms(600))
            .watchdog()
            .acquire()
            .await
            .unwrap()
            .unwrap();
        assert_eq!(g.session(), None);
        tokio::time::sleep(ms(1200)).await;
        assert_eq!(
            holder(&mut c, "a"),
            Some((g.token().to_string(), g.fence())),
            "renewed by its watchdog"
        );
        assert!(g.release().await.unwrap());
    });
}

#[test]
fn session_async_guards_share_a_session_and_a_kill_signals_each() {
    let server = Server::start();
    let mut c = server.conn();
    if !has_sessions(&mut c) {
        eprintln!("skipped: the server has no sessions (DLOCK.SESSION)");
        return;
    }
    runtime().block_on(async {
        let locker = Locker::new(&server.url()).unwrap();
        let ttl = 3 * SEC;
        let a = locker
            .request("a")
            .ttl(ttl)
            .watchdog()
            .acquire()
            .await
            .unwrap()
            .unwrap();
        let b = locker
            .request("b")
            .ttl(ttl)
            .watchdog()
            .acquire()
            .await
            .unwrap()
            .unwrap();
        let id = a.session().expect("bound").to_string();
        assert_eq!(b.session(), Some(id.as_str()));
        assert_eq!(session_field(&mut c, &id, "holds"), Some(2));
        // Past the ttl: kept alive by the session.
        tokio::time::sleep(ttl + SEC).await;
        assert!(!a.is_lost() && !b.is_lost());
        assert_eq!(
            holder(&mut c, "a"),
            Some((a.token().to_string(), a.fence()))
        );
        let killed: i64 = redis::cmd("DLOCK.SESSION")
            .arg("KILL")
            .arg(&id)
            .query(&mut c)
            .unwrap();
        assert_eq!(killed, 1);
        let at = Instant::now();
        tokio::time::timeout(ttl / 3 + SEC, async {
            a.lost().await;
            b.lost().await;
        })
        .await
        .expect("both told of the loss");
        assert!(at.elapsed() <= ttl / 3 + SEC);
        assert!(!a.release().await.unwrap());
        assert!(!b.release().await.unwrap());
    });
}

#[test]
fn session_async_close_ends_the_session_and_its_guards() {
    let server = Server::start();
    let mut c = server.conn();
    if !has_sessions(&mut c) {
        eprintln!("skipped: the server has no sessions (DLOCK.SESSION)");
        return;
    }
    runtime().block_on(async {
        let locker = Locker::new(&server.url()).unwrap();
        let g = locker
            .request("a")
            .ttl(10 * SEC)
            .watchdog()
            .acquire()
            .await
            .unwrap()
            .unwrap();
        let id = g.session().unwrap().to_string();
        locker.close().await;
        tokio::time::timeout(SEC, g.lost())
            .await
            .expect("close marks the guard lost");
        assert_eq!(session_field(&mut c, &id, "ttl"), None);
        crate::common::server::wait_until(5 * SEC, "the hold released", || {
            crate::common::is_free(&mut c, "a")
        });
        // A later renewed acquire opens a new session.
        let h = locker
            .request("a")
            .ttl(10 * SEC)
            .watchdog()
            .acquire()
            .await
            .unwrap()
            .unwrap();
        assert!(h.session().is_some_and(|s| s != id));
        assert!(h.release().await.unwrap());
    });
}
