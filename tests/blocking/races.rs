//! A grant is delivered or revoked. Every way a waiter can end is forced
//! into the same event-loop turn as its grant (`MULTI`/`EXEC`, or a slow
//! script), where timing cannot hide the race: the waiter either gets the
//! fence, or the grant is released again right after that turn (counted in
//! `dlock_revoked_grants`) and the next waiter gets the lock.
use super::*;

fn counter(c: &mut Connection, name: &str) -> i64 {
    info_field(c, "dlock", &format!("dlock_{name}"))
        .unwrap_or_else(|| panic!("INFO dlock has no dlock_{name}"))
        .parse()
        .unwrap()
}

/// `dlock_grants`, `dlock_revoked_grants`, `dlock_wait_timeouts`.
fn counters(c: &mut Connection) -> [i64; 3] {
    ["grants", "revoked_grants", "wait_timeouts"].map(|n| counter(c, n))
}

fn delta(before: [i64; 3], after: [i64; 3]) -> [i64; 3] {
    [0, 1, 2].map(|i| after[i] - before[i])
}

/// A server where `holder` holds `res` and waiter `W` is queued on it.
fn held_with_waiter() -> (Server, Connection, Waiter) {
    let s = Server::start();
    let mut c = s.conn();
    hold(&mut c, "res", "holder");
    let w = Waiter::queue(&mut c, &s.url(), "res", "W", 1);
    (s, c, w)
}

/// `MULTI; DLOCK.RELEASE res holder; <cmds...>; EXEC`: the holder's release
/// (a grant to the head waiter) and `cmds` in one event-loop turn; returns
/// the EXEC results.
fn release_and(c: &mut Connection, cmds: &[&[&str]]) -> Vec<Value> {
    let mut pipe = redis::pipe();
    pipe.atomic().cmd("DLOCK.RELEASE").arg("res").arg("holder");
    for cmd in cmds {
        pipe.cmd(cmd[0]).arg(&cmd[1..]);
    }
    exec_values(c, &pipe)
}

/// A grant and its waiter's end in one transaction. `then` is the second
/// waiter, which must get the lock the revoked grant gave back.
fn grant_racing(end: impl Fn(&str) -> Vec<&str>, check: impl Fn(&Outcome)) {
    let m = Server::start();
    let r = Server::builder().replica_of(&m).start();
    r.wait_for_sync(SOON);
    let mut c = m.conn();
    hold(&mut c, "res", "holder");
    let w = Waiter::queue(&mut c, &m.url(), "res", "W", 1);
    let next = Waiter::queue(&mut c, &m.url(), "res", "NEXT", 2);
    let before = counters(&mut c);
    let id = w.id.to_string();
    let results = release_and(&mut c, &[&end(&id)]);
    assert_eq!(as_int(&results[0]), 1, "the holder's release");
    assert_eq!(as_int(&results[1]), 1, "the waiter was found: {results:?}");
    check(&w.outcome(SOON));
    // The revoked grant went on to the next waiter, with a newer fence.
    let fence = next.granted().fence();
    let i = assert_owner(&mut c, "res", "NEXT", fence);
    assert_eq!(i.waiters, 0);
    let d = delta(before, counters(&mut c));
    assert_eq!(d[0], 2, "two grants: to W (revoked) and to NEXT");
    assert_eq!(d[1], 1, "one revoked grant");
    wait_blocked_clients(&mut c, 0);
    // The replica holds exactly what the master holds.
    let n: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut c).unwrap();
    assert_eq!(n, 1, "replica acknowledged");
    let mut rc = r.conn();
    assert_owner(&mut rc, "res", "NEXT", fence);
    assert!(
        m.log().contains("revoked"),
        "the revocation is logged:\n{}",
        m.log()
    );
}

#[test]
fn grant_racing_client_unblock_is_revoked_and_answered_nil() {
    grant_racing(
        |id| vec!["CLIENT", "UNBLOCK", id],
        |o| assert!(matches!(o.reply, Ok(None)), "nil, got {:?}", o.reply),
    );
}

