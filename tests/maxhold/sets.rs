//! `MACQUIRE ... MAXHOLD` and `MEXTEND` past a member's cap.
use super::*;

fn macquire(members: &[&str], token: &str, ttl: u64, ms: Option<u64>) -> redis::Cmd {
    let mut cmd = redis::cmd("DLOCK.MACQUIRE");
    cmd.arg(members.len()).arg(members).arg(token).arg(ttl);
    if let Some(ms) = ms {
        cmd.arg("MAXHOLD").arg(ms);
    }
    cmd
}

fn mextend(members: &[&str], token: &str, ttl: u64) -> redis::Cmd {
    let mut cmd = redis::cmd("DLOCK.MEXTEND");
    cmd.arg(members.len()).arg(members).arg(token).arg(ttl);
    cmd
}

#[test]
fn every_member_gets_the_cap() {
    let s = Server::start();
    let mut c = s.conn();
    let f = fence_of(&mut c, &macquire(&["a", "b"], "t", 100_000, Some(5_000)));
    for m in ["a", "b"] {
        let h = only(&mut c, m);
        assert_eq!(h.fence, f);
        assert!(h.ttl <= 5_000 && h.maxhold.unwrap() <= 5_000, "{m}: {h:?}");
    }
    assert_eq!(
        fence_of(&mut c, &macquire(&["a", "b"], "t", 1_000, Some(5_000))),
        f,
        "a retry"
    );
    assert_eq!(
        refused(&mut c, &macquire(&["a", "b"], "t", 1_000, None)),
        MISMATCH
    );
}

/// A set whose second member is capped and the first not: `MEXTEND` past
/// the cap moves neither, `waiting`: while someone waits on the first.
fn mextend_refused_whole(waiting: bool) {
    let s = Server::start();
    let mut c = s.conn();
    // `a` uncapped, `b` capped, both held by `t` under their own fences.
    grant(&mut c, "a", "t", 10_000);
    fence_of(&mut c, &capped("b", "t", 10_000, 20_000, &[]));
    let url = s.url();
    let waiter = waiting.then(|| {
        std::thread::spawn(move || {
            let mut w = connect_within(&url, SOON).unwrap();
            acquire_wait(&mut w, "a", "w", 1_000, 0).unwrap()
        })
    });
    if waiting {
        wait_waiters(&mut c, "a", 1);
    }
    let before = snapshot(&mut c, &["b"]);
    let a_before = digest(&mut c, "a");
    let a_ttl = pttl(&mut c, "a");
    let e = refused(&mut c, &mextend(&["a", "b"], "t", 20_001));
    assert!(ms_left(&e) <= 20_000, "{e}");
    assert_eq!(snapshot(&mut c, &["b"]), before);
    assert_eq!(
        digest(&mut c, "a"),
        a_before,
        "the uncapped member is as it was"
    );
    assert!(pttl(&mut c, "a") <= a_ttl, "a did not move");
    // Within the cap every member moves.
    let moved: i64 = mextend(&["a", "b"], "t", 15_000).query(&mut c).unwrap();
    assert_eq!(moved, 1);
    assert!(pttl(&mut c, "a") > 10_000);
    if let Some(w) = waiter {
        assert_eq!(release(&mut c, "a", "t"), 1);
        assert!(w.join().unwrap().is_some());
    }
}

#[test]
fn mextend_past_a_members_cap_moves_no_member() {
    mextend_refused_whole(false);
}

#[test]
fn mextend_past_a_members_cap_moves_no_member_while_someone_waits() {
    mextend_refused_whole(true);
}
