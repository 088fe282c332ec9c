//! Expiry hands off to the head waiter at the lease deadline, whether the
//! lease was shortened or lengthened by EXTEND, PEXPIRE or a re-acquire, and
//! not while writes are paused.
use super::*;

/// Waits for `w`'s grant after the lease (that ends `lease` after `t0`)
/// runs out; checks the grant came after the lease end and long before the
/// waiter's own 5 s timeout.
fn check_expiry_grant(w: &Waiter, t0: Instant, lease: Duration, what: &str) -> i64 {
    let o = w.outcome(Duration::from_secs(6));
    let f = o.fence();
    let after = o.at - t0;
    eprintln!("{what}: waiter granted {after:?} after a {lease:?} lease started");
    assert!(
        after >= lease - Duration::from_millis(50),
        "{what}: granted after {after:?}, before the {lease:?} lease ended"
    );
    assert!(
        after < lease + Duration::from_millis(1200),
        "{what}: granted only after {after:?} (lease {lease:?})"
    );
    f
}

#[test]
fn expiry_hands_off() {
    let s = Server::start();
    let mut c = s.conn();
    let mut obs = s.conn();
    let lease = Duration::from_millis(300);
    // The waiter must be queued before the 300 ms lease ends; its connection
    // is made in advance, and on a badly stalled machine the round is
    // retried rather than misjudged.
    let mut done = false;
    for attempt in 0..3 {
        let res = format!("res{attempt}");
        let mut w = Waiter::prepare(&s.url(), &res, "waiter", 10_000, 5_000);
        let t0 = Instant::now(); // before the holder's ACQUIRE is sent
        let hf = acquire(&mut c, &res, "holder", 300).expect("grant");
        w.send();
        let queued_by = t0 + Duration::from_millis(200);
        let mut queued = false;
        while Instant::now() < queued_by {
            if waiters(&mut obs, &res) == 1 {
                queued = true;
                break;
            }
            thread::sleep(Duration::from_millis(2));
        }
        if !queued {
            eprintln!("attempt {attempt}: waiter not queued within 200 ms, retrying");
            continue;
        }
        let f = check_expiry_grant(&w, t0, lease, "ACQUIRE 300");
        assert!(f > hf);
        assert_owner(&mut c, &res, "waiter", f);
        done = true;
        break;
    }
    assert!(
        done,
        "the waiter never got queued before a 300 ms lease ended"
    );

    // Same, but the short lease is set by EXTEND while the waiter is queued.
    let hf = hold(&mut c, "ext", "holder");
    let w = Waiter::start(&s.url(), "ext", "waiter", 10_000, 5_000);
    wait_waiters(&mut c, "ext", 1);
    let t0 = Instant::now();
    assert_eq!(extend(&mut c, "ext", "holder", 300), 1);
    let f = check_expiry_grant(&w, t0, lease, "EXTEND 300");
    assert!(f > hf);
    assert_owner(&mut c, "ext", "waiter", f);
    assert_eq!(blocked_clients(&mut c), 0);
}

/// A lease shortened while a waiter is queued must be handed off at its new
/// deadline by the module's timer, not whenever Redis's active-expire cycle
/// happens to notice the key. `--hz 1` makes that cycle run about once a
/// second, so a late handoff cannot hide inside the margin. Nothing reads
/// the key while waiting (a read would expire it lazily and hide the bug).
fn check_shortened_lease(what: &str, shorten: impl FnOnce(&mut Connection) -> i64) {
    let s = Server::builder().arg("--hz").arg("1").start();
    let mut c = s.conn();
    let hf = hold(&mut c, "res", "holder");
    let w = Waiter::start(&s.url(), "res", "waiter", 10_000, 5_000);
    wait_waiters(&mut c, "res", 1);
    let t0 = Instant::now();
    assert_eq!(shorten(&mut c), 1, "{what}");
    let o = w.outcome(Duration::from_secs(6));
    let after = o.at - t0;
    eprintln!("{what} with waiter queued (hz 1): granted {after:?} after the command");
    let f = o.fence();
    assert!(f > hf);
    assert!(
        after >= Duration::from_millis(250),
        "{what}: granted after {after:?}, before the 300 ms lease ended"
    );
    assert!(
        after < Duration::from_millis(500),
        "{what}: 300 ms lease handed off only after {after:?}: the expiry timer \
         was not re-armed for the shorter lease"
    );
    assert_owner(&mut c, "res", "waiter", f);
}

