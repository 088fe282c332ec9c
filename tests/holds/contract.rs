//! The command contract of the new options: MULTI/EXEC and Lua (where
//! `WAIT` is a plain try), WRONGTYPE, bad input, the INFO list form in RESP2
//! and RESP3, fences.
use super::*;

const TTL: u64 = 60_000;

fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

fn raw(args: &[&str]) -> redis::Cmd {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    c
}

#[test]
fn multi_exec_and_lua_never_wait() {
    let s = Server::start();
    let mut c = s.conn();
    let t = Instant::now();
    let v: Vec<Value> = redis::pipe()
        .atomic()
        .add_command(acq("rw", "a", TTL).shared().cmd())
        .add_command(acq("rw", "b", TTL).shared().owner("B").wait(0).cmd())
        .add_command(acq("rw", "w", TTL).wait(0).cmd())
        .cmd("DLOCK.INFO")
        .arg("rw")
        .cmd("DLOCK.RELEASE")
        .arg("rw")
        .arg("a")
        .add_command(acq("rw", "b2", TTL).owner("B").wait(0).cmd())
        .cmd("DLOCK.INFO")
        .arg("rw")
        .query(&mut c)
        .unwrap();
    assert!(t.elapsed() < SOON, "WAIT blocked inside MULTI");
    let (fa, fb) = (as_int(&v[0]), as_int(&v[1]));
    assert!(fb > fa);
    assert_eq!(v[2], Value::Nil, "a writer beside readers: nil, not a wait");
    let Shown::Holds(h) = parse_shown(v[3].clone()) else {
        panic!("{v:?}")
    };
    assert_eq!((h.tokens(), h.waiters), (vec!["a", "b"], 0));
    assert_eq!(v[4], Value::Int(1));
    assert_eq!(as_int(&v[5]), fb, "upgrade granted once B is alone");
    let Shown::Holds(h) = parse_shown(v[6].clone()) else {
        panic!("{v:?}")
    };
    assert_eq!(h.tokens(), ["b", "b2"]);

    // Lua: a semaphore filled, the third permit with WAIT 0 (forever) is
    // a try; INFO comes back in the flat RESP2 form.
    let script = "local r = {} \
        for i, t in ipairs({'p1', 'p2', 'p3'}) do \
          r[i] = redis.call('DLOCK.ACQUIRE', KEYS[1], t, 10000, 'LIMIT', 2, 'WAIT', 0) \
        end \
        r[4] = redis.call('DLOCK.INFO', KEYS[1]) \
        return r";
    let t = Instant::now();
    let v: Vec<Value> = redis::cmd("EVAL")
        .arg(script)
        .arg(1)
        .arg("sem")
        .query(&mut c)
        .unwrap();
    assert!(t.elapsed() < SOON, "WAIT blocked inside Lua");
    assert!(as_int(&v[1]) > as_int(&v[0]));
    assert_eq!(v[2], Value::Nil);
    let Shown::Holds(h) = parse_shown(v[3].clone()) else {
        panic!("{v:?}")
    };
    assert_eq!(
        (h.kind.as_str(), h.limit, h.tokens()),
        ("semaphore", 2, vec!["p1", "p2"])
    );
    // Shared and owned holds from Lua, and their errors.
    let call =
        "return redis.call('DLOCK.ACQUIRE', KEYS[1], ARGV[1], 10000, 'SHARED', 'OWNER', ARGV[2])";
    let eval = |c: &mut Connection, tok: &str, owner: &str| -> RedisResult<Option<i64>> {
        redis::cmd("EVAL")
            .arg(call)
            .arg(1)
            .arg("lua")
            .arg(tok)
            .arg(owner)
            .query(c)
    };
    let f = eval(&mut c, "l1", "L").unwrap().expect("granted from Lua");
    assert_eq!(eval(&mut c, "l2", "L").unwrap(), Some(f));
    assert_eq!(eval(&mut c, "l1", "L").unwrap(), Some(f), "a retry");
    let e = err_text(&eval(&mut c, "l1", "M").unwrap_err());
    assert!(e.contains(&TOKEN_IN_USE[4..]), "{e}");
    assert_eq!(holds(&mut c, "lua").tokens(), ["l1", "l2"]);
}

#[test]
fn wrongtype_for_every_option() {
    let s = Server::start();
    let mut c = s.conn();
    let _: () = raw(&["SET", "s", "v", "PX", "60000"])
        .query(&mut c)
        .unwrap();
    let options: [&[&str]; 9] = [
        &["SHARED"],
        &["LIMIT", "2"],
        &["LIMIT", "1"],
        &["OWNER", "o"],
        &["SHARED", "OWNER", "o"],
        &["LIMIT", "3", "WAIT", "0"],
        &["SHARED", "WAIT", "100"],
        &["OWNER", "o", "WAIT", "0"],
        &["LIMIT", "1048576"],
    ];
    for opts in options {
        let mut args = vec!["DLOCK.ACQUIRE", "s", "tok", "1000"];
        args.extend_from_slice(opts);
        let e = raw(&args).query::<Value>(&mut c).unwrap_err();
        assert_eq!(err_text(&e), WRONGTYPE, "{opts:?}");
    }
    let v: String = raw(&["GET", "s"]).query(&mut c).unwrap();
    assert_eq!(v, "v");
    let p = pttl(&mut c, "s");
    assert!(p > 40_000 && p <= 60_000, "string TTL changed: {p}");
    assert_eq!(blocked_clients(&mut c), 0);
}

