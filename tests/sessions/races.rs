//! A session's end in the same event-loop turn as what competes with it:
//! forced with `MULTI`/`EXEC`, or with commands written in one packet
//! behind a `DEBUG SLEEP` (the server runs a client's buffered commands
//! back to back, before any timer; unlike a transaction, each sees the
//! clock move).
use super::*;

/// Writes `cmds` in one packet and reads their replies, errors included:
/// the server runs them in one turn of its event loop.
fn one_turn(c: &mut Connection, cmds: &[redis::Cmd]) -> Vec<Value> {
    let mut p = redis::pipe();
    for cmd in cmds {
        p.add_command(cmd.clone());
    }
    c.req_packed_commands(&p.get_packed_pipeline(), 0, cmds.len())
        .expect("replies")
}

fn sleep_cmd(seconds: &str) -> redis::Cmd {
    let mut c = redis::cmd("DEBUG");
    c.arg("SLEEP").arg(seconds);
    c
}

#[test]
fn a_close_and_acquires_in_one_transaction_leave_the_resource_to_its_queue() {
    let s = Server::start();
    let mut c = s.conn();
    open(&mut c, "w", 60_000);
    req("r", "t1").session("w").grant(&mut c);
    let waiter = req("r", "W").ttl("60000").wait(0).spawn(&s);
    wait_queued(&mut c, "r", 1);
    let grants = stat(&mut c, "grants");
    let v = transaction(
        &mut c,
        &[
            session_cmd("CLOSE", &["w"]),
            req("r", "X").ttl("60000").cmd(),
            req("free", "Y").session("w").cmd(),
            req("r", "t1").session("w").cmd(),
        ],
    );
    assert_eq!(v[0], Value::Int(1), "{v:?}");
    // Whether r is still being released or reserved for W, X must not
    // pass the queue.
    assert_eq!(v[1], Value::Nil, "{v:?}");
    assert_eq!(
        value_err(&v[2]),
        NOSESSION,
        "a new hold for an ended session"
    );
    assert_eq!(value_err(&v[3]), NOSESSION, "a retry for an ended session");
    let fence = waiter.granted();
    assert_eq!(shown(&mut c, "r").tokens(), ["W"]);
    assert_eq!(shown(&mut c, "r").hold("W").fence, fence);
    assert!(!exists(&mut c, "free"));
    wait_no_session_holds(&mut c);
    assert_eq!(shown(&mut c, "r").hold("W").fence, fence, "W keeps it");
    assert_eq!(stat(&mut c, "grants") - grants, 1, "one grant: W's");
}

#[test]
fn a_keepalive_in_the_turn_the_ttl_is_due_finds_the_session_ended() {
    let s = Server::start();
    let mut c = s.conn();
    open(&mut c, "w", 60_000);
    req("r", "t1").session("w").grant(&mut c);
    let waiter = req("r", "W").ttl("60000").wait(0).spawn(&s);
    wait_queued(&mut c, "r", 1);
    // The ttl is cut to 200 ms and the server then sleeps 500 ms: the
    // session's deadline has passed when the next commands run, in the same
    // turn, before any timer could end it.
    let v = one_turn(
        &mut c,
        &[
            session_cmd("KEEPALIVE", &["w", "200"]),
            sleep_cmd("0.5"),
            session_cmd("KEEPALIVE", &["w"]),
            req("r", "t1").session("w").cmd(),
            req("other", "t2").session("w").cmd(),
        ],
    );
    assert_eq!(v[0], Value::Int(200), "{v:?}");
    assert_eq!(
        value_err(&v[2]),
        NOSESSION,
        "a session past its ttl is over"
    );
    assert_eq!(value_err(&v[3]), NOSESSION, "{v:?}");
    assert_eq!(value_err(&v[4]), NOSESSION, "{v:?}");
    waiter.granted();
    assert!(!exists(&mut c, "other"));
    assert_eq!(stat(&mut c, "sessions_expired"), 1);
    assert_eq!(stat(&mut c, "sessions"), 0);
}

