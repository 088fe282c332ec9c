//! What the AOF (and so every replica) receives: effects with absolute
//! deadlines, never the client's commands with relative TTLs. Read straight
//! from the AOF file the server wrote.
mod common;

use common::lock::*;
use common::*;

/// Every command in the server's incremental AOF files, without `SELECT`
/// and the quarantine metadata (sent with a new longest TTL, together with
/// the effect inside `MULTI`/`EXEC`).
fn aof_commands(s: &Server) -> Vec<Vec<String>> {
    common::aof::commands(s, ".incr.aof")
        .into_iter()
        .filter(|c| {
            let name = c[0].to_ascii_uppercase();
            !["SELECT", "DLOCK.META", "MULTI", "EXEC"].contains(&name.as_str())
        })
        .collect()
}

fn deadline_within(raw: &str, before_ms: i64, after_ms: i64, ttl: i64) {
    let at: i64 = raw.parse().unwrap();
    assert!(
        (before_ms + ttl..=after_ms + ttl).contains(&at),
        "deadline {at} not in [{}, {}]",
        before_ms + ttl,
        after_ms + ttl
    );
}

#[test]
fn aof_gets_effects_with_absolute_deadlines() {
    let s = Server::builder().aof("always").start();
    let mut c = s.conn();

    let t0 = now_ms();
    let fence = grant(&mut c, "res", "tok", 30_000);
    let t1 = now_ms();
    // A retry by the owner (refresh) and an extension move only the deadline.
    assert_eq!(grant(&mut c, "res", "tok", 20_000), fence);
    let t2 = now_ms();
    assert_eq!(extend(&mut c, "res", "tok", 60_000), 1);
    let t3 = now_ms();
    // Refused commands write nothing.
    assert_eq!(acquire(&mut c, "res", "other", 1_000), None);
    assert_eq!(extend(&mut c, "res", "other", 1_000), 0);
    assert_eq!(release(&mut c, "res", "other"), 0);
    assert_eq!(release(&mut c, "res", "tok"), 1);

    let cmds = aof_commands(&s);
    let names: Vec<&str> = cmds.iter().map(|c| c[0].as_str()).collect();
    assert_eq!(
        names,
        ["DLOCK.APPLY", "PEXPIREAT", "PEXPIREAT", "DEL"],
        "{cmds:?}"
    );
    // A grant: owner, fence and deadline; the fence is the clock's mark, so
    // the optional last_fence is left out.
    let apply = &cmds[0];
    assert_eq!(apply.len(), 5, "{apply:?}");
    assert_eq!(
        (&apply[1][..], &apply[2][..], &apply[3][..]),
        ("res", "tok", &fence.to_string()[..])
    );
    deadline_within(&apply[4], t0, t1, 30_000);
    assert_eq!(cmds[1][1], "res");
    deadline_within(&cmds[1][2], t1, t2, 20_000);
    assert_eq!(cmds[2][1], "res");
    deadline_within(&cmds[2][2], t2, t3, 60_000);
    assert_eq!(cmds[3], ["DEL", "res"]);
}

#[test]
fn effects_replay_to_the_same_lease_after_a_crash() {
    let mut s = Server::builder().aof("always").start();
    let mut c = s.conn();
    let fence = grant(&mut c, "res", "tok", 30_000);
    assert_eq!(extend(&mut c, "res", "tok", 90_000), 1);
    let before = held(&mut c, "res");
    let deadline = now_ms() + before.ttl;
    let mut c = s.crash_and_restart();
    let after = held(&mut c, "res");
    assert_eq!((&after.token[..], after.fence), (&b"tok"[..], fence));
    // The same absolute deadline: replay neither stretched nor lost it.
    let replayed = now_ms() + after.ttl;
    assert!(
        (replayed - deadline).abs() <= 1_000,
        "deadline before {deadline}, after replay {replayed}"
    );
    assert!(after.ttl > 30_000, "the extension was lost: {after:?}");
    // The next grant still gets a higher fence.
    assert_eq!(release(&mut c, "res", "tok"), 1);
    assert!(grant(&mut c, "res", "tok2", 1_000) > fence);
}
