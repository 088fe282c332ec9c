//! Guarded writes (`Guard::write`, `write_batch`: `DLOCK.GUARD`) and the
//! sequencer check (`Guard::check`, `Locker::check`: `DLOCK.CHECK`)
//! against a real server: they run while the lock is held, and once it is
//! not (released, taken over, expired) they are refused with `NotHeld`
//! and nothing is written; a batch is all or none as the client sees it.

use crate::common::{is_free, ms, server::wait_until, Server, SEC};
use dlock_client::redis::{self, Cmd, Value};
use dlock_client::{Error, Locker, Redlock};

fn get(c: &mut redis::Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(c).unwrap()
}

fn set(k: &str, v: &str) -> Cmd {
    redis::cmd("SET").arg(k).arg(v).clone()
}

fn code(e: Error) -> String {
    match e {
        Error::Refused { code, .. } => code,
        other => panic!("not a refusal: {other:?}"),
    }
}

#[test]
fn a_guarded_write_runs_while_the_lock_is_held() {
    let server = Server::start();
    let locker = Locker::new(&server.url()).unwrap();
    let mut c = server.conn();
    let g = locker.try_lock("{o}", 30 * SEC).unwrap().unwrap();
    let ok: String = g.write(&set("{o}:state", "paid")).unwrap();
    assert_eq!(ok, "OK");
    assert_eq!(get(&mut c, "{o}:state").as_deref(), Some("paid"));
    let n: i64 = g.write(redis::cmd("INCRBY").arg("{o}:n").arg(5)).unwrap();
    assert_eq!(n, 5);
    let replies: (String, i64, Option<String>) = g
        .write_batch(&[
            set("{o}:a", "1"),
            redis::cmd("INCR").arg("{o}:a").clone(),
            redis::cmd("GET").arg("{o}:a").clone(),
        ])
        .unwrap();
    assert_eq!(replies, ("OK".into(), 2, Some("2".into())));
    let raw: Vec<Value> = g.write_batch(&[set("{o}:b", "x")]).unwrap();
    assert_eq!(raw.len(), 1);
    assert!(g.check().unwrap());
    assert!(locker.check("{o}", g.fence()).unwrap());
    assert!(!locker.check("{o}", g.fence() + 1).unwrap());
    assert!(!locker.check("{other}", g.fence()).unwrap());
    assert!(!g.is_lost());
    assert!(g.release().unwrap());
}

/// The paused holder's case without the pause: its lock was released
/// behind its back and another client took it. The old guard's writes are
/// refused (NotHeld, the guard marked lost, its listeners told), the new
/// holder's go through, and the data shows only the new holder's.
#[test]
fn a_guarded_write_after_release_or_takeover_is_refused_and_writes_nothing() {
    let server = Server::start();
    let locker = Locker::new(&server.url()).unwrap();
    let mut c = server.conn();
    let old = locker.try_lock("{o}", 30 * SEC).unwrap().unwrap();
    let lost = old.lost_signal();
    assert!(locker.release_token("{o}", old.token()).unwrap());
    match old.write::<Value>(&set("{o}:k", "old")) {
        Err(Error::NotHeld) => {}
        other => panic!("a released lock's write: {other:?}"),
    }
    assert_eq!(get(&mut c, "{o}:k"), None, "nothing written");
    assert!(old.is_lost(), "NOTHELD marks the guard lost");
    lost.recv_timeout(10 * SEC).expect("the loss is signalled");
    let new = locker.try_lock("{o}", 30 * SEC).unwrap().unwrap();
    assert!(new.fence() > old.fence());
    let _: () = new.write(&set("{o}:k", "new")).unwrap();
    for attempt in [
        old.write::<Value>(&set("{o}:k", "old")),
        old.write_batch::<Value>(&[set("{o}:k", "old"), set("{o}:j", "old")]),
    ] {
        assert!(matches!(attempt, Err(Error::NotHeld)), "{attempt:?}");
    }
    assert_eq!(get(&mut c, "{o}:k").as_deref(), Some("new"));
    assert_eq!(get(&mut c, "{o}:j"), None);
    assert!(!old.check().unwrap());
    assert!(!locker.check("{o}", old.fence()).unwrap());
    assert!(new.check().unwrap());
}

