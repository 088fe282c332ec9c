//! Pacing (`dlock.observe-rate`): the answers to one resource's waiting
//! observers share a budget, so followers of a busy resource cannot crowd
//! out its clients; held back, they still hear the latest state, and their
//! `WAIT` still bounds how long they wait.
//!
//! The tests set a rate of 1 answer a second: one batch of 3 answers
//! overdraws the half-second burst by 2.5 s, long enough to look at the
//! held observers on a loaded machine without racing the pace.
use super::*;

fn paced(c: &mut Connection) -> i64 {
    info_field(c, "dlock", "dlock_observers_paced")
        .unwrap()
        .parse()
        .unwrap()
}

/// Spends the budget of `res`: 3 observers wait on it, and `change`
/// answers them in one batch (the budget was full), which holds the next
/// answers back for 2.5 s.
fn spend(s: &Server, c: &mut Connection, res: &str, change: impl FnOnce(&mut Connection)) {
    spend_n(s, c, res, 3, change);
}

/// `spend` with `n` observers: the next answers are held back n - 0.5 s.
fn spend_n(
    s: &Server,
    c: &mut Connection,
    res: &str,
    n: usize,
    change: impl FnOnce(&mut Connection),
) {
    let before = paced(c);
    let now = observe(c, res).version;
    let mut obs: Vec<Observer> = (0..n).map(|_| Observer::start(s, res, &now, 0)).collect();
    wait_observers(c, n as i64);
    change(c);
    for o in &mut obs {
        assert!(o.reply().unwrap().is_some(), "answered at once");
    }
    assert_eq!(paced(c), before, "within the budget nobody is held");
}

/// Starts an observer of `res` that saw `since` and checks that the pace
/// holds it back (it waits although `res` differs).
fn held(s: &Server, c: &mut Connection, res: &str, since: &str, wait_ms: u64) -> Observer {
    let before = paced(c);
    let o = Observer::start(s, res, since, wait_ms);
    wait_observers(c, 1);
    assert_eq!(paced(c), before + 1, "held back by the pace");
    o
}

fn unblock(c: &mut Connection, o: &Observer) {
    let unblocked: i64 = redis::cmd("CLIENT")
        .arg("UNBLOCK")
        .arg(o.id)
        .query(c)
        .unwrap();
    assert_eq!(unblocked, 1);
}

#[test]
fn followers_past_the_budget_wait_for_the_pace_and_hear_the_latest() {
    let s = Server::start();
    let mut c = s.conn();
    set_rate(&mut c, 1);
    grant(&mut c, "r", "a", LONG_TTL);
    let t = Instant::now();
    spend(&s, &mut c, "r", |c| {
        release(c, "r", "a");
        grant(c, "r", "b", LONG_TTL);
    });
    let seen_b = observe(&mut c, "r").version;
    release(&mut c, "r", "b");
    grant(&mut c, "r", "c", LONG_TTL);
    // Out of date, but held back: it waits although the resource differs.
    let mut held = held(&s, &mut c, "r", &seen_b, 0);
    // Changes while it is held are skipped; it hears the latest.
    release(&mut c, "r", "c");
    grant(&mut c, "r", "d", LONG_TTL);
    let got = held.reply().unwrap().expect("a change");
    assert!(
        t.elapsed() >= Duration::from_millis(2300),
        "answered after {:?}, before the pace allows",
        t.elapsed()
    );
    assert_eq!(got.info.expect("held").token, b"d");
    assert_eq!(got.version, observe(&mut c, "r").version);
    assert_eq!(observers(&mut c), 0);
}

#[test]
fn without_a_rate_every_follower_is_answered_at_once() {
    let s = Server::start();
    let mut c = s.conn();
    set_rate(&mut c, 0);
    let mut seen = observe(&mut c, "r").version;
    for i in 0..50 {
        let tok = format!("t{i}");
        grant(&mut c, "r", &tok, LONG_TTL);
        let mut o = Observer::start(&s, "r", &seen, 0);
        let got = o.reply().unwrap().expect("a change");
        assert_ne!(got.version, seen);
        seen = got.version;
        release(&mut c, "r", &tok);
    }
    assert_eq!(paced(&mut c), 0, "nobody held back");
    // The same follower with a rate is held back: the check above can fail.
    set_rate(&mut c, 1);
    spend(&s, &mut c, "r", |c| {
        grant(c, "r", "late", LONG_TTL);
    });
    let mut o = held(&s, &mut c, "r", &seen, 0);
    set_rate(&mut c, 0);
    assert!(
        o.reply().unwrap().is_some(),
        "answered when the pace allows"
    );
}

