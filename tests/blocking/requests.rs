//! WAIT inside MULTI and Lua (never blocks), the same token waiting on its
//! own lock, and bad WAIT arguments.
use super::*;

// ---------------------------------------------------------------- MULTI / Lua

#[test]
fn wait_inside_multi_and_lua_does_not_block() {
    let s = Server::start();
    let mut c = s.conn();
    let hf = hold(&mut c, "res", "holder");
    let t0 = Instant::now();
    let v = exec_values(
        &mut c,
        redis::pipe()
            .atomic()
            .cmd("DLOCK.ACQUIRE")
            .arg("res")
            .arg("b")
            .arg(1000)
            .arg("WAIT")
            .arg(5000)
            .cmd("DLOCK.ACQUIRE")
            .arg("free")
            .arg("b")
            .arg(1000)
            .arg("WAIT")
            .arg(0),
    );
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert_eq!(v.len(), 2);
    assert_eq!(v[0], Value::Nil, "busy lock inside MULTI: nil at once");
    assert!(
        matches!(v[1], Value::Int(_)),
        "free lock inside MULTI: {v:?}"
    );

    let t0 = Instant::now();
    let v: Value = redis::cmd("EVAL")
        .arg("return redis.call('DLOCK.ACQUIRE', KEYS[1], 'b', 1000, 'WAIT', 0)")
        .arg(1)
        .arg("res")
        .query(&mut c)
        .unwrap();
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert_eq!(v, Value::Nil, "busy lock inside Lua: nil at once");
    let v: Value = redis::cmd("EVAL")
        .arg("return redis.call('DLOCK.ACQUIRE', KEYS[1], 'b', 1000, 'WAIT', 5000)")
        .arg(1)
        .arg("free2")
        .query(&mut c)
        .unwrap();
    assert!(matches!(v, Value::Int(_)), "free lock inside Lua: {v:?}");

    let i = assert_owner(&mut c, "res", "holder", hf);
    assert_eq!(i.waiters, 0);
    assert_eq!(blocked_clients(&mut c), 0);
}

// ---------------------------------------------------------------- same token

#[test]
fn same_token_waiting_on_own_lock_is_immediate() {
    let s = Server::start();
    let mut c = s.conn();
    let hf = hold(&mut c, "res", "tok");
    let mut other = s.conn();
    for conn in [&mut c, &mut other] {
        let t0 = Instant::now();
        let f = acquire_wait(conn, "res", "tok", 5_000, 10_000).unwrap();
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
        assert_eq!(f, Some(hf), "same token: same fence at once");
    }
    let i = assert_owner(&mut c, "res", "tok", hf);
    assert!(
        i.ttl > 4_000 && i.ttl <= 5_000,
        "ttl reset to 5000: {}",
        i.ttl
    );
    assert_eq!(i.waiters, 0);
}

#[test]
fn same_token_queued_twice_gets_one_grant() {
    let s = Server::start();
    let mut c = s.conn();
    let hf = hold(&mut c, "res", "holder");
    let a = Waiter::queue(&mut c, &s.url(), "res", "T", 1);
    let b = Waiter::queue(&mut c, &s.url(), "res", "T", 2);
    let z = Waiter::queue(&mut c, &s.url(), "res", "Z", 3);
    assert_eq!(release(&mut c, "res", "holder"), 1);
    let (fa, fb) = (a.granted().fence(), b.granted().fence());
    assert_eq!(fa, fb, "one grant answers both");
    assert!(fa > hf);
    let i = assert_owner(&mut c, "res", "T", fa);
    assert_eq!(i.waiters, 1, "only Z is left");
    z.assert_pending();
    assert_eq!(release(&mut c, "res", "T"), 1);
    let fz = z.granted().fence();
    assert_owner(&mut c, "res", "Z", fz);
    assert_eq!(blocked_clients(&mut c), 0);
}

// ---------------------------------------------------------------- bad input

#[test]
fn bad_wait_arguments() {
    let s = Server::start();
    let mut c = s.conn();
    let hf = hold(&mut c, "res", "holder");
    let cases: &[(&[&str], &str)] = &[
        (&["WAIT"], SYNTAX_ERR),
        (&["WAIT", "1", "WAIT", "1"], SYNTAX_ERR),
        (&["WAIT", "100", "WAIT"], SYNTAX_ERR),
        (&["WAIT", "100", "NX"], SYNTAX_ERR),
        (&["WAIT", "-1"], WAIT_ERR),
        (&["WAIT", "abc"], WAIT_ERR),
        (&["WAIT", "1.5"], WAIT_ERR),
        (&["WAIT", ""], WAIT_ERR),
        (&["WAIT", "140737488355329"], WAIT_ERR),
        (&["WAIT", "99999999999999999999999"], WAIT_ERR),
    ];
    for res in ["res", "free"] {
        for (extra, expected) in cases {
            let mut cmd = redis::cmd("DLOCK.ACQUIRE");
            cmd.arg(res).arg("other").arg(1000);
            for a in *extra {
                cmd.arg(*a);
            }
            let t0 = Instant::now();
            match cmd.query::<Value>(&mut c) {
                Ok(v) => panic!("{res} {extra:?}: expected {expected:?}, got {v:?}"),
                Err(e) => assert_eq!(err_text(&e), *expected, "{res} {extra:?}"),
            }
            assert!(t0.elapsed() < Duration::from_secs(2), "{extra:?} blocked");
        }
    }
    let i = assert_owner(&mut c, "res", "holder", hf);
    assert!(i.ttl > LONG_TTL as i64 - 10_000, "ttl {}", i.ttl);
    assert_eq!(i.waiters, 0);
    assert_eq!(info(&mut c, "free"), None, "bad input must create nothing");
    assert_eq!(blocked_clients(&mut c), 0);
    // Lowercase `wait` and the maximum timeout are accepted.
    let f = acquire_wait(&mut c, "free", "tok", 1000, 1 << 47).unwrap();
    assert!(f.is_some());
    let f: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
        .arg("free2")
        .arg("tok")
        .arg(1000)
        .arg("wait")
        .arg(10)
        .query(&mut c)
        .unwrap();
    assert!(f.is_some());
}
