//! A resized semaphore through `DEBUG RELOAD`, a replica and the AOF: each
//! holds exactly what the master holds, the mark included; memory flat.
use super::*;
use common::dump::dump;
use redis::ConnectionLike;
use std::time::Duration;

const KEYS: [&str; 4] = ["up", "down", "weighted", "below"];

fn populate(c: &mut Connection) {
    fence_of(c, &permit("up", "a", 2, &[]));
    assert_eq!(resize(c, "up", 4), Some(2));
    fence_of(c, &permit("up", "b", 2, &[]));
    for t in ["a", "b", "c"] {
        fence_of(c, &permit("down", t, 3, &[]));
    }
    assert_eq!(resize(c, "down", 2), Some(3));
    fence_of(c, &permit("weighted", "a", 4, &["PERMITS", "3"]));
    assert_eq!(resize(c, "weighted", 6), Some(4));
    fence_of(c, &permit("weighted", "b", 4, &["PERMITS", "2"]));
    // One hold of more permits than the lowered limit.
    fence_of(c, &permit("below", "a", 4, &["PERMITS", "4"]));
    assert_eq!(resize(c, "below", 2), Some(4));
}

/// A key as compared: `DUMP`, digest, expiry, limit and resized mark.
type Exactly = (Vec<u8>, String, i64, Option<String>, Option<String>);

fn exactly(c: &mut Connection) -> Vec<Exactly> {
    KEYS.iter()
        .map(|k| {
            let at: i64 = redis::cmd("PEXPIRETIME").arg(*k).query(c).unwrap();
            (
                dump(c, k),
                digest(c, k),
                at,
                field(c, k, "limit"),
                field(c, k, "resized"),
            )
        })
        .collect()
}

/// The layout byte and flags of the multi-hold value inside a `DUMP`.
fn layout_of(payload: &[u8]) -> (u8, u8) {
    let at = payload
        .windows(8)
        .position(|w| w == [0; 8])
        .expect("a multi-hold value");
    (payload[at + 8], payload[at + 9])
}

#[test]
fn debug_reload_keeps_the_resized_limit() {
    let s = Server::builder().arg("--rdbcompression").arg("no").start();
    let mut c = s.conn();
    populate(&mut c);
    assert_eq!(
        layout_of(&dump(&mut c, "up")),
        (4, 0b1000),
        "resized: layout 4, bit 3"
    );
    let before = exactly(&mut c);
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut c).unwrap();
    assert_eq!(exactly(&mut c), before);
    // Still resized: the old limit joins; down still refuses.
    fence_of(&mut c, &permit("up", "x", 2, &[]));
    assert_eq!(try_fence(&mut c, &permit("down", "x", 3, &[])), None);
}

#[test]
fn a_replica_and_the_aof_hold_exactly_the_masters_limits() {
    let master = Server::builder()
        .aof("always")
        .arg("--aof-use-rdb-preamble")
        .arg("no")
        .start();
    let mut m = master.conn();
    fence_of(&mut m, &permit("pre", "a", 2, &[]));
    assert_eq!(resize(&mut m, "pre", 3), Some(2));
    let replica = Server::builder().replica_of(&master).start();
    replica.wait_for_sync(Duration::from_secs(30));
    populate(&mut m);
    let n: i64 = redis::cmd("WAIT").arg(1).arg(10_000).query(&mut m).unwrap();
    assert_eq!(n, 1);
    let mut r = replica.conn();
    assert_eq!(exactly(&mut r), exactly(&mut m));
    assert_eq!(digest(&mut r, "pre"), digest(&mut m, "pre"), "full sync");
    let setlimits: Vec<Vec<String>> = common::aof::commands(&master, ".incr.aof")
        .into_iter()
        .filter(|cmd| cmd[0].eq_ignore_ascii_case("DLOCK.SETLIMIT"))
        .collect();
    assert_eq!(setlimits.len(), 5, "{setlimits:?}");
    assert_eq!(setlimits[1][1..], ["up".to_string(), "4".to_string()]);
    let before = exactly(&mut m);
    drop(replica);
    let mut master = master;
    master.restart();
    let mut c = master.conn();
    assert_eq!(exactly(&mut c), before, "replayed from the effects");
    rewrite_aof(&mut c);
    master.restart();
    let mut c = master.conn();
    assert_eq!(exactly(&mut c), before, "replayed from a rewrite");
}

#[test]
fn thousands_of_resizes_leave_no_memory() {
    let _q = crate::quiet();
    let s = Server::start();
    let mut c = s.conn();
    let round = |c: &mut Connection| {
        let mut p = redis::pipe();
        for i in 0..1_000 {
            let res = format!("k{i}");
            p.add_command(permit(&res, "a", 2, &[]));
            p.add_command(resize_cmd(&res, 5));
            p.add_command(permit(&res, "b", 2, &["PERMITS", "2"]));
            p.add_command(resize_cmd(&res, 2));
            p.add_command(redis::cmd("DLOCK.RELEASE").arg(&res).arg("a").clone());
            p.add_command(redis::cmd("DLOCK.RELEASE").arg(&res).arg("b").clone());
        }
        let replies = c
            .req_packed_commands(&p.get_packed_pipeline(), 0, 6_000)
            .unwrap();
        assert!(replies
            .iter()
            .all(|v| !matches!(v, Value::ServerError(_) | Value::Nil)));
    };
    round(&mut c);
    round(&mut c);
    let before = used_memory_purged(&mut c);
    for _ in 0..10 {
        round(&mut c);
    }
    let after = used_memory_purged(&mut c);
    assert_eq!(dbsize(&mut c), 0);
    assert!(
        after - before < 64 * 1024,
        "used_memory {before} -> {after} over 10,000 resized semaphores"
    );
}
