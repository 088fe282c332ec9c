//! A plain lock whose owner nests (`OWNER`) or reads (`SHARED`) becomes a
//! multi-hold value, and a plain lock again when those holds end; a
//! persisted plain lock keeps its hold without a deadline. The plain and
//! per-hold effects mix in one stream: AOF replay, a rewrite without the
//! RDB preamble and a replica must all rebuild exactly the master's values.
use super::value::{info_agrees, must_store, Stored};
use super::*;

fn keys() -> Vec<String> {
    ["nested", "back", "kept"].map(String::from).to_vec()
}

/// `nested`: plain `t`, then `t2` (`OWNER t`) and `t3` (`SHARED OWNER t`).
/// `back`: plain `b`, `b2` (`OWNER b`) released again, `b` extended.
/// `kept`: plain `u` made persistent, then `u2` (`SHARED OWNER u`).
fn build(c: &mut Connection) {
    let f = take(c, "nested", "t", 60_000, &[]);
    assert_eq!(take(c, "nested", "t2", 65_000, &["OWNER", "t"]), f);
    assert_eq!(
        take(c, "nested", "t3", 70_000, &["SHARED", "OWNER", "t"]),
        f
    );
    let g = take(c, "back", "b", 60_000, &[]);
    assert_eq!(take(c, "back", "b2", 65_000, &["OWNER", "b"]), g);
    assert_eq!(release(c, "back", "b2"), 1);
    assert_eq!(extend(c, "back", "b", 75_000), 1);
    take(c, "kept", "u", 60_000, &[]);
    let n: i64 = redis::cmd("PERSIST").arg("kept").query(c).unwrap();
    assert_eq!(n, 1);
    take(c, "kept", "u2", 60_000, &["SHARED", "OWNER", "u"]);
}

fn check(c: &mut Connection) {
    let nested = info_agrees(c, "nested");
    assert_eq!(nested.holds.len(), 3, "{nested:?}");
    assert!(
        matches!(must_store(c, "back"), Stored::Plain { .. }),
        "plain again"
    );
    assert_eq!(held(c, "back").token, b"b");
    let kept = info_agrees(c, "kept");
    assert_eq!(
        kept.holds[0].ttl, -1,
        "the persisted hold never ends: {kept:?}"
    );
    assert_eq!(pexpiretime(c, "kept"), -1);
    busy(c, "nested", "w", &[]);
    busy(c, "kept", "w", &["SHARED"]);
}

#[test]
fn plain_locks_turning_multi_and_back_replay_and_replicate() {
    let (mut master, replica) = pair(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--aof-use-rdb-preamble",
        "no",
    ]);
    let (mut m, mut r) = (master.conn(), replica.conn());
    build(&mut m);
    check(&mut m);
    wait_replica(&mut m);
    let before = snapshots(&mut m, &keys());
    assert_same("replica", &before, &snapshots(&mut r, &keys()));
    let mut m = master.crash_and_restart();
    assert_same("AOF replay", &before, &snapshots(&mut m, &keys()));
    rewrite_aof(&mut m);
    let mut m = master.crash_and_restart();
    assert_same("rewrite + replay", &before, &snapshots(&mut m, &keys()));
    check(&mut m);
}

/// `PERSIST` on a multi-hold key (an admin override) leaves every hold its
/// deadline but takes the key's TTL away; RDB and AOF replay keep that.
#[test]
fn a_persisted_multi_hold_key_keeps_no_ttl_through_every_reload() {
    let mut s = Server::builder()
        .aof("always")
        .arg("--aof-use-rdb-preamble")
        .arg("no")
        .start();
    let mut c = s.conn();
    take(&mut c, "p", "r1", 60_000, &["SHARED"]);
    take(&mut c, "p", "r2", 70_000, &["SHARED"]);
    let n: i64 = redis::cmd("PERSIST").arg("p").query(&mut c).unwrap();
    assert_eq!(n, 1);
    let before = snapshots(&mut c, &["p".to_string()]);
    assert_eq!(before[0].expires_at, -1);
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut c).unwrap();
    assert_same(
        "DEBUG RELOAD",
        &before,
        &snapshots(&mut c, &["p".to_string()]),
    );
    let mut c = s.crash_and_restart();
    assert_same(
        "AOF replay",
        &before,
        &snapshots(&mut c, &["p".to_string()]),
    );
    rewrite_aof(&mut c);
    let mut c = s.crash_and_restart();
    assert_same(
        "rewrite + replay",
        &before,
        &snapshots(&mut c, &["p".to_string()]),
    );
}
