//! Fairness between readers and writers: no writer starvation, a reentrant
//! read passes a queued writer (its owner already holds), downgrade and
//! upgrade.
use super::*;
use proxy::Rng;
use std::sync::atomic::{AtomicBool, Ordering};

const TTL: u64 = 30_000;

/// `MULTI / DLOCK.RELEASE res token / DLOCK.INFO res / EXEC`: what the
/// release answered and the resource right after it, atomically.
fn release_and_show(c: &mut Connection, res: &str, token: &str) -> (i64, Shown) {
    let v: Vec<Value> = redis::pipe()
        .atomic()
        .cmd("DLOCK.RELEASE")
        .arg(res)
        .arg(token)
        .cmd("DLOCK.INFO")
        .arg(res)
        .query(c)
        .expect("MULTI/EXEC");
    (as_int(&v[0]), parse_shown(v[1].clone()))
}

/// The holders' tokens and fences, whichever form INFO answers in.
fn holders(c: &mut Connection, res: &str) -> Vec<(String, i64)> {
    match shown(c, res) {
        Shown::Free => vec![],
        Shown::Plain(i) => vec![(String::from_utf8(i.token).unwrap(), i.fence)],
        Shown::Holds(h) => h.holds.into_iter().map(|h| (h.token, h.fence)).collect(),
    }
}

/// A reader's request: when it was sent, and the hold it got.
struct ReaderOp {
    sent: Instant,
    span: Span,
}

/// Re-acquires shared holds of 20-60 ms back to back until `stop`.
fn reader(id: usize, url: &str, stop: &AtomicBool) -> Vec<ReaderOp> {
    let mut rng = Rng::new(0xfa1e ^ id as u64);
    let mut c = connect(url);
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut ops = Vec::new();
    let give_up = Instant::now() + Duration::from_secs(60);
    for n in 0.. {
        if stop.load(Ordering::SeqCst) || Instant::now() > give_up {
            break;
        }
        let token = format!("r{id}-{n}");
        let sent = Instant::now();
        let fence = acq("fair", &token, TTL).shared().wait(20_000).grant(&mut c);
        let start = Instant::now();
        thread::sleep(Duration::from_millis(20 + rng.below(40)));
        let end = Instant::now();
        assert_eq!(release(&mut c, "fair", &token), 1, "{token}");
        let span = Span {
            client: id,
            token,
            exclusive: false,
            fence,
            start,
            end,
        };
        ops.push(ReaderOp { sent, span });
    }
    ops
}

struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// One writer's turn: when INFO first showed it queued (or holding), its
/// hold, and the readers INFO listed then.
struct Turn {
    queued_seen: Instant,
    present: Vec<String>,
    span: Span,
}

#[test]
fn a_writer_is_not_starved_by_readers_that_keep_coming() {
    const READERS: usize = 5;
    let _quiet = quiet();
    let s = Server::start();
    let stop = AtomicBool::new(false);
    let (turns, ops) = thread::scope(|sc| {
        let hs: Vec<_> = (0..READERS)
            .map(|id| {
                let (url, stop) = (s.url(), &stop);
                sc.spawn(move || reader(id, &url, stop))
            })
            .collect();
        // However the writers' side ends (a panic too), the readers stop.
        let _stop = StopOnDrop(&stop);
        let mut c = s.conn();
        let mut turns = Vec::new();
        for round in 0..5 {
            thread::sleep(Duration::from_millis(200));
            let token = format!("w{round}");
            let w = acq("fair", &token, TTL).wait(10_000).spawn(&s.url());
            let mut seen = None;
            wait_until(SOON, "the writer queued or holding", || {
                match shown(&mut c, "fair") {
                    Shown::Holds(h) if h.waiters > 0 || h.tokens().contains(&token.as_str()) => {
                        seen = Some((Instant::now(), h));
                    }
                    // Granted at once, alone: a writer is a plain lock.
                    Shown::Plain(p) if p.token == token.as_bytes() => {
                        let h = Holds {
                            kind: "plain".into(),
                            limit: 1,
                            waiters: p.waiters,
                            holds: Vec::new(),
                        };
                        seen = Some((Instant::now(), h));
                    }
                    _ => {}
                }
                seen.is_some()
            });
            let (queued_seen, info) = seen.unwrap();
            // Not starved: granted while readers keep asking.
            let (fence, start, mut wc) = w.granted();
            thread::sleep(Duration::from_millis(10));
            let end = Instant::now();
            assert_eq!(release(&mut wc, "fair", &token), 1);
            let present = info.tokens().iter().map(|t| t.to_string()).collect();
            let span = Span {
                client: READERS + round,
                token,
                exclusive: true,
                fence,
                start,
                end,
            };
            turns.push(Turn {
                queued_seen,
                present,
                span,
            });
        }
        stop.store(true, Ordering::SeqCst);
        let ops: Vec<ReaderOp> = hs.into_iter().flat_map(join).collect();
        (turns, ops)
    });
    let mut spans: Vec<Span> = ops.iter().map(|o| o.span.clone()).collect();
    spans.extend(turns.iter().map(|t| t.span.clone()));
    check_exclusion(&spans);
    let mut arrived_while_waiting = 0;
    for t in &turns {
        // Readers that asked once the writer was queued come after it.
        for o in ops.iter().filter(|o| o.sent > t.queued_seen) {
            assert!(
                o.span.fence > t.span.fence,
                "reader {} asked after writer {} queued, yet was granted before it",
                o.span.token,
                t.span.token
            );
            if o.sent < t.span.start {
                arrived_while_waiting += 1;
            }
        }
        // The readers present then had all left before it was granted.
        for p in t.present.iter().filter(|p| **p != t.span.token) {
            let o = ops.iter().find(|o| o.span.token == *p).expect("a reader");
            assert!(o.span.end < t.span.start, "{p} still held");
        }
    }
    eprintln!(
        "fairness: {} reader holds, {} readers asked while a writer waited",
        ops.len(),
        arrived_while_waiting
    );
    assert!(
        arrived_while_waiting > 0,
        "no reader ever asked behind a writer"
    );
    let with_readers = turns
        .iter()
        .filter(|t| t.present.iter().any(|p| *p != t.span.token))
        .count();
    assert!(with_readers >= 3, "writers rarely found readers holding");
}

