//! Every kind survives RDB (`SAVE` + kill -9 + restart, `DEBUG RELOAD`),
//! AOF replay of its per-hold effects, and AOF rewrites with and without the
//! RDB preamble: the same holds with the same absolute deadlines, and the
//! same behaviour afterwards.
use super::kinds::Kinds;
use super::*;

use crate::common::aof::commands as aof_commands;

fn named<'a>(cmds: &'a [Vec<String>], name: &str) -> Vec<&'a Vec<String>> {
    cmds.iter()
        .filter(|c| c[0].eq_ignore_ascii_case(name))
        .collect()
}

/// The fence clock's high-water mark: no fence after a restart may be at
/// or below a fence issued before it (released holds' fences included).
fn fence_mark(c: &mut Connection) -> i64 {
    counter(c, "dlock", "dlock_last_fence")
}

fn aof_server(preamble: &str) -> Server {
    Server::builder()
        .aof("always")
        .arg("--aof-use-rdb-preamble")
        .arg(preamble)
        .start()
}

#[test]
fn rdb_restart_and_debug_reload_keep_every_hold() {
    // RDB only: a kill -9 would start the restart quarantine, which has its
    // own tests; here grants must work right after the restart.
    let mut s = Server::builder()
        .arg("--dlock.restart-quarantine")
        .arg("off")
        .start();
    let mut c = s.conn();
    let k = Kinds::build(&mut c, "rdb");
    k.check_built(&mut c);
    let before = snapshots(&mut c, &k.keys());
    let mark = fence_mark(&mut c);
    let _: () = redis::cmd("SAVE").query(&mut c).unwrap();
    let mut c = s.crash_and_restart();
    assert_same(
        "SAVE + kill -9 + restart",
        &before,
        &snapshots(&mut c, &k.keys()),
    );
    assert!(fence_mark(&mut c) >= mark, "the fence clock went back");
    k.check_built(&mut c);
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut c).unwrap();
    assert_same("DEBUG RELOAD", &before, &snapshots(&mut c, &k.keys()));
    k.behave(&mut c);
}

/// The per-hold effects replayed from the incremental AOF, after a base
/// of either kind.
fn aof_replay(preamble: &str) {
    let mut s = aof_server(preamble);
    let mut c = s.conn();
    let k = Kinds::build(&mut c, "aof");
    let before = snapshots(&mut c, &k.keys());
    // The incremental AOF holds per-hold effects only: no client command,
    // no plain-lock effect.
    let cmds = aof_commands(&s, ".incr.aof");
    let adds = named(&cmds, "DLOCK.ADDHOLD");
    assert_eq!(adds.len(), 10, "one ADDHOLD per hold granted: {cmds:?}");
    assert_eq!(named(&cmds, "DLOCK.MOVEHOLD").len(), 4, "{cmds:?}");
    assert_eq!(named(&cmds, "DLOCK.DROPHOLD").len(), 2, "{cmds:?}");
    for plain in ["DLOCK.ACQUIRE", "DLOCK.APPLY", "PEXPIREAT", "DEL"] {
        assert!(named(&cmds, plain).is_empty(), "{plain} in {cmds:?}");
    }
    let mark = fence_mark(&mut c);
    let mut c = s.crash_and_restart();
    assert_same("AOF replay", &before, &snapshots(&mut c, &k.keys()));
    assert!(fence_mark(&mut c) >= mark, "the fence clock went back");
    k.check_built(&mut c);
    k.behave(&mut c);
}

#[test]
fn aof_replay_with_rdb_preamble_keeps_every_hold() {
    aof_replay("yes");
}

#[test]
fn aof_replay_without_rdb_preamble_keeps_every_hold() {
    aof_replay("no");
}

/// Rewrite, then more effects into the new incremental file, then kill -9
/// and replay both.
fn rewrite_then_restart(preamble: &str) {
    let mut s = aof_server(preamble);
    let mut c = s.conn();
    let k = Kinds::build(&mut c, "rw");
    let rewritten = snapshots(&mut c, &k.keys());
    rewrite_aof(&mut c);
    let base = if preamble == "yes" {
        ".base.rdb"
    } else {
        ".base.aof"
    };
    let names: Vec<String> = std::fs::read_dir(s.dir().join("appendonlydir"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().any(|n| n.ends_with(base)),
        "no *{base}: {names:?}"
    );
    if preamble == "no" {
        // One SETHOLDS per key (the whole value, every hold with its own
        // absolute deadline: the replay below compares them), then PERSIST
        // (the key's own PEXPIREAT follows when it has one).
        let cmds = aof_commands(&s, ".base.aof");
        assert!(named(&cmds, "DLOCK.ADDHOLD").is_empty(), "{cmds:?}");
        for snap in &rewritten {
            let multi = matches!(snap.value, Some(value::Stored::Multi { .. }));
            let sets = named(&cmds, "DLOCK.SETHOLDS")
                .into_iter()
                .filter(|l| l[1] == snap.key)
                .count();
            assert_eq!(sets, usize::from(multi), "{}: {cmds:?}", snap.key);
        }
    }
    // After the rewrite: a hold added, one moved, one dropped.
    let f = take(&mut c, &k.shared, "r4", 50_000, &["SHARED"]);
    assert_eq!(extend(&mut c, &k.sem, "p1", 99_000), 1);
    assert_eq!(release(&mut c, &k.owner, "a2"), 1);
    let before = snapshots(&mut c, &k.keys());
    assert_ne!(before, rewritten);
    let mark = fence_mark(&mut c);
    let mut c = s.crash_and_restart();
    assert!(fence_mark(&mut c) >= mark, "the fence clock went back");
    assert_same(
        &format!("rewrite (preamble {preamble}) + replay"),
        &before,
        &snapshots(&mut c, &k.keys()),
    );
    assert_eq!(release(&mut c, &k.shared, "r4"), 1);
    let i = value::info_agrees(&mut c, &k.owner);
    assert_eq!(i.holds.len(), 1, "a2 stays released: {i:?}");
    assert!(take(&mut c, &k.owner, "a2", 85_000, &["OWNER", "A"]) < f);
    k.behave(&mut c);
}

#[test]
fn aof_rewrite_with_rdb_preamble_then_restart_keeps_every_hold() {
    rewrite_then_restart("yes");
}

#[test]
fn aof_rewrite_without_rdb_preamble_then_restart_keeps_every_hold() {
    rewrite_then_restart("no");
}
