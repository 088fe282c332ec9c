//! The documentation, checked: the command metadata set at load
//! (src/server/commands/docs.rs: `COMMAND DOCS`, `COMMAND INFO` key specs and arity,
//! `COMMAND GETKEYS`, and the ACL key permissions that follow from the
//! key-spec flags), and the manual, README.md and docs/ (`docs/manual.rs`:
//! its `redis-cli` sessions run against a real server, its links, its
//! command pages against `COMMAND DOCS`, the error texts it quotes).
use crate::common;
mod log_messages;
mod manual;
mod markdown;
mod transcript;

use common::*;
use redis::{Connection, Value};
use std::collections::HashMap;

const PUBLIC: [&str; 5] = [
    "dlock.acquire",
    "dlock.release",
    "dlock.resize",
    "dlock.extend",
    "dlock.info",
];
const INTERNAL_SUMMARY: &str = "Applies a replicated lock effect; refused from clients.";

/// One documented argument: name, type, token, flags.
type ArgDoc = (
    &'static str,
    &'static str,
    Option<&'static str>,
    &'static [&'static str],
);

fn expected_args(cmd: &str) -> Vec<ArgDoc> {
    let resource = ("resource", "key", None, &[][..]);
    let token = ("token", "string", None, &[][..]);
    let ttl = ("ttl_ms", "integer", None, &[][..]);
    match cmd {
        "dlock.acquire" => vec![
            resource,
            token,
            ttl,
            ("shared", "pure-token", Some("SHARED"), &["optional"][..]),
            ("n", "integer", Some("LIMIT"), &["optional"][..]),
            ("k", "integer", Some("PERMITS"), &["optional"][..]),
            ("owner", "string", Some("OWNER"), &["optional"][..]),
            ("timeout_ms", "integer", Some("WAIT"), &["optional"][..]),
            ("id", "string", Some("SESSION"), &["optional"][..]),
            ("ms", "integer", Some("MAXHOLD"), &["optional"][..]),
            ("p", "integer", Some("PRIORITY"), &["optional"][..]),
        ],
        "dlock.release" => vec![
            resource,
            token,
            ("waiter_token", "string", Some("TO"), &["optional"][..]),
        ],
        "dlock.resize" => vec![resource, ("n", "integer", None, &[][..])],
        "dlock.setlimit" => vec![resource, ("n", "integer", None, &[][..])],
        "dlock.extend" => vec![
            resource,
            token,
            ttl,
            ("wanted", "pure-token", Some("WANTED"), &["optional"][..]),
        ],
        "dlock.info" => vec![resource],
        "dlock.apply" => vec![
            resource,
            token,
            ("fence", "integer", None, &[][..]),
            ("deadline_ms", "unix-time", None, &[][..]),
            ("last_fence", "integer", None, &["optional"][..]),
        ],
        "dlock.addhold" => vec![
            resource,
            token,
            ("owner", "string", None, &[][..]),
            ("fence", "integer", None, &[][..]),
            ("mode", "string", None, &[][..]),
            ("limit", "integer", None, &[][..]),
            ("deadline_ms", "unix-time", None, &[][..]),
            ("last_fence", "integer", None, &[][..]),
            ("bound-or-capped", "oneof", None, &["optional"][..]),
            ("max_hold_ms", "integer", None, &["optional"][..]),
            ("k", "integer", Some("PERMITS"), &["optional"][..]),
        ],
        "dlock.movehold" => vec![resource, token, ("deadline_ms", "unix-time", None, &[][..])],
        "dlock.drophold" => vec![resource, token],
        "dlock.setholds" => vec![
            resource,
            ("value", "string", None, &[][..]),
            ("last_fence", "integer", None, &[][..]),
        ],
        "dlock.meta" => vec![
            ("longest_ttl_ms", "integer", None, &[][..]),
            ("lossy", "integer", None, &[][..]),
            ("quarantine_until_ms", "unix-time", None, &["optional"][..]),
        ],
        other => panic!("no expectation for {other}"),
    }
}

