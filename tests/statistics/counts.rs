//! What each path counts, once: grants at once and after a wait, holds
//! ended by release and by expiry (plain key expiry and a semaphore hold
//! pruned later), wait timeouts, per kind.
use super::*;
use std::time::{Duration, Instant};

#[test]
fn grants_releases_and_contention_of_a_plain_lock() {
    let s = Server::start();
    let mut c = s.conn();
    acquire(&mut c, "a", "t1", 60_000).expect("free");
    assert!(acq(&mut c, "a", "t2", 60_000, &[]).is_none());
    assert!(acq(&mut c, "a", "t2", 60_000, &[]).is_none());
    // A same-token retry and an extend are not grants.
    acquire(&mut c, "a", "t1", 60_000).expect("retry");
    extend(&mut c, "a", "t1", 60_000);
    release(&mut c, "a", "t1");
    let st = stats(&mut c);
    for (name, want) in [
        ("grants", 1),
        ("contended", 2),
        ("releases", 1),
        ("expired", 0),
    ] {
        assert_eq!(figure(&st, "total", name), want, "{name}");
        assert_eq!(figure(&st, "lock", name), want, "{name}");
        assert_eq!(figure(&st, "shared", name), 0, "{name}");
    }
    assert_eq!(dist(&st, "total", "wait", "count"), 1);
    assert_eq!(dist(&st, "total", "wait", "max"), 0);
    assert_eq!(dist(&st, "total", "hold", "count"), 1);
    let top = hot(&mut c, "contended", 5);
    assert_eq!(top.len(), 1);
    assert_eq!(
        (name_of(&top[0]), as_int(&top[0]["score"])),
        ("a".into(), 2)
    );
}

/// A waiter granted by a release: its wait is at least the time the holder
/// kept the lock after it queued, at most what its client saw.
#[test]
fn a_wait_is_measured_from_queueing_to_the_grant() {
    let s = Server::start();
    let mut c = s.conn();
    acquire(&mut c, "w", "h", 60_000).expect("free");
    let url = s.url();
    let started = Instant::now();
    let waiter = std::thread::spawn(move || {
        let mut w = redis::Client::open(url).unwrap().get_connection().unwrap();
        let f = acquire_wait(&mut w, "w", "x", 60_000, 30_000).unwrap();
        (f, started.elapsed())
    });
    wait_waiters(&mut c, "w", 1);
    let queued = Instant::now();
    std::thread::sleep(Duration::from_millis(200));
    let kept = queued.elapsed();
    release(&mut c, "w", "h");
    let (fence, seen) = waiter.join().unwrap();
    assert!(fence.is_some());
    let st = stats(&mut c);
    assert_eq!(figure(&st, "lock", "waited"), 1);
    assert_eq!(figure(&st, "lock", "grants"), 2);
    let max = dist(&st, "lock", "wait", "max");
    assert!(
        max as u128 >= kept.as_micros() - 1000,
        "{max} µs < {kept:?}"
    );
    assert!(
        max as u128 <= seen.as_micros() + 1000,
        "{max} µs > {seen:?}"
    );
    let top = hot(&mut c, "wait", 1);
    assert_eq!(name_of(&top[0]), "w");
    assert_eq!(as_int(&top[0]["waited"]), 1);
    assert_eq!(as_int(&fields(&top[0]["wait"])["max"]), max);
}

#[test]
fn a_wait_that_times_out_is_counted_and_not_granted() {
    let s = Server::start();
    let mut c = s.conn();
    acquire(&mut c, "t", "h", 60_000).expect("free");
    assert!(acquire_wait(&mut c, "t", "x", 60_000, 50)
        .unwrap()
        .is_none());
    let st = stats(&mut c);
    assert_eq!(figure(&st, "total", "wait_timeouts"), 1);
    assert_eq!(figure(&st, "total", "contended"), 1);
    assert_eq!(figure(&st, "total", "waited"), 0);
    let top = hot(&mut c, "wait", 1);
    assert_eq!(name_of(&top[0]), "t");
    assert!(as_int(&top[0]["score"]) >= 50_000, "{top:?}");
    assert_eq!(as_int(&top[0]["wait_timeouts"]), 1);
}

/// A plain lease that runs out counts as expired, not released, and its
/// resource heads HOT BY expired.
#[test]
fn a_lease_that_runs_out_is_an_expiry() {
    let s = Server::start();
    let mut c = s.conn();
    acquire(&mut c, "e", "t", 30).expect("free");
    acquire(&mut c, "k", "t", 60_000).expect("free");
    wait_until(Duration::from_secs(10), "the lease expired", || {
        figure(&stats(&mut c), "total", "expired") == 1
    });
    let st = stats(&mut c);
    assert_eq!(figure(&st, "lock", "releases"), 0);
    assert!(dist(&st, "lock", "hold", "max") >= 28_000);
    let top = hot(&mut c, "expired", 5);
    assert_eq!(top.len(), 1);
    assert_eq!(
        (name_of(&top[0]), as_int(&top[0]["expired"])),
        ("e".into(), 1)
    );
}

