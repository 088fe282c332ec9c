//! Caps through `DEBUG RELOAD`, a replica and the AOF: each holds exactly
//! what the master holds (value, digest, expiry); a value without a cap is
//! written in the layout the previous release reads.
use super::*;
use common::dump::dump;

const KEYS: [&str; 5] = ["p", "rw", "sem", "m1", "m2"];

/// A capped plain lock, shared holds (one capped), a capped permit, a
/// capped set; then a retry and an extension within the caps.
fn populate(c: &mut Connection) {
    fence_of(c, &capped("p", "t", 100_000, 50_000, &[]));
    fence_of(c, &capped("rw", "a", 60_000, 500_000, &["SHARED"]));
    let _: i64 = redis::cmd("DLOCK.ACQUIRE")
        .arg("rw")
        .arg("b")
        .arg(60_000)
        .arg("SHARED")
        .query(c)
        .unwrap();
    fence_of(c, &capped("sem", "x", 60_000, 400_000, &["LIMIT", "2"]));
    let mut set = redis::cmd("DLOCK.MACQUIRE");
    set.arg(2).arg("m1").arg("m2").arg("t").arg(30_000);
    set.arg("MAXHOLD").arg(300_000);
    fence_of(c, &set);
    // A retry within the cap.
    fence_of(c, &capped("sem", "x", 70_000, 400_000, &["LIMIT", "2"]));
    assert_eq!(extend(c, "rw", "a", 90_000), 1);
}

/// Each key exactly: its value (`DUMP`), digest (caps included) and expiry.
fn exactly(c: &mut Connection) -> Vec<(Vec<u8>, String, i64)> {
    KEYS.iter()
        .map(|k| {
            let at: i64 = redis::cmd("PEXPIRETIME").arg(*k).query(c).unwrap();
            (dump(c, k), digest(c, k), at)
        })
        .collect()
}

/// The layout byte of the multi-hold value inside a `DUMP` payload: the
/// byte after its eight-zero marker.
fn layout_of(payload: &[u8]) -> u8 {
    let at = payload
        .windows(8)
        .position(|w| w == [0; 8])
        .expect("a multi-hold value");
    payload[at + 8]
}

#[test]
fn debug_reload_keeps_every_cap() {
    let s = Server::start();
    let mut c = s.conn();
    populate(&mut c);
    let before = exactly(&mut c);
    let shown_before: Vec<_> = KEYS.iter().map(|k| shown(&mut c, k)).collect();
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut c).unwrap();
    assert_eq!(exactly(&mut c), before);
    for (k, was) in KEYS.iter().zip(shown_before) {
        let now = shown(&mut c, k);
        let caps = |v: &[Shown]| v.iter().map(|h| h.maxhold.is_some()).collect::<Vec<_>>();
        assert_eq!(caps(&now), caps(&was), "{k}");
    }
    // Still enforced after the reload.
    ms_left(&refused(&mut c, &extend_cmd("p", "t", 50_001)));
}

#[test]
fn a_value_without_a_cap_keeps_the_old_layout() {
    // Uncompressed, so the value's bytes show in the payload.
    let s = Server::builder().arg("--rdbcompression").arg("no").start();
    let mut c = s.conn();
    let _: i64 = redis::cmd("DLOCK.ACQUIRE")
        .arg("rw")
        .arg("b")
        .arg(60_000)
        .arg("SHARED")
        .query(&mut c)
        .unwrap();
    assert_eq!(layout_of(&dump(&mut c, "rw")), 1, "no cap: layout 1");
    fence_of(&mut c, &capped("rw", "a", 60_000, 500_000, &["SHARED"]));
    assert_eq!(layout_of(&dump(&mut c, "rw")), 3, "a cap: layout 3");
    assert_eq!(release(&mut c, "rw", "a"), 1);
    assert_eq!(layout_of(&dump(&mut c, "rw")), 1, "the cap gone: layout 1");
}

#[test]
fn a_replica_holds_exactly_the_masters_caps() {
    let master = Server::builder()
        .arg("--repl-ping-replica-period")
        .arg("3600")
        .start();
    let mut m = master.conn();
    // Half before the sync (the RDB), half after (the effects).
    fence_of(&mut m, &capped("pre", "t", 100_000, 50_000, &[]));
    let replica = Server::builder().replica_of(&master).start();
    replica.wait_for_sync(Duration::from_secs(30));
    populate(&mut m);
    let n: i64 = redis::cmd("WAIT").arg(1).arg(10_000).query(&mut m).unwrap();
    assert_eq!(n, 1);
    let mut r = replica.conn();
    assert_eq!(exactly(&mut r), exactly(&mut m));
    assert_eq!(
        digest(&mut r, "pre"),
        digest(&mut m, "pre"),
        "from the full sync"
    );
}

#[test]
fn the_aof_carries_caps_in_its_effects_and_its_rewrite() {
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
    // Every capped hold's effect carries its cap; the uncapped one none.
    for add in &adds {
        let capped = add[3] != "b";
        assert_eq!(add.len(), if capped { 12 } else { 9 }, "{add:?}");
        if capped {
            assert_eq!(add[9], "MAXHOLD", "{add:?}");
        }
    }
    assert!(adds.len() >= 5, "{adds:?}");
    let before = exactly(&mut c);
    s.restart();
    let mut c = s.conn();
    assert_eq!(exactly(&mut c), before, "replayed from the effects");
    rewrite_aof(&mut c);
    s.restart();
    let mut c = s.conn();
    assert_eq!(exactly(&mut c), before, "replayed from a rewrite");
}

use std::time::Duration;
