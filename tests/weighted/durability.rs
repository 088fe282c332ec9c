//! Weighted holds through `DEBUG RELOAD`, a replica and the AOF: each holds
//! exactly what the master holds; layout 4 only while a hold counts as
//! several permits; memory flat over thousands of weighted holds.
use super::*;
use common::dump::dump;
use redis::ConnectionLike;
use std::time::Duration;

const KEYS: [&str; 4] = ["w", "one", "capped", "bound"];

/// Weighted holds beside one-permit ones, a capped one, a session's one;
/// then a retry, an extension and a release.
fn populate(c: &mut Connection) {
    fence_of(c, &weighted("w", "a", 6, 3, &[]));
    fence_of(c, &weighted("w", "b", 6, 1, &[]));
    fence_of(c, &weighted("w", "d", 6, 2, &[]));
    fence_of(c, &weighted("one", "a", 3, 1, &[]));
    fence_of(c, &weighted("capped", "a", 5, 4, &["MAXHOLD", "500000"]));
    let _: Value = redis::cmd("DLOCK.SESSION")
        .arg("OPEN")
        .arg("s1")
        .arg(600_000)
        .query(c)
        .unwrap();
    fence_of(c, &weighted("bound", "a", 3, 2, &["SESSION", "s1"]));
    fence_of(c, &weighted("w", "a", 6, 3, &[]));
    assert_eq!(extend(c, "w", "d", 90_000), 1);
    assert_eq!(release(c, "w", "b"), 1);
}

/// Each key exactly: its value (`DUMP`), digest and expiry, and the
/// permits INFO shows.
fn exactly(c: &mut Connection) -> Vec<(Vec<u8>, String, i64, Option<String>)> {
    KEYS.iter()
        .map(|k| {
            let at: i64 = redis::cmd("PEXPIRETIME").arg(*k).query(c).unwrap();
            let used = value_field(c, k, "used");
            (dump(c, k), digest(c, k), at, used)
        })
        .collect()
}

/// The layout byte of the multi-hold value inside a `DUMP` payload.
fn layout_of(payload: &[u8]) -> u8 {
    let at = payload
        .windows(8)
        .position(|w| w == [0; 8])
        .expect("a multi-hold value");
    payload[at + 8]
}

#[test]
fn debug_reload_keeps_every_permit() {
    let s = Server::start();
    let mut c = s.conn();
    populate(&mut c);
    let before = exactly(&mut c);
    assert_eq!(before[0].3.as_deref(), Some("5"));
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut c).unwrap();
    assert_eq!(exactly(&mut c), before);
    // Still counted after the reload: 5 of 6 used.
    assert_eq!(try_fence(&mut c, &weighted("w", "x", 6, 2, &[])), None);
    fence_of(&mut c, &weighted("w", "x", 6, 1, &[]));
}

#[test]
fn layout_4_only_while_a_hold_counts_as_several() {
    // Uncompressed, so the value's bytes show in the payload.
    let s = Server::builder().arg("--rdbcompression").arg("no").start();
    let mut c = s.conn();
    fence_of(&mut c, &weighted("w", "a", 4, 1, &[]));
    assert_eq!(layout_of(&dump(&mut c, "w")), 1, "k = 1: layout 1");
    fence_of(&mut c, &weighted("w", "b", 4, 2, &[]));
    assert_eq!(layout_of(&dump(&mut c, "w")), 4, "k = 2: layout 4");
    assert_eq!(release(&mut c, "w", "b"), 1);
    assert_eq!(layout_of(&dump(&mut c, "w")), 1, "back to layout 1");
}

