//! Locks restored with a fence ahead of this server's clock (as if migrated
//! from a server whose fences run ahead), then flushed, swapped or read in
//! the same transaction: no later grant may get a fence below theirs. The
//! clock is raised by a timer after the RESTORE, and a transaction runs
//! before any timer, so each case is forced into one `MULTI`/`EXEC`.
use super::*;
use redis::Value;

/// Fences an hour ahead, one hour further for each case, so that each case
/// shows on its own whether it raised the clock.
fn ahead(case: i64) -> i64 {
    now_us() + case * 3_600_000_000
}

/// A DUMP payload of a lock held by `tok` with fence `fence`.
fn payload(c: &mut redis::Connection, fence: i64) -> Vec<u8> {
    grant(c, "tmpl", "tok", 60_000);
    let p = payload_with_fence(c, "tmpl", fence);
    assert_eq!(release(c, "tmpl", "tok"), 1);
    p
}

/// `payload` without its end-of-value marker: the module decodes the lock,
/// then the server refuses the payload.
fn refused_payload(c: &mut redis::Connection, fence: i64) -> Vec<u8> {
    let (mut body, ver) = split_payload(&payload(c, fence));
    assert_eq!(body.pop(), Some(0), "the body ends with the EOF opcode");
    seal(&body, ver)
}

fn restore_cmd(key: &str, p: &[u8]) -> redis::Cmd {
    let mut c = redis::cmd("RESTORE");
    c.arg(key).arg(0).arg(p);
    c
}

fn cmd(args: &[&str]) -> redis::Cmd {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    c
}

fn last_fence(c: &mut redis::Connection) -> i64 {
    info_field(c, "dlock", "dlock_last_fence")
        .and_then(|v| v.parse().ok())
        .expect("INFO dlock: dlock_last_fence")
}

/// The fence of the last reply (an ACQUIRE that must have been granted).
fn granted(what: &str, replies: &[Value]) -> i64 {
    match replies.last() {
        Some(Value::Int(f)) => *f,
        other => panic!("{what}: ACQUIRE answered {other:?} (all: {replies:?})"),
    }
}

/// Runs `cmds` (which end with an ACQUIRE) in one transaction after a
/// RESTORE of a lock with fence `f` into `res` in db 0, and checks that the
/// grant and the clock are above `f`, also after the transaction.
fn grant_after_restore(c: &mut redis::Connection, what: &str, f: i64, cmds: &[redis::Cmd]) {
    let p = payload(c, f);
    let mut all = vec![restore_cmd("res", &p)];
    all.extend_from_slice(cmds);
    let replies = transaction(c, &all);
    assert_eq!(replies[0], Value::Okay, "{what}: RESTORE");
    let fence = granted(what, &replies);
    assert!(
        fence > f,
        "{what}: granted fence {fence} below the restored lock's {f}"
    );
    assert!(last_fence(c) >= fence, "{what}: dlock_last_fence");
    let _: () = redis::cmd("FLUSHALL").query(c).unwrap();
}

#[test]
fn a_flush_in_the_same_transaction_keeps_the_restored_fence() {
    let s = Server::start();
    let mut c = s.conn();
    let acquire = cmd(&["DLOCK.ACQUIRE", "res", "new", "60000"]);
    let cases: [(&str, Vec<redis::Cmd>); 4] = [
        (
            "RESTORE, INFO, FLUSHALL, ACQUIRE",
            vec![cmd(&["DLOCK.INFO", "res"]), cmd(&["FLUSHALL"])],
        ),
        ("RESTORE, FLUSHALL, ACQUIRE", vec![cmd(&["FLUSHALL"])]),
        (
            "RESTORE, FLUSHALL ASYNC, ACQUIRE",
            vec![cmd(&["FLUSHALL", "ASYNC"])],
        ),
        ("RESTORE, FLUSHDB, ACQUIRE", vec![cmd(&["FLUSHDB"])]),
    ];
    for (i, (what, mut cmds)) in cases.into_iter().enumerate() {
        cmds.push(acquire.clone());
        grant_after_restore(&mut c, what, ahead(i as i64 + 1), &cmds);
    }
}

