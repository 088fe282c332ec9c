//! The `dlock` ACL category. Redis 7.4 and later and Valkey 8 have module
//! ACL categories: there `+@dlock` grants exactly the lock commands. Redis
//! 7.0 and 7.2 have none: the module loads the same, and users are granted
//! the commands by name.
use crate::common;

use common::lock::*;
use common::*;
use redis::{Connection, Value};

/// Whether this server has `RedisModule_AddACLCategory`, from its version
/// (Valkey reports `redis_version:7.2.4` beside its own `valkey_version`).
fn has_module_acl_categories(c: &mut Connection) -> bool {
    if info_field(c, "server", "valkey_version").is_some() {
        return true;
    }
    let v = info_field(c, "server", "redis_version").expect("redis_version");
    let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (7, 4)
}

/// The ACL categories `COMMAND INFO` gives for `cmd`.
fn acl_categories(c: &mut Connection, cmd: &str) -> Vec<String> {
    let v: Value = redis::cmd("COMMAND").arg("INFO").arg(cmd).query(c).unwrap();
    let Value::Array(cmds) = v else {
        panic!("{v:?}")
    };
    let Some(Value::Array(info)) = cmds.first() else {
        panic!("{cmds:?}")
    };
    match &info[6] {
        Value::Array(cats) | Value::Set(cats) => cats
            .iter()
            .map(|c| String::from_utf8(as_bytes(c)).unwrap())
            .collect(),
        other => panic!("categories {other:?}"),
    }
}

fn acl(c: &mut Connection, args: &[&str]) -> redis::RedisResult<Value> {
    redis::cmd("ACL").arg(args).query(c)
}

/// A connection authenticated as `user` (password `pw`).
fn login(s: &Server, user: &str) -> Connection {
    let mut c = s.conn();
    let _: () = redis::cmd("AUTH")
        .arg(user)
        .arg("pw")
        .query(&mut c)
        .unwrap();
    c
}

fn denied(c: &mut Connection, args: &[&str]) {
    let e = redis::cmd(args[0])
        .arg(&args[1..])
        .query::<Value>(c)
        .unwrap_err();
    assert_eq!(e.code(), Some("NOPERM"), "{args:?}: {e}");
}

#[test]
fn plus_at_dlock_grants_exactly_the_lock_commands_where_categories_exist() {
    let s = Server::start();
    let mut admin = s.conn();
    let categories: Vec<String> = redis::cmd("ACL").arg("CAT").query(&mut admin).unwrap();
    let has = categories.iter().any(|c| c == "dlock");
    if !has_module_acl_categories(&mut admin) {
        // Redis 7.0 / 7.2: no category, the module still loaded, and the
        // category is unknown to ACL.
        assert!(!has, "no module categories here: {categories:?}");
        assert!(acl_categories(&mut admin, "dlock.acquire").is_empty());
        let e = acl(
            &mut admin,
            &["SETUSER", "locker", "on", ">pw", "~lock:*", "+@dlock"],
        )
        .unwrap_err();
        assert!(
            format!("{e}").contains("dlock") || e.code() == Some("ERR"),
            "{e}"
        );
        // The way to grant there: the commands by name.
        acl(
            &mut admin,
            &[
                "SETUSER",
                "locker",
                "on",
                ">pw",
                "~lock:*",
                "+dlock.acquire",
                "+dlock.release",
                "+dlock.extend",
                "+dlock.info",
                "+dlock.macquire",
                "+dlock.mrelease",
                "+dlock.mextend",
                "+dlock.queued",
            ],
        )
        .unwrap();
    } else {
        assert!(has, "ACL CAT must list dlock: {categories:?}");
        // `ACL CAT dlock` lists no module command (the server skips them);
        // each command's own categories say it.
        for (cmd, expected) in [
            ("dlock.acquire", &["@write", "@dlock"][..]),
            ("dlock.release", &["@write", "@dlock"]),
            ("dlock.extend", &["@write", "@fast", "@dlock"]),
            ("dlock.info", &["@read", "@fast", "@dlock"]),
            ("dlock.macquire", &["@write", "@dlock"]),
            ("dlock.mrelease", &["@write", "@dlock"]),
            ("dlock.mextend", &["@write", "@dlock"]),
            // Names whatever the key patterns, as `SCAN` gives them.
            ("dlock.queued", &["@keyspace", "@read", "@slow", "@dlock"]),
        ] {
            assert_eq!(acl_categories(&mut admin, cmd), expected, "{cmd}");
        }
        acl(
            &mut admin,
            &["SETUSER", "locker", "on", ">pw", "~lock:*", "+@dlock"],
        )
        .unwrap();
    }
    let mut locker = login(&s, "locker");
    let fence = acquire(&mut locker, "lock:1", "tok", 60_000).expect("granted");
    assert_eq!(held(&mut locker, "lock:1").fence, fence);
    assert_eq!(extend(&mut locker, "lock:1", "tok", 60_000), 1);
    assert_eq!(release(&mut locker, "lock:1", "tok"), 1);
    // A set: every member's key is checked, none may be outside `lock:*`.
    let set = |c: &mut redis::Connection, cmd: &str, keys: &[&str], tail: &[&str]| {
        let mut cmd = redis::cmd(cmd);
        cmd.arg(keys.len()).arg(keys).arg(tail);
        cmd.query::<Value>(c)
    };
    let fence = set(
        &mut locker,
        "DLOCK.MACQUIRE",
        &["lock:a", "lock:b"],
        &["s", "60000"],
    );
    assert!(matches!(fence, Ok(Value::Int(_))), "{fence:?}");
    let mextend = set(
        &mut locker,
        "DLOCK.MEXTEND",
        &["lock:a", "lock:b"],
        &["s", "60000"],
    );
    assert!(matches!(mextend, Ok(Value::Int(1))), "{mextend:?}");
    let mrelease = set(&mut locker, "DLOCK.MRELEASE", &["lock:a", "lock:b"], &["s"]);
    assert!(matches!(mrelease, Ok(Value::Int(2))), "{mrelease:?}");
    let outside = set(
        &mut locker,
        "DLOCK.MACQUIRE",
        &["lock:a", "other:b"],
        &["s", "60000"],
    );
    assert!(
        err_of(outside).starts_with("NOPERM"),
        "a member outside the pattern"
    );
    // DLOCK.QUEUED names no key: granted with the lock commands.
    let names: Vec<String> = redis::cmd("DLOCK.QUEUED").query(&mut locker).unwrap();
    assert!(names.is_empty(), "{names:?}");
    // Only the lock commands, and only on its keys.
    denied(&mut locker, &["GET", "lock:1"]);
    denied(&mut locker, &["SET", "lock:2", "x"]);
    denied(&mut locker, &["DLOCK.ACQUIRE", "other:1", "tok", "1000"]);
    assert_eq!(dbsize(&mut admin), 0);
}
