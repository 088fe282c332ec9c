//! Waiters whose `WAIT` ran out before their timer could answer them: the
//! command that finds them (a barging ACQUIRE, a RELEASE) answers them nil
//! and never hands them the lock, whether a live waiter stands behind them
//! or nobody does.
//!
//! The `WAIT` is made to run out inside a MULTI (`DEBUG SLEEP` longer than
//! it): no timer runs until EXEC ends, so the commands after the sleep find
//! the waiter given up but still queued. Were the waiter's own timer to
//! answer it first (a machine stalled for the whole `WAIT` before the
//! MULTI), the replies would be the same.
use super::*;

/// The head waiter's `WAIT`, and the sleep inside the MULTI that outlasts it.
const GIVE_UP_MS: u64 = 1_000;
const SLEEP_S: &str = "1.2";

/// `res` held by "holder", a head waiter "gaveup" whose `WAIT` runs out
/// inside the MULTI, and (with `live_behind`) a waiter "next" behind it
/// with a long `WAIT`. The MULTI sleeps, then runs `then`.
fn after_give_up(
    live_behind: bool,
    then: &[&[&str]],
) -> (Server, Connection, Waiter, Option<Waiter>, Vec<Value>) {
    let s = Server::start();
    let mut c = s.conn();
    hold(&mut c, "res", "holder");
    let gaveup = Waiter::start(&s.url(), "res", "gaveup", 10_000, GIVE_UP_MS);
    wait_waiters(&mut c, "res", 1);
    let next = live_behind.then(|| Waiter::queue(&mut c, &s.url(), "res", "next", 2));
    let mut pipe = redis::pipe();
    pipe.atomic().cmd("DEBUG").arg("SLEEP").arg(SLEEP_S);
    for cmd in then {
        let mut one = redis::cmd(cmd[0]);
        for a in &cmd[1..] {
            one.arg(*a);
        }
        pipe.add_command(one);
    }
    let v = exec_values(&mut c, &pipe);
    (s, c, gaveup, next, v)
}

fn assert_nil(w: &Waiter) {
    let o = w.outcome(SOON);
    assert!(
        matches!(o.reply, Ok(None)),
        "waiter {} gave up: nil, not {:?}",
        w.tok,
        o.reply
    );
}

#[test]
fn a_barging_acquire_answers_a_given_up_head_and_hands_over_to_the_next() {
    let (_s, mut c, gaveup, next, v) = after_give_up(
        true,
        &[&["DEL", "res"], &["DLOCK.ACQUIRE", "res", "barger", "1000"]],
    );
    assert_eq!(
        v,
        vec![Value::Okay, Value::Int(1), Value::Nil],
        "MULTI replies"
    );
    assert_nil(&gaveup);
    let next = next.expect("a waiter behind");
    let f = next.granted().fence();
    let i = assert_owner(&mut c, "res", "next", f);
    assert_eq!(i.waiters, 0);
    assert_eq!(blocked_clients(&mut c), 0);
}

#[test]
fn a_release_answers_a_given_up_head_and_hands_over_to_the_next() {
    let (_s, mut c, gaveup, next, v) = after_give_up(
        true,
        &[&["DLOCK.RELEASE", "res", "holder"], &["DLOCK.INFO", "res"]],
    );
    assert_eq!(v.len(), 3, "MULTI replies {v:?}");
    assert_eq!(v[1], Value::Int(1), "the holder's RELEASE");
    let i = parse_info(v[2].clone()).expect("handed over inside the RELEASE");
    assert_eq!(
        i.token, b"next",
        "the live waiter gets it, not the given-up head"
    );
    assert_nil(&gaveup);
    let f = next.expect("a waiter behind").granted().fence();
    assert_eq!(f, i.fence);
    assert_owner(&mut c, "res", "next", f);
    assert_eq!(blocked_clients(&mut c), 0);
}

#[test]
fn a_barging_acquire_behind_only_given_up_waiters_gets_the_lock() {
    let (_s, mut c, gaveup, _, v) = after_give_up(
        false,
        &[&["DEL", "res"], &["DLOCK.ACQUIRE", "res", "barger", "1000"]],
    );
    assert_eq!(v.len(), 3, "MULTI replies {v:?}");
    let Value::Int(f) = v[2] else {
        panic!("the barger is granted a lock nobody live waits for: {v:?}");
    };
    assert_nil(&gaveup);
    let i = assert_owner(&mut c, "res", "barger", f);
    assert_eq!(i.waiters, 0);
    assert_eq!(blocked_clients(&mut c), 0);
}