#[test]
fn grant_racing_client_unblock_error_is_revoked() {
    grant_racing(
        |id| vec!["CLIENT", "UNBLOCK", id, "ERROR"],
        |o| assert!(o.error().starts_with("UNBLOCKED"), "{}", o.error()),
    );
}

#[test]
fn grant_racing_client_kill_is_revoked() {
    grant_racing(
        |id| vec!["CLIENT", "KILL", "ID", id],
        |o| assert!(o.conn.is_none(), "killed, got {:?}", o.reply),
    );
}

#[test]
fn unblocked_waiter_connection_stays_in_step() {
    // The waiter's next command must get its own reply, not a leftover.
    let (_s, mut c, w) = held_with_waiter();
    release_and(&mut c, &[&["CLIENT", "UNBLOCK", &w.id.to_string()]]);
    let o = w.outcome(SOON);
    assert!(matches!(o.reply, Ok(None)), "{:?}", o.reply);
    let mut wc = o.conn.expect("connection kept");
    let echo: String = redis::cmd("ECHO").arg("next").query(&mut wc).unwrap();
    assert_eq!(echo, "next");
    assert_eq!(info(&mut c, "res"), None, "revoked, nobody else waits");
}

/// `EVAL` of a script that busy-waits `ms` (on `TIME`), with `before` and
/// `after` run before and after the wait.
fn slow_script(c: &mut Connection, ms: u64, before: &str, after: &str) -> RedisResult<Value> {
    let script = format!(
        "{before}
         local t = redis.call('TIME')
         local start = t[1] * 1000000 + t[2]
         repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] - start >= {us}
         {after}
         return 1",
        us = ms * 1000
    );
    redis::cmd("EVAL").arg(script).arg(1).arg("res").query(c)
}

#[test]
fn a_waiter_whose_wait_ran_out_is_never_granted() {
    let s = Server::start();
    let mut c = s.conn();
    hold(&mut c, "res", "holder");
    // W gives up after 100 ms; the script releases at 300 ms.
    let w = Waiter::start(&s.url(), "res", "W", 10_000, 100);
    wait_waiters(&mut c, "res", 1);
    let next = Waiter::start(&s.url(), "res", "NEXT", 10_000, 20_000);
    wait_waiters(&mut c, "res", 2);
    let before = counters(&mut c);
    slow_script(
        &mut c,
        300,
        "",
        "redis.call('DLOCK.RELEASE', KEYS[1], 'holder')",
    )
    .unwrap();
    assert!(matches!(w.outcome(SOON).reply, Ok(None)), "W timed out");
    let fence = next.granted().fence();
    assert_owner(&mut c, "res", "NEXT", fence);
    let d = delta(before, counters(&mut c));
    assert_eq!(d, [1, 0, 1], "one grant (NEXT), none revoked, W timed out");
}

#[test]
fn a_waiter_whose_connection_closes_in_the_grant_turn_is_revoked() {
    // The server reads a closed connection while a slow script runs (past
    // busy-reply-threshold): the grant the script made is revoked once the
    // script is over, and the lock is free again.
    let s = Server::builder()
        .arg("--busy-reply-threshold")
        .arg("50")
        .start();
    let mut c = s.conn();
    hold(&mut c, "res", "holder");
    let mut raw = TcpStream::connect(("127.0.0.1", s.port())).unwrap();
    raw.write_all(
        b"*6\r\n$13\r\nDLOCK.ACQUIRE\r\n$3\r\nres\r\n$4\r\ngone\r\n$5\r\n10000\r\n$4\r\nWAIT\r\n$1\r\n0\r\n",
    )
    .unwrap();
    wait_waiters(&mut c, "res", 1);
    let before = counters(&mut c);
    let url = s.url();
    let script = thread::spawn(move || {
        let mut sc = connect_within(&url, Duration::from_secs(10)).unwrap();
        sc.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        slow_script(
            &mut sc,
            2500,
            "redis.call('DLOCK.RELEASE', KEYS[1], 'holder')",
            "",
        )
    });
    // Once the server answers BUSY, the script runs (and has granted).
    let mut probe = s.conn();
    wait_until(
        SOON,
        "the script to run",
        || matches!(redis::cmd("PING").query::<String>(&mut probe), Err(e) if err_text(&e).starts_with("BUSY")),
    );
    raw.shutdown(std::net::Shutdown::Both).unwrap();
    drop(raw);
    script.join().unwrap().expect("script");
    wait_until(SOON, "the revoked lock to be free", || {
        info(&mut c, "res").is_none()
    });
    let d = delta(before, counters(&mut c));
    assert_eq!(d[0], 1, "one grant");
    assert_eq!(d[1], 1, "revoked");
    wait_blocked_clients(&mut c, 0);
}