/// (arity, first/last/step, key-spec flags or None for no key).
fn expected_info(cmd: &str) -> (i64, [i64; 3], Option<&'static [&'static str]>) {
    match cmd {
        "dlock.acquire" => (-4, [1, 1, 1], Some(&["RW", "access", "update"])),
        "dlock.release" => (-3, [1, 1, 1], Some(&["RW", "access", "delete"])),
        "dlock.extend" => (-4, [1, 1, 1], Some(&["RW", "access", "update"])),
        "dlock.info" => (2, [1, 1, 1], Some(&["RO", "access"])),
        // The handler checks the internal commands' arity itself.
        "dlock.apply" => (-1, [1, 1, 1], Some(&["OW", "update"])),
        "dlock.addhold" | "dlock.movehold" => (-1, [1, 1, 1], Some(&["RW", "update"])),
        "dlock.drophold" => (-1, [1, 1, 1], Some(&["RW", "delete"])),
        "dlock.setlimit" => (-1, [1, 1, 1], Some(&["RW", "update"])),
        "dlock.resize" => (3, [1, 1, 1], Some(&["RW", "access", "update"])),
        "dlock.setholds" => (-1, [1, 1, 1], Some(&["OW", "update"])),
        "dlock.meta" => (-1, [0, 0, 0], None),
        other => panic!("no expectation for {other}"),
    }
}

// ---------------------------------------------------------------- reply helpers

fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::VerbatimString { text, .. } => text.clone(),
        Value::Okay => "OK".into(),
        other => panic!("expected a string, got {other:?}"),
    }
}

fn int(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        other => panic!("expected an integer, got {other:?}"),
    }
}

fn list(v: &Value) -> &[Value] {
    match v {
        Value::Array(items) | Value::Set(items) => items,
        other => panic!("expected an array, got {other:?}"),
    }
}

/// A RESP2 flat `[k, v, k, v, ...]` array (or a RESP3 map) as a map.
fn map(v: &Value) -> HashMap<String, Value> {
    match v {
        Value::Map(pairs) => pairs.iter().map(|(k, v)| (text(k), v.clone())).collect(),
        Value::Array(items) => {
            assert!(items.len() % 2 == 0, "odd-length map: {v:?}");
            items
                .chunks(2)
                .map(|kv| (text(&kv[0]), kv[1].clone()))
                .collect()
        }
        other => panic!("expected a map, got {other:?}"),
    }
}

fn field<'a>(m: &'a HashMap<String, Value>, k: &str) -> &'a Value {
    m.get(k)
        .unwrap_or_else(|| panic!("field {k:?} missing from {m:?}"))
}

fn texts(v: &Value) -> Vec<String> {
    list(v).iter().map(text).collect()
}

/// `COMMAND DOCS cmd` -> the doc map of that one command.
fn docs(c: &mut Connection, cmd: &str) -> HashMap<String, Value> {
    let reply: Value = redis::cmd("COMMAND").arg("DOCS").arg(cmd).query(c).unwrap();
    let all = map(&reply);
    assert_eq!(all.len(), 1, "COMMAND DOCS {cmd}: {reply:?}");
    let (name, doc) = all.into_iter().next().unwrap();
    assert!(name.eq_ignore_ascii_case(cmd), "{name} for {cmd}");
    map(&doc)
}

/// `COMMAND INFO cmd` -> the one entry: [name, arity, flags, first, last,
/// step, acl categories, tips, key specs, subcommands].
fn command_info(c: &mut Connection, cmd: &str) -> Vec<Value> {
    let reply: Value = redis::cmd("COMMAND").arg("INFO").arg(cmd).query(c).unwrap();
    let entries = list(&reply);
    assert_eq!(entries.len(), 1, "COMMAND INFO {cmd}: {reply:?}");
    let entry = list(&entries[0]).to_vec();
    assert!(entry.len() >= 10, "COMMAND INFO {cmd}: {entry:?}");
    entry
}

