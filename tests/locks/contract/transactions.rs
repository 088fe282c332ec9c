//! WATCH (aborted only by real changes), MULTI/EXEC and Lua.
use super::*;

// ---------------------------------------------------------------- WATCH

/// `owner` holds `res` on conn O; conn A WATCHes it; `meddle` runs on conn
/// B; returns whether A's MULTI/EXEC still ran.
fn watch_survives(meddle: impl FnOnce(&mut Connection)) -> bool {
    let s = Server::start();
    let mut o = s.conn();
    let mut a = s.conn();
    let mut b = s.conn();
    hold(&mut o, b"res", b"owner");
    let _: () = redis::cmd("WATCH").arg("res").query(&mut a).unwrap();
    meddle(&mut b);
    let _: () = redis::cmd("MULTI").query(&mut a).unwrap();
    let q: String = redis::cmd("SET").arg("x").arg("1").query(&mut a).unwrap();
    assert_eq!(q, "QUEUED");
    let v: Value = redis::cmd("EXEC").query(&mut a).unwrap();
    match v {
        Value::Nil => false,
        Value::Array(r) => {
            assert_eq!(r, vec![Value::Okay]);
            true
        }
        other => panic!("unexpected EXEC reply {other:?}"),
    }
}

/// Runs an empty-ish transaction on `a`; false if its WATCH aborted it.
fn exec_runs(a: &mut Connection) -> bool {
    let _: () = redis::cmd("MULTI").query(a).unwrap();
    let _: String = redis::cmd("PING").query(a).unwrap();
    let v: Value = redis::cmd("EXEC").query(a).unwrap();
    v != Value::Nil
}

#[test]
fn watch_survives_failed_acquire() {
    assert!(watch_survives(|b| {
        assert_eq!(acquire(b, b"res", b"other", 10_000), None);
    }));
}

#[test]
fn watch_survives_failed_release() {
    assert!(watch_survives(|b| {
        assert_eq!(release(b, b"res", b"other"), 0);
    }));
}

#[test]
fn watch_survives_failed_extend() {
    assert!(watch_survives(|b| {
        assert_eq!(extend(b, b"res", b"other", 10_000), 0);
    }));
}

#[test]
fn watch_survives_refused_bad_input() {
    assert!(watch_survives(|b| {
        assert_eq!(
            expect_err(b, &[b"DLOCK.ACQUIRE", b"res", b"owner", b"abc"]),
            TTL_ERR
        );
        assert_eq!(
            expect_err(b, &[b"DLOCK.EXTEND", b"res", b"owner", b"0"]),
            TTL_ERR
        );
        assert_eq!(
            expect_err(b, &[b"DLOCK.RELEASE", b"res", b""]),
            EMPTY_TOKEN_ERR
        );
        assert_eq!(
            expect_err(b, &[b"DLOCK.ACQUIRE", b"res", b"owner", b"10", b"X"]),
            SYNTAX_ERR
        );
    }));
}

#[test]
fn watch_survives_info() {
    assert!(watch_survives(|b| {
        assert!(info(b, b"res").is_some());
    }));
}

#[test]
fn watch_aborted_by_successful_extend() {
    assert!(!watch_survives(|b| {
        assert_eq!(extend(b, b"res", b"owner", 10_000), 1);
    }));
}

#[test]
fn watch_aborted_by_successful_reacquire() {
    assert!(!watch_survives(|b| {
        assert!(acquire(b, b"res", b"owner", 10_000).is_some());
    }));
}

#[test]
fn watch_aborted_by_successful_release() {
    assert!(!watch_survives(|b| {
        assert_eq!(release(b, b"res", b"owner"), 1);
    }));
}

#[test]
fn watch_on_other_type_survives_wrongtype() {
    let s = Server::start();
    let mut a = s.conn();
    let mut b = s.conn();
    let _: () = redis::cmd("SET").arg("s").arg("v").query(&mut a).unwrap();
    let _: () = redis::cmd("WATCH").arg("s").query(&mut a).unwrap();
    for args in [
        &[&b"DLOCK.ACQUIRE"[..], b"s", b"t", b"1000"][..],
        &[b"DLOCK.RELEASE", b"s", b"t"],
        &[b"DLOCK.EXTEND", b"s", b"t", b"1000"],
        &[b"DLOCK.INFO", b"s"],
    ] {
        assert_eq!(expect_err(&mut b, args), WRONGTYPE_ERR);
    }
    assert!(exec_runs(&mut a), "WRONGTYPE refusals aborted WATCH");
}

#[test]
fn watch_on_free_key_aborted_by_grant_not_by_failed_ops() {
    let s = Server::start();
    let mut a = s.conn();
    let mut b = s.conn();
    // Failed ops on a free key do not touch the watch...
    let _: () = redis::cmd("WATCH").arg("free").query(&mut a).unwrap();
    assert_eq!(release(&mut b, b"free", b"t"), 0);
    assert_eq!(extend(&mut b, b"free", b"t", 1_000), 0);
    assert_eq!(info(&mut b, b"free"), None);
    assert!(exec_runs(&mut a), "failed ops on a free key aborted WATCH");
    // ... a grant does.
    let _: () = redis::cmd("WATCH").arg("free").query(&mut a).unwrap();
    assert!(acquire(&mut b, b"free", b"t", 10_000).is_some());
    assert!(!exec_runs(&mut a), "a grant must abort WATCH");
}

