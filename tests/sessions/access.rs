//! Who may send what: replicas refuse the writes and answer the reads,
//! each subcommand allowed alone by ACL, its flags and categories in
//! `COMMAND INFO`, `HELP`.
use super::*;

#[test]
fn a_replica_refuses_the_writes_and_answers_the_reads() {
    let m = Server::start();
    let r = Server::builder().replica_of(&m).start();
    r.wait_for_sync(SOON);
    let mut mc = m.conn();
    let mut rc = r.conn();
    open(&mut mc, "w", 60_000);
    req("res", "t").session("w").grant(&mut mc);
    wait_replica(&mut mc);
    for read_only in ["yes", "no"] {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("replica-read-only")
            .arg(read_only)
            .query(&mut rc)
            .unwrap();
        for args in [
            &["OPEN", "new", "1000"][..],
            &["OPEN", "w", "1000"],
            &["KEEPALIVE", "w"],
            &["CLOSE", "w"],
            &["KILL", "w"],
        ] {
            let e = err_of(redis::cmd("DLOCK.SESSION").arg(args).query(&mut rc));
            if read_only == "no" {
                assert_eq!(e, READONLY, "{args:?}");
            } else {
                assert!(e.starts_with("READONLY"), "{args:?}: {e}");
            }
        }
        let e = req("other", "t").session("w").error(&mut rc);
        assert!(e.starts_with("READONLY"), "{e}");
        // The reads answer from the replica's data.
        let i = live(&mut rc, "w");
        assert_eq!((i.session_ttl, i.holds), (60_000, 1));
        assert_eq!(list_all(&mut rc, None, None), ["w"]);
        assert_eq!(holds_all(&mut rc, "w", None), [bound(0, "res", "t")]);
    }
    assert_eq!(session_info(&mut rc, "new"), None);
    assert_eq!(
        live(&mut mc, "w").holds,
        1,
        "the master's session is untouched"
    );
}

#[test]
fn each_subcommand_can_be_allowed_alone_and_names_no_key() {
    let s = Server::start();
    let mut admin = s.conn();
    open(&mut admin, "w", 60_000);
    // No key pattern at all: a subcommand that named a key would be refused.
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "keeper",
            "on",
            ">pw",
            "+dlock.session|keepalive",
            "+dlock.session|info",
        ])
        .query(&mut admin)
        .unwrap();
    let mut keeper = s.conn();
    let _: () = redis::cmd("AUTH")
        .arg("keeper")
        .arg("pw")
        .query(&mut keeper)
        .unwrap();
    assert_eq!(keepalive(&mut keeper, "w", None), 60_000);
    assert_eq!(live(&mut keeper, "w").session_ttl, 60_000);
    for args in [&["OPEN", "x", "1000"][..], &["CLOSE", "w"], &["KILL", "w"]] {
        let e = redis::cmd("DLOCK.SESSION")
            .arg(args)
            .query::<Value>(&mut keeper)
            .unwrap_err();
        assert_eq!(e.code(), Some("NOPERM"), "{args:?}: {e}");
    }
    assert!(session_info(&mut admin, "w").is_some());
    assert_eq!(session_info(&mut admin, "x"), None);
}

#[test]
fn command_info_gives_each_subcommand_its_flags_categories_and_no_key() {
    let s = Server::start();
    let mut c = s.conn();
    let v: Value = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("dlock.session")
        .query(&mut c)
        .unwrap();
    let array = |v: &Value| match v {
        Value::Array(a) => a.clone(),
        other => panic!("expected an array, got {other:?}"),
    };
    let sorted_texts = |v: &Value, skip: &str| {
        let mut t: Vec<String> = array(v).iter().map(text).filter(|f| f != skip).collect();
        t.sort();
        t
    };
    let entry = array(&array(&v)[0]);
    // name -> (flags, ACL categories), both sorted.
    let mut got: Vec<(String, Vec<String>, Vec<String>)> = array(&entry[9])
        .iter()
        .map(|sub| {
            let e = array(sub);
            let name = text(&e[0]).to_lowercase();
            assert_eq!(
                [as_int(&e[3]), as_int(&e[4]), as_int(&e[5])],
                [0, 0, 0],
                "{name} names no key"
            );
            assert!(array(&e[8]).is_empty(), "{name}: no key specs");
            (name, sorted_texts(&e[2], "module"), sorted_texts(&e[6], ""))
        })
        .collect();
    got.sort();
    // Module ACL categories exist on Redis 7.4+ and Valkey 8 only.
    let categories: Vec<String> = redis::cmd("ACL").arg("CAT").query(&mut c).unwrap();
    let with_categories = categories.iter().any(|c| c == "dlock");
    let table: [(&str, &[&str], &[&str]); 9] = [
        ("close", &["fast", "write"], &["@dlock", "@fast", "@write"]),
        ("help", &["fast", "readonly"], &["@dlock", "@slow"]),
        ("holds", &["readonly"], &["@dlock", "@read", "@slow"]),
        ("info", &["fast", "readonly"], &["@dlock", "@fast", "@read"]),
        (
            "keepalive",
            &["fast", "write"],
            &["@dlock", "@fast", "@write"],
        ),
        ("kill", &["fast", "write"], &["@dlock", "@fast", "@write"]),
        ("list", &["readonly"], &["@dlock", "@read", "@slow"]),
        (
            "open",
            &["denyoom", "fast", "write"],
            &["@dlock", "@fast", "@write"],
        ),
        ("waits", &["readonly"], &["@dlock", "@read", "@slow"]),
    ];
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let want: Vec<(String, Vec<String>, Vec<String>)> = table
        .iter()
        .map(|(n, f, cats)| {
            let cats = if with_categories {
                strings(cats)
            } else {
                vec![]
            };
            (format!("dlock.session|{n}"), strings(f), cats)
        })
        .collect();
    if with_categories {
        assert_eq!(got, want);
    } else {
        // Without module categories the server may still add its own.
        let strip = |v: &[(String, Vec<String>, Vec<String>)]| {
            v.iter()
                .map(|(n, f, _)| (n.clone(), f.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(strip(&got), strip(&want));
    }
}

#[test]
fn help_names_every_subcommand_a_line_each() {
    let s = Server::start();
    let mut c = s.conn();
    let lines: Vec<String> = session_cmd("HELP", &[]).query(&mut c).unwrap();
    for sub in [
        "OPEN",
        "KEEPALIVE",
        "CLOSE",
        "KILL",
        "INFO",
        "LIST",
        "HOLDS",
        "HELP",
    ] {
        assert!(
            lines.iter().any(|l| l.trim_start().starts_with(sub)),
            "HELP has no line for {sub}: {lines:?}"
        );
    }
}