#[test]
fn bad_options_are_refused_and_change_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    acq("rw", "a1", TTL).shared().owner("A").grant(&mut c);
    acq("rw", "b1", TTL).shared().grant(&mut c);
    let before = holds(&mut c, "rw");
    let cases: &[(&[&str], &str)] = &[
        (&["LIMIT", "0"], LIMIT_RANGE),
        (&["LIMIT", "1048577"], LIMIT_RANGE),
        (&["LIMIT", "-1"], LIMIT_RANGE),
        (&["LIMIT", "2.0"], LIMIT_RANGE),
        (&["LIMIT", "x"], LIMIT_RANGE),
        (&["LIMIT", ""], LIMIT_RANGE),
        (&["OWNER", ""], EMPTY_OWNER),
        (&["SHARED", "OWNER", ""], EMPTY_OWNER),
        (&["SHARED", "SHARED"], SYNTAX),
        (&["shared", "SHARED"], SYNTAX),
        (&["LIMIT", "2", "LIMIT", "2"], SYNTAX),
        (&["OWNER", "a", "OWNER", "a"], SYNTAX),
        (&["OWNER", "a", "owner", "b"], SYNTAX),
        (&["WAIT", "1", "WAIT", "1"], SYNTAX),
        (&["OWNER"], SYNTAX),
        (&["LIMIT"], SYNTAX),
        (&["SHARED", "LIMIT"], SYNTAX),
        (&["FOO"], SYNTAX),
        (&["SHARED", "FOO"], SYNTAX),
        (&["SHAREDX"], SYNTAX),
        (&["LIMIT", "2", "SHARED"], SHARED_SEMAPHORE),
        (&["SHARED", "LIMIT", "3", "WAIT", "10"], SHARED_SEMAPHORE),
        (&["LIMIT", "2", "OWNER", "o"], OWNER_SEMAPHORE),
        (&["OWNER", "o", "LIMIT", "3", "WAIT", "10"], OWNER_SEMAPHORE),
    ];
    for res in ["rw", "free"] {
        for (opts, want) in cases {
            let mut args = vec!["DLOCK.ACQUIRE", res, "tok", "1000"];
            args.extend_from_slice(opts);
            let e = raw(&args).query::<Value>(&mut c).unwrap_err();
            assert_eq!(err_text(&e), *want, "{res} {opts:?}");
        }
    }
    before.assert_same(&holds(&mut c, "rw"));
    assert_eq!(shown(&mut c, "free"), Shown::Free);
    assert_eq!(dbsize(&mut c), 1);
    assert_eq!(blocked_clients(&mut c), 0);
    // The bounds themselves, options in any order and any case.
    let f = raw(&[
        "DLOCK.ACQUIRE",
        "big",
        "t",
        "60000",
        "wait",
        "10",
        "limit",
        "1048576",
    ])
    .query::<i64>(&mut c)
    .unwrap();
    let h = holds(&mut c, "big");
    assert_eq!(
        (h.kind.as_str(), h.limit, h.holds[0].fence),
        ("semaphore", 1 << 20, f)
    );
    // LIMIT 1 is the plain lock.
    let f = raw(&["DLOCK.ACQUIRE", "one", "t", "60000", "LIMIT", "1"])
        .query::<i64>(&mut c)
        .unwrap();
    // Two reads may straddle a millisecond: compare all but the ttl.
    match shown(&mut c, "one") {
        Shown::Plain(info) => assert_eq!((info.token, info.fence), (b"t".to_vec(), f)),
        other => panic!("LIMIT 1 must be a plain lock: {other:?}"),
    }
    let f = raw(&["DLOCK.ACQUIRE", "low", "t", "60000", "owner", "o", "Shared"])
        .query::<i64>(&mut c)
        .unwrap();
    let h = holds(&mut c, "low").holds;
    assert_eq!(
        (h[0].owner.as_str(), h[0].mode.as_str(), h[0].fence),
        ("o", "shared", f)
    );
}

