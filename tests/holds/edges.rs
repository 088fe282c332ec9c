//! Where two paths meet: a same-token retry and a grant from the queue in
//! one event-loop turn, a pending handoff and the token limit in one
//! command, `RESTORE` of holds no command could make, and `INFO`'s form once
//! a reentrant companion hold has passed its deadline.

use super::*;
use common::dump::{dump, restore, seal, split_payload};

/// A retry answered with a fence confirms the grant its token got from the
/// queue in the same turn: the old connection's close, read in that turn,
/// must not revoke it (the lost-reply retry, Redisson #7367).
#[test]
fn a_retry_in_the_grant_turn_confirms_the_grant() {
    for ask in [
        acq("k", "t", 10_000).shared(),
        acq("k", "t", 10_000).owner("o"),
    ] {
        let s = Server::start();
        let mut c = s.conn();
        acq("k", "W", LONG_TTL).grant(&mut c);
        let waiter = ask.clone().wait(0).spawn(&s.url());
        wait_queue(&mut c, "k", 1);
        let (_, fence, _, _): (i64, Option<i64>, i64, i64) = redis::pipe()
            .atomic()
            .cmd("DEL")
            .arg("k")
            .add_command(ask.cmd())
            .cmd("CLIENT")
            .arg("KILL")
            .arg("ID")
            .arg(waiter.id)
            .cmd("DLOCK.EXTEND")
            .arg("k")
            .arg("t")
            .arg(LONG_TTL)
            .query(&mut c)
            .unwrap();
        let fence = fence.unwrap_or_else(|| panic!("{ask:?}: the retry got no fence"));
        // The revocation (if any) runs from the callbacks right after EXEC.
        thread::sleep(Duration::from_millis(200));
        let h = holds(&mut c, "k");
        assert_eq!(h.tokens(), ["t"], "{ask:?}: the retried hold was revoked");
        assert_eq!(h.hold("t").fence, fence);
        acq("k", "W2", 10_000).busy(&mut c);
        assert_eq!(
            info_field(&mut c, "dlock", "dlock_revoked_grants").as_deref(),
            Some("0")
        );
    }
}

/// A new hold needs a token within `dlock.max-token-length` also when the
/// queue empties in the same command (a pending handoff completed first).
#[test]
fn the_token_limit_holds_after_a_pending_handoff() {
    let long = "x".repeat(600);
    for ask in [
        acq("k", &long, LONG_TTL).shared(),
        acq("k", "t", LONG_TTL).shared().owner(&long),
    ] {
        let s = Server::start();
        let mut c = s.conn();
        acq("k", "W", LONG_TTL).grant(&mut c);
        let reader = acq("k", "R", LONG_TTL).shared().wait(0).spawn(&s.url());
        wait_queue(&mut c, "k", 1);
        let r: RedisResult<(i64, Option<i64>)> = redis::pipe()
            .atomic()
            .cmd("DEL")
            .arg("k")
            .add_command(ask.cmd())
            .query(&mut c);
        let e = r.expect_err("a long token got a new hold");
        assert_eq!(err_text(&e), "ERR token is longer than 512 bytes");
        // The pending handoff itself went through.
        let (f, _, _) = reader.granted();
        let h = holds(&mut c, "k");
        assert_eq!(h.tokens(), ["R"]);
        assert_eq!(h.hold("R").fence, f);
    }
}

/// Bytes that decode but describe holds no command could make are refused
/// by `RESTORE`, and nothing is stored.
#[test]
fn restore_refuses_holds_that_exclude_each_other() {
    let s = Server::start();
    let mut c = s.conn();
    // Uncompressed, so the test can find the mode bytes.
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("rdbcompression")
        .arg("no")
        .query::<()>(&mut c)
        .unwrap();
    acq("k", "aa", LONG_TTL).shared().grant(&mut c);
    acq("k", "bb", LONG_TTL).shared().grant(&mut c);
    let payload = dump(&mut c, "k");
    let (mut body, version) = split_payload(&payload);
    // Layout: the dump's type/length prefix, then [0; 8], version, limit,
    // count, and per hold: fence, deadline, mode. Flip every "shared" mode
    // byte to "exclusive": two writers.
    let mut flipped = 0;
    for pos in 0..body.len().saturating_sub(5) {
        // A mode byte is followed by the token length 2 (LE u32).
        if body[pos] == 1 && body[pos + 1..pos + 5] == [2, 0, 0, 0] {
            body[pos] = 0;
            flipped += 1;
        }
    }
    assert_eq!(flipped, 2, "layout changed? {body:?}");
    let forged = seal(&body, version);
    let e = restore(&mut c, "k2", 0, &forged).expect_err("two writers restored");
    assert!(err_text(&e).contains("Bad data format"), "{e}");
    assert_eq!(shown(&mut c, "k2"), Shown::Free);
    // The untouched payload restores.
    restore(&mut c, "k3", 0, &payload).unwrap();
    assert_eq!(holds(&mut c, "k3").tokens(), ["aa", "bb"]);
}

/// INFO's form follows the live holds: a plain hold whose reentrant
/// companion passed its deadline answers as a plain lock before any write
/// drops the dead hold.
#[test]
fn info_of_one_live_plain_hold_is_the_plain_form() {
    let s = Server::start();
    let mut c = s.conn();
    let f = acq("k", "T", LONG_TTL).grant(&mut c);
    // Long enough to be read before it ends on a slow run (valgrind).
    assert_eq!(acq("k", "T2", 500).owner("T").grant(&mut c), f);
    assert!(matches!(shown(&mut c, "k"), Shown::Holds(_)));
    thread::sleep(Duration::from_millis(700));
    match shown(&mut c, "k") {
        Shown::Plain(info) => {
            assert_eq!(info.token, b"T");
            assert_eq!(info.fence, f);
        }
        other => panic!("expected the plain form, got {other:?}"),
    }
}