#[test]
fn a_held_observer_whose_wait_ends_hears_the_change_not_nil() {
    let s = Server::start();
    let mut c = s.conn();
    set_rate(&mut c, 1);
    grant(&mut c, "r", "a", LONG_TTL);
    spend(&s, &mut c, "r", |c| {
        release(c, "r", "a");
    });
    let seen_free = observe(&mut c, "r").version;
    assert_eq!(seen_free, FREE);
    grant(&mut c, "r", "b", LONG_TTL);
    let t = Instant::now();
    let mut o = Observer::start(&s, "r", FREE, 100);
    let got = o
        .reply()
        .unwrap()
        .expect("the change it was held from, not nil");
    assert_eq!(got.info.expect("held").token, b"b");
    assert!(
        t.elapsed() < Duration::from_millis(2300),
        "its WAIT ended it, not the pace: {:?}",
        t.elapsed()
    );
    assert_eq!(observers(&mut c), 0);
}

#[test]
fn a_held_observer_whose_resource_returns_to_what_it_saw_times_out() {
    let s = Server::start();
    let mut c = s.conn();
    set_rate(&mut c, 1);
    spend(&s, &mut c, "r", |c| {
        grant(c, "r", "a", LONG_TTL);
    });
    // Held: the resource is held, it saw it free.
    let mut o = held(&s, &mut c, "r", FREE, 300);
    // Free again before its WAIT ends: as it saw it, so nil.
    release(&mut c, "r", "a");
    assert!(
        o.reply().unwrap().is_none(),
        "nothing changed from what it saw"
    );
    assert_eq!(observers(&mut c), 0);
}

#[test]
fn a_new_rate_frees_the_observers_the_old_one_held() {
    let s = Server::start();
    let mut c = s.conn();
    set_rate(&mut c, 1);
    // 30 answers at 1 a second: the next are held back 29.5 s.
    spend_n(&s, &mut c, "r", 30, |c| {
        grant(c, "r", "a", LONG_TTL);
    });
    let seen = observe(&mut c, "r").version;
    release(&mut c, "r", "a");
    let mut held = held(&s, &mut c, "r", &seen, 0);
    // The budget was reckoned at 1 a second; at 2,000 it is full.
    set_rate(&mut c, 2000);
    assert!(
        held.answered_within(SOON),
        "still held by the old rate's pace"
    );
    assert_eq!(observers(&mut c), 0);
}

#[test]
fn client_unblock_of_a_held_observer_gives_the_change_it_was_held_from() {
    let s = Server::start();
    let mut c = s.conn();
    set_rate(&mut c, 1);
    spend(&s, &mut c, "r", |c| {
        grant(c, "r", "a", LONG_TTL);
    });
    let mut held = held(&s, &mut c, "r", FREE, 0);
    unblock(&mut c, &held);
    let got = held
        .reply()
        .unwrap()
        .expect("the state, not nil: it differs");
    assert_eq!(got.info.expect("held").token, b"a");
    // One not held back, whose resource reads as it saw it: nil.
    let v = observe(&mut c, "r").version;
    let mut waiting = Observer::start(&s, "r", &v, 0);
    wait_observers(&mut c, 1);
    unblock(&mut c, &waiting);
    assert!(waiting.reply().unwrap().is_none());
    assert_eq!(observers(&mut c), 0);
}

#[test]
fn a_change_the_pace_end_and_the_wait_end_in_one_turn_answer_once() {
    // Rate 2: 3 answers hold the next back 1 s. A slow script changes the
    // resource and holds the event loop past both the held observer's
    // WAIT and the pace's end, which meet in the turn after it.
    let s = Server::start();
    let mut c = s.conn();
    set_rate(&mut c, 2);
    spend(&s, &mut c, "r", |c| {
        grant(c, "r", "a", LONG_TTL);
    });
    let mut o = held(&s, &mut c, "r", FREE, 100);
    eval_then_busy(
        &mut c,
        "r",
        "redis.call('DLOCK.RELEASE', KEYS[1], 'a') \
         redis.call('DLOCK.ACQUIRE', KEYS[1], 'b', ARGV[1])",
        LONG_TTL,
        1200,
    );
    // One answer, the change (it differs from what the observer saw).
    let got = o.reply().unwrap().expect("the change, not nil");
    assert_eq!(got.info.expect("held").token, b"b");
    assert!(
        !o.answered_within(Duration::from_millis(300)),
        "a second answer"
    );
    assert_eq!(observers(&mut c), 0);
}

