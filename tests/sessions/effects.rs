//! What the AOF (and so a replica) receives: `DLOCK.SESSIONSET` with the
//! absolute deadline, `DLOCK.SESSIONEND` with the end (plus the lock-delay
//! of an involuntary end), each hold's release or delay, `DONE`; never the
//! `DLOCK.SESSION` command itself.
use super::*;

/// The AOF's commands (of its incremental files).
fn aof(s: &Server) -> Vec<Vec<String>> {
    common::aof::commands(s, ".incr.aof")
}

/// Position of the first command after `from` named `name` whose
/// arguments start with `args`.
fn find(cmds: &[Vec<String>], from: usize, name: &str, args: &[&str]) -> Option<usize> {
    (from..cmds.len()).find(|&i| {
        let c = &cmds[i];
        c[0].eq_ignore_ascii_case(name)
            && c.len() > args.len()
            && c[1..=args.len()].iter().zip(args).all(|(a, b)| a == b)
    })
}

#[test]
fn the_aof_receives_session_effects_with_absolute_deadlines() {
    let s = Server::builder().aof("always").start();
    let mut c = s.conn();
    open_with(&mut c, "w", 60_000, &["LOCKDELAY", "5"]);
    let d1 = live(&mut c, "w").deadline.to_string();
    req("p", "t1").session("w").grant(&mut c);
    req("sh", "t2").shared().session("w").grant(&mut c);
    keepalive(&mut c, "w", Some(90_000));
    let d2 = live(&mut c, "w").deadline.to_string();
    let cmds = aof(&s);
    let set = |d: &str| find(&cmds, 0, "DLOCK.SESSIONSET", &["w", d]);
    let opened = set(&d1).unwrap_or_else(|| panic!("no SESSIONSET w {d1}: {cmds:?}"));
    assert_eq!(cmds[opened][3..], ["60000", "5"], "{:?}", cmds[opened]);
    let kept = set(&d2).unwrap_or_else(|| panic!("no SESSIONSET w {d2}: {cmds:?}"));
    assert_eq!(cmds[kept].len(), 5, "{:?}", cmds[kept]);
    assert_eq!(cmds[kept][4], "5");
    assert!(
        !cmds
            .iter()
            .any(|c| c[0].eq_ignore_ascii_case("DLOCK.SESSION")),
        "effects only, never the command: {cmds:?}"
    );

    // CLOSE: the end (until now: no delay), each hold's release, DONE.
    let before = now_ms();
    assert_eq!(close(&mut c, "w"), 1);
    let after = now_ms();
    wait_until(RELEASED, "the releases in the AOF", || {
        let cmds = aof(&s);
        let Some(end) = find(&cmds, kept, "DLOCK.SESSIONEND", &["w"]) else {
            return false;
        };
        ["p", "sh"].iter().all(|r| {
            find(&cmds, end, "DEL", &[r]).is_some()
                || find(&cmds, end, "DLOCK.DROPHOLD", &[r]).is_some()
        }) && find(&cmds, end, "DLOCK.SESSIONEND", &["w", "DONE"]).is_some()
    });
    let cmds = aof(&s);
    let end = find(&cmds, kept, "DLOCK.SESSIONEND", &["w"]).unwrap();
    let until: i64 = cmds[end][2].parse().unwrap();
    assert!(
        (before..=after).contains(&until),
        "until {until} not in {before}..={after}"
    );

    // KILL with a lock-delay: the end, then each hold's new deadline.
    open_with(&mut c, "k", 60_000, &["LOCKDELAY", "5000"]);
    req("q", "t3").session("k").grant(&mut c);
    req("qs", "t4").shared().session("k").grant(&mut c);
    let from = aof(&s).len();
    let before = now_ms();
    assert_eq!(kill(&mut c, "k"), 1);
    let after = now_ms();
    wait_until(RELEASED, "the lock-delay in the AOF", || {
        let cmds = aof(&s);
        let Some(end) = find(&cmds, from, "DLOCK.SESSIONEND", &["k"]) else {
            return false;
        };
        ["q", "qs"].iter().all(|r| {
            find(&cmds, end, "PEXPIREAT", &[r]).is_some()
                || find(&cmds, end, "DLOCK.MOVEHOLD", &[r]).is_some()
        })
    });
    let cmds = aof(&s);
    let end = find(&cmds, from, "DLOCK.SESSIONEND", &["k"]).unwrap();
    let until: i64 = cmds[end][2].parse().unwrap();
    let delayed = before + 5000..=after + 5000;
    assert!(delayed.contains(&until), "until {until} not in {delayed:?}");
}