#[test]
fn a_refresh_by_the_owner_keeps_a_grant_whose_waiter_left() {
    // The waiter's owner retried on another connection and learned the
    // fence: the grant stands even though the waiter itself was unblocked.
    let (_s, mut c, w) = held_with_waiter();
    let id = w.id.to_string();
    let v = release_and(
        &mut c,
        &[
            &["DLOCK.ACQUIRE", "res", "W", "10000"],
            &["CLIENT", "UNBLOCK", &id],
        ],
    );
    let fence = as_int(&v[1]);
    assert!(matches!(w.outcome(SOON).reply, Ok(None)));
    assert_owner(&mut c, "res", "W", fence);
    assert_eq!(counter(&mut c, "revoked_grants"), 0);
}

#[test]
fn stress_grants_minus_revoked_equals_fences_received() {
    // 8 clients wait on 3 resources while a chaos client unblocks waiters
    // (both ways) at random: every grant the server counts either reached
    // its client or was revoked.
    let s = Server::start();
    let stop = Arc::new(AtomicBool::new(false));
    let received = Arc::new(std::sync::atomic::AtomicI64::new(0));
    let mut threads = Vec::new();
    for t in 0..8 {
        let (url, stop, received) = (s.url(), stop.clone(), received.clone());
        threads.push(thread::spawn(move || {
            let mut c = connect_within(&url, Duration::from_secs(10)).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let res = format!("r{}", (n + t) % 3);
                let tok = format!("t{t}-{n}");
                let wait = [5, 50, 0][(n % 3) as usize];
                match acquire_wait(&mut c, &res, &tok, 300, wait) {
                    Ok(Some(_)) => {
                        received.fetch_add(1, Ordering::Relaxed);
                        if !n.is_multiple_of(16) {
                            release(&mut c, &res, &tok);
                        }
                    }
                    Ok(None) => {}
                    Err(e) => assert!(err_text(&e).starts_with("UNBLOCKED"), "{e}"),
                }
            }
        }));
    }
    let mut chaos = s.conn();
    let end = Instant::now() + Duration::from_secs(4);
    let mut unblocks = 0;
    while Instant::now() < end {
        let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut chaos).unwrap();
        // Every third blocked waiter is unblocked.
        for line in list
            .lines()
            .filter(|l| l.contains("cmd=dlock.acquire") && l.contains("flags=b"))
            .step_by(3)
        {
            let id = line.split(' ').find_map(|f| f.strip_prefix("id="));
            if let Some(id) = id {
                let mut cmd = redis::cmd("CLIENT");
                cmd.arg("UNBLOCK").arg(id);
                if unblocks % 2 == 0 {
                    cmd.arg("ERROR");
                }
                let _: i64 = cmd.query(&mut chaos).unwrap();
                unblocks += 1;
            }
        }
        thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    // Waiters with WAIT 0 are woken by releases; unblock any left.
    let deadline = Instant::now() + SOON;
    while threads.iter().any(|t| !t.is_finished()) {
        assert!(Instant::now() < deadline, "clients did not finish");
        let _ = redis::cmd("FLUSHALL").query::<()>(&mut chaos);
        thread::sleep(Duration::from_millis(20));
    }
    for t in threads {
        t.join().unwrap();
    }
    let grants = counter(&mut chaos, "grants");
    let revoked = counter(&mut chaos, "revoked_grants");
    let got = received.load(Ordering::Relaxed);
    eprintln!("grants {grants}, revoked {revoked}, received {got}, unblocks {unblocks}");
    assert!(got > 100, "the run made progress: {got}");
    assert_eq!(grants - revoked, got, "grants - revoked = fences received");
    wait_blocked_clients(&mut chaos, 0);
}