#[test]
fn a_restored_fence_follows_its_key_across_swapdb() {
    let s = Server::start();
    let mut c = s.conn();
    let acquire = cmd(&["DLOCK.ACQUIRE", "res", "new", "60000"]);
    // The lock moves to db 1, then every database is emptied.
    grant_after_restore(
        &mut c,
        "RESTORE, SWAPDB 0 1, FLUSHALL, ACQUIRE",
        ahead(1),
        &[
            cmd(&["SWAPDB", "0", "1"]),
            cmd(&["FLUSHALL"]),
            acquire.clone(),
        ],
    );
    // Only the database it moved to is emptied.
    grant_after_restore(
        &mut c,
        "RESTORE, SWAPDB 0 1, SELECT 1, FLUSHDB, SELECT 0, ACQUIRE",
        ahead(2),
        &[
            cmd(&["SWAPDB", "0", "1"]),
            cmd(&["SELECT", "1"]),
            cmd(&["FLUSHDB"]),
            cmd(&["SELECT", "0"]),
            acquire.clone(),
        ],
    );
    // There and back: the lock is in db 0 again when it is flushed.
    grant_after_restore(
        &mut c,
        "RESTORE, SWAPDB 0 1 twice, FLUSHDB, ACQUIRE",
        ahead(3),
        &[
            cmd(&["SWAPDB", "0", "1"]),
            cmd(&["SWAPDB", "1", "0"]),
            cmd(&["FLUSHDB"]),
            acquire.clone(),
        ],
    );
    // Nothing flushed: the confirmation after the transaction finds the
    // lock in db 1.
    let f = ahead(4);
    let p = payload(&mut c, f);
    let replies = transaction(
        &mut c,
        &[restore_cmd("res", &p), cmd(&["SWAPDB", "0", "1"])],
    );
    assert_eq!(replies, [Value::Okay, Value::Okay]);
    wait_until(
        SOON,
        "dlock_last_fence to reach the swapped lock's fence",
        || last_fence(&mut c) >= f,
    );
    let fence = grant(&mut c, "other", "new", 60_000);
    assert!(fence > f, "granted {fence} below the swapped lock's {f}");
}

#[test]
fn reading_a_restored_lock_raises_the_clock_at_once() {
    let s = Server::start();
    let mut c = s.conn();
    // Another resource, in the same transaction: only the read can have
    // raised the clock.
    let cases: [(&str, &str); 2] = [("DLOCK.INFO", "INFO"), ("DUMP", "DUMP")];
    for (i, (read, what)) in cases.into_iter().enumerate() {
        grant_after_restore(
            &mut c,
            &format!("RESTORE, {what}, ACQUIRE of another resource"),
            ahead(i as i64 + 1),
            &[
                cmd(&[read, "res"]),
                cmd(&["DLOCK.ACQUIRE", "other", "new", "60000"]),
            ],
        );
    }
}

/// The protection `corrupt_restore.rs` checks, with a flush right after: a
/// refused payload leaves nothing the flush could confirm.
#[test]
fn a_flush_after_a_refused_restore_leaves_the_clock_alone() {
    let s = Server::start();
    let mut c = s.conn();
    let held = grant(&mut c, "res", "owner", 600_000);
    let far = i64::MAX - 2;
    let bad = refused_payload(&mut c, far);
    let before = last_fence(&mut c);
    let mut replace = restore_cmd("res", &bad);
    replace.arg("REPLACE");
    let replies = transaction(
        &mut c,
        &[
            restore_cmd("bad", &bad),
            replace,
            cmd(&["DLOCK.INFO", "res"]),
            cmd(&["FLUSHALL"]),
        ],
    );
    assert!(
        matches!(replies[0], Value::ServerError(_)) && matches!(replies[1], Value::ServerError(_)),
        "the payload was accepted: {replies:?}"
    );
    assert_eq!(replies[3], Value::Okay);
    let after = last_fence(&mut c);
    assert_eq!(after, before, "a refused RESTORE moved the fence clock");
    let fence = grant(&mut c, "res", "next", 60_000);
    assert!(fence > held && fence < far, "next fence {fence}");
}
