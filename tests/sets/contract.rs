//! The set commands' contract: `DLOCK.MACQUIRE`, `MRELEASE` and
//! `MEXTEND` replies, errors that change nothing, retries, members as
//! ordinary holds, `MULTI` and Lua, key positions. The load tests are the
//! other modules of `tests/sets/`, durability and cluster in `durable/`.
use crate::common;

use common::lock::*;
use common::*;
use redis::{Connection, RedisResult, Value};
use std::time::Duration;

const MISMATCH: &str = "ERR token already holds part of this set, or holds it as another set \
or mode (release it with DLOCK.MRELEASE first)";

fn set_cmd(name: &str, keys: &[&str], tail: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd(name);
    cmd.arg(keys.len()).arg(keys).arg(tail);
    cmd
}

fn macquire(c: &mut Connection, keys: &[&str], tail: &[&str]) -> RedisResult<Option<i64>> {
    set_cmd("DLOCK.MACQUIRE", keys, tail).query(c)
}

fn mrelease(c: &mut Connection, keys: &[&str], token: &str) -> i64 {
    set_cmd("DLOCK.MRELEASE", keys, &[token]).query(c).unwrap()
}

fn mextend(c: &mut Connection, keys: &[&str], token: &str, ttl: u64) -> i64 {
    let ttl = ttl.to_string();
    set_cmd("DLOCK.MEXTEND", keys, &[token, &ttl])
        .query(c)
        .unwrap()
}

fn grants(c: &mut Connection) -> String {
    info_field(c, "dlock", "dlock_grants").unwrap_or_default()
}

/// Every key's value and TTL, to prove a refused command changed nothing.
fn snapshot(c: &mut Connection, keys: &[&str]) -> Vec<(Option<LockInfo>, i64)> {
    keys.iter().map(|k| (info(c, *k), pttl(c, *k))).collect()
}

#[test]
fn a_set_is_granted_with_one_fence_and_one_deadline() {
    let s = Server::start();
    let mut c = s.conn();
    let keys = ["a", "b", "c"];
    let fence = macquire(&mut c, &keys, &["t", "60000"])
        .unwrap()
        .expect("free");
    let infos: Vec<LockInfo> = keys.iter().map(|k| held(&mut c, *k)).collect();
    for i in &infos {
        assert_eq!(
            (i.token.as_slice(), i.fence, i.waiters),
            (&b"t"[..], fence, 0)
        );
    }
    let deadlines: Vec<i64> = keys
        .iter()
        .map(|k| redis::cmd("PEXPIRETIME").arg(*k).query(&mut c).unwrap())
        .collect();
    assert!(deadlines.windows(2).all(|w| w[0] == w[1]), "{deadlines:?}");
    // Busy on one member: nil, and the free members stay free.
    assert_eq!(macquire(&mut c, &["c", "d"], &["u", "1000"]).unwrap(), None);
    assert!(!exists(&mut c, "d"));
    // Members are ordinary holds.
    assert_eq!(extend(&mut c, "a", "t", 90_000), 1);
    assert_eq!(release(&mut c, "c", "t"), 1);
    assert_eq!(mrelease(&mut c, &keys, "t"), 2, "c was released already");
    assert_eq!(mrelease(&mut c, &keys, "t"), 0);
    assert_eq!(dbsize(&mut c), 0);
    // One resource: a set of one.
    let one = macquire(&mut c, &["solo"], &["t", "1000"]).unwrap();
    assert_eq!(one.map(|f| f > fence), Some(true));
}

#[test]
fn a_retry_of_the_same_set_returns_its_fence_and_resets_the_ttls() {
    let s = Server::start();
    let mut c = s.conn();
    let keys = ["a", "b"];
    let fence = macquire(&mut c, &keys, &["t", "5000"]).unwrap().unwrap();
    let again = macquire(&mut c, &keys, &["t", "60000"]).unwrap();
    assert_eq!(again, Some(fence));
    assert!(keys.iter().all(|k| pttl(&mut c, *k) > 50_000));
    assert_eq!(
        info_field(&mut c, "dlock", "dlock_refreshes").as_deref(),
        Some("1")
    );
}