#[test]
fn readers_arriving_after_a_writer_queue_behind_it() {
    let s = Server::start();
    let mut c = s.conn();
    let f1 = acq("rw", "r1", TTL).shared().grant(&mut c);
    let f2 = acq("rw", "r2", TTL).shared().grant(&mut c);
    assert!(f2 > f1, "each reader is a new owner: a fresh fence");
    let w = acq("rw", "w", TTL).wait(20_000).spawn(&s.url());
    wait_queue(&mut c, "rw", 1);
    acq("rw", "r3", TTL).shared().busy(&mut c);
    let r4 = acq("rw", "r4", TTL).shared().wait(20_000).spawn(&s.url());
    wait_queue(&mut c, "rw", 2);
    let (n, after) = release_and_show(&mut c, "rw", "r1");
    let Shown::Holds(after) = after else {
        panic!("{after:?}")
    };
    assert_eq!((n, after.tokens(), after.waiters), (1, vec!["r2"], 2));
    thread::sleep(Duration::from_millis(100));
    w.assert_pending();
    r4.assert_pending();
    // The last reader present when the writer queued leaves: its turn.
    assert_eq!(release(&mut c, "rw", "r2"), 1);
    let (fw, _, mut wc) = w.granted();
    assert!(fw > f2);
    assert_eq!(holders(&mut c, "rw"), vec![("w".to_string(), fw)]);
    r4.assert_pending();
    assert_eq!(release(&mut wc, "rw", "w"), 1);
    let (f4, ..) = r4.granted();
    assert!(f4 > fw);
    assert_eq!(holders(&mut c, "rw"), vec![("r4".to_string(), f4)]);
}

#[test]
fn a_reentrant_read_passes_a_queued_writer() {
    let s = Server::start();
    let mut c = s.conn();
    let fa = acq("rw", "a1", TTL).shared().owner("A").grant(&mut c);
    let w = acq("rw", "w", TTL).wait(20_000).spawn(&s.url());
    wait_queue(&mut c, "rw", 1);
    // Nested read of the same owner: at once (WAIT or not), same fence.
    let nested = acq("rw", "a2", TTL).shared().owner("A").wait(20_000);
    let t = Instant::now();
    assert_eq!(nested.grant(&mut c), fa);
    assert!(t.elapsed() < SOON, "the nested read waited");
    let h = holds(&mut c, "rw");
    assert_eq!((h.kind.as_str(), h.waiters), ("rwlock", 1));
    assert_eq!(h.tokens(), ["a1", "a2"]);
    for x in &h.holds {
        assert_eq!(
            (x.owner.as_str(), x.fence, x.mode.as_str()),
            ("A", fa, "shared")
        );
    }
    // Another owner's read does not pass the writer.
    acq("rw", "b", TTL).shared().busy(&mut c);
    acq("rw", "a3", TTL).shared().owner("B").busy(&mut c);
    // The writer waits for the last of A's holds.
    let (n, after) = release_and_show(&mut c, "rw", "a1");
    let Shown::Holds(after) = after else {
        panic!("{after:?}")
    };
    assert_eq!((n, after.tokens(), after.waiters), (1, vec!["a2"], 1));
    thread::sleep(Duration::from_millis(100));
    w.assert_pending();
    assert_eq!(release(&mut c, "rw", "a2"), 1);
    let (fw, ..) = w.granted();
    assert!(fw > fa);
    assert_eq!(holders(&mut c, "rw"), vec![("w".to_string(), fw)]);
}