fn check_arguments(cmd: &str, doc: &HashMap<String, Value>) {
    let args = list(field(doc, "arguments"));
    let want = expected_args(cmd);
    assert_eq!(args.len(), want.len(), "{cmd} arguments: {args:?}");
    for (got, (name, kind, token, flags)) in args.iter().zip(want) {
        let got = map(got);
        assert_eq!(text(field(&got, "name")), name, "{cmd}: {got:?}");
        assert_eq!(text(field(&got, "type")), kind, "{cmd} {name}: {got:?}");
        assert_eq!(got.get("token").map(text).as_deref(), token, "{cmd} {name}");
        let got_flags = got.get("flags").map(texts).unwrap_or_default();
        assert_eq!(got_flags, flags, "{cmd} {name} flags");
        if kind == "key" {
            assert_eq!(int(field(&got, "key_spec_index")), 0, "{cmd} {name}");
        } else {
            assert!(!got.contains_key("key_spec_index"), "{cmd} {name}: {got:?}");
        }
    }
}

// ---------------------------------------------------------------- tests

#[test]
fn command_docs_describe_every_public_command() {
    let s = Server::start();
    let mut c = s.conn();
    for cmd in PUBLIC {
        let doc = docs(&mut c, cmd);
        let summary = text(field(&doc, "summary"));
        assert!(summary.len() > 20, "{cmd} summary: {summary:?}");
        assert_ne!(summary, INTERNAL_SUMMARY, "{cmd}");
        assert_eq!(text(field(&doc, "since")), "0.1.0", "{cmd}");
        assert_eq!(text(field(&doc, "complexity")), "O(1)", "{cmd}");
        assert_eq!(text(field(&doc, "group")), "module", "{cmd}");
        assert_eq!(text(field(&doc, "module")), "dlock", "{cmd}");
        check_arguments(cmd, &doc);
    }
    let acquire = text(field(&docs(&mut c, "dlock.acquire"), "summary"));
    assert!(
        acquire.contains("fencing token") && acquire.contains("FIFO"),
        "{acquire}"
    );
    // The same docs over RESP3, where the server sends real maps.
    let mut c3 = s.conn_resp3();
    let doc = docs(&mut c3, "DLOCK.ACQUIRE");
    check_arguments("dlock.acquire", &doc);

    // Nothing was refused at load.
    let log = s.log();
    assert!(!log.contains("Invalid command info"), "{log}");
    assert!(!log.contains("SetCommandInfo"), "{log}");
}

#[test]
fn internal_commands_are_documented_as_internal() {
    let s = Server::start();
    let mut c = s.conn();
    let internal = [
        "dlock.apply",
        "dlock.meta",
        "dlock.addhold",
        "dlock.movehold",
        "dlock.drophold",
        "dlock.setlimit",
        "dlock.setholds",
    ];
    for cmd in internal {
        let doc = docs(&mut c, cmd);
        assert_eq!(text(field(&doc, "summary")), INTERNAL_SUMMARY, "{cmd}");
        assert_eq!(text(field(&doc, "since")), "0.1.0", "{cmd}");
        assert_eq!(text(field(&doc, "complexity")), "O(1)", "{cmd}");
        check_arguments(cmd, &doc);
    }
    // Still refused from clients, whatever the arity.
    for args in [&["res"][..], &["res", "tok", "5", "0", "7"][..]] {
        let e = redis::cmd("DLOCK.APPLY")
            .arg(args)
            .query::<Value>(&mut c)
            .unwrap_err();
        assert!(
            format!("{e}").contains("DLOCK.APPLY is internal"),
            "{args:?}: {e}"
        );
    }
    // The per-hold effects too, before parsing anything, changing nothing.
    for (cmd, args) in [
        (
            "DLOCK.ADDHOLD",
            &["res", "t", "t", "5", "shared", "1", "0", "5"][..],
        ),
        ("DLOCK.MOVEHOLD", &["res", "t", "0"][..]),
        ("DLOCK.DROPHOLD", &["res", "t"][..]),
        ("DLOCK.DROPHOLD", &["res"][..]),
        ("DLOCK.SETHOLDS", &["res", "x", "1"][..]),
    ] {
        let e = redis::cmd(cmd)
            .arg(args)
            .query::<Value>(&mut c)
            .unwrap_err();
        assert!(
            format!("{e}").contains(&format!("{cmd} is internal")),
            "{cmd}: {e}"
        );
    }
    assert_eq!(dbsize(&mut c), 0);
}