#[test]
fn a_token_holding_part_of_a_set_or_another_set_is_refused_and_nothing_changes() {
    let s = Server::start();
    let mut c = s.conn();
    macquire(&mut c, &["a", "b"], &["t", "60000"])
        .unwrap()
        .unwrap();
    acquire(&mut c, "x", "t", 60_000).expect("free");
    acquire(&mut c, "busy", "other", 60_000).expect("free");
    let all = ["a", "b", "c", "x", "busy"];
    let before = snapshot(&mut c, &all);
    let granted = grants(&mut c);
    for (keys, tail) in [
        // More than the set it holds.
        (&["a", "b", "c"][..], &["t", "1000"][..]),
        // Two of its sets at once (two fences).
        (&["a", "x"], &["t", "1000"]),
        // Same members, another mode.
        (&["a", "b"], &["t", "1000", "SHARED"]),
        // Held, then free, then busy: decided member by member, the
        // mismatch comes first (the plain fast path answers as the rules do).
        (&["a", "c", "busy"], &["t", "1000"]),
    ] {
        let e = err_of(set_cmd("DLOCK.MACQUIRE", keys, tail).query(&mut c));
        assert_eq!(e, MISMATCH, "{keys:?} {tail:?}");
    }
    // TTLs move while we look: compare owners and fences, and that no TTL grew.
    let after = snapshot(&mut c, &all);
    for ((b, bt), (a, at)) in before.iter().zip(&after) {
        assert_eq!(
            b.as_ref().map(|i| (&i.token, i.fence)),
            a.as_ref().map(|i| (&i.token, i.fence))
        );
        assert!(at <= bt, "a refused MACQUIRE reset a TTL: {bt} -> {at}");
    }
    assert!(!exists(&mut c, "c"));
    assert_eq!(grants(&mut c), granted);
}

#[test]
fn mextend_extends_every_member_or_none() {
    let s = Server::start();
    let mut c = s.conn();
    let keys = ["a", "b", "c"];
    macquire(&mut c, &keys, &["t", "10000"]).unwrap().unwrap();
    assert_eq!(mextend(&mut c, &keys, "t", 60_000), 1);
    assert!(keys.iter().all(|k| pttl(&mut c, *k) > 50_000));
    // An admin takes one member away: the set is no longer a lock.
    redis::cmd("DEL").arg("b").query::<i64>(&mut c).unwrap();
    assert_eq!(mextend(&mut c, &keys, "t", 120_000), 0);
    assert!(pttl(&mut c, "a") <= 60_000 && pttl(&mut c, "c") <= 60_000);
    assert_eq!(mextend(&mut c, &keys, "other", 120_000), 0);
}