#[test]
fn a_waiter_the_server_closes_later_in_the_grant_turn_is_revoked() {
    // `ACL DELUSER` of the waiter's user marks its connection to be closed
    // later in the turn; the server then drops every reply to it, so its
    // grant was never delivered.
    let s = Server::start();
    let mut c = s.conn();
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "wu", "on", ">pw", "~*", "+@all"])
        .query(&mut c)
        .unwrap();
    hold(&mut c, "res", "holder");
    let mut w = s.conn();
    let _: () = redis::cmd("AUTH")
        .arg("wu")
        .arg("pw")
        .query(&mut w)
        .unwrap();
    let acquire = redis::cmd("DLOCK.ACQUIRE")
        .arg(&["res", "W", "60000", "WAIT", "0"])
        .get_packed_command();
    w.send_packed_command(&acquire).unwrap();
    wait_waiters(&mut c, "res", 1);
    let next = Waiter::queue(&mut c, &s.url(), "res", "NEXT", 2);
    let before = counters(&mut c);
    let results = release_and(&mut c, &[&["ACL", "DELUSER", "wu"]]);
    assert_eq!(as_int(&results[1]), 1, "user deleted");
    assert!(
        w.recv_response().is_err(),
        "the waiter's connection is closed"
    );
    let fence = next.granted().fence();
    assert_owner(&mut c, "res", "NEXT", fence);
    let d = delta(before, counters(&mut c));
    assert_eq!([d[0], d[1]], [2, 1], "W's grant revoked, NEXT granted");
    wait_blocked_clients(&mut c, 0);
}

#[test]
fn an_extend_does_not_confirm_a_grant_nobody_received() {
    // EXTEND answers 1 or 0, never the fence: a grant its waiter never got
    // is revoked even if its token extended the lease in between.
    let (_s, mut c, w) = held_with_waiter();
    let id = w.id.to_string();
    let v = release_and(
        &mut c,
        &[
            &["DLOCK.EXTEND", "res", "W", "60000"],
            &["CLIENT", "UNBLOCK", &id],
        ],
    );
    assert_eq!(as_int(&v[1]), 1, "extended inside the grant's turn");
    assert!(matches!(w.outcome(SOON).reply, Ok(None)));
    assert_eq!(info(&mut c, "res"), None, "revoked");
    assert_eq!(counter(&mut c, "revoked_grants"), 1);
}

#[test]
fn a_revocation_follows_a_lock_swapped_to_another_database() {
    let (_s, mut c, w) = held_with_waiter();
    let id = w.id.to_string();
    let v = release_and(
        &mut c,
        &[&["SWAPDB", "0", "1"], &["CLIENT", "UNBLOCK", &id]],
    );
    assert_eq!(as_int(&v[2]), 1, "W unblocked in its grant's turn");
    assert!(matches!(w.outcome(SOON).reply, Ok(None)));
    select(&mut c, 1);
    assert_eq!(
        info(&mut c, "res"),
        None,
        "revoked in the database the lock went to"
    );
    assert_eq!(counter(&mut c, "revoked_grants"), 1);
}

#[test]
fn a_revocation_due_when_its_lock_is_swapped_follows_it() {
    // The waiter leaves before the swap in the same turn: its grant's
    // revocation is still pending when SWAPDB moves the lock.
    let (_s, mut c, w) = held_with_waiter();
    let id = w.id.to_string();
    let v = release_and(
        &mut c,
        &[&["CLIENT", "UNBLOCK", &id], &["SWAPDB", "0", "1"]],
    );
    assert_eq!(as_int(&v[1]), 1, "W unblocked in its grant's turn");
    assert!(matches!(w.outcome(SOON).reply, Ok(None)));
    select(&mut c, 1);
    assert_eq!(
        info(&mut c, "res"),
        None,
        "revoked in the database the lock went to"
    );
    assert_eq!(counter(&mut c, "revoked_grants"), 1);
}