#[test]
fn command_info_shows_arity_and_key_spec_flags() {
    let s = Server::start();
    let mut c = s.conn();
    let internal = [
        "dlock.apply",
        "dlock.meta",
        "dlock.addhold",
        "dlock.movehold",
        "dlock.drophold",
        "dlock.setlimit",
        "dlock.setholds",
    ];
    for cmd in PUBLIC.into_iter().chain(internal) {
        let (arity, range, flags) = expected_info(cmd);
        let entry = command_info(&mut c, cmd);
        assert!(text(&entry[0]).eq_ignore_ascii_case(cmd));
        assert_eq!(int(&entry[1]), arity, "{cmd} arity");
        let got_range = [int(&entry[3]), int(&entry[4]), int(&entry[5])];
        assert_eq!(got_range, range, "{cmd} first/last/step");
        let specs = list(&entry[8]);
        let Some(flags) = flags else {
            assert!(specs.is_empty(), "{cmd} key specs: {specs:?}");
            continue;
        };
        assert_eq!(specs.len(), 1, "{cmd} key specs: {specs:?}");
        let spec = map(&specs[0]);
        assert_eq!(texts(field(&spec, "flags")), flags, "{cmd} key-spec flags");
        let bs = map(field(&spec, "begin_search"));
        assert_eq!(text(field(&bs, "type")), "index", "{cmd}");
        assert_eq!(int(field(&map(field(&bs, "spec")), "index")), 1, "{cmd}");
        let fk = map(field(&spec, "find_keys"));
        assert_eq!(text(field(&fk, "type")), "range", "{cmd}");
        let range = map(field(&fk, "spec"));
        assert_eq!(int(field(&range, "lastkey")), 0, "{cmd}");
        assert_eq!(int(field(&range, "keystep")), 1, "{cmd}");
        assert_eq!(int(field(&range, "limit")), 0, "{cmd}");
    }
    // The command flags from registration are untouched.
    let flags = texts(&command_info(&mut c, "dlock.info")[2]);
    assert!(flags.contains(&"readonly".to_string()), "{flags:?}");
    let flags = texts(&command_info(&mut c, "dlock.acquire")[2]);
    assert!(flags.contains(&"write".to_string()), "{flags:?}");
    assert!(flags.contains(&"denyoom".to_string()), "{flags:?}");
}

#[test]
fn command_getkeys_still_finds_the_resource() {
    let s = Server::start();
    let mut c = s.conn();
    let calls: [&[&str]; 6] = [
        &["dlock.acquire", "lock:a", "tok", "1000"],
        &["dlock.acquire", "lock:a", "tok", "1000", "WAIT", "50"],
        &["dlock.release", "lock:a", "tok"],
        &["dlock.extend", "lock:a", "tok", "1000"],
        &["dlock.info", "lock:a"],
        &["dlock.apply", "lock:a", "tok", "5", "0", "5"],
    ];
    for call in calls {
        let keys: Vec<String> = redis::cmd("COMMAND")
            .arg("GETKEYS")
            .arg(call)
            .query(&mut c)
            .unwrap();
        assert_eq!(keys, ["lock:a"], "{call:?}");
    }
    // DLOCK.META has no key: its first argument is a number.
    let e = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg(&["dlock.meta", "1000", "0"])
        .query::<Vec<String>>(&mut c)
        .unwrap_err();
    assert!(format!("{e}").contains("no key arguments"), "{e}");
    // A fixed arity is checked by the server from the registered arity,
    // with the server's own message.
    let e = redis::cmd("DLOCK.EXTEND")
        .arg(&["lock:a", "tok"])
        .query::<Value>(&mut c)
        .unwrap_err();
    assert!(
        format!("{e}").contains("wrong number of arguments for 'dlock.extend' command"),
        "{e}"
    );
}