#[test]
fn bad_input_is_refused_before_anything_changes() {
    let s = Server::start();
    let mut c = s.conn();
    acquire(&mut c, "held", "h", 60_000).expect("free");
    let granted = grants(&mut c);
    let held_as = |c: &mut Connection| {
        let i = held(c, "held");
        (i.token, i.fence)
    };
    let before = held_as(&mut c);
    let numkeys = "ERR numkeys must be an integer from 1 to 64";
    let refused: &[(&[&str], &str)] = &[
        // A bad `numkeys` is named whatever follows it, even when too few
        // arguments follow for any valid call.
        (&["DLOCK.MEXTEND", "0", "t", "10"], numkeys),
        (&["DLOCK.MEXTEND", "0", "held", "h", "10"], numkeys),
        (&["DLOCK.MEXTEND", "0"], numkeys),
        (&["DLOCK.MEXTEND", "-1", "held", "h", "10"], numkeys),
        (&["DLOCK.MRELEASE", "0", "t"], numkeys),
        (&["DLOCK.MRELEASE", "0", "held", "h"], numkeys),
        (&["DLOCK.MRELEASE", "65", "held", "h"], numkeys),
        (&["DLOCK.MRELEASE", "x"], numkeys),
        (&["DLOCK.MACQUIRE", "0", "t", "10"], numkeys),
        (&["DLOCK.MACQUIRE", "0"], numkeys),
        (&["DLOCK.MACQUIRE", "1.5", "a", "t", "1000"], numkeys),
        (
            &["DLOCK.MEXTEND"],
            "ERR wrong number of arguments for 'dlock.mextend' command",
        ),
        (
            &["DLOCK.MEXTEND", "1", "held"],
            "ERR wrong number of arguments for 'dlock.mextend' command",
        ),
        (
            &["DLOCK.MRELEASE", "1", "held"],
            "ERR wrong number of arguments for 'dlock.mrelease' command",
        ),
        (
            &["DLOCK.MACQUIRE", "1", "a", "t"],
            "ERR wrong number of arguments for 'dlock.macquire' command",
        ),
        (
            &["DLOCK.MACQUIRE", "2", "a"],
            "ERR wrong number of arguments for 'dlock.macquire' command",
        ),
        (
            &["DLOCK.MACQUIRE", "0", "a", "t", "1000"],
            "ERR numkeys must be an integer from 1 to 64",
        ),
        (
            // Not in the server's own integer form: its key-spec parser
            // would find no keys for ACL patterns to check.
            &["DLOCK.MACQUIRE", "01", "a", "t", "1000"],
            "ERR numkeys must be an integer from 1 to 64",
        ),
        (
            &["DLOCK.MACQUIRE", "65", "a", "t", "1000"],
            "ERR numkeys must be an integer from 1 to 64",
        ),
        (
            &["DLOCK.MACQUIRE", "x", "a", "t", "1000"],
            "ERR numkeys must be an integer from 1 to 64",
        ),
        (
            &["DLOCK.MACQUIRE", "3", "a", "b", "t", "1000"],
            "ERR wrong number of arguments for 'dlock.macquire' command",
        ),
        (
            &["DLOCK.MACQUIRE", "2", "a", "a", "t", "1000"],
            "ERR a set names the same resource twice",
        ),
        (
            &["DLOCK.MACQUIRE", "2", "a", "b", "t", "1000", "OWNER", "o"],
            "ERR syntax error",
        ),
        (
            &["DLOCK.MACQUIRE", "2", "a", "b", "t", "1000", "LIMIT", "2"],
            "ERR syntax error",
        ),
        (
            &["DLOCK.MACQUIRE", "2", "a", "b", "t", "1000", "WAIT"],
            "ERR syntax error",
        ),
        (
            &["DLOCK.MACQUIRE", "2", "a", "b", "", "1000"],
            "ERR token must not be empty",
        ),
        (
            &["DLOCK.MACQUIRE", "2", "a", "b", "t", "0"],
            "ERR ttl_ms must be an integer from 1 to 140737488355328",
        ),
        (
            &["DLOCK.MRELEASE", "2", "a", "b", "t", "extra"],
            "ERR wrong number of arguments for 'dlock.mrelease' command",
        ),
        (
            &["DLOCK.MEXTEND", "2", "a", "held", "h"],
            "ERR wrong number of arguments for 'dlock.mextend' command",
        ),
    ];
    for (args, expected) in refused {
        let mut cmd = redis::cmd(args[0]);
        cmd.arg(&args[1..]);
        assert_eq!(err_of(cmd.query(&mut c)), *expected, "{args:?}");
    }
    // An EXTEND would have reset the lease to at most 10 ms or 1 s.
    assert_eq!(held_as(&mut c), before);
    assert!(pttl(&mut c, "held") > 50_000);
    assert_eq!(dbsize(&mut c), 1, "held only");
    // A member of another type: WRONGTYPE, and the other members untouched.
    redis::cmd("SET")
        .arg("str")
        .arg("v")
        .query::<()>(&mut c)
        .unwrap();
    let e = err_of(set_cmd("DLOCK.MACQUIRE", &["a", "str"], &["t", "1000"]).query(&mut c));
    assert!(e.starts_with("WRONGTYPE"), "{e}");
    assert!(!exists(&mut c, "a"));
    assert_eq!(dbsize(&mut c), 2, "held and str only");
    assert_eq!(held(&mut c, "held").token, b"h");
    assert_eq!(grants(&mut c), granted);
    // MRELEASE with a member of another type releases nothing.
    let releases = info_field(&mut c, "dlock", "dlock_releases");
    let e = err_of(set_cmd("DLOCK.MRELEASE", &["held", "str"], &["h"]).query(&mut c));
    assert!(e.starts_with("WRONGTYPE"), "{e}");
    assert_eq!(held(&mut c, "held").token, b"h");
    assert_eq!(info_field(&mut c, "dlock", "dlock_releases"), releases);
    // A token too long to queue is refused, and counted as nothing.
    redis::cmd("CONFIG")
        .arg(&["SET", "dlock.max-token-length", "4"])
        .query::<()>(&mut c)
        .unwrap();
    let contended = info_field(&mut c, "dlock", "dlock_contended");
    let e = err_of(
        set_cmd(
            "DLOCK.MACQUIRE",
            &["held", "c"],
            &["longtoken", "1000", "WAIT", "100"],
        )
        .query(&mut c),
    );
    assert_eq!(e, "ERR token is longer than 4 bytes");
    assert_eq!(info_field(&mut c, "dlock", "dlock_contended"), contended);
    assert_eq!(blocked_clients(&mut c), 0);
}

#[test]
fn the_longest_set_fits_and_every_key_is_declared() {
    let s = Server::start();
    let mut c = s.conn();
    let names: Vec<String> = (0..64).map(|i| format!("k{i}")).collect();
    let keys: Vec<&str> = names.iter().map(String::as_str).collect();
    let fence = macquire(&mut c, &keys, &["t", "60000", "SHARED", "WAIT", "10"]).unwrap();
    assert!(fence.is_some());
    assert_eq!(mextend(&mut c, &keys, "t", 60_000), 1);
    let mut getkeys = redis::cmd("COMMAND");
    getkeys
        .arg("GETKEYS")
        .arg("DLOCK.MACQUIRE")
        .arg(64)
        .arg(&keys)
        .arg("t")
        .arg(1000);
    let listed: Vec<String> = getkeys.query(&mut c).unwrap();
    assert_eq!(listed, names);
    for (cmd, tail) in [
        ("DLOCK.MRELEASE", &["t"][..]),
        ("DLOCK.MEXTEND", &["t", "5"]),
    ] {
        let mut getkeys = redis::cmd("COMMAND");
        getkeys
            .arg("GETKEYS")
            .arg(cmd)
            .arg(2)
            .arg("x")
            .arg("y")
            .arg(tail);
        let listed: Vec<String> = getkeys.query(&mut c).unwrap();
        assert_eq!(listed, ["x", "y"], "{cmd}");
    }
    assert_eq!(mrelease(&mut c, &keys, "t"), 64);
    let docs: Value = redis::cmd("COMMAND")
        .arg("DOCS")
        .arg("dlock.macquire")
        .query(&mut c)
        .unwrap();
    assert!(format!("{docs:?}").contains("numkeys"), "{docs:?}");
}