#[test]
fn a_reentrant_write_passes_a_queued_writer() {
    let s = Server::start();
    let mut c = s.conn();
    let fa = acq("x", "a1", TTL).owner("A").grant(&mut c);
    let w = acq("x", "w", TTL).wait(20_000).spawn(&s.url());
    wait_queue(&mut c, "x", 1);
    assert_eq!(
        acq("x", "a2", TTL).owner("A").wait(20_000).grant(&mut c),
        fa
    );
    assert_eq!(acq("x", "a3", TTL).shared().owner("A").grant(&mut c), fa);
    assert_eq!(holds(&mut c, "x").tokens(), ["a1", "a2", "a3"]);
    for t in ["a3", "a1"] {
        assert_eq!(release(&mut c, "x", t), 1);
        thread::sleep(Duration::from_millis(50));
        w.assert_pending();
    }
    assert_eq!(release(&mut c, "x", "a2"), 1);
    assert!(w.granted().0 > fa);
}

#[test]
fn downgrade_keeps_a_queued_writer_out() {
    let s = Server::start();
    let mut c = s.conn();
    let fa = acq("rw", "a-w", TTL).owner("A").grant(&mut c);
    let w = acq("rw", "w", TTL).wait(20_000).spawn(&s.url());
    wait_queue(&mut c, "rw", 1);
    let r = acq("rw", "r", TTL).shared().wait(20_000).spawn(&s.url());
    wait_queue(&mut c, "rw", 2);
    // Downgrade: a read under the same owner, then drop the write.
    assert_eq!(acq("rw", "a-r", TTL).shared().owner("A").grant(&mut c), fa);
    let (n, after) = release_and_show(&mut c, "rw", "a-w");
    let Shown::Holds(after) = after else {
        panic!("{after:?}")
    };
    assert_eq!(n, 1);
    assert_eq!((after.tokens(), after.waiters), (vec!["a-r"], 2));
    let h = after.hold("a-r");
    assert_eq!(
        (h.owner.as_str(), h.fence, h.mode.as_str()),
        ("A", fa, "shared")
    );
    thread::sleep(Duration::from_millis(100));
    w.assert_pending();
    r.assert_pending();
    // A's read is still live; nobody got in beside it.
    assert_eq!(holds(&mut c, "rw").tokens(), ["a-r"]);
    acq("rw", "late", TTL).shared().busy(&mut c);
    assert_eq!(release(&mut c, "rw", "a-r"), 1);
    let (fw, _, mut wc) = w.granted();
    assert!(fw > fa);
    thread::sleep(Duration::from_millis(50));
    r.assert_pending();
    assert_eq!(release(&mut wc, "rw", "w"), 1);
    assert!(r.granted().0 > fw);
}

#[test]
fn upgrade_is_refused_beside_another_reader_and_granted_alone() {
    let s = Server::start();
    let mut c = s.conn();
    let fa = acq("rw", "a1", TTL).shared().owner("A").grant(&mut c);
    let fb = acq("rw", "b1", TTL).shared().owner("B").grant(&mut c);
    assert!(fb > fa);
    let before = holds(&mut c, "rw");
    let up = acq("rw", "a2", TTL).owner("A");
    assert_eq!(up.error(&mut c), UPGRADE_REFUSED);
    // With WAIT too: refused at once, never queued.
    let t = Instant::now();
    assert_eq!(up.clone().wait(30_000).error(&mut c), UPGRADE_REFUSED);
    assert!(t.elapsed() < SOON, "the upgrade waited");
    before.assert_same(&holds(&mut c, "rw"));
    // Alone again: granted at once, with the owner's fence.
    assert_eq!(release(&mut c, "rw", "b1"), 1);
    assert_eq!(up.grant(&mut c), fa);
    let h = holds(&mut c, "rw");
    assert_eq!(h.tokens(), ["a1", "a2"]);
    assert_eq!(h.hold("a2").mode, "exclusive");
    assert_eq!(h.hold("a2").fence, fa);
    acq("rw", "b2", TTL).shared().owner("B").busy(&mut c);
    acq("rw", "c", TTL).busy(&mut c);
    // An exclusive hold of its own: another request of A is no upgrade.
    assert_eq!(acq("rw", "a3", TTL).owner("A").grant(&mut c), fa);
}
