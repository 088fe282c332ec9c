//! A set grant racing its waiter's departure. The release that grants the
//! set and the waiter's end are forced into one event-loop turn
//! (`MULTI`/`EXEC`, or a slow script), where timing cannot hide the race:
//! the grant never reaches its client, so it is revoked on every member
//! (counted once in `dlock_revoked_grants`), and each member goes to the
//! next request queued on it, or is free.
use super::*;
use std::io::Write;
use std::net::TcpStream;

/// `dlock_grants`, `dlock_revoked_grants`, `dlock_wait_timeouts`.
fn counters(c: &mut Connection) -> [i64; 3] {
    ["grants", "revoked_grants", "wait_timeouts"].map(|n| counter(c, n))
}

fn delta(before: [i64; 3], c: &mut Connection) -> [i64; 3] {
    let after = counters(c);
    [0, 1, 2].map(|i| after[i] - before[i])
}

#[derive(Debug, Clone, Copy)]
enum End {
    Unblock,
    UnblockError,
    Kill,
}

/// Who waits behind the set W = {A, B}.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Behind {
    /// One single request on each member.
    Singles,
    /// Another set {B, A}.
    Set,
    Nobody,
}

/// A holds A; W = {A, B} waits for it (B reserved), `behind` queues after
/// W. One transaction releases A (granting W both members) and ends W's
/// wait: the grant is revoked on both members.
fn set_grant_racing(end: End, behind: Behind) {
    let _quiet = quiet();
    let m = Server::start();
    let r = Server::builder().replica_of(&m).start();
    r.wait_for_sync(SOON);
    let (mut c, url) = (m.conn(), m.url());
    one("A", "h").grant(&mut c);
    let wp = set(&["A", "B"], "W").wait(LONG_WAIT).spawn(&url);
    wait_queue(&mut c, "A", 1);
    wait_queue(&mut c, "B", 1);
    let next: Vec<Pending> = match behind {
        Behind::Singles => ["A", "B"]
            .iter()
            .map(|res| {
                let p = one(res, &format!("n{res}")).wait(LONG_WAIT).spawn(&url);
                wait_queue(&mut c, res, 2);
                p
            })
            .collect(),
        Behind::Set => {
            let p = set(&["B", "A"], "N").wait(LONG_WAIT).spawn(&url);
            wait_queue(&mut c, "A", 2);
            wait_queue(&mut c, "B", 2);
            vec![p]
        }
        Behind::Nobody => Vec::new(),
    };
    let before = counters(&mut c);
    let id = wp.id.to_string();
    let mut pipe = redis::pipe();
    pipe.atomic().cmd("DLOCK.RELEASE").arg("A").arg("h");
    match end {
        End::Unblock => pipe.cmd("CLIENT").arg(&["UNBLOCK", &id]),
        End::UnblockError => pipe.cmd("CLIENT").arg(&["UNBLOCK", &id, "ERROR"]),
        End::Kill => pipe.cmd("CLIENT").arg(&["KILL", "ID", &id]),
    };
    let results: Vec<Value> = pipe.query(&mut c).expect("MULTI/EXEC");
    assert_eq!(as_int(&results[0]), 1, "the holder's release");
    assert_eq!(as_int(&results[1]), 1, "W was found: {results:?}");
    let o = wp.outcome(SOON);
    match end {
        End::Unblock => assert!(matches!(o.reply, Ok(None)), "nil, got {:?}", o.reply),
        End::UnblockError => match &o.reply {
            Err(e) => assert!(err_text(e).starts_with("UNBLOCKED"), "{e}"),
            other => panic!("expected UNBLOCKED, got {other:?}"),
        },
        End::Kill => assert!(o.conn.is_none(), "killed, got {:?}", o.reply),
    }
    // The revoked grant gave both members to what waits behind W.
    let mut conns = Vec::new();
    let owners: Vec<(&str, &str, i64)> = match behind {
        Behind::Singles => {
            let (fa, ca) = next[0].granted();
            let (fb, cb) = next[1].granted();
            conns.extend([ca, cb]);
            vec![("A", "nA", fa), ("B", "nB", fb)]
        }
        Behind::Set => {
            let (f, cn) = next[0].granted();
            conns.push(cn);
            vec![("A", "N", f), ("B", "N", f)]
        }
        Behind::Nobody => Vec::new(),
    };
    for (res, tok, fence) in &owners {
        let s = shown(&mut c, res);
        s.assert_owner(tok, *fence);
        assert_eq!(s.waiters(), 0, "{res}");
    }
    if behind == Behind::Nobody {
        assert_eq!(shown(&mut c, "A"), Shown::Free, "revoked on A");
        assert_eq!(shown(&mut c, "B"), Shown::Free, "revoked on B");
    }
    let d = delta(before, &mut c);
    let received = match behind {
        Behind::Singles => 2,
        Behind::Set => 1,
        Behind::Nobody => 0,
    };
    assert_eq!(d[1], 1, "W's grant revoked, counted once: {d:?}");
    assert_eq!(
        d[0] - d[1],
        received,
        "dlock_grants - dlock_revoked_grants = fences received: {d:?}"
    );
    wait_blocked_clients(&mut c, 0);
    assert_eq!(counter(&mut c, "waiters"), 0);
    // The replica holds exactly what the master holds.
    let n: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut c).unwrap();
    assert_eq!(n, 1, "replica acknowledged");
    let mut rc = r.conn();
    for res in ["A", "B"] {
        assert_eq!(shown(&mut rc, res), shown(&mut c, res), "replica's {res}");
    }
    assert!(m.log().contains("revoked"), "logged:\n{}", m.log());
}