#[test]
fn a_replica_holds_exactly_the_masters_permits() {
    let master = Server::builder()
        .arg("--repl-ping-replica-period")
        .arg("3600")
        .start();
    let mut m = master.conn();
    // Half before the sync (the RDB), half after (the effects).
    fence_of(&mut m, &weighted("pre", "a", 5, 4, &[]));
    let replica = Server::builder().replica_of(&master).start();
    replica.wait_for_sync(Duration::from_secs(30));
    populate(&mut m);
    let n: i64 = redis::cmd("WAIT").arg(1).arg(10_000).query(&mut m).unwrap();
    assert_eq!(n, 1);
    let mut r = replica.conn();
    assert_eq!(exactly(&mut r), exactly(&mut m));
    assert_eq!(digest(&mut r, "pre"), digest(&mut m, "pre"), "full sync");
    assert_eq!(permits_shown(&mut r, "pre", "a").as_deref(), Some("4"));
}

#[test]
fn the_aof_carries_permits_in_its_effects_and_its_rewrite() {
    // Without the RDB preamble a rewrite writes each value as an effect.
    let mut s = Server::builder()
        .aof("always")
        .arg("--aof-use-rdb-preamble")
        .arg("no")
        .start();
    let mut c = s.conn();
    populate(&mut c);
    let adds: Vec<Vec<String>> = common::aof::commands(&s, ".incr.aof")
        .into_iter()
        .filter(|cmd| cmd[0].eq_ignore_ascii_case("DLOCK.ADDHOLD"))
        .collect();
    // `PERMITS k` last, only for k > 1, after a session or a cap.
    let tail = |add: &Vec<String>| add[9..].to_vec();
    let by = |res: &str, token: &str| {
        adds.iter()
            .find(|a| a[1] == res && a[2] == token)
            .map(tail)
            .unwrap_or_else(|| panic!("no ADDHOLD {res} {token}: {adds:?}"))
    };
    assert_eq!(by("w", "a"), ["PERMITS", "3"]);
    assert_eq!(by("w", "b"), Vec::<String>::new());
    assert_eq!(by("one", "a"), Vec::<String>::new());
    assert_eq!(by("bound", "a"), ["s1", "PERMITS", "2"]);
    let capped = by("capped", "a");
    assert_eq!(
        (capped[0].as_str(), &capped[3..]),
        ("MAXHOLD", &["PERMITS".to_string(), "4".to_string()][..])
    );
    let before = exactly(&mut c);
    s.restart();
    let mut c = s.conn();
    assert_eq!(exactly(&mut c), before, "replayed from the effects");
    rewrite_aof(&mut c);
    s.restart();
    let mut c = s.conn();
    assert_eq!(exactly(&mut c), before, "replayed from a rewrite");
}

#[test]
fn thousands_of_weighted_holds_leave_no_memory() {
    let _q = crate::quiet();
    let s = Server::start();
    let mut c = s.conn();
    let round = |c: &mut Connection, r: usize| {
        let mut p = redis::pipe();
        for i in 0..1_000 {
            let res = format!("k{i}");
            p.add_command(weighted(&res, "a", 4, 3, &[]));
            p.add_command(weighted(&res, "b", 4, 1, &[]));
            p.add_command(weighted(&res, "c", 4, 2, &[]));
            p.add_command(
                redis::cmd("DLOCK.EXTEND")
                    .arg(&res)
                    .arg("a")
                    .arg(30_000)
                    .clone(),
            );
            p.add_command(redis::cmd("DLOCK.RELEASE").arg(&res).arg("a").clone());
            p.add_command(redis::cmd("DLOCK.RELEASE").arg(&res).arg("b").clone());
        }
        let replies = c
            .req_packed_commands(&p.get_packed_pipeline(), 0, 6_000)
            .unwrap();
        let nils = replies.iter().filter(|v| matches!(v, Value::Nil)).count();
        assert_eq!(nils, 1_000, "round {r}: c's 2 never fit beside 3 + 1");
    };
    round(&mut c, 0);
    round(&mut c, 1);
    let before = used_memory_purged(&mut c);
    for r in 2..12 {
        round(&mut c, r);
    }
    let after = used_memory_purged(&mut c);
    assert_eq!(dbsize(&mut c), 0);
    // 30,000 holds: a leak of even 8 bytes each would show.
    assert!(
        after - before < 64 * 1024,
        "used_memory {before} -> {after} over 30,000 weighted holds"
    );
}