#[test]
fn a_session_past_its_ttl_is_shown_nowhere_in_that_turn() {
    // KEEPALIVE calls it ended; INFO and LIST must agree (as DLOCK.INFO
    // never shows a hold past its deadline).
    let s = Server::start();
    let mut c = s.conn();
    open(&mut c, "w", 60_000);
    req("r", "t1").session("w").grant(&mut c);
    let v = one_turn(
        &mut c,
        &[
            session_cmd("KEEPALIVE", &["w", "200"]),
            sleep_cmd("0.5"),
            session_cmd("INFO", &["w"]),
            session_cmd("LIST", &[]),
            session_cmd("KEEPALIVE", &["w"]),
        ],
    );
    assert_eq!(value_err(&v[4]), NOSESSION, "{v:?}");
    assert_eq!(v[2], Value::Nil, "INFO of a session past its ttl");
    let (next, ids) = page(v[3].clone());
    assert_eq!(
        (next, ids),
        (None, vec![]),
        "LIST of a session past its ttl"
    );
}

#[test]
fn a_keepalive_before_the_ttl_is_due_keeps_everything() {
    // The counterpart: the same turn without the sleep keeps the session.
    let s = Server::start();
    let mut c = s.conn();
    open(&mut c, "w", 60_000);
    let fence = req("r", "t1").session("w").grant(&mut c);
    let v = one_turn(
        &mut c,
        &[
            session_cmd("KEEPALIVE", &["w", "200"]),
            session_cmd("KEEPALIVE", &["w", "60000"]),
            req("r", "t1").session("w").cmd(),
        ],
    );
    assert_eq!(v, [Value::Int(200), Value::Int(60_000), Value::Int(fence)]);
    std::thread::sleep(Duration::from_millis(400));
    assert!(live(&mut c, "w").ttl > 200);
    assert_bound(&mut c, "r", "t1", "w");
}

#[test]
fn a_close_racing_the_handoff_to_its_bound_waiter_frees_the_resource() {
    let s = Server::start();
    let mut c = s.conn();
    open(&mut c, "w", 60_000);
    req("r", "holder").ttl("60000").grant(&mut c);
    let bound_waiter = req("r", "tw").wait(0).session("w").spawn(&s);
    wait_queued(&mut c, "r", 1);
    let next = req("r", "NEXT").ttl("60000").wait(0).spawn(&s);
    wait_queued(&mut c, "r", 2);
    // The release grants r to tw (bound to w); w ends in the same turn.
    let v = transaction(
        &mut c,
        &[
            redis::cmd("DLOCK.RELEASE").arg("r").arg("holder").clone(),
            session_cmd("CLOSE", &["w"]),
        ],
    );
    assert_eq!(v, [Value::Int(1), Value::Int(1)]);
    let next_fence = next.granted();
    // tw was granted before w ended, so it may have its fence (a hold the
    // session's end then released), or it learns the session ended.
    match bound_waiter.outcome(RELEASED).0 {
        Ok(Some(f)) => assert!(f < next_fence, "tw's fence {f} after NEXT's"),
        Err(e) => assert_eq!(err_text(&e), NOSESSION),
        other => panic!("tw: {other:?}"),
    }
    wait_no_session_holds(&mut c);
    assert_eq!(shown(&mut c, "r").tokens(), ["NEXT"]);
    assert_eq!(shown(&mut c, "r").hold("NEXT").fence, next_fence);
    assert_eq!(session_info(&mut c, "w"), None);
    wait_blocked_clients(&mut c, 0);
}

