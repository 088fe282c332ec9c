//! Every way an observer leaves: its wait runs out, `CLIENT UNBLOCK`
//! (with or without ERROR), `CLIENT KILL`, a closed connection. Each
//! leaves nothing behind (no observer, no blocked client).
use super::*;

fn settled(c: &mut Connection) {
    wait_observers(c, 0);
    wait_blocked_clients(c, 0);
}

#[test]
fn a_wait_that_runs_out_answers_nil() {
    let s = Server::start();
    let mut c = s.conn();
    let t = Instant::now();
    let mut o = Observer::start(&s, "r", FREE, 300);
    assert!(o.reply().unwrap().is_none());
    assert!(
        t.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
    settled(&mut c);
}

#[test]
fn client_unblock_answers_nil_or_the_servers_error() {
    let s = Server::start();
    let mut c = s.conn();
    let mut o = Observer::start(&s, "r", FREE, 0);
    wait_observers(&mut c, 1);
    let n: i64 = redis::cmd("CLIENT")
        .arg("UNBLOCK")
        .arg(o.id)
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 1);
    assert!(o.reply().unwrap().is_none());
    settled(&mut c);
    let mut o = Observer::start(&s, "r", FREE, 0);
    wait_observers(&mut c, 1);
    let n: i64 = redis::cmd("CLIENT")
        .arg("UNBLOCK")
        .arg(o.id)
        .arg("ERROR")
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 1);
    let e = o.reply().unwrap_err();
    assert!(err_text(&e).starts_with("UNBLOCKED"), "{e}");
    settled(&mut c);
    // The connection still works, and observes again.
    let got: Value = observe_cmd("r", None, None).query(&mut o.conn).unwrap();
    assert_eq!(parse(got).unwrap().version, FREE);
}

#[test]
fn a_killed_or_closed_observer_leaves_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    let mut o = Observer::start(&s, "r", FREE, 0);
    wait_observers(&mut c, 1);
    let n: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(o.id)
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 1);
    assert!(o.reply().is_err(), "the connection is gone");
    settled(&mut c);
    let o = Observer::start(&s, "r", FREE, 0);
    wait_observers(&mut c, 1);
    drop(o);
    settled(&mut c);
    // A change after they left answers nobody and breaks nothing.
    grant(&mut c, "r", "a", LONG_TTL);
    assert_eq!(observe(&mut c, "r").info.unwrap().token, b"a");
}

#[test]
fn an_answer_and_the_end_of_the_wait_in_one_turn_answer_once() {
    // The observer's wait ends while a slow script holds the event loop;
    // the script's change and the timeout meet in the turn after it.
    let s = Server::start();
    let mut c = s.conn();
    let mut o = Observer::start(&s, "r", FREE, 100);
    wait_observers(&mut c, 1);
    eval_then_busy(
        &mut c,
        "r",
        "redis.call('DLOCK.ACQUIRE', KEYS[1], 'a', ARGV[1])",
        LONG_TTL,
        300,
    );
    // One answer: the change or nil, never both, never none.
    let got = o.reply().unwrap();
    if let Some(got) = got {
        assert_eq!(got.info.unwrap().token, b"a");
    }
    assert!(
        !o.answered_within(Duration::from_millis(300)),
        "a second answer"
    );
    settled(&mut c);
}

#[test]
fn observers_asking_ever_shorter_waits_leave_no_jobs() {
    // Each observer's WAIT ends before the one before it: each one's
    // give-up is due first. Gone, they leave no give-up job behind.
    let s = Server::start();
    let mut c = s.conn();
    let base = deferred_jobs(&mut c);
    for i in 0..200u64 {
        let o = Observer::start(&s, "r", FREE, 3_600_000 - i * 1000);
        wait_observers(&mut c, 1);
        drop(o);
        wait_observers(&mut c, 0);
    }
    wait_until(SOON, "no give-up jobs left", || {
        deferred_jobs(&mut c) <= base
    });
    settled(&mut c);
}

#[test]
fn observing_a_long_lease_leaves_no_check_once_the_observer_left() {
    // A check is scheduled at the lease's end, an hour away: once the
    // observers are gone, nobody needs it.
    let s = Server::start();
    let mut c = s.conn();
    let base = deferred_jobs(&mut c);
    for i in 0..100 {
        let res = format!("long{i}");
        grant(&mut c, &res, "a", 3_600_000);
        let (_, o) = watch(&s, &mut c, &res);
        drop(o);
        wait_observers(&mut c, 0);
        release(&mut c, &res, "a");
    }
    wait_until(SOON, "no check jobs left", || deferred_jobs(&mut c) <= base);
    settled(&mut c);
}