#[test]
fn set_grant_racing_client_unblock_is_revoked_on_every_member() {
    set_grant_racing(End::Unblock, Behind::Singles);
}

#[test]
fn set_grant_racing_client_unblock_error_is_revoked_on_every_member() {
    set_grant_racing(End::UnblockError, Behind::Set);
}

#[test]
fn set_grant_racing_client_kill_is_revoked_on_every_member() {
    set_grant_racing(End::Kill, Behind::Singles);
}

#[test]
fn a_revoked_set_grant_with_nobody_behind_frees_every_member() {
    set_grant_racing(End::Kill, Behind::Nobody);
}

/// `EVAL` of a script that runs `before`, busy-waits `ms` (on `TIME`), then
/// runs `after`.
fn slow_script(c: &mut Connection, ms: u64, before: &str, after: &str) -> RedisResult<Value> {
    let script = format!(
        "{before}
         local t = redis.call('TIME')
         local start = t[1] * 1000000 + t[2]
         repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] - start >= {us}
         {after}
         return 1",
        us = ms * 1000
    );
    redis::cmd("EVAL").arg(script).arg(1).arg("A").query(c)
}

#[test]
fn a_set_whose_wait_ran_out_is_never_granted() {
    let _quiet = quiet();
    let s = Server::start();
    let (mut c, url) = (s.conn(), s.url());
    one("A", "h").grant(&mut c);
    // W gives up after 1 s; the script releases A at 2 s, before the
    // event loop had a chance to answer W.
    let wp = set(&["A", "B"], "W").wait(1000).spawn(&url);
    wait_queue(&mut c, "B", 1);
    let np = set(&["B", "A"], "N").wait(LONG_WAIT).spawn(&url);
    wait_queue(&mut c, "B", 2);
    let before = counters(&mut c);
    slow_script(
        &mut c,
        2000,
        "",
        "redis.call('DLOCK.RELEASE', KEYS[1], 'h')",
    )
    .unwrap();
    let o = wp.outcome(SOON);
    assert!(matches!(o.reply, Ok(None)), "W timed out: {:?}", o.reply);
    let (f, mut nc) = np.granted();
    shown(&mut c, "A").assert_owner("N", f);
    shown(&mut c, "B").assert_owner("N", f);
    let d = delta(before, &mut c);
    assert_eq!(d, [1, 0, 1], "one grant (N), none revoked, W timed out");
    set(&["A", "B"], "N").release(&mut nc);
    assert_all_free(&mut c, &["A", "B"]);
}

#[test]
fn a_set_whose_connection_closes_in_the_grant_turn_is_revoked_on_every_member() {
    // The server reads the closed connection while a slow script runs
    // (past busy-reply-threshold): the set grant the script made is
    // revoked once the script is over, on both members.
    let _quiet = quiet();
    let s = Server::builder()
        .arg("--busy-reply-threshold")
        .arg("50")
        .start();
    let mut c = s.conn();
    one("A", "h").grant(&mut c);
    let mut raw = TcpStream::connect(("127.0.0.1", s.port())).unwrap();
    let cmd = set(&["A", "B"], "gone").wait(0).cmd().get_packed_command();
    raw.write_all(&cmd).unwrap();
    wait_queue(&mut c, "A", 1);
    wait_queue(&mut c, "B", 1);
    let before = counters(&mut c);
    let url = s.url();
    let script = thread::spawn(move || {
        let mut sc = connect(&url);
        sc.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        slow_script(
            &mut sc,
            2500,
            "redis.call('DLOCK.RELEASE', KEYS[1], 'h')",
            "",
        )
    });
    // Once the server answers BUSY, the script runs (and has granted).
    let mut probe = s.conn();
    wait_until(SOON, "the script to run", || {
        matches!(redis::cmd("PING").query::<String>(&mut probe),
                 Err(e) if err_text(&e).starts_with("BUSY"))
    });
    raw.shutdown(std::net::Shutdown::Both).unwrap();
    drop(raw);
    script.join().unwrap().expect("script");
    wait_until(SOON, "the revoked set to be free", || {
        shown(&mut c, "A") == Shown::Free && shown(&mut c, "B") == Shown::Free
    });
    let d = delta(before, &mut c);
    assert_eq!([d[0], d[1]], [1, 1], "one grant, revoked once: {d:?}");
    assert_all_free(&mut c, &["A", "B"]);
}