#[test]
fn a_close_racing_its_own_holds_release_grants_the_waiter_once() {
    let s = Server::start();
    let mut c = s.conn();
    open(&mut c, "w", 60_000);
    req("r", "t1").session("w").grant(&mut c);
    let waiter = req("r", "W").ttl("60000").wait(0).spawn(&s);
    wait_queued(&mut c, "r", 1);
    let grants = stat(&mut c, "grants");
    let v = transaction(
        &mut c,
        &[
            session_cmd("CLOSE", &["w"]),
            redis::cmd("DLOCK.RELEASE").arg("r").arg("t1").clone(),
        ],
    );
    assert_eq!(v[0], Value::Int(1), "{v:?}");
    assert!(matches!(v[1], Value::Int(0 | 1)), "{v:?}");
    let fence = waiter.granted();
    wait_no_session_holds(&mut c);
    // The session's later release touched nothing that was W's.
    assert_eq!(shown(&mut c, "r").tokens(), ["W"]);
    assert_eq!(shown(&mut c, "r").hold("W").fence, fence);
    assert_eq!(stat(&mut c, "grants") - grants, 1, "one grant");
}

#[test]
fn a_hold_taken_after_a_close_is_not_released_by_the_ending_session() {
    let s = Server::start();
    let mut c = s.conn();
    open(&mut c, "w", 60_000);
    for i in 0..50 {
        req(&format!("r{i}"), "t").session("w").grant(&mut c);
    }
    // Each resource is released and taken by u in the turn of the CLOSE,
    // before the session's own release reaches it.
    let mut cmds = vec![session_cmd("CLOSE", &["w"])];
    for i in 0..50 {
        let res = format!("r{i}");
        cmds.push(redis::cmd("DLOCK.RELEASE").arg(&res).arg("t").clone());
        cmds.push(req(&res, "u").ttl("60000").cmd());
    }
    let v = transaction(&mut c, &cmds);
    assert_eq!(v[0], Value::Int(1));
    let mut taken = Vec::new();
    for i in 0..50 {
        match (&v[1 + 2 * i], &v[2 + 2 * i]) {
            // Released by t (or already by the session, if it releases
            // some in the command), then u's.
            (Value::Int(0 | 1), Value::Int(f)) => taken.push((format!("r{i}"), *f)),
            (Value::Int(0), Value::Nil) => {}
            other => panic!("r{i}: {other:?}"),
        }
    }
    wait_no_session_holds(&mut c);
    for (res, fence) in &taken {
        assert_eq!(shown(&mut c, res).hold("u").fence, *fence, "{res}");
    }
    for i in 0..50 {
        let res = format!("r{i}");
        if !taken.iter().any(|(r, _)| *r == res) {
            assert_eq!(shown(&mut c, &res), Shown::Free, "{res}");
        }
    }
}

#[test]
fn a_bind_connection_killed_while_its_waiter_is_granted_frees_the_resource() {
    let s = Server::start();
    let mut c = s.conn();
    req("r", "holder").ttl("60000").grant(&mut c);
    let mut owner = s.conn();
    assert_eq!(open_with(&mut owner, "w", 60_000, &["BIND"]), 1);
    let cmd = req("r", "tb").wait(0).session("w").cmd();
    let bound_waiter = Blocked::send(owner, cmd, "tb on the BIND connection".into());
    wait_queued(&mut c, "r", 1);
    let next = req("r", "NEXT").ttl("60000").wait(0).spawn(&s);
    wait_queued(&mut c, "r", 2);
    let id = bound_waiter.id.to_string();
    let v = transaction(
        &mut c,
        &[
            redis::cmd("DLOCK.RELEASE").arg("r").arg("holder").clone(),
            redis::cmd("CLIENT").arg("KILL").arg("ID").arg(&id).clone(),
        ],
    );
    assert_eq!(v, [Value::Int(1), Value::Int(1)]);
    let (reply, ..) = bound_waiter.outcome(RELEASED);
    assert!(
        reply.is_err(),
        "a killed connection gets no fence: {reply:?}"
    );
    let next_fence = next.granted();
    wait_ended(&mut c, "w");
    wait_no_session_holds(&mut c);
    assert_eq!(shown(&mut c, "r").tokens(), ["NEXT"]);
    assert_eq!(shown(&mut c, "r").hold("NEXT").fence, next_fence);
    assert_eq!(stat(&mut c, "sessions_disconnected"), 1);
    wait_blocked_clients(&mut c, 0);
}
