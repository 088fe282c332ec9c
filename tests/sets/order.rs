//! Queue order across single and set requests: strict FIFO on every
//! resource, a member freed (or free) while its set waits for another
//! member stays reserved, and a client that holds while it waits gets its
//! bounded `WAIT`'s nil.
use super::*;

/// A short pause before asserting that nothing was granted: a grant, had
/// there been one, is on its way within it.
fn settle_pause() {
    thread::sleep(Duration::from_millis(150));
}

#[test]
fn single_requests_do_not_pass_a_set_on_a_reserved_member() {
    let _quiet = quiet();
    let s = Server::start();
    let (mut c, url) = (s.conn(), s.url());
    let fh = one("A", "h").grant(&mut c);
    // S = {A, B} waits for A and reserves B, which nobody holds.
    let sp = set(&["A", "B"], "S").wait(LONG_WAIT).spawn(&url);
    wait_queue(&mut c, "A", 1);
    wait_queue(&mut c, "B", 1);
    assert_eq!(shown(&mut c, "B"), Shown::Reserved { waiters: 1 });
    // Single requests on B queue behind S.
    let b1 = one("B", "b1").wait(LONG_WAIT).spawn(&url);
    wait_queue(&mut c, "B", 2);
    let b2 = one("B", "b2").wait(LONG_WAIT).spawn(&url);
    wait_queue(&mut c, "B", 3);
    // Without WAIT, nothing passes the queue either.
    one("B", "x").busy(&mut c);
    one("B", "x").shared().busy(&mut c);
    set(&["B", "C"], "x").busy(&mut c);
    set(&["C", "B"], "x").shared().busy(&mut c);
    assert_eq!(shown(&mut c, "B"), Shown::Reserved { waiters: 3 });
    assert_eq!(
        shown(&mut c, "C"),
        Shown::Free,
        "a refused set left C as it was"
    );
    // A later set behind a single request on a shared member: it waits on
    // B behind b1 and b2, and reserves C, where c1 queues behind it.
    let tp = set(&["C", "B"], "T").wait(LONG_WAIT).spawn(&url);
    wait_queue(&mut c, "B", 4);
    wait_queue(&mut c, "C", 1);
    assert_eq!(shown(&mut c, "C"), Shown::Reserved { waiters: 1 });
    let c1 = one("C", "c1").wait(LONG_WAIT).spawn(&url);
    wait_queue(&mut c, "C", 2);
    one("C", "x").busy(&mut c);
    settle_pause();
    for p in [&sp, &b1, &b2, &tp, &c1] {
        p.assert_pending();
    }

    // h releases A: S gets A and B, one fence.
    one("A", "h").release(&mut c);
    let (fs, mut sc) = sp.granted();
    assert!(fs > fh, "a fresh fence");
    shown(&mut c, "A").assert_owner("S", fs);
    let b = shown(&mut c, "B");
    b.assert_owner("S", fs);
    assert_eq!(b.waiters(), 3, "b1, b2, T still queued on B");
    assert_eq!(shown(&mut c, "C"), Shown::Reserved { waiters: 2 });
    settle_pause();
    for p in [&b1, &b2, &tp, &c1] {
        p.assert_pending();
    }

    // Then B's queue in order: b1, b2, then T (with C), then c1 on C.
    set(&["A", "B"], "S").release(&mut sc);
    let (f1, mut b1c) = b1.granted();
    assert!(f1 > fs);
    shown(&mut c, "B").assert_owner("b1", f1);
    assert_eq!(shown(&mut c, "A"), Shown::Free, "nobody waits for A");
    assert_eq!(shown(&mut c, "C"), Shown::Reserved { waiters: 2 });
    settle_pause();
    for p in [&b2, &tp, &c1] {
        p.assert_pending();
    }
    one("B", "b1").release(&mut b1c);
    let (f2, mut b2c) = b2.granted();
    assert!(f2 > f1);
    shown(&mut c, "B").assert_owner("b2", f2);
    settle_pause();
    tp.assert_pending();
    c1.assert_pending();
    one("B", "b2").release(&mut b2c);
    let (ft, mut tc) = tp.granted();
    assert!(ft > f2);
    shown(&mut c, "B").assert_owner("T", ft);
    shown(&mut c, "C").assert_owner("T", ft);
    settle_pause();
    c1.assert_pending();
    set(&["C", "B"], "T").release(&mut tc);
    let (fc, mut cc) = c1.granted();
    assert!(fc > ft);
    shown(&mut c, "C").assert_owner("c1", fc);
    assert_eq!(shown(&mut c, "B"), Shown::Free);
    one("C", "c1").release(&mut cc);
    assert_all_free(&mut c, &["A", "B", "C"]);
}

