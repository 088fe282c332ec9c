//! What a hostile (or merely careless) reader can do to other observers
//! of a resource.
use super::*;
use std::thread;

/// Observers that pass a stale version with a short `WAIT` are answered at
/// each `WAIT` end whatever the pace. Were those answers charged to the
/// resource's budget, its debt would grow with each, and a follower with
/// `WAIT 0` would wait for all of it to be paid back; the docs promise each
/// follower hears of a change within about n / `dlock.observe-rate`
/// seconds, the budget overdrawn by one batch at most. Here 4 connections
/// loop `DLOCK.OBSERVE r SINCE ffffffffffffffff WAIT 1` for 1.5 s (an ACL
/// user with read-only key access may run it); then one change must reach
/// an up-to-date follower at once.
#[test]
fn stale_short_waits_cannot_hold_a_follower_past_the_pace() {
    let s = Server::start();
    let mut c = s.conn();
    set_rate(&mut c, 100);
    grant(&mut c, "r", "a", LONG_TTL);
    let seen = observe(&mut c, "r").version;
    let mut follower = Observer::start(&s, "r", &seen, 0);
    wait_observers(&mut c, 1);
    let until = Instant::now() + Duration::from_millis(1500);
    let attackers: Vec<_> = (0..4)
        .map(|_| {
            let mut a = s.conn();
            thread::spawn(move || {
                let mut answers = 0u64;
                while Instant::now() < until {
                    let v: Value = observe_cmd("r", Some("ffffffffffffffff"), Some(1))
                        .query(&mut a)
                        .unwrap();
                    if !matches!(v, Value::Nil) {
                        answers += 1;
                    }
                }
                answers
            })
        })
        .collect();
    let answers: u64 = attackers.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(answers > 300, "the attack was answered {answers} times");
    // The attack is over; the follower's resource changes once.
    release(&mut c, "r", "a");
    grant(&mut c, "r", "b", LONG_TTL);
    let t = Instant::now();
    assert!(
        follower.answered_within(Duration::from_secs(3)),
        "an up-to-date follower (WAIT 0) did not hear a change within 3 s \
         (n / rate = 0.01 s) after {answers} answers to stale short-WAIT \
         observers had ended"
    );
    assert!(t.elapsed() < Duration::from_secs(3));
}

/// The same debt without any attacker: followers of a busy resource that
/// loop with a timeout (`WAIT 100`, a common client pattern) are answered at
/// each `WAIT` end, past the pace; were those answers charged, the followers
/// with `WAIT 0` would be held until all of it is paid back, which grows
/// faster than time passes. Docs: with n followers each hears of a change
/// about every n / rate seconds (25 followers at rate 100: 0.25 s).
#[test]
fn followers_with_timeouts_do_not_starve_followers_without() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let s = Server::start();
    let mut c = s.conn();
    set_rate(&mut c, 100);
    let until = Instant::now() + Duration::from_secs(3);
    // The resource changes until every follower is done, so none waits
    // on a version that no longer changes.
    let following = Arc::new(AtomicUsize::new(25));
    let follow = |wait_ms: u64| {
        let mut f = s.conn();
        f.set_read_timeout(Some(SOON)).unwrap();
        let following = following.clone();
        thread::spawn(move || {
            let mut seen = observe(&mut f, "r").version;
            let mut longest = Duration::ZERO;
            let mut last = Instant::now();
            while Instant::now() < until {
                let v: Value = observe_cmd("r", Some(&seen), Some(wait_ms))
                    .query(&mut f)
                    .unwrap();
                if let Some(o) = parse(v) {
                    longest = longest.max(last.elapsed());
                    last = Instant::now();
                    seen = o.version;
                }
            }
            following.fetch_sub(1, Ordering::SeqCst);
            longest
        })
    };
    let timeouts: Vec<_> = (0..20).map(|_| follow(100)).collect();
    let plain: Vec<_> = (0..5).map(|_| follow(0)).collect();
    let mut k = s.conn();
    let churning = following.clone();
    let churn = thread::spawn(move || {
        while churning.load(Ordering::SeqCst) > 0 {
            let mut p = redis::pipe();
            for _ in 0..4 {
                p.cmd("DLOCK.RELEASE").arg("r").arg("z").ignore();
                p.cmd("DLOCK.ACQUIRE")
                    .arg("r")
                    .arg("z")
                    .arg(LONG_TTL)
                    .ignore();
            }
            let _: () = p.query(&mut k).unwrap();
        }
    });
    for t in timeouts {
        t.join().unwrap();
    }
    let longest = plain.into_iter().map(|t| t.join().unwrap()).max().unwrap();
    churn.join().unwrap();
    assert!(
        longest < Duration::from_millis(1500),
        "a follower with WAIT 0 went {longest:?} without an answer while the \
         resource changed all the time (n / rate = 0.25 s)"
    );
}
