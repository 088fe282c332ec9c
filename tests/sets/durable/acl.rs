//! ACL key patterns apply to every member of a set (the keynum key spec):
//! a user allowed `~{a}*` gets `NOPERM` for any set command that names a
//! key outside it, and nothing changes (no hold, no queue entry, no
//! counter, no effect); sets inside the pattern work, and a token that
//! looks like a forbidden key is not a key.
use super::*;

fn noperm(r: RedisResult<Value>, what: &str) {
    match r {
        Err(e) => assert!(
            err_text(&e).starts_with("NOPERM"),
            "{what}: {}",
            err_text(&e)
        ),
        Ok(v) => panic!("{what}: expected NOPERM, got {v:?}"),
    }
}

/// What must not move when a command is refused.
fn state(c: &mut Connection, keys: &[String]) -> (Vec<Snapshot>, Vec<i64>) {
    let counters = [
        "grants",
        "refreshes",
        "contended",
        "releases",
        "extends",
        "waiters",
        "last_fence",
    ]
    .map(|n| dlock_counter(c, n))
    .to_vec();
    let mut all = counters;
    all.push(blocked_clients(c));
    all.push(counter(c, "persistence", "aof_current_size"));
    (snapshots(c, keys), all)
}

#[test]
fn a_set_with_a_key_outside_the_users_patterns_is_refused_whole() {
    let s = Server::builder().aof("always").start();
    let mut c = s.conn();
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "u", "on", ">pw", "~{a}*", "+@all"])
        .query(&mut c)
        .unwrap();
    let mut u = s.conn();
    let _: () = redis::cmd("AUTH").arg("u").arg("pw").query(&mut u).unwrap();
    // The default user holds a set across both patterns.
    let held = ["{a}:1", "{b}:1"];
    let f = macquire(&mut c, &held, "t0", 60_000, &[]);
    let keys = strings(&["{a}:1", "{a}:2", "{b}:1", "{b}:2"]);
    let before = state(&mut c, &keys);

    let free = ["{a}:2", "{b}:2"];
    let mut waiting = macquire_cmd(&free, "tu", 60_000, &[]);
    waiting.arg("WAIT").arg(5_000);
    let mut release = redis::cmd("DLOCK.MRELEASE");
    release.arg(2).arg(&held).arg("t0");
    let mut extend = redis::cmd("DLOCK.MEXTEND");
    extend.arg(2).arg(&held).arg("t0").arg(1_000);
    let refused = [
        (
            "MACQUIRE of free keys",
            macquire_cmd(&free, "tu", 60_000, &[]),
        ),
        (
            "MACQUIRE SHARED",
            macquire_cmd(&free, "tu", 60_000, &["SHARED"]),
        ),
        ("MACQUIRE WAIT", waiting),
        (
            "MACQUIRE of held keys",
            macquire_cmd(&held, "tu", 60_000, &["WAIT", "5000"]),
        ),
        ("MRELEASE", release),
        ("MEXTEND", extend),
        // The forbidden key last, first, alone among allowed ones.
        (
            "MACQUIRE, key last",
            macquire_cmd(&["{a}:7", "{a}:8", "{b}:2"], "tu", 60_000, &[]),
        ),
        (
            "MACQUIRE, key first",
            macquire_cmd(&["{b}:2", "{a}:8"], "tu", 60_000, &[]),
        ),
    ];
    for (what, cmd) in &refused {
        noperm(cmd.query(&mut u), what);
    }
    assert_eq!(
        state(&mut c, &keys),
        before,
        "a refused command changed something"
    );
    assert_eq!(assert_set(&mut c, &held, "t0", false), f);
    // The ACL log names a forbidden member.
    let log: Value = redis::cmd("ACL").arg("LOG").query(&mut c).unwrap();
    let text = format!("{log:?}");
    assert!(text.contains("{b}:2") && text.contains("{b}:1"), "{text}");

    // Inside the pattern: granted, released; the token is not a key.
    let mine = ["{a}:2", "{a}:3"];
    let fu = macquire(&mut u, &mine, "{b}:token", 60_000, &[]);
    assert!(fu > f);
    assert_eq!(assert_set(&mut c, &mine, "{b}:token", false), fu);
    assert_eq!(mextend(&mut u, &mine, "{b}:token", 90_000), 1);
    assert_eq!(mrelease(&mut u, &mine, "{b}:token"), 2);
    assert_eq!(mrelease(&mut c, &held, "t0"), 2);
    assert_eq!(dbsize(&mut c), 0);
}
