//! Replies, versions and refusals.
use super::*;

#[test]
fn the_first_observation_answers_at_once_with_what_info_shows() {
    let s = Server::start();
    let mut c = s.conn();
    let free = observe(&mut c, "r");
    assert_eq!(free.version, FREE);
    assert_eq!(free.raw, Value::Nil, "free: INFO's nil");
    let fence = acquire(&mut c, "r", "tok", LONG_TTL).unwrap();
    let held = observe(&mut c, "r");
    assert_ne!(held.version, FREE);
    let i = held.info.expect("a plain lock's map");
    assert_eq!((i.token.as_slice(), i.fence), (&b"tok"[..], fence));
    // Without WAIT, or with a version other than the current one: at once.
    for since in [FREE, held.version.as_str()] {
        let v: Value = observe_cmd("r", Some(since), None).query(&mut c).unwrap();
        assert_eq!(parse(v).unwrap().version, held.version);
    }
    let v: Value = observe_cmd("r", Some(FREE), Some(0)).query(&mut c).unwrap();
    assert_eq!(parse(v).unwrap().version, held.version, "already changed");
    assert_eq!(observers(&mut c), 0);
}

#[test]
fn the_version_names_the_holders_not_the_moment() {
    let s = Server::start();
    let mut c = s.conn();
    acquire(&mut c, "r", "a", LONG_TTL).unwrap();
    let v1 = observe(&mut c, "r").version;
    assert_eq!(extend(&mut c, "r", "a", LONG_TTL * 2), 1);
    assert_eq!(
        observe(&mut c, "r").version,
        v1,
        "an extension changes no holder"
    );
    assert_eq!(release(&mut c, "r", "a"), 1);
    assert_eq!(observe(&mut c, "r").version, FREE);
    acquire(&mut c, "r", "a", LONG_TTL).unwrap();
    assert_ne!(
        observe(&mut c, "r").version,
        v1,
        "the same token granted again is another hold (another fence)"
    );
    // Readers: each set of holders has its version, and the same set the
    // same version.
    let read = |c: &mut Connection, tok: &str| {
        let r: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
            .arg("rw")
            .arg(tok)
            .arg(LONG_TTL)
            .arg("SHARED")
            .query(c)
            .unwrap();
        r.expect("granted")
    };
    read(&mut c, "r1");
    let one = observe(&mut c, "rw").version;
    read(&mut c, "r2");
    let two = observe(&mut c, "rw").version;
    assert_ne!(one, two);
    assert_eq!(release(&mut c, "rw", "r2"), 1);
    assert_eq!(observe(&mut c, "rw").version, one);
    let raw = observe(&mut c, "rw").raw;
    assert!(
        !is_plain(&raw),
        "a multi-hold resource answers INFO's map: {raw:?}"
    );
}

#[test]
fn bad_input_is_refused_and_registers_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    let e = |c: &mut Connection, args: &[&str]| {
        let mut cmd = redis::cmd("DLOCK.OBSERVE");
        for a in args {
            cmd.arg(*a);
        }
        err_of(cmd.query(c))
    };
    assert!(e(&mut c, &[]).starts_with("ERR wrong number of arguments"));
    let bad_version = "ERR version must be 16 hex digits, as a DLOCK.OBSERVE reply gives it";
    assert_eq!(e(&mut c, &["r", "SINCE", "12"]), bad_version);
    assert_eq!(e(&mut c, &["r", "SINCE", "zzzzzzzzzzzzzzzz"]), bad_version);
    assert_eq!(e(&mut c, &["r", "SINCE"]), "ERR syntax error");
    assert_eq!(
        e(&mut c, &["r", "WAIT", "1", "WAIT", "1"]),
        "ERR syntax error"
    );
    assert_eq!(e(&mut c, &["r", "NOW", "1"]), "ERR syntax error");
    assert_eq!(
        e(&mut c, &["r", "WAIT", "-1"]),
        "ERR timeout_ms must be an integer from 0 to 140737488355328"
    );
    let _: () = redis::cmd("SET").arg("s").arg("x").query(&mut c).unwrap();
    assert!(e(&mut c, &["s", "SINCE", FREE, "WAIT", "0"]).starts_with("WRONGTYPE"));
    assert_eq!(observers(&mut c), 0);
    assert_eq!(blocked_clients(&mut c), 0);
}

#[test]
fn inside_a_transaction_or_a_script_it_only_reads() {
    let s = Server::start();
    let mut c = s.conn();
    acquire(&mut c, "r", "tok", LONG_TTL).unwrap();
    let v = observe(&mut c, "r").version;
    let replies = transaction(&mut c, &[observe_cmd("r", Some(&v), Some(0))]);
    assert_eq!(
        parse(replies[0].clone()).unwrap().version,
        v,
        "answered in the EXEC"
    );
    let script = "return redis.call('DLOCK.OBSERVE', KEYS[1], 'SINCE', ARGV[1], 'WAIT', '0')";
    let got: Value = redis::cmd("EVAL")
        .arg(script)
        .arg(1)
        .arg("r")
        .arg(&v)
        .query(&mut c)
        .unwrap();
    assert_eq!(parse(got).unwrap().version, v);
    assert_eq!(observers(&mut c), 0);
}

#[test]
fn the_resource_is_the_commands_key() {
    let s = Server::start();
    let mut c = s.conn();
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg("DLOCK.OBSERVE")
        .arg("r")
        .arg("SINCE")
        .arg(FREE)
        .arg("WAIT")
        .arg(10)
        .query(&mut c)
        .unwrap();
    assert_eq!(keys, ["r"]);
}