#[test]
fn thousands_of_paced_answers_leave_no_server_memory() {
    // Every answer to a follower leaves its resource a pace record until
    // the budget is full again; a sweep forgets them.
    const ROUND: usize = 2000;
    let s = Server::start();
    let mut c = s.conn();
    let round = |c: &mut Connection, r: usize| {
        let mut p = redis::pipe();
        for i in 0..ROUND {
            let res = format!("m{r}:{i}");
            p.cmd("DLOCK.ACQUIRE").arg(&res).arg("t").arg(LONG_TTL);
            p.cmd("DLOCK.OBSERVE")
                .arg(&res)
                .arg("SINCE")
                .arg(FREE)
                .arg("WAIT")
                .arg(0);
            p.cmd("DEL").arg(&res);
        }
        let replies: Vec<Value> = p.query(c).unwrap();
        let answered = replies
            .chunks(3)
            .filter(|r| matches!(&r[1], Value::Array(a) if a.len() == 2))
            .count();
        assert_eq!(answered, ROUND, "every follower answered at once");
    };
    round(&mut c, 0);
    std::thread::sleep(Duration::from_millis(1500));
    let before = used_memory_purged(&mut c);
    for r in 1..=5 {
        round(&mut c, r);
    }
    let n = (5 * ROUND) as i64;
    let mut after = used_memory_purged(&mut c);
    wait_until(SOON, "pace records forgotten", || {
        after = used_memory_purged(&mut c);
        after - before < n * 8
    });
    eprintln!("used_memory {before} -> {after} over {n} paced answers");
}

#[test]
fn a_change_a_paid_answer_and_a_held_arrival_in_one_turn_lose_no_state() {
    // One pipeline, run in one turn before any timer: a release queues a
    // check of the waiting observer's resource; a follower is answered at
    // once and spends the budget (rate 1: held back 0.5 s); a second
    // follower arrives held back and asks for a check when the pace
    // allows. Then no change ever comes again: the first observer and the
    // held follower must still hear that the resource is free.
    let s = Server::start();
    let mut c = s.conn();
    set_rate(&mut c, 1);
    grant(&mut c, "r", "a", LONG_TTL);
    let (held_version, mut o) = watch(&s, &mut c, "r");
    let stale = "0000000000000001";
    let mut f = s.conn();
    f.set_read_timeout(Some(SOON + Duration::from_secs(20)))
        .unwrap();
    let mut pipeline = redis::cmd("DLOCK.RELEASE")
        .arg("r")
        .arg("a")
        .get_packed_command();
    for _ in 0..2 {
        pipeline.extend(observe_cmd("r", Some(stale), Some(0)).get_packed_command());
    }
    f.send_packed_command(&pipeline).unwrap();
    assert_eq!(f.recv_response().unwrap(), Value::Int(1), "released");
    let paid = parse(f.recv_response().unwrap()).expect("answered at once");
    assert_eq!(paid.version, FREE);
    let got = changed(&mut c, &mut o, "r", &held_version);
    assert_eq!(got.version, FREE);
    f.set_read_timeout(Some(SOON)).unwrap();
    let held = parse(f.recv_response().expect("the held follower is answered"))
        .expect("a change, not nil");
    assert_eq!(held.version, FREE);
    assert_eq!(observers(&mut c), 0);
}

#[test]
fn followers_of_a_busy_resource_all_hear_its_last_state() {
    // 24 followers at a rate of 100 answers a second while 4 clients take
    // and release the resource as fast as they can; when they stop, it is
    // free, and every follower must hear so with no further change.
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    const FOLLOWERS: usize = 24;
    let s = Server::start();
    let mut c = s.conn();
    set_rate(&mut c, 100);
    let stop = Arc::new(AtomicBool::new(false));
    let last: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(vec![String::new(); FOLLOWERS]));
    let followers: Vec<_> = (0..FOLLOWERS)
        .map(|i| {
            let mut conn = s.conn();
            conn.set_read_timeout(Some(Duration::from_secs(120)))
                .unwrap();
            let (stop, last) = (stop.clone(), last.clone());
            std::thread::spawn(move || {
                let mut seen = FREE.to_string();
                loop {
                    let v: Value = observe_cmd("r", Some(&seen), Some(0))
                        .query(&mut conn)
                        .expect("an answer");
                    seen = parse(v).expect("a change: the wait has no end").version;
                    last.lock().unwrap()[i] = seen.clone();
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                }
            })
        })
        .collect();
    wait_observers(&mut c, FOLLOWERS as i64);
    let churners: Vec<_> = (0..4)
        .map(|i| {
            let mut conn = s.conn();
            std::thread::spawn(move || {
                let tok = format!("t{i}");
                let until = Instant::now() + Duration::from_millis(1500);
                while Instant::now() < until {
                    let got: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
                        .arg("r")
                        .arg(&tok)
                        .arg(10_000)
                        .arg("WAIT")
                        .arg(5_000)
                        .query(&mut conn)
                        .unwrap();
                    if got.is_some() {
                        release(&mut conn, "r", &tok);
                    }
                }
            })
        })
        .collect();
    for t in churners {
        t.join().unwrap();
    }
    assert_eq!(observe(&mut c, "r").version, FREE);
    wait_until(SOON, "every follower heard the resource free", || {
        last.lock().unwrap().iter().all(|v| v == FREE)
    });
    // Let them go: one more change answers every follower.
    stop.store(true, Ordering::SeqCst);
    grant(&mut c, "r", "end", LONG_TTL);
    for t in followers {
        t.join().unwrap();
    }
}