#[test]
fn shared_sets_and_singles_are_granted_in_queue_order() {
    let _quiet = quiet();
    let s = Server::start();
    let (mut c, url) = (s.conn(), s.url());
    one("A", "h").grant(&mut c);
    // R = SHARED {A, B} waits for A; B is reserved for it, so a shared
    // single on B queues too, and an exclusive single behind both.
    let rp = set(&["A", "B"], "R").shared().wait(LONG_WAIT).spawn(&url);
    wait_queue(&mut c, "B", 1);
    let r2 = one("B", "r2").shared().wait(LONG_WAIT).spawn(&url);
    wait_queue(&mut c, "B", 2);
    let w = one("B", "w").wait(LONG_WAIT).spawn(&url);
    wait_queue(&mut c, "B", 3);
    settle_pause();
    for p in [&rp, &r2, &w] {
        p.assert_pending();
    }
    // A released: R and r2 share B at once; w waits for both.
    one("A", "h").release(&mut c);
    let (fr, mut rc) = rp.granted();
    let (f2, mut r2c) = r2.granted();
    assert!(f2 > fr, "granted in queue order");
    let b = shown(&mut c, "B");
    assert_eq!(b.fence_of("R"), Some(fr), "{b:?}");
    assert_eq!(b.fence_of("r2"), Some(f2), "{b:?}");
    assert_eq!(b.waiters(), 1);
    assert_eq!(shown(&mut c, "A").fence_of("R"), Some(fr));
    set(&["A", "B"], "R").shared().release(&mut rc);
    settle_pause();
    w.assert_pending();
    one("B", "r2").release(&mut r2c);
    let (fw, mut wc) = w.granted();
    assert!(fw > f2);
    shown(&mut c, "B").assert_owner("w", fw);
    one("B", "w").release(&mut wc);
    assert_all_free(&mut c, &["A", "B"]);
}

#[test]
fn hold_and_wait_with_a_bounded_wait_times_out_and_leaves_nothing() {
    let _quiet = quiet();
    let s = Server::start();
    let (mut x, url) = (s.conn(), s.url());
    // X holds A; Y's set {A, B} queues behind X and reserves B.
    let fx = one("A", "x").grant(&mut x);
    let yp = set(&["A", "B"], "y").wait(LONG_WAIT).spawn(&url);
    let mut c = s.conn();
    wait_queue(&mut c, "A", 1);
    wait_queue(&mut c, "B", 1);
    assert_eq!(shown(&mut c, "B"), Shown::Reserved { waiters: 1 });
    let timeouts = counter(&mut c, "wait_timeouts");
    // X, still holding A, asks for B: it waits behind Y, which waits for
    // X. The bounded WAIT ends it with nil, as documented.
    for req in [
        one("B", "x2").wait(300),
        set(&["B", "C"], "x3").wait(300),
        set(&["C", "B"], "x4").shared().wait(300),
    ] {
        let sent = Instant::now();
        let r = req.send(&mut x);
        let took = sent.elapsed();
        assert!(matches!(r, Ok(None)), "{req:?}: expected nil, got {r:?}");
        assert!(
            took >= Duration::from_millis(290) && took < Duration::from_secs(3),
            "{req:?}: nil after {took:?}, expected about 300 ms"
        );
        assert_eq!(shown(&mut c, "B"), Shown::Reserved { waiters: 1 });
        assert_eq!(shown(&mut c, "C"), Shown::Free, "{req:?} left C's queue");
        yp.assert_pending();
    }
    assert_eq!(counter(&mut c, "wait_timeouts") - timeouts, 3);
    // X gives A up: Y gets the set, then releases it. Nothing is left.
    one("A", "x").release(&mut x);
    let (fy, mut yc) = yp.granted();
    assert!(fy > fx);
    shown(&mut c, "A").assert_owner("y", fy);
    shown(&mut c, "B").assert_owner("y", fy);
    set(&["A", "B"], "y").release(&mut yc);
    assert_all_free(&mut c, &["A", "B", "C"]);
}