// ---------------------------------------------------------------- MULTI, Lua

#[test]
fn works_inside_multi_exec() {
    let s = Server::start();
    let mut c = s.conn();
    let v: Vec<Value> = redis::pipe()
        .atomic()
        .cmd("DLOCK.ACQUIRE")
        .arg("res")
        .arg("tok")
        .arg(10_000)
        .cmd("DLOCK.ACQUIRE")
        .arg("res")
        .arg("other")
        .arg(10_000)
        .cmd("DLOCK.EXTEND")
        .arg("res")
        .arg("tok")
        .arg(20_000)
        .cmd("DLOCK.INFO")
        .arg("res")
        .cmd("DLOCK.RELEASE")
        .arg("res")
        .arg("tok")
        .cmd("DLOCK.INFO")
        .arg("res")
        .query(&mut c)
        .unwrap();
    assert_eq!(v.len(), 6, "{v:?}");
    let fence = as_int(&v[0]);
    assert!(fence >= 1);
    assert_eq!(v[1], Value::Nil);
    assert_eq!(v[2], Value::Int(1));
    let i = parse_info(v[3].clone()).unwrap();
    assert_eq!((i.token.as_slice(), i.fence), (&b"tok"[..], fence));
    assert!(i.ttl > 0 && i.ttl <= 20_000);
    assert_eq!(v[4], Value::Int(1));
    assert_eq!(v[5], Value::Nil);
    assert!(!exists(&mut c, b"res"));
    // A bad command inside MULTI is an error entry (the client surfaces it
    // as the query's error); the rest of the transaction still runs.
    let e = redis::pipe()
        .atomic()
        .cmd("DLOCK.ACQUIRE")
        .arg("res")
        .arg("tok")
        .arg("abc")
        .cmd("DLOCK.ACQUIRE")
        .arg("res")
        .arg("tok")
        .arg(10_000)
        .query::<Vec<Value>>(&mut c)
        .unwrap_err();
    assert_eq!(err_text(&e), TTL_ERR);
    let i = info(&mut c, b"res").expect("second command of the MULTI ran");
    assert_eq!(i.token, b"tok");
    assert!(i.fence > fence);
}

#[test]
fn works_in_lua() {
    let s = Server::start();
    let mut c = s.conn();
    let script = "return redis.call('DLOCK.ACQUIRE', KEYS[1], ARGV[1], ARGV[2])";
    let fence: Option<i64> = redis::cmd("EVAL")
        .arg(script)
        .arg(1)
        .arg("res")
        .arg("tok")
        .arg(5000)
        .query(&mut c)
        .unwrap();
    let fence = fence.expect("granted from Lua");
    let i = info(&mut c, b"res").unwrap();
    assert_eq!((i.token.as_slice(), i.fence), (&b"tok"[..], fence));
    let p = pttl(&mut c, b"res");
    assert!(p > 0 && p <= 5000, "PTTL {p}");
    // Idempotent from Lua too, and nil (false) for another token.
    let again: Option<i64> = redis::cmd("EVAL")
        .arg(script)
        .arg(1)
        .arg("res")
        .arg("tok")
        .arg(5000)
        .query(&mut c)
        .unwrap();
    assert_eq!(again, Some(fence));
    let other: Option<i64> = redis::cmd("EVAL")
        .arg(script)
        .arg(1)
        .arg("res")
        .arg("other")
        .arg(5000)
        .query(&mut c)
        .unwrap();
    assert_eq!(other, None);
    // INFO from Lua comes back as the flat RESP2 layout.
    let v: Value = redis::cmd("EVAL")
        .arg("return redis.call('DLOCK.INFO', KEYS[1])")
        .arg(1)
        .arg("res")
        .query(&mut c)
        .unwrap();
    let i = parse_info(v).unwrap();
    assert_eq!((i.token.as_slice(), i.fence), (&b"tok"[..], fence));
    // Errors reach the script caller with their text.
    let e = redis::cmd("EVAL")
        .arg(script)
        .arg(1)
        .arg("res")
        .arg("tok")
        .arg("abc")
        .query::<Value>(&mut c)
        .unwrap_err();
    assert!(err_text(&e).contains("ttl_ms must be an integer"), "{e}");
    let released: i64 = redis::cmd("EVAL")
        .arg("return redis.call('DLOCK.RELEASE', KEYS[1], ARGV[1])")
        .arg(1)
        .arg("res")
        .arg("tok")
        .query(&mut c)
        .unwrap();
    assert_eq!(released, 1);
    assert!(!exists(&mut c, b"res"));
}
