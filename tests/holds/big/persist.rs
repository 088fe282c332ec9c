//! N holds through RDB (`SAVE` + kill -9 + restart, `DEBUG RELOAD`), the
//! AOF's per-hold effects replayed, and AOF rewrites with and without the
//! RDB preamble, each restarted from the AOF alone. A rewrite writes each
//! resource as one `DLOCK.SETHOLDS` carrying the whole value: with N holds
//! a single command of megabytes, which the AOF loader must take whole.
use super::*;

/// The commands of `s`'s AOF files whose names end with `suffix`, each as
/// its raw arguments (values are binary).
pub fn aof_raw(s: &Server, suffix: &str) -> Vec<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    for f in common::aof::files(s, suffix) {
        let b = std::fs::read(&f).unwrap();
        let mut at = 0;
        let line = |at: &mut usize| -> usize {
            let end = *at + b[*at..].windows(2).position(|w| w == b"\r\n").unwrap();
            let n = std::str::from_utf8(&b[*at + 1..end])
                .unwrap()
                .parse()
                .unwrap();
            *at = end + 2;
            n
        };
        while at < b.len() {
            assert_eq!(b[at], b'*', "{}: a command at {at}", f.display());
            let argc = line(&mut at);
            let mut cmd = Vec::with_capacity(argc);
            for _ in 0..argc {
                let len = line(&mut at);
                cmd.push(b[at..at + len].to_vec());
                at += len + 2;
            }
            out.push(cmd);
        }
    }
    out
}

/// Waits (bounded by `budget(n)`) until a respawned server has loaded its
/// data, and says how long it took; a server that exits fails the test
/// with its log.
fn wait_loaded(s: &mut Server, n: usize, since: Instant) -> Duration {
    let end = since + budget(n);
    loop {
        let loaded = connect_within(&s.url(), Duration::from_secs(2))
            .ok()
            .and_then(|mut c| info_field(&mut c, "persistence", "loading"));
        if loaded.as_deref() == Some("0") {
            break;
        }
        if exited(s.pid()) {
            break; // `wait_ready` reports it with the log
        }
        assert!(
            Instant::now() < end,
            "not loaded after {:?}:\n{}",
            budget(n),
            s.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let took = since.elapsed();
    s.wait_ready();
    took
}

/// Whether our child has exited (a zombie until reaped, or gone).
fn exited(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

/// kill -9, then start on the same data; a connection for N holds.
pub fn crash_restart(s: &mut Server, n: usize, what: &str) -> Connection {
    s.kill9();
    let t = Instant::now();
    s.respawn();
    let took = wait_loaded(s, n, t);
    eprintln!("{what}: restarted and loaded in {took:?}");
    big_conn(s, n)
}

fn named<'a>(cmds: &'a [Vec<Vec<u8>>], name: &str) -> Vec<&'a Vec<Vec<u8>>> {
    cmds.iter()
        .filter(|c| c[0].eq_ignore_ascii_case(name.as_bytes()))
        .collect()
}

fn aof_server(preamble: &str) -> Server {
    Server::builder()
        .aof("always")
        .arg("--aof-use-rdb-preamble")
        .arg(preamble)
        // Only the rewrites a test asks for.
        .arg("--auto-aof-rewrite-percentage")
        .arg("0")
        .start()
}

#[test]
fn save_restart_and_debug_reload_keep_every_hold() {
    let _quiet = crate::quiet();
    let n = holds_n();
    // RDB only: the restart after kill -9 would start a quarantine, which
    // has its own tests; here grants must work right after the restart.
    let mut s = Server::builder()
        .arg("--dlock.restart-quarantine")
        .arg("off")
        .start();
    let mut c = big_conn(&s, n);
    let big = Big::fill(&mut c, n, "rdb");
    big.check(&mut c, "filled");
    let before = big.snaps(&mut c);
    let mark = last_fence(&mut c);
    let t = Instant::now();
    let _: () = redis::cmd("SAVE").query(&mut c).unwrap();
    let size = std::fs::metadata(s.dir().join(RDB_NAME)).unwrap().len();
    eprintln!("SAVE: {size} bytes in {:?}", t.elapsed());
    let mut c = crash_restart(&mut s, n, "SAVE + kill -9");
    same("SAVE + restart", &before, &big.snaps(&mut c), 0);
    assert!(last_fence(&mut c) >= mark, "the fence clock went back");
    big.check(&mut c, "SAVE + restart");
    let t = Instant::now();
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut c).unwrap();
    eprintln!("DEBUG RELOAD in {:?}", t.elapsed());
    same("DEBUG RELOAD", &before, &big.snaps(&mut c), 0);
    big.behave(&mut c, "after DEBUG RELOAD");
}