#[test]
fn read_only_key_permission_allows_info_only() {
    let s = Server::start();
    let mut admin = s.conn();
    let fence: i64 = redis::cmd("DLOCK.ACQUIRE")
        .arg(&["lock:a", "owner", "60000"])
        .query(&mut admin)
        .unwrap();
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "reader", "on", "nopass", "+@all", "%R~lock:*"])
        .query(&mut admin)
        .unwrap();
    let mut ro = s.conn();
    let _: () = redis::cmd("AUTH")
        .arg(&["reader", "any"])
        .query(&mut ro)
        .unwrap();

    // DLOCK.INFO only reads its key: allowed, and it sees the lease.
    let reply: Value = redis::cmd("DLOCK.INFO")
        .arg("lock:a")
        .query(&mut ro)
        .unwrap();
    let lease = map(&reply);
    assert_eq!(text(field(&lease, "token")), "owner");
    assert_eq!(int(field(&lease, "fence")), fence);
    let free: Value = redis::cmd("DLOCK.INFO")
        .arg("lock:free")
        .query(&mut ro)
        .unwrap();
    assert_eq!(free, Value::Nil);

    // Every command that writes the key is refused by ACL.
    let denied: [&[&str]; 5] = [
        &["DLOCK.ACQUIRE", "lock:a", "owner", "1000"],
        &["DLOCK.ACQUIRE", "lock:b", "tok", "1000", "WAIT", "10"],
        &["DLOCK.RELEASE", "lock:a", "owner"],
        &["DLOCK.EXTEND", "lock:a", "owner", "1000"],
        // Outside the pattern even reading is refused.
        &["DLOCK.INFO", "other:a"],
    ];
    for call in denied {
        let e = redis::cmd(call[0])
            .arg(&call[1..])
            .query::<Value>(&mut ro)
            .unwrap_err();
        assert_eq!(e.code(), Some("NOPERM"), "{call:?}: {e}");
    }

    // Nothing changed: the owner still holds the same lease.
    let reply: Value = redis::cmd("DLOCK.INFO")
        .arg("lock:a")
        .query(&mut admin)
        .unwrap();
    assert_eq!(int(field(&map(&reply), "fence")), fence);
    let b: Value = redis::cmd("DLOCK.INFO")
        .arg("lock:b")
        .query(&mut admin)
        .unwrap();
    assert_eq!(b, Value::Nil);

    // Read+write permission on the same pattern runs everything.
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "writer", "on", "nopass", "+@all", "~lock:*"])
        .query(&mut admin)
        .unwrap();
    let mut rw = s.conn();
    let _: () = redis::cmd("AUTH")
        .arg(&["writer", "any"])
        .query(&mut rw)
        .unwrap();
    let n: i64 = redis::cmd("DLOCK.EXTEND")
        .arg(&["lock:a", "owner", "30000"])
        .query(&mut rw)
        .unwrap();
    assert_eq!(n, 1);
    let n: i64 = redis::cmd("DLOCK.RELEASE")
        .arg(&["lock:a", "owner"])
        .query(&mut rw)
        .unwrap();
    assert_eq!(n, 1);
    let f: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
        .arg(&["lock:a", "next", "1000"])
        .query(&mut rw)
        .unwrap();
    assert!(f.is_some_and(|f| f > fence), "{f:?}");
}
