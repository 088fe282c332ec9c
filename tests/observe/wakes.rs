//! Every way the holders change wakes an observer, with the latest state;
//! what changes no holder wakes nobody.
use super::*;
use common::dump::restore_replace;

/// Holds `res` for `tok`, observes it, runs `change`, and returns what the
/// observer was answered.
fn after(s: &Server, res: &str, change: impl FnOnce(&mut Connection)) -> Observed {
    let mut c = s.conn();
    let (v, mut o) = watch(s, &mut c, res);
    change(&mut c);
    let got = changed(&mut c, &mut o, res, &v);
    assert_eq!(observers(&mut c), 0, "the answered observer left");
    got
}

#[test]
fn a_release_a_grant_and_a_handoff_wake_the_observer() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "r", "a", LONG_TTL);
    let got = after(&s, "r", |c| assert_eq!(release(c, "r", "a"), 1));
    assert_eq!((got.version.as_str(), got.raw), (FREE, Value::Nil));
    let got = after(&s, "r", |c| {
        grant(c, "r", "b", LONG_TTL);
    });
    assert_eq!(got.info.unwrap().token, b"b");
    // A waiter: the release hands the lock over inside the command, so the
    // observer sees the next holder, never a free lock.
    let w = common::waiter::Waiter::send(&s, {
        let mut cmd = redis::cmd("DLOCK.ACQUIRE");
        cmd.arg("r").arg("w").arg(LONG_TTL).arg("WAIT").arg(30_000);
        cmd
    });
    wait_waiters(&mut c, "r", 1);
    let got = after(&s, "r", |c| assert_eq!(release(c, "r", "b"), 1));
    assert_eq!(got.info.unwrap().token, b"w");
    w.granted();
}

#[test]
fn a_lease_that_runs_out_wakes_the_observer_without_any_command() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "r", "a", 300);
    let t = Instant::now();
    let got = after(&s, "r", |_| {});
    assert_eq!(got.version, FREE);
    assert!(
        t.elapsed() >= Duration::from_millis(250),
        "{:?}",
        t.elapsed()
    );
    // One permit of a semaphore ending by its deadline.
    let permit = |c: &mut Connection, tok: &str, ttl: u64| {
        let f: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
            .arg("sem")
            .arg(tok)
            .arg(ttl)
            .arg("LIMIT")
            .arg(3)
            .query(c)
            .unwrap();
        f.expect("a permit")
    };
    permit(&mut c, "long", LONG_TTL);
    permit(&mut c, "short", 300);
    let got = after(&s, "sem", |_| {});
    assert_ne!(got.version, FREE, "the long permit still holds");
}

#[test]
fn an_admins_del_flush_expire_rename_and_restore_wake_the_observer() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "r", "a", LONG_TTL);
    let got = after(&s, "r", |c| {
        let _: i64 = redis::cmd("DEL").arg("r").query(c).unwrap();
    });
    assert_eq!(got.version, FREE);
    grant(&mut c, "r", "a", LONG_TTL);
    let got = after(&s, "r", |c| {
        let _: () = redis::cmd("FLUSHALL").query(c).unwrap();
    });
    assert_eq!(got.version, FREE);
    grant(&mut c, "r", "a", LONG_TTL);
    let got = after(&s, "r", |c| {
        let _: i64 = redis::cmd("PEXPIRE").arg("r").arg(1).query(c).unwrap();
    });
    assert_eq!(got.version, FREE, "the admin's expiry ended the lease");
    // A lock renamed onto the observed (free) name.
    grant(&mut c, "other", "o", LONG_TTL);
    let got = after(&s, "r", |c| {
        let _: () = redis::cmd("RENAME").arg("other").arg("r").query(c).unwrap();
    });
    assert_eq!(got.info.unwrap().token, b"o");
    // A lock restored onto it.
    grant(&mut c, "src", "x", LONG_TTL);
    let payload: Vec<u8> = redis::cmd("DUMP").arg("src").query(&mut c).unwrap();
    let got = after(&s, "r", |c| {
        restore_replace(c, "r", 0, &payload).unwrap();
    });
    assert_eq!(got.info.unwrap().token, b"x");
}