/// The exact list form, field by field, in both protocols.
#[test]
fn info_list_form_in_resp2_and_resp3() {
    let s = Server::start();
    let mut c = s.conn();
    let fa = acq("rw", "a1", TTL).shared().owner("A").grant(&mut c);
    let w = acq("rw", "w", TTL).wait(30_000).spawn(&s.url());
    wait_queue(&mut c, "rw", 1);
    let fp = acq("sem", "p1", TTL).limit(2).grant(&mut c);
    let cases = [
        ("rw", "rwlock", 1, 1, "a1", "A", fa, "shared"),
        ("sem", "semaphore", 2, 0, "p1", "p1", fp, "exclusive"),
    ];
    for resp3 in [false, true] {
        let mut c = if resp3 { s.conn_resp3() } else { s.conn() };
        for (res, kind, limit, waiters, token, owner, fence, mode) in cases {
            let v: Value = redis::cmd("DLOCK.INFO").arg(res).query(&mut c).unwrap();
            let ttl = parse_shown(v.clone());
            let Shown::Holds(h) = ttl else {
                panic!("{v:?}")
            };
            let ttl = h.holds[0].ttl;
            assert!(ttl > TTL as i64 - 20_000 && ttl <= TTL as i64, "ttl {ttl}");
            let hold = [
                ("token", bulk(token)),
                ("owner", bulk(owner)),
                ("fence", Value::Int(fence)),
                ("ttl", Value::Int(ttl)),
                ("mode", bulk(mode)),
            ];
            let top = [
                ("kind", bulk(kind)),
                ("limit", Value::Int(limit)),
                ("waiters", Value::Int(waiters)),
            ];
            let want = if resp3 {
                let map = |p: &[(&str, Value)]| {
                    Value::Map(p.iter().map(|(k, v)| (bulk(k), v.clone())).collect())
                };
                let mut m: Vec<(&str, Value)> = top.to_vec();
                m.push(("holds", Value::Array(vec![map(&hold)])));
                map(&m)
            } else {
                let flat = |p: &[(&str, Value)]| {
                    Value::Array(p.iter().flat_map(|(k, v)| [bulk(k), v.clone()]).collect())
                };
                let mut m: Vec<(&str, Value)> = top.to_vec();
                m.push(("holds", Value::Array(vec![flat(&hold)])));
                flat(&m)
            };
            assert_eq!(v, want, "{res}, resp3 {resp3}");
        }
    }
    assert_eq!(release(&mut c, "rw", "a1"), 1);
    w.granted();
}

#[test]
fn several_holds_of_one_owner_use_the_list_form_and_one_hold_the_plain_one() {
    let s = Server::start();
    let mut c = s.conn();
    let f = grant(&mut c, "x", "t", TTL);
    assert!(matches!(shown(&mut c, "x"), Shown::Plain(_)));
    // The plain holder's token is its owner: a second hold shares its fence.
    assert_eq!(acq("x", "t2", TTL).owner("t").grant(&mut c), f);
    let h = holds(&mut c, "x");
    assert_eq!((h.kind.as_str(), h.tokens()), ("rwlock", vec!["t", "t2"]));
    assert!(h
        .holds
        .iter()
        .all(|x| x.owner == "t" && x.mode == "exclusive"));
    assert_eq!(release(&mut c, "x", "t2"), 1);
    let i = match shown(&mut c, "x") {
        Shown::Plain(i) => i,
        other => panic!("one exclusive hold of its own token is a plain lock: {other:?}"),
    };
    assert_eq!((i.token.as_slice(), i.fence), (&b"t"[..], f));
}

#[test]
fn fences_are_fresh_per_owner_and_per_permit_and_shared_within_an_owner() {
    let s = Server::start();
    let mut c = s.conn();
    let r1 = acq("rw", "r1", TTL).shared().grant(&mut c);
    let r2 = acq("rw", "r2", TTL).shared().grant(&mut c);
    let a = acq("rw", "a1", TTL).shared().owner("A").grant(&mut c);
    assert_eq!(acq("rw", "a2", TTL).shared().owner("A").grant(&mut c), a);
    let b = acq("rw", "b1", TTL).shared().owner("B").grant(&mut c);
    assert!(r1 < r2 && r2 < a && a < b, "{r1} {r2} {a} {b}");
    // The owner's first live hold gone, the others keep its fence.
    assert_eq!(release(&mut c, "rw", "a1"), 1);
    assert_eq!(acq("rw", "a3", TTL).shared().owner("A").grant(&mut c), a);
    assert_eq!(holds(&mut c, "rw").hold("a2").fence, a);
    // All of A's holds gone: A is a new owner again.
    assert_eq!(release(&mut c, "rw", "a2"), 1);
    assert_eq!(release(&mut c, "rw", "a3"), 1);
    let a_again = acq("rw", "a4", TTL).shared().owner("A").grant(&mut c);
    assert!(a_again > b);
    // Permits: each its own fence, increasing; a retry gives its own back.
    let p: Vec<i64> = (1..=3)
        .map(|i| acq("sem", &format!("p{i}"), TTL).limit(3).grant(&mut c))
        .collect();
    assert!(p[0] > a_again && p[0] < p[1] && p[1] < p[2], "{p:?}");
    assert_eq!(acq("sem", "p2", TTL).limit(3).grant(&mut c), p[1]);
    assert_eq!(release(&mut c, "sem", "p2"), 1);
    assert!(acq("sem", "p4", TTL).limit(3).grant(&mut c) > p[2]);
    let h = holds(&mut c, "sem");
    assert_eq!(h.tokens(), ["p1", "p3", "p4"]);
}
