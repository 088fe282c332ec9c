//! COMMAND INFO / COMMAND GETKEYS key positions, ACL key patterns on the
//! resource, and forged internal DLOCK.APPLY refused from clients.
use super::*;

// ---------------------------------------------------------------- COMMAND

#[test]
fn command_info_declares_one_key_at_position_one() {
    let s = Server::start();
    let mut c = s.conn();
    let expected_flags: [(&str, &[&str]); 4] = [
        ("dlock.acquire", &["write", "denyoom"]),
        ("dlock.release", &["write"]),
        ("dlock.extend", &["write", "fast"]),
        ("dlock.info", &["readonly", "fast"]),
    ];
    for (name, flags) in expected_flags {
        let v: Vec<Value> = redis::cmd("COMMAND")
            .arg("INFO")
            .arg(name)
            .query(&mut c)
            .unwrap();
        assert_eq!(v.len(), 1);
        let Value::Array(entry) = &v[0] else {
            panic!("{name}: no COMMAND INFO entry: {v:?}");
        };
        assert_eq!(as_bytes(&entry[0]), name.as_bytes());
        assert_eq!(
            (as_int(&entry[3]), as_int(&entry[4]), as_int(&entry[5])),
            (1, 1, 1),
            "{name}: first/last/step"
        );
        let Value::Array(got) = &entry[2] else {
            panic!("{name}: flags {:?}", entry[2]);
        };
        let got: Vec<String> = got
            .iter()
            .map(|f| String::from_utf8(as_bytes(f)).unwrap())
            .collect();
        for f in flags {
            assert!(got.iter().any(|g| g == f), "{name}: flags {got:?} lack {f}");
        }
        if name != "dlock.info" {
            assert!(!got.iter().any(|g| g == "readonly"), "{name}: {got:?}");
        } else {
            assert!(!got.iter().any(|g| g == "write"), "{name}: {got:?}");
        }
    }
}

#[test]
fn command_getkeys_returns_the_resource() {
    let s = Server::start();
    let mut c = s.conn();
    let cases: [&[&str]; 4] = [
        &["DLOCK.ACQUIRE", "res", "tok", "100"],
        &["DLOCK.RELEASE", "res", "tok"],
        &["DLOCK.EXTEND", "res", "tok", "100"],
        &["DLOCK.INFO", "res"],
    ];
    for args in cases {
        let keys: Vec<String> = redis::cmd("COMMAND")
            .arg("GETKEYS")
            .arg(args)
            .query(&mut c)
            .unwrap();
        assert_eq!(keys, vec!["res"], "{args:?}");
    }
}

// ---------------------------------------------------------------- ACL

#[test]
fn acl_key_patterns_apply_to_the_resource() {
    let s = Server::start();
    let mut admin = s.conn();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("locker")
        .arg("on")
        .arg(">pw")
        .arg("~lock:*")
        .arg("+dlock.acquire")
        .arg("+dlock.release")
        .arg("+dlock.info")
        .arg("+dlock.extend")
        .query(&mut admin)
        .unwrap();
    let client = redis::Client::open(format!("redis://locker:pw@127.0.0.1:{}/", s.port())).unwrap();
    let mut c = client
        .get_connection_with_timeout(Duration::from_secs(10))
        .unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let fence = acquire(&mut c, b"lock:a", b"tok", LONG_TTL).expect("allowed key");
    assert_eq!(info(&mut c, b"lock:a").unwrap().fence, fence);
    assert_eq!(extend(&mut c, b"lock:a", b"tok", LONG_TTL), 1);
    for args in [
        &[&b"DLOCK.ACQUIRE"[..], b"other:a", b"tok", b"1000"][..],
        &[b"DLOCK.RELEASE", b"other:a", b"tok"],
        &[b"DLOCK.EXTEND", b"other:a", b"tok", b"1000"],
        &[b"DLOCK.INFO", b"other:a"],
    ] {
        let e = expect_err(&mut c, args);
        assert!(e.starts_with("NOPERM"), "{:?}: {e}", show(args));
    }
    // Not a command the user was granted.
    let e = expect_err(&mut c, &[b"GET", b"lock:a"]);
    assert!(e.starts_with("NOPERM"), "{e}");
    assert!(!exists(&mut admin, b"other:a"));
    assert_eq!(release(&mut c, b"lock:a", b"tok"), 1);
}

// ---------------------------------------------------------------- DLOCK.APPLY

#[test]
fn forged_apply_is_refused_and_changes_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    let held = hold(&mut c, b"res", b"owner");
    let far = (now_us() / 1000 + 3_600_000).to_string();
    let huge_fence = "9000000000000000000";
    for (key, tok) in [(&b"res"[..], &b"attacker"[..]), (b"free", b"attacker")] {
        let args: [&[u8]; 5] = [
            b"DLOCK.APPLY",
            key,
            tok,
            huge_fence.as_bytes(),
            far.as_bytes(),
        ];
        let e = expect_err(&mut c, &args);
        assert!(e.starts_with("ERR DLOCK.APPLY is internal"), "{e}");
    }
    // Malformed too: refused as internal before anything is parsed.
    let e = expect_err(&mut c, &[b"DLOCK.APPLY", b"res"]);
    assert!(e.starts_with("ERR DLOCK.APPLY is internal"), "{e}");
    // Not inside MULTI either (the client surfaces the entry's error).
    let e = redis::pipe()
        .atomic()
        .cmd("DLOCK.APPLY")
        .arg("res")
        .arg("attacker")
        .arg(huge_fence)
        .arg(&far)
        .cmd("PING")
        .query::<Vec<Value>>(&mut c)
        .unwrap_err();
    assert!(
        err_text(&e).starts_with("ERR DLOCK.APPLY is internal"),
        "{}",
        err_text(&e)
    );
    held.assert_unchanged(&mut c);
    assert!(!exists(&mut c, b"free"));
    // The fence clock was not pushed up by the forged fence.
    let f = acquire(&mut c, b"other", b"t", 1_000).unwrap();
    assert!(f > held.fence && f < 9_000_000_000_000_000_000, "{f}");
    assert!((f - now_us()).abs() < 60_000_000, "fence {f} far from now");
}

/// `DLOCK.META` is internal too, and its refusal names it, not
/// `DLOCK.APPLY`; the quarantine facts it carries are untouched.
#[test]
fn forged_meta_is_refused_under_its_own_name() {
    let s = Server::start();
    let mut c = s.conn();
    let before = info_field(&mut c, "dlock", "dlock_longest_ttl");
    assert!(before.is_some(), "INFO dlock has dlock_longest_ttl");
    let internal = "ERR DLOCK.META is internal: accepted only from the master link or the AOF";
    for args in [
        &[&b"DLOCK.META"[..], b"140737488355328", b"1"][..],
        &[b"DLOCK.META"],
        &[b"DLOCK.META", b"x", b"y", b"z"],
    ] {
        assert_eq!(expect_err(&mut c, args), internal, "{:?}", show(args));
    }
    assert_eq!(info_field(&mut c, "dlock", "dlock_longest_ttl"), before);
}