/// A lease that ended on the server: its guarded writes are refused and
/// write nothing, whether the guard's budget already says so (a short
/// ttl that ran out: refused without asking) or not (the key expired
/// early on the server, an admin's PEXPIRE: the server refuses it).
#[test]
fn a_guarded_write_after_the_lease_expired_is_refused() {
    let server = Server::start();
    let locker = Locker::new(&server.url()).unwrap();
    let mut c = server.conn();
    let short = locker.try_lock("{s}", ms(200)).unwrap().unwrap();
    wait_until(10 * SEC, "the lease expired", || is_free(&mut c, "{s}"));
    wait_until(10 * SEC, "the budget passed", || short.is_lost());
    let r = short.write::<Value>(&set("{s}:k", "late"));
    assert!(matches!(r, Err(Error::NotHeld)), "{r:?}");
    assert_eq!(get(&mut c, "{s}:k"), None);
    assert!(!short.check().unwrap());

    let g = locker.try_lock("{e}", 60 * SEC).unwrap().unwrap();
    let _: i64 = redis::cmd("PEXPIRE")
        .arg("{e}")
        .arg(1)
        .query(&mut c)
        .unwrap();
    wait_until(10 * SEC, "the key expired", || is_free(&mut c, "{e}"));
    assert!(!g.is_lost(), "the client cannot know yet");
    let r = g.write::<Value>(&set("{e}:k", "late"));
    assert!(matches!(r, Err(Error::NotHeld)), "{r:?}");
    assert_eq!(get(&mut c, "{e}:k"), None);
    assert!(g.is_lost());
}

/// A batch runs all or none: a command that fails at run time (WRONGTYPE)
/// undoes the ones before it, one the server does not run guarded
/// (blocking, a dlock command) or too many commands are refused before any
/// runs; the error keeps its code, and the guard is still held.
#[test]
fn a_guarded_batch_is_all_or_none() {
    let server = Server::start();
    let locker = Locker::new(&server.url()).unwrap();
    let mut c = server.conn();
    let _: () = redis::cmd("SET")
        .arg("{o}:a")
        .arg("old")
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("{o}:str")
        .arg("s")
        .query(&mut c)
        .unwrap();
    let g = locker.try_lock("{o}", 30 * SEC).unwrap().unwrap();
    let wrongtype = g.write_batch::<Value>(&[
        set("{o}:a", "new"),
        redis::cmd("INCR").arg("{o}:n").clone(),
        redis::cmd("LPUSH").arg("{o}:str").arg("x").clone(),
    ]);
    assert_eq!(code(wrongtype.unwrap_err()), "WRONGTYPE");
    let blocking = g.write_batch::<Value>(&[
        set("{o}:a", "new"),
        redis::cmd("BLPOP").arg("{o}:l").arg(0).clone(),
    ]);
    assert_eq!(code(blocking.unwrap_err()), "ERR");
    let dlock = g.write_batch::<Value>(&[
        set("{o}:a", "new"),
        redis::cmd("DLOCK.RELEASE")
            .arg("{o}")
            .arg(g.token())
            .clone(),
    ]);
    assert_eq!(code(dlock.unwrap_err()), "ERR");
    let huge: Vec<Cmd> = (0..100_000).map(|i| set("{o}:a", &i.to_string())).collect();
    assert_eq!(code(g.write_batch::<Value>(&huge).unwrap_err()), "ERR");
    let empty = g.write_batch::<Value>(&[]);
    assert!(matches!(empty, Err(Error::Invalid(_))), "{empty:?}");
    let empty_cmd = g.write_batch::<Value>(&[set("{o}:a", "new"), Cmd::new()]);
    assert!(matches!(empty_cmd, Err(Error::Invalid(_))), "{empty_cmd:?}");
    assert_eq!(
        get(&mut c, "{o}:a").as_deref(),
        Some("old"),
        "nothing written"
    );
    assert_eq!(get(&mut c, "{o}:n"), None, "nothing written");
    assert!(!g.is_lost(), "a refused write is no loss");
    assert!(g.check().unwrap());
    let _: Vec<Value> = g
        .write_batch(&[set("{o}:a", "new"), redis::cmd("INCR").arg("{o}:n").clone()])
        .unwrap();
    assert_eq!(get(&mut c, "{o}:a").as_deref(), Some("new"));
}

