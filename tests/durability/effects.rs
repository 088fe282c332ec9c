//! What the AOF (and so every replica) receives: effects with absolute
//! deadlines, never the client's commands with relative TTLs. Read straight
//! from the AOF file the server wrote.
use crate::common;

use common::lock::*;
use common::repl_stream::ReplStream;
use common::waiter::Waiter;
use common::*;
use redis::Connection;
use std::time::Duration;

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

// Work that arises inside another command (a waiter killed or unblocked in
// its grant's turn, a lock flushed, swapped, deleted, expired or evicted
// under its waiters) is done by dlock in a turn of its own: replicas and
// the AOF get dlock's effects, never the other command because of them.

/// The commands dlock propagates.
const EFFECTS: [&str; 7] = [
    "DLOCK.APPLY",
    "DLOCK.ADDHOLD",
    "DLOCK.MOVEHOLD",
    "DLOCK.DROPHOLD",
    "DLOCK.SETHOLDS",
    "PEXPIREAT",
    "DEL",
];

/// A command stream cut into what the server propagated as one unit (a
/// `MULTI`/`EXEC` block or a single command), without `SELECT`, the
/// replication link's own `PING`/`REPLCONF` and the quarantine metadata.
fn units(cmds: &[Vec<String>]) -> Vec<Vec<Vec<String>>> {
    let mut out = Vec::new();
    let mut open: Option<Vec<Vec<String>>> = None;
    for c in cmds {
        match c[0].to_ascii_uppercase().as_str() {
            "SELECT" | "REPLCONF" | "DLOCK.META" => {}
            "PING" if open.is_none() => {}
            "MULTI" => open = Some(Vec::new()),
            "EXEC" => out.extend(open.take()),
            _ => match &mut open {
                Some(unit) => unit.push(c.clone()),
                None => out.push(vec![c.clone()]),
            },
        }
    }
    out.retain(|u| !u.is_empty());
    out
}

/// Every unit holds only dlock's effects, except the test's own writes
/// (`alone`), each propagated by itself; the tokens `res` was granted to
/// end with `granted`.
fn assert_only_effects(what: &str, cmds: &[Vec<String>], alone: &[&str], granted: &[&str]) {
    let units = units(cmds);
    for u in &units {
        for c in u {
            let name = c[0].to_ascii_uppercase();
            if alone.contains(&name.as_str()) {
                assert_eq!(u.len(), 1, "{what}: {name} propagated with more: {units:?}");
            } else {
                assert!(
                    EFFECTS.contains(&name.as_str()),
                    "{what}: {name} propagated: {units:?}"
                );
            }
        }
    }
    let tokens: Vec<&str> = units
        .iter()
        .flatten()
        .filter(|c| c[0].eq_ignore_ascii_case("DLOCK.APPLY") && c[1] == "res")
        .map(|c| c[2].as_str())
        .collect();
    assert!(
        tokens.ends_with(granted),
        "{what}: grants of res {tokens:?}, expected to end with {granted:?}"
    );
}

/// A master with an AOF whose replication stream is being read, where
/// `holder` holds `res` for `ttl_ms`.
fn master_with_stream(ttl_ms: u64, args: &[&str]) -> (Server, Connection, ReplStream) {
    let mut b = Server::builder().aof("always");
    for a in args {
        b = b.arg(*a);
    }
    let s = b.start();
    let stream = ReplStream::attach(&s);
    let mut c = s.conn();
    grant(&mut c, "res", "holder", ttl_ms);
    (s, c, stream)
}

/// `DLOCK.ACQUIRE res tok 60000 WAIT 30000`, returned once `n` wait on res.
fn queue(s: &Server, c: &mut Connection, tok: &str, n: i64) -> Waiter {
    let mut cmd = redis::cmd("DLOCK.ACQUIRE");
    cmd.arg("res").arg(tok).arg(60_000).arg("WAIT").arg(30_000);
    let w = Waiter::send(s, cmd);
    wait_waiters(c, "res", n);
    w
}

/// What the replica stream and the AOF got, both checked.
fn assert_streams(
    what: &str,
    s: &Server,
    c: &mut Connection,
    stream: &mut ReplStream,
    alone: &[&str],
    granted: &[&str],
) {
    let sent = stream.commands(c);
    assert_only_effects(&format!("{what} (replica)"), &sent, alone, granted);
    let mut aof = common::aof::commands(s, ".incr.aof");
    // Up to the stream's marker.
    let marker = aof.iter().rposition(|c| c[0].eq_ignore_ascii_case("SET"));
    aof.truncate(marker.expect("the marker in the AOF"));
    assert_only_effects(
        &format!("{what} (AOF)"),
        &aof,
        &[alone, &["SET"]].concat(),
        granted,
    );
}

/// The holder's release grants W, and `end` ends W in the same
/// transaction: the grant is revoked and goes on to NEXT.
fn revoked_in(what: &str, end: impl Fn(&str) -> Vec<String>) {
    let (s, mut c, mut stream) = master_with_stream(60_000, &[]);
    let w = queue(&s, &mut c, "W", 1);
    let next = queue(&s, &mut c, "NEXT", 2);
    let id = w.id.to_string();
    let end = end(&id);
    let mut pipe = redis::pipe();
    pipe.atomic().cmd("DLOCK.RELEASE").arg("res").arg("holder");
    pipe.cmd(&end[0]).arg(&end[1..]);
    let (released, ended): (i64, i64) = pipe.query(&mut c).unwrap();
    assert_eq!((released, ended), (1, 1));
    let _ = w.reply();
    let (fence, _) = next.granted();
    assert_eq!(held(&mut c, "res").fence, fence);
    assert_eq!(
        info_field(&mut c, "dlock", "dlock_revoked_grants").as_deref(),
        Some("1")
    );
    assert_streams(what, &s, &mut c, &mut stream, &[], &["W", "NEXT"]);
}