#[test]
fn aof_replay_of_every_per_hold_effect_keeps_every_hold() {
    let _quiet = crate::quiet();
    let n = holds_n();
    let mut s = aof_server("yes");
    let mut c = big_conn(&s, n);
    let big = Big::fill(&mut c, n, "replay");
    let before = big.snaps(&mut c);
    let cmds = aof_raw(&s, ".incr.aof");
    let adds = named(&cmds, "DLOCK.ADDHOLD");
    assert_eq!(adds.len(), 2 * n, "one DLOCK.ADDHOLD per hold granted");
    assert!(named(&cmds, "DLOCK.SETHOLDS").is_empty());
    let mut c = crash_restart(&mut s, n, "replay of 2N DLOCK.ADDHOLD");
    same("AOF replay", &before, &big.snaps(&mut c), 0);
    big.check(&mut c, "AOF replay");
    big.behave(&mut c, "after AOF replay");
}

/// The base file a rewrite wrote holds each resource whole: with the
/// preamble in the RDB layout, without it as one `DLOCK.SETHOLDS` per key
/// (then `PERSIST` and the key's own `PEXPIREAT`), never per-hold effects.
fn check_base(s: &Server, preamble: &str, before: &[Snap]) {
    let names: Vec<String> = std::fs::read_dir(s.dir().join("appendonlydir"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let base = if preamble == "yes" {
        ".base.rdb"
    } else {
        ".base.aof"
    };
    assert!(
        names.iter().any(|n| n.ends_with(base)),
        "no *{base}: {names:?}"
    );
    assert!(!s.dir().join(RDB_NAME).exists(), "an RDB beside the AOF");
    if preamble == "yes" {
        return;
    }
    let cmds = aof_raw(s, ".base.aof");
    assert!(named(&cmds, "DLOCK.ADDHOLD").is_empty());
    for snap in before {
        let key = snap.key.as_bytes();
        let at: Vec<usize> = (0..cmds.len())
            .filter(|&i| cmds[i][0] == b"DLOCK.SETHOLDS" && cmds[i][1] == key)
            .collect();
        assert_eq!(at.len(), 1, "{}: one DLOCK.SETHOLDS", snap.key);
        let set = &cmds[at[0]];
        let (stored, _) = value::decode(&set[2]);
        let Stored::Multi { limit, holds } = stored else {
            panic!("{}: SETHOLDS of a plain lock", snap.key)
        };
        let written = Snap {
            limit,
            holds,
            ..snap.clone()
        };
        same(
            "the rewritten value",
            std::slice::from_ref(snap),
            &[written],
            0,
        );
        let bytes: usize = set.iter().map(Vec::len).sum();
        eprintln!("{}: DLOCK.SETHOLDS of {bytes} bytes", snap.key);
        let after = &cmds[at[0] + 1..];
        assert_eq!(after[0], [b"PERSIST".to_vec(), key.to_vec()]);
        let at_ms = snap.expires_at.to_string().into_bytes();
        assert_eq!(after[1], [b"PEXPIREAT".to_vec(), key.to_vec(), at_ms]);
    }
}

/// Rewrite, restart from the AOF alone, change every resource (per-hold
/// effects into the file after the new base), and restart again.
fn rewrite_then_restart(preamble: &str) {
    let n = holds_n();
    let mut s = aof_server(preamble);
    let mut c = big_conn(&s, n);
    let big = Big::fill(&mut c, n, "rw");
    let before = big.snaps(&mut c);
    let t = Instant::now();
    rewrite_aof(&mut c);
    eprintln!("BGREWRITEAOF (preamble {preamble}) in {:?}", t.elapsed());
    check_base(&s, preamble, &before);
    let what = format!("rewrite (preamble {preamble}) + restart");
    let mut c = crash_restart(&mut s, n, &what);
    same(&what, &before, &big.snaps(&mut c), 0);
    big.check(&mut c, &what);
    big.behave(&mut c, &what);
    let changed = big.snaps(&mut c);
    let what = format!("rewritten base (preamble {preamble}) + effects");
    let mut c = crash_restart(&mut s, n, &what);
    same(&what, &changed, &big.snaps(&mut c), 0);
}

#[test]
fn aof_rewrite_with_rdb_preamble_then_restart_keeps_every_hold() {
    let _quiet = crate::quiet();
    rewrite_then_restart("yes");
}

#[test]
fn aof_rewrite_without_rdb_preamble_then_restart_keeps_every_hold() {
    let _quiet = crate::quiet();
    rewrite_then_restart("no");
}