/// A semaphore hold past its deadline, pruned long after by the next
/// command on the resource, is measured to its deadline, not to the
/// prune; shared and semaphore holds count under their kinds.
#[test]
fn a_pruned_hold_is_measured_to_its_deadline_under_its_kind() {
    let s = Server::start();
    let mut c = s.conn();
    let lim = ["LIMIT", "3"];
    assert!(acq(&mut c, "sem", "short", 50, &lim).is_some());
    assert!(acq(&mut c, "sem", "long", 60_000, &lim).is_some());
    assert!(acq(&mut c, "rw", "r1", 60_000, &["SHARED"]).is_some());
    assert!(acq(&mut c, "rw", "r2", 60_000, &["SHARED"]).is_some());
    std::thread::sleep(Duration::from_millis(600));
    // The next command on `sem` prunes the dead hold.
    assert!(acq(&mut c, "sem", "third", 60_000, &lim).is_some());
    release(&mut c, "rw", "r1");
    let st = stats(&mut c);
    assert_eq!(figure(&st, "semaphore", "expired"), 1);
    assert_eq!(figure(&st, "semaphore", "grants"), 3);
    let held = dist(&st, "semaphore", "hold", "max");
    assert!(
        (45_000..=60_000).contains(&held),
        "{held} µs, not the 600 ms"
    );
    assert_eq!(figure(&st, "shared", "grants"), 2);
    assert_eq!(figure(&st, "shared", "releases"), 1);
    assert_eq!(figure(&st, "lock", "grants"), 0);
}

/// A set counts a grant and a hold on each member; a set request that
/// finds a member taken is one contended request, shown on each member.
#[test]
fn a_set_counts_per_member_and_its_contention_once() {
    let s = Server::start();
    let mut c = s.conn();
    let macquire = |c: &mut Connection, set: [&str; 2], token: &str, extra: &[&str]| {
        redis::cmd("DLOCK.MACQUIRE")
            .arg(2)
            .arg(&set[..])
            .arg(token)
            .arg(60_000)
            .arg(extra)
            .query::<Option<i64>>(c)
            .unwrap()
    };
    // The plain path (exclusive, nobody waits).
    assert!(macquire(&mut c, ["{s}a", "{s}b"], "t1", &[]).is_some());
    assert!(macquire(&mut c, ["{s}a", "{s}b"], "t2", &[]).is_none());
    let st = stats(&mut c);
    assert_eq!(figure(&st, "lock", "grants"), 2);
    assert_eq!(figure(&st, "lock", "contended"), 1);
    let mut names: Vec<String> = hot(&mut c, "contended", 5).iter().map(name_of).collect();
    names.sort();
    assert_eq!(names, ["{s}a", "{s}b"]);
    // The step's path (shared holds).
    assert!(macquire(&mut c, ["{s}c", "{s}d"], "r1", &["SHARED"]).is_some());
    assert!(macquire(&mut c, ["{s}c", "{s}d"], "w1", &[]).is_none());
    let st = stats(&mut c);
    assert_eq!(figure(&st, "shared", "grants"), 2);
    assert_eq!(figure(&st, "total", "contended"), 2);
    assert_eq!(hot(&mut c, "contended", 5).len(), 4);
}

/// A key of more holds than the expiry keeps lengths for (64) still counts
/// every one that ran out.
#[test]
fn every_hold_of_a_big_semaphore_that_runs_out_is_counted() {
    let s = Server::start();
    let mut c = s.conn();
    let mut p = redis::pipe();
    p.atomic();
    for i in 0..100 {
        p.cmd("DLOCK.ACQUIRE")
            .arg("big")
            .arg(format!("t{i}"))
            .arg(100)
            .arg("LIMIT")
            .arg(1000)
            .ignore();
    }
    let () = p.query(&mut c).unwrap();
    wait_until(Duration::from_secs(10), "the key expired", || {
        !exists(&mut c, "big")
    });
    wait_until(Duration::from_secs(10), "every hold counted", || {
        figure(&stats(&mut c), "semaphore", "expired") == 100
    });
    let st = stats(&mut c);
    assert_eq!(
        dist(&st, "semaphore", "hold", "count"),
        64,
        "lengths of the first 64"
    );
    assert_eq!(as_int(&hot(&mut c, "expired", 1)[0]["score"]), 100);
}

/// `RELEASE ... TO` a `SHARED` waiter: a handover under `shared`, and a
/// grant after a wait there; the released hold under `lock`.
#[test]
fn a_handover_counts_under_its_targets_kind() {
    let s = Server::start();
    let mut c = s.conn();
    acquire(&mut c, "hs", "t1", 60_000).expect("free");
    let url = s.url();
    let reader = std::thread::spawn(move || {
        let mut w = redis::Client::open(url).unwrap().get_connection().unwrap();
        redis::cmd("DLOCK.ACQUIRE")
            .arg("hs")
            .arg("ws")
            .arg(60_000)
            .arg("SHARED")
            .arg("WAIT")
            .arg(30_000)
            .query::<Option<i64>>(&mut w)
            .unwrap()
    });
    wait_waiters(&mut c, "hs", 1);
    let released: i64 = redis::cmd("DLOCK.RELEASE")
        .arg("hs")
        .arg("t1")
        .arg("TO")
        .arg("ws")
        .query(&mut c)
        .unwrap();
    assert_eq!(released, 1);
    assert!(reader.join().unwrap().is_some());
    let st = stats(&mut c);
    assert_eq!(figure(&st, "shared", "handovers"), 1);
    assert_eq!(figure(&st, "shared", "waited"), 1);
    assert_eq!(figure(&st, "lock", "handovers"), 0);
    assert_eq!(figure(&st, "lock", "releases"), 1);
}
