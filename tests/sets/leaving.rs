//! A queued set that leaves (its `WAIT` runs out, `CLIENT UNBLOCK` with and
//! without `ERROR`, its connection killed) leaves every member's queue at
//! once: no `MULTI`/`DLOCK.INFO` snapshot shows it gone from one queue and
//! still in another, and the requests behind it on every member proceed.
use super::*;
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Way {
    Timeout,
    Unblock,
    UnblockError,
    Kill,
}

/// The leaving set's `WAIT` when it runs out: long enough for the queue
/// behind it to form first, even on a loaded machine.
const SHORT_WAIT: u64 = 2_000;
const MEMBERS: [&str; 3] = ["A", "B", "C"];

/// What the queues look like while L waits, and after it left: per member,
/// its holder (None: reserved) and its queue length.
fn state(snap: &[Shown]) -> Vec<(Option<String>, i64)> {
    snap.iter()
        .map(|s| match s {
            Shown::Held { holds, waiters } if holds.len() == 1 => {
                (Some(holds[0].0.clone()), *waiters)
            }
            Shown::Reserved { waiters } => (None, *waiters),
            other => panic!("unexpected {other:?} in {snap:?}"),
        })
        .collect()
}

/// Every snapshot must show L in all queues or in none.
fn leaves(way: Way) {
    let _quiet = quiet();
    let s = Server::start();
    let (mut c, url) = (s.conn(), s.url());
    // A and C held, B free. L = {A, B, C} waits for A and C and reserves B;
    // one single request queues behind it on each member.
    one("A", "ha").grant(&mut c);
    one("C", "hc").grant(&mut c);
    let wait = if way == Way::Timeout {
        SHORT_WAIT
    } else {
        LONG_WAIT
    };
    let lp = set(&["B", "C", "A"], "L").wait(wait).spawn(&url);
    for m in MEMBERS {
        wait_queue(&mut c, m, 1);
    }
    let behind: Vec<Pending> = MEMBERS
        .iter()
        .map(|m| {
            let p = one(m, &format!("{m}1")).wait(LONG_WAIT).spawn(&url);
            wait_queue(&mut c, m, 2);
            p
        })
        .collect();
    let before = vec![
        (Some("ha".to_string()), 2),
        (None, 2),
        (Some("hc".to_string()), 2),
    ];
    // Once L left: B1 holds B at once; A1 and C1 wait for the holders.
    let after = vec![
        (Some("ha".to_string()), 1),
        (Some("B1".to_string()), 0),
        (Some("hc".to_string()), 1),
    ];
    // L gone from every queue, B's handoff to B1 not run yet (it runs from
    // a timer after a timeout or an unblock): B shows reserved for B1.
    let pending = vec![
        (Some("ha".to_string()), 1),
        (None, 1),
        (Some("hc".to_string()), 1),
    ];
    assert_eq!(state(&snapshot(&mut c, &MEMBERS)), before);
    let timeouts = counter(&mut c, "wait_timeouts");
    let started = AtomicBool::new(false);
    let snaps = thread::scope(|sc| {
        let checker = sc.spawn(|| {
            let mut k = s.conn();
            let end = Instant::now() + SOON + Duration::from_millis(SHORT_WAIT);
            let mut n = 0;
            loop {
                let now = state(&snapshot(&mut k, &MEMBERS));
                n += 1;
                started.store(true, Ordering::Relaxed);
                if now == after {
                    return n;
                }
                if now == pending {
                    continue;
                }
                assert_eq!(now, before, "snapshot {n}: L left some queues only");
                assert!(Instant::now() < end, "L never left");
            }
        });
        wait_until(SOON, "the checker to run", || {
            started.load(Ordering::Relaxed)
        });
        let id = lp.id.to_string();
        match way {
            Way::Timeout => {}
            Way::Unblock => {
                let n: i64 = redis::cmd("CLIENT")
                    .arg(&["UNBLOCK", &id])
                    .query(&mut c)
                    .unwrap();
                assert_eq!(n, 1, "L was blocked");
            }
            Way::UnblockError => {
                let n: i64 = redis::cmd("CLIENT")
                    .arg(&["UNBLOCK", &id, "ERROR"])
                    .query(&mut c)
                    .unwrap();
                assert_eq!(n, 1, "L was blocked");
            }
            Way::Kill => {
                let n: i64 = redis::cmd("CLIENT")
                    .arg(&["KILL", "ID", &id])
                    .query(&mut c)
                    .unwrap();
                assert_eq!(n, 1, "L was killed");
            }
        }
        join(checker)
    });
    // L heard what its way of leaving says.
    let o = lp.outcome(SOON);
    match way {
        Way::Timeout => {
            assert!(matches!(o.reply, Ok(None)), "{:?}", o.reply);
            let took = o.at - lp.sent;
            assert!(
                took >= Duration::from_millis(SHORT_WAIT - 10),
                "timed out after {took:?}"
            );
        }
        Way::Unblock => assert!(matches!(o.reply, Ok(None)), "{:?}", o.reply),
        Way::UnblockError => match &o.reply {
            Err(e) => assert!(err_text(e).starts_with("UNBLOCKED"), "{e}"),
            other => panic!("expected UNBLOCKED, got {other:?}"),
        },
        Way::Kill => assert!(o.conn.is_none(), "killed, got {:?}", o.reply),
    }
    // The requests behind it proceed on every member.
    let (fb, mut bc) = behind[1].granted();
    shown(&mut c, "B").assert_owner("B1", fb);
    behind[0].assert_pending();
    behind[2].assert_pending();
    one("A", "ha").release(&mut c);
    let (fa, mut ac) = behind[0].granted();
    shown(&mut c, "A").assert_owner("A1", fa);
    one("C", "hc").release(&mut c);
    let (fc, mut cc) = behind[2].granted();
    shown(&mut c, "C").assert_owner("C1", fc);
    assert!(fb < fa && fa < fc, "fences in grant order");
    one("A", "A1").release(&mut ac);
    one("B", "B1").release(&mut bc);
    one("C", "C1").release(&mut cc);
    assert_all_free(&mut c, &MEMBERS);
    let counted = if way == Way::Kill { 0 } else { 1 };
    assert_eq!(counter(&mut c, "wait_timeouts") - timeouts, counted);
    assert_eq!(counter(&mut c, "revoked_grants"), 0);
    eprintln!("{way:?}: {snaps} snapshots, L left every queue at once");
}

/// A snapshot whose `EXEC` straddles L's deadline still reads one instant:
/// inside a transaction `DLOCK.INFO` only reads.
#[test]
fn a_set_whose_wait_runs_out_leaves_every_queue_at_once() {
    leaves(Way::Timeout);
}

#[test]
fn an_unblocked_set_leaves_every_queue_at_once() {
    leaves(Way::Unblock);
}

#[test]
fn a_set_unblocked_with_an_error_leaves_every_queue_at_once() {
    leaves(Way::UnblockError);
}

#[test]
fn a_killed_set_leaves_every_queue_at_once() {
    leaves(Way::Kill);
}