/// An inner command's error comes back with its code (WRONGTYPE; NOPERM
/// for a key outside the user's ACL patterns and for a command the ACL
/// denies), nothing written; arguments the client cannot send are refused
/// before any server is asked.
#[test]
fn an_inner_command_error_keeps_its_code() {
    let server = Server::start();
    let mut c = server.conn();
    let _: () = redis::cmd("SET")
        .arg("{o}:str")
        .arg("s")
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("noset")
        .arg("on")
        .arg(">pw")
        .arg("~{u}*")
        .arg("+@all")
        .arg("-set")
        .query(&mut c)
        .unwrap();
    let locker = Locker::new(&server.url()).unwrap();
    let g = locker.try_lock("{o}", 30 * SEC).unwrap().unwrap();
    let r = g.write::<Value>(redis::cmd("LPUSH").arg("{o}:str").arg("x"));
    assert_eq!(code(r.unwrap_err()), "WRONGTYPE");
    let url = format!("redis://noset:pw@127.0.0.1:{}/", server.port());
    let limited = Locker::new(&url).unwrap();
    let h = limited.try_lock("{u}", 30 * SEC).unwrap().unwrap();
    let r = h.write::<Value>(redis::cmd("HSET").arg("{x}:h").arg("f").arg("v"));
    assert_eq!(code(r.unwrap_err()), "NOPERM");
    let r = h.write::<Value>(&set("{u}:k", "v"));
    assert_eq!(code(r.unwrap_err()), "NOPERM");
    assert_eq!(get(&mut c, "{u}:k"), None);
    let exists: i64 = redis::cmd("EXISTS").arg("{x}:h").query(&mut c).unwrap();
    assert_eq!(exists, 0);
    assert!(!h.is_lost());
    let r = g.write::<Value>(&Cmd::new());
    assert!(matches!(r, Err(Error::Invalid(_))), "{r:?}");
    for (res, fence) in [("", 1), ("{o}", 0), ("{o}", u64::MAX)] {
        let r = locker.check(res, fence);
        assert!(
            matches!(r, Err(Error::Invalid(_))),
            "{res:?} {fence}: {r:?}"
        );
    }
    assert!(!g.is_lost());
}

/// A Redlock guard makes no guarded write and no check (a write on one of
/// its servers is not protected by a majority): a clear error, nothing
/// sent.
#[test]
fn a_redlock_guard_refuses_guarded_writes() {
    let servers: Vec<Server> = (0..3).map(|_| Server::start()).collect();
    let urls: Vec<String> = servers.iter().map(Server::url).collect();
    let rl = Redlock::new(&urls).unwrap().with_node_timeout(SEC);
    let g = rl.try_lock("{o}", 30 * SEC).unwrap().expect("free");
    let r = g.write::<Value>(&set("{o}:k", "v"));
    assert!(
        matches!(&r, Err(Error::Invalid(m)) if m.contains("majority")),
        "{r:?}"
    );
    let r = g.write_batch::<Value>(&[set("{o}:k", "v")]);
    assert!(matches!(r, Err(Error::Invalid(_))), "{r:?}");
    assert!(matches!(g.check(), Err(Error::Invalid(_))));
    for s in &servers {
        assert_eq!(get(&mut s.conn(), "{o}:k"), None);
    }
    assert!(g.release().unwrap());
}

fn guards(args: &[Vec<u8>]) -> bool {
    args.first()
        .is_some_and(|a| a.eq_ignore_ascii_case(b"DLOCK.GUARD"))
}

/// A guarded write whose reply is lost (the server ran it, the connection
/// broke before the reply came back) is not sent again: an `INCR` counts
/// once, and the error says the write may or may not have run.
#[test]
fn a_guarded_write_whose_reply_was_lost_is_not_sent_again() {
    use crate::lock::proxy::Proxy;
    let server = Server::start();
    let proxy = Proxy::start(server.port(), 7, 1000, guards);
    let locker = Locker::new(&proxy.url()).unwrap().with_retry_for(5 * SEC);
    let mut c = server.conn();
    let g = locker.try_lock("{o}", 60 * SEC).unwrap().unwrap();
    let r = g.write::<Value>(redis::cmd("INCR").arg("{o}:n"));
    match r {
        Err(Error::Unavailable(m)) => assert!(m.contains("may or may not"), "{m}"),
        other => panic!("a lost reply: {other:?}"),
    }
    assert_eq!(get(&mut c, "{o}:n").as_deref(), Some("1"), "ran once");
    assert_eq!(proxy.drop_count(), 1, "sent once");
    assert!(!g.is_lost(), "a lost reply is no loss of the lease");
    assert!(g.check().unwrap());
}