#[test]
fn wait_inside_multi_or_lua_is_a_plain_try() {
    let s = Server::start();
    let mut c = s.conn();
    acquire(&mut c, "b", "h", 60_000).expect("free");
    let replies: Vec<Value> = redis::pipe()
        .atomic()
        .add_command(set_cmd(
            "DLOCK.MACQUIRE",
            &["a", "b"],
            &["t", "1000", "WAIT", "0"],
        ))
        .add_command(set_cmd(
            "DLOCK.MACQUIRE",
            &["a", "c"],
            &["u", "1000", "WAIT", "0"],
        ))
        .query(&mut c)
        .unwrap();
    assert_eq!(replies[0], Value::Nil, "busy: nil at once, not a block");
    assert!(matches!(replies[1], Value::Int(_)), "{replies:?}");
    let script = "return redis.call('DLOCK.MACQUIRE', 2, KEYS[1], KEYS[2], 'v', 1000, 'WAIT', 0)";
    let r: Option<i64> = redis::cmd("EVAL")
        .arg(script)
        .arg(2)
        .arg("b")
        .arg("d")
        .query(&mut c)
        .unwrap();
    assert_eq!(r, None);
    assert_eq!(blocked_clients(&mut c), 0);
    assert!(!exists(&mut c, "d"));
}

#[test]
fn shared_sets_share_members_and_exclude_writers() {
    let s = Server::start();
    let mut c = s.conn();
    let f1 = macquire(&mut c, &["a", "b"], &["r1", "60000", "SHARED"]).unwrap();
    let f2 = macquire(&mut c, &["b", "c"], &["r2", "60000", "SHARED"]).unwrap();
    assert!(f1.is_some() && f2.is_some() && f1 != f2);
    let shared: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
        .arg("b")
        .arg("r3")
        .arg(60_000)
        .arg("SHARED")
        .query(&mut c)
        .unwrap();
    assert!(shared.is_some());
    assert_eq!(try_acquire(&mut c, "b", "w", 1000).unwrap(), None);
    assert_eq!(macquire(&mut c, &["c", "d"], &["w", "1000"]).unwrap(), None);
    assert_eq!(mrelease(&mut c, &["a", "b"], "r1"), 2);
    assert_eq!(mrelease(&mut c, &["b", "c"], "r2"), 2);
    assert_eq!(release(&mut c, "b", "r3"), 1);
    assert!(macquire(&mut c, &["a", "b", "c", "d"], &["w", "1000"])
        .unwrap()
        .is_some());
}

/// A member overwritten with another type while a set waits on it: the
/// next settle that starts from that member ends (the server keeps
/// answering), and the queued set is refused with `WRONGTYPE`.
#[test]
fn a_member_of_another_type_under_a_queued_set_does_not_hang_the_server() {
    let s = Server::start();
    let mut c = s.conn();
    acquire(&mut c, "b", "x", 60_000).expect("free");
    let url = s.url();
    let waiter = std::thread::spawn(move || {
        let mut w = redis::Client::open(url).unwrap().get_connection().unwrap();
        macquire(&mut w, &["a", "b"], &["s", "60000", "WAIT", "0"])
    });
    wait_until(Duration::from_secs(5), "the set queued", || {
        info_field(&mut c, "dlock", "dlock_waiters").as_deref() == Some("1")
    });
    redis::cmd("SET")
        .arg("a")
        .arg("str")
        .query::<()>(&mut c)
        .unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let e = err_of(redis::cmd("DLOCK.INFO").arg("a").query::<Value>(&mut c));
    assert!(e.starts_with("WRONGTYPE"), "{e}");
    // Freeing `b` makes the queued set's turn come: it must be refused for
    // `a`'s type, not granted over a string and not left waiting.
    assert_eq!(release(&mut c, "b", "x"), 1);
    let e = match waiter.join().unwrap() {
        Err(e) => e.to_string(),
        Ok(v) => format!("{v:?}"),
    };
    assert!(e.starts_with("WRONGTYPE"), "{e}");
    ping(&mut c);
}