#[test]
fn an_extend_after_the_waiter_left_in_the_grant_turn_finds_no_hold() {
    // The revocation is queued when EXTEND runs: the command completes it
    // first, so the token that never got its fence holds nothing.
    let (_s, mut c, w) = held_with_waiter();
    let id = w.id.to_string();
    let v = release_and(
        &mut c,
        &[
            &["CLIENT", "KILL", "ID", &id],
            &["DLOCK.EXTEND", "res", "W", "60000"],
            &["DLOCK.INFO", "res"],
        ],
    );
    assert_eq!(as_int(&v[2]), 0, "nothing to extend: {v:?}");
    assert_eq!(v[3], Value::Nil, "free: {v:?}");
    assert_eq!(info(&mut c, "res"), None);
    assert_eq!(counter(&mut c, "revoked_grants"), 1);
}

#[test]
fn info_while_writes_are_paused_shows_no_grant_whose_waiter_left() {
    // The waiter leaves in its grant's turn, and writes are paused in that
    // same turn: the revocation waits for the pause to end. Meanwhile INFO
    // must not show the waiter as the owner (it never got the fence).
    let (_s, mut c, w) = held_with_waiter();
    let id = w.id.to_string();
    let v = release_and(
        &mut c,
        &[
            &["CLIENT", "UNBLOCK", &id],
            &["CLIENT", "PAUSE", "1500", "WRITE"],
        ],
    );
    assert_eq!(as_int(&v[1]), 1, "{v:?}");
    assert!(matches!(w.outcome(SOON).reply, Ok(None)));
    let shown = info(&mut c, "res");
    let _: () = redis::cmd("CLIENT").arg("UNPAUSE").query(&mut c).unwrap();
    wait_until(SOON, "the revocation after the pause", || {
        counter(&mut c, "revoked_grants") == 1
    });
    assert_eq!(info(&mut c, "res"), None);
    assert!(
        shown.as_ref().is_none_or(|i| i.token != b"W"),
        "INFO showed the undelivered grant as held: {shown:?}"
    );
}

#[test]
fn info_while_writes_are_paused_shows_no_shared_hold_whose_waiter_left() {
    // Two readers are granted together; one of them leaves in the grant's
    // turn while writes are paused: INFO lists only the other.
    let s = Server::start();
    let mut c = s.conn();
    hold(&mut c, "res", "holder");
    let mut readers = Vec::new();
    for (i, tok) in ["W", "X"].into_iter().enumerate() {
        let mut r = s.conn();
        let id: i64 = redis::cmd("CLIENT").arg("ID").query(&mut r).unwrap();
        let acquire = redis::cmd("DLOCK.ACQUIRE")
            .arg(&["res", tok, "10000", "SHARED", "WAIT", "20000"])
            .get_packed_command();
        r.send_packed_command(&acquire).unwrap();
        wait_waiters(&mut c, "res", i as i64 + 1);
        readers.push((id, r));
    }
    let id = readers[0].0.to_string();
    let v = release_and(
        &mut c,
        &[
            &["CLIENT", "UNBLOCK", &id],
            &["CLIENT", "PAUSE", "1500", "WRITE"],
        ],
    );
    assert_eq!(as_int(&v[1]), 1, "{v:?}");
    let shown: Value = redis::cmd("DLOCK.INFO").arg("res").query(&mut c).unwrap();
    let _: () = redis::cmd("CLIENT").arg("UNPAUSE").query(&mut c).unwrap();
    wait_until(SOON, "the revocation after the pause", || {
        counter(&mut c, "revoked_grants") == 1
    });
    let text = format!("{shown:?}");
    assert!(text.contains("'\"X\"'"), "X's hold is shown: {text}");
    assert!(!text.contains("'\"W\"'"), "W's hold is not: {text}");
}