#[test]
fn sets_shared_and_reentrant_holds_wake_the_observers_of_each_member() {
    let s = Server::start();
    let mut c = s.conn();
    let (va, mut oa) = watch(&s, &mut c, "{s}a");
    let (vb, mut ob) = watch(&s, &mut c, "{s}b");
    let f: Option<i64> = redis::cmd("DLOCK.MACQUIRE")
        .arg(2)
        .arg("{s}a")
        .arg("{s}b")
        .arg("set")
        .arg(LONG_TTL)
        .query(&mut c)
        .unwrap();
    assert!(f.is_some());
    let a = changed(&mut c, &mut oa, "{s}a", &va);
    let b = changed(&mut c, &mut ob, "{s}b", &vb);
    assert_eq!(a.version, b.version, "the same holder: the same version");
    // A reader joins, an owner adds a hold.
    let shared = |c: &mut Connection, tok: &str| {
        let r: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
            .arg("rw")
            .arg(tok)
            .arg(LONG_TTL)
            .arg("SHARED")
            .query(c)
            .unwrap();
        assert!(r.is_some());
    };
    shared(&mut c, "r1");
    after(&s, "rw", |c| shared(c, "r2"));
    let owned = |c: &mut Connection, tok: &str| {
        let r: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
            .arg("re")
            .arg(tok)
            .arg(LONG_TTL)
            .arg("OWNER")
            .arg("me")
            .query(c)
            .unwrap();
        assert!(r.is_some());
    };
    owned(&mut c, "t1");
    after(&s, "re", |c| owned(c, "t2"));
}

#[test]
fn what_changes_no_holder_wakes_nobody() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "r", "a", LONG_TTL);
    let v = observe(&mut c, "r").version;
    let mut o = Observer::start(&s, "r", &v, 800);
    wait_observers(&mut c, 1);
    let t = Instant::now();
    assert_eq!(extend(&mut c, "r", "a", LONG_TTL * 2), 1);
    assert_eq!(try_acquire(&mut c, "r", "b", LONG_TTL).unwrap(), None);
    assert_eq!(release(&mut c, "r", "nobody"), 0);
    // A lock taken and released in one turn ends where it started.
    transaction(
        &mut c,
        &[
            redis::cmd("DLOCK.ACQUIRE")
                .arg("q")
                .arg("x")
                .arg(LONG_TTL)
                .clone(),
            redis::cmd("DLOCK.RELEASE").arg("q").arg("x").clone(),
        ],
    );
    let got = o.reply().unwrap();
    assert!(got.is_none(), "nil when the wait ends: {got:?}");
    assert!(
        t.elapsed() >= Duration::from_millis(700),
        "{:?}",
        t.elapsed()
    );
    // The same for a free resource taken and released in one turn.
    let mut o = Observer::start(&s, "q", FREE, 500);
    wait_observers(&mut c, 1);
    transaction(
        &mut c,
        &[
            redis::cmd("DLOCK.ACQUIRE")
                .arg("q")
                .arg("x")
                .arg(LONG_TTL)
                .clone(),
            redis::cmd("DLOCK.RELEASE").arg("q").arg("x").clone(),
        ],
    );
    assert!(o.reply().unwrap().is_none());
    assert_eq!(observers(&mut c), 0);
}

#[test]
fn changes_in_one_turn_show_their_last_state() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "r", "a", LONG_TTL);
    let (v, mut o) = watch(&s, &mut c, "r");
    transaction(
        &mut c,
        &[
            redis::cmd("DLOCK.RELEASE").arg("r").arg("a").clone(),
            redis::cmd("DLOCK.ACQUIRE")
                .arg("r")
                .arg("b")
                .arg(LONG_TTL)
                .clone(),
        ],
    );
    let got = changed(&mut c, &mut o, "r", &v);
    assert_eq!(got.info.unwrap().token, b"b", "never shown free in between");
}

#[test]
fn an_observer_that_comes_back_with_an_old_version_is_answered_at_once() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "r", "a", LONG_TTL);
    let old = observe(&mut c, "r").version;
    release(&mut c, "r", "a");
    grant(&mut c, "r", "b", LONG_TTL);
    release(&mut c, "r", "b");
    grant(&mut c, "r", "c", LONG_TTL);
    let v: Value = observe_cmd("r", Some(&old), Some(0)).query(&mut c).unwrap();
    let got = parse(v).unwrap();
    assert_eq!(got.info.unwrap().token, b"c", "the latest state, at once");
}