#[test]
fn extend_shortened_lease_hands_off_at_new_deadline() {
    check_shortened_lease("DLOCK.EXTEND res holder 300", |c| {
        redis::cmd("DLOCK.EXTEND")
            .arg("res")
            .arg("holder")
            .arg(300)
            .query(c)
            .unwrap()
    });
}

/// An admin's PEXPIRE bypasses the module
/// (docs/safety.md#admin-overrides), so no module timer follows it: the
/// shortened lease is handed over when Redis's own expiry notices the key
/// (active expiry, about every 1000/hz ms) or when any client touches it.
/// With `--hz 1` that is within ~1 s; it is never early and never lost.
#[test]
fn pexpire_shortened_lease_hands_off_by_redis_expiry() {
    let s = Server::builder().arg("--hz").arg("1").start();
    let mut c = s.conn();
    let hf = hold(&mut c, "res", "holder");
    let w = Waiter::start(&s.url(), "res", "waiter", 10_000, 5_000);
    wait_waiters(&mut c, "res", 1);
    let t0 = Instant::now();
    let n: i64 = redis::cmd("PEXPIRE")
        .arg("res")
        .arg(300)
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 1);
    let o = w.outcome(Duration::from_secs(6));
    let after = o.at - t0;
    eprintln!("PEXPIRE res 300 with waiter queued (hz 1): granted {after:?} after the command");
    assert!(after >= Duration::from_millis(250), "early: {after:?}");
    assert!(after < Duration::from_millis(2500), "late: {after:?}");
    let f = o.fence();
    assert!(f > hf);
    assert_owner(&mut c, "res", "waiter", f);
}

#[test]
fn reacquire_shortened_lease_hands_off_at_new_deadline() {
    check_shortened_lease("DLOCK.ACQUIRE res holder 300 (owner refresh)", |c| {
        let f = acquire(c, "res", "holder", 300);
        assert!(f.is_some(), "the owner's re-ACQUIRE must succeed");
        1
    });
}

/// Lengthening works: the timer that fires at the old deadline must not
/// grant early, and the waiter is granted at the new one.
#[test]
fn extend_lengthened_lease_hands_off_at_new_deadline() {
    let s = Server::builder().arg("--hz").arg("1").start();
    let mut c = s.conn();
    let hf = acquire(&mut c, "res", "holder", 300).expect("grant");
    let w = Waiter::start(&s.url(), "res", "waiter", 10_000, 5_000);
    wait_waiters(&mut c, "res", 1);
    let t0 = Instant::now();
    assert_eq!(
        extend(&mut c, "res", "holder", 800),
        1,
        "EXTEND must succeed while the lease is still running"
    );
    let o = w.outcome(Duration::from_secs(6));
    let after = o.at - t0;
    eprintln!("EXTEND 800 with waiter queued (hz 1): granted {after:?} after the command");
    assert!(
        after >= Duration::from_millis(750),
        "granted early: {after:?}"
    );
    assert!(
        after < Duration::from_millis(1000),
        "granted late: {after:?}"
    );
    let f = o.fence();
    assert!(f > hf);
    assert_owner(&mut c, "res", "waiter", f);
}

/// While the server must not produce writes (`CLIENT PAUSE WRITE`, which a
/// manual failover also uses), a deferred handoff waits: a grant is a write
/// that replicas would miss. It happens as soon as the pause ends.
#[test]
fn paused_writes_hold_back_expiry_handoff() {
    let s = Server::start();
    let mut c = s.conn();
    let hf = acquire(&mut c, "res", "holder", 200).expect("grant");
    let w = Waiter::start(&s.url(), "res", "waiter", 10_000, 5_000);
    wait_waiters(&mut c, "res", 1);
    let t0 = Instant::now();
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1000)
        .arg("WRITE")
        .query(&mut c)
        .unwrap();
    let o = w.outcome(Duration::from_secs(6));
    let after = o.at - t0;
    eprintln!("lease ended 200 ms into a 1000 ms write pause: granted after {after:?}");
    assert!(
        after >= Duration::from_millis(950),
        "granted during the write pause: {after:?}"
    );
    assert!(after < Duration::from_millis(3000), "late: {after:?}");
    let f = o.fence();
    assert!(f > hf);
    assert_owner(&mut c, "res", "waiter", f);
}