#[test]
fn a_grant_revoked_inside_client_kill_propagates_no_client_kill() {
    revoked_in("CLIENT KILL", |id| strings(&["CLIENT", "KILL", "ID", id]));
}

#[test]
fn a_grant_revoked_inside_client_unblock_propagates_no_client_unblock() {
    revoked_in("CLIENT UNBLOCK", |id| strings(&["CLIENT", "UNBLOCK", id]));
    revoked_in("CLIENT UNBLOCK ERROR", |id| {
        strings(&["CLIENT", "UNBLOCK", id, "ERROR"])
    });
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

/// `cmd` frees `res` under its waiter W, who is then granted it.
fn freed_by(cmd: &[&str], alone: &[&str]) {
    let (s, mut c, mut stream) = master_with_stream(60_000, &[]);
    let w = queue(&s, &mut c, "W", 1);
    let _: redis::Value = redis::cmd(cmd[0]).arg(&cmd[1..]).query(&mut c).unwrap();
    w.granted();
    assert_streams(&cmd.join(" "), &s, &mut c, &mut stream, alone, &["W"]);
}

#[test]
fn a_handoff_after_flushall_or_flushdb_propagates_only_the_flush() {
    freed_by(&["FLUSHALL"], &["FLUSHALL"]);
    freed_by(&["FLUSHDB"], &["FLUSHDB"]);
}

#[test]
fn a_handoff_after_swapdb_propagates_only_the_swap() {
    freed_by(&["SWAPDB", "0", "1"], &["SWAPDB"]);
}

#[test]
fn a_handoff_after_del_or_unlink_propagates_only_the_delete() {
    freed_by(&["DEL", "res"], &["DEL"]);
    freed_by(&["UNLINK", "res"], &["UNLINK"]);
}

#[test]
fn a_handoff_at_expiry_propagates_only_effects() {
    let (s, mut c, mut stream) = master_with_stream(300, &[]);
    let w = queue(&s, &mut c, "W", 1);
    w.granted();
    // The server's own expiry goes out as a DEL (or UNLINK with lazy
    // expiry) of the lock.
    let sent = stream.commands(&mut c);
    let deletes = sent
        .iter()
        .filter(|c| ["DEL", "UNLINK"].contains(&c[0].to_ascii_uppercase().as_str()))
        .count();
    assert!(deletes <= 1, "{sent:?}");
    let sent: Vec<Vec<String>> = sent
        .into_iter()
        .filter(|c| !c[0].eq_ignore_ascii_case("UNLINK"))
        .collect();
    assert_only_effects("expiry (replica)", &sent, &[], &["W"]);
    let mut aof = common::aof::commands(&s, ".incr.aof");
    aof.retain(|c| !c[0].eq_ignore_ascii_case("UNLINK"));
    let marker = aof.iter().rposition(|c| c[0].eq_ignore_ascii_case("SET"));
    aof.truncate(marker.expect("the marker in the AOF"));
    assert_only_effects("expiry (AOF)", &aof, &[], &["W"]);
}

#[test]
fn a_handoff_after_an_eviction_propagates_only_effects() {
    // `volatile-ttl` sampling every key evicts the key closest to expiry:
    // the lock, whose waiter is granted at the evicted lease's deadline.
    let (s, mut c, mut stream) = master_with_stream(
        1_000,
        &[
            "--maxmemory-policy",
            "volatile-ttl",
            "--maxmemory-samples",
            "64",
        ],
    );
    for i in 0..40 {
        let _: () = redis::cmd("SET")
            .arg(format!("filler:{i}"))
            .arg("x".repeat(64))
            .arg("EX")
            .arg(3600)
            .query(&mut c)
            .unwrap();
    }
    let w = queue(&s, &mut c, "W", 1);
    let evicted = |c: &mut Connection| info_field(c, "dlock", "dlock_evicted_locks");
    let mut margin = 64;
    wait_until(Duration::from_secs(5), "the lock evicted", || {
        let used: u64 = info_field(&mut c, "memory", "used_memory")
            .unwrap()
            .parse()
            .unwrap();
        let limit = used.saturating_sub(margin);
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory")
            .arg(limit)
            .query(&mut c)
            .unwrap();
        margin *= 2;
        let _: String = redis::cmd("PING").query(&mut c).unwrap();
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory")
            .arg(0)
            .query(&mut c)
            .unwrap();
        evicted(&mut c).as_deref() == Some("1")
    });
    w.granted();
    let sent = stream.commands(&mut c);
    // Evictions go out as DEL (or UNLINK with lazy eviction).
    let sent: Vec<Vec<String>> = sent
        .into_iter()
        .filter(|c| !c[0].eq_ignore_ascii_case("UNLINK"))
        .collect();
    assert_only_effects("eviction (replica)", &sent, &["SET"], &["W"]);
}
