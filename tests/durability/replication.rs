//! Replication of locks: effects with absolute deadlines, releases and
//! expiry reaching the replica, grants refused on replicas, forged internal
//! effects refused, fence continuity across promotion, and a replica's own
//! AOF across a crash.
use crate::common;

use common::dump::*;
use common::lock::*;
use common::*;
use redis::Value;
use std::thread::sleep;
use std::time::{Duration, Instant};

// ------------------------------------------------------------------ tests

const SYNC: Duration = Duration::from_secs(10);

/// A master that starts a full sync at once: redis 7.0 defaults to diskless
/// sync with `repl-diskless-sync-delay 5`, which costs 5 s per sync.
fn master() -> Server {
    Server::builder()
        .arg("--repl-diskless-sync-delay")
        .arg("0")
        .start()
}

fn pair() -> (Server, Server) {
    let master = master();
    let replica = Server::builder().replica_of(&master).start();
    replica.wait_for_sync(SYNC);
    (master, replica)
}

/// `WAIT 1 2000` must report the replica.
fn wait_replica(m: &mut redis::Connection) {
    let n: i64 = redis::cmd("WAIT").arg(1).arg(2000).query(m).unwrap();
    assert_eq!(n, 1, "WAIT 1 2000");
}

fn set_read_only(c: &mut redis::Connection, yes: bool) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("replica-read-only")
        .arg(if yes { "yes" } else { "no" })
        .query(c)
        .unwrap();
}

#[test]
fn grant_release_extend_and_expiry_reach_the_replica() {
    let (master, replica) = pair();
    let mut m = master.conn();
    let mut r = replica.conn();

    let fence = grant(&mut m, "res", "owner", 10_000);
    wait_replica(&mut m);
    let mi = held(&mut m, "res");
    let ri = held(&mut r, "res");
    assert_eq!((&ri.token, ri.fence), (&mi.token, mi.fence));
    assert_eq!(ri.fence, fence);
    let mp = pttl(&mut m, "res");
    let rp = pttl(&mut r, "res");
    assert!(mp > 0 && rp > 0, "{mp} {rp}");
    assert!(
        (mp - rp).abs() <= 100,
        "master PTTL {mp}, replica PTTL {rp}"
    );
    let ty: String = redis::cmd("TYPE").arg("res").query(&mut r).unwrap();
    assert_eq!(ty, "dlocklock");

    // Same-token re-acquire: same fence, TTL reset, on both.
    sleep(Duration::from_millis(300));
    assert_eq!(grant(&mut m, "res", "owner", 10_000), fence);
    wait_replica(&mut m);
    let rp = pttl(&mut r, "res");
    assert!(rp > 9_000, "refresh not replicated: PTTL {rp}");
    assert_eq!(held(&mut r, "res").fence, fence);

    // Extend: the replica's TTL follows.
    assert_eq!(extend(&mut m, "res", "owner", 60_000), 1);
    wait_replica(&mut m);
    let mp = pttl(&mut m, "res");
    let rp = pttl(&mut r, "res");
    assert!(rp > 50_000, "extend not replicated: replica PTTL {rp}");
    assert!(
        (mp - rp).abs() <= 100,
        "master PTTL {mp}, replica PTTL {rp}"
    );

    // Release: gone on the replica.
    assert_eq!(release(&mut m, "res", "owner"), 1);
    wait_replica(&mut m);
    assert_eq!(info(&mut r, "res"), None);
    assert!(!exists(&mut r, "res"));

    // A new owner gets a higher fence, replicated.
    let f2 = grant(&mut m, "res", "owner2", 10_000);
    assert!(f2 > fence);
    wait_replica(&mut m);
    assert_eq!(held(&mut r, "res").fence, f2);

    // Expiry: within 5 s the replica shows it gone, and the key is really
    // deleted there (the master's expiry propagates a DEL).
    grant(&mut m, "short", "t", 200);
    wait_replica(&mut m);
    wait_until(Duration::from_secs(5), "expiry on the replica", || {
        info(&mut r, "short").is_none()
    });
    wait_until(
        Duration::from_secs(5),
        "expired key deleted on replica",
        || {
            let keys: Vec<String> = redis::cmd("KEYS").arg("short").query(&mut r).unwrap();
            keys.is_empty()
        },
    );
}

#[test]
fn replica_refuses_grants_even_when_writable() {
    let (master, replica) = pair();
    let mut m = master.conn();
    let mut r = replica.conn();
    let fence = grant(&mut m, "res", "owner", 60_000);
    wait_replica(&mut m);

    for read_only in [true, false] {
        set_read_only(&mut r, read_only);
        let attempts: [(&str, Vec<&str>); 4] = [
            ("DLOCK.ACQUIRE", vec!["free-res", "tok", "10000"]),
            ("DLOCK.ACQUIRE", vec!["res", "owner", "10000"]),
            ("DLOCK.RELEASE", vec!["res", "owner"]),
            ("DLOCK.EXTEND", vec!["res", "owner", "90000"]),
        ];
        for (cmd, args) in attempts {
            let e = err_of(redis::cmd(cmd).arg(&args).query(&mut r));
            assert!(
                e.starts_with("READONLY"),
                "replica-read-only {read_only}: {cmd} {args:?} -> {e}"
            );
        }
        // Nothing changed on the replica; INFO works there.
        assert!(!exists(&mut r, "free-res"));
        let i = held(&mut r, "res");
        assert_eq!((i.token.as_slice(), i.fence), (&b"owner"[..], fence));
        assert!(i.ttl <= 60_000 && i.ttl > 50_000, "{i:?}");
        assert_eq!(info(&mut r, "free-res"), None);
    }
    // The master's copy is still the owner's.
    assert_eq!(held(&mut m, "res").fence, fence);
}

#[test]
fn promoted_replica_continues_fences_upward() {
    let (master, replica) = pair();
    let mut m = master.conn();
    let mut r = replica.conn();
    let mut seen = vec![];
    for i in 0..10 {
        seen.push(grant(&mut m, &format!("r{i}"), "t", 60_000));
    }
    for i in 0..5 {
        assert_eq!(release(&mut m, &format!("r{i}"), "t"), 1);
    }
    // Push the master's clock an hour ahead of the wall clock (a lock
    // RESTOREd with a fence from a server whose fences run ahead), so that
    // the replica's own wall clock cannot hide a clock that did not follow.
    grant(&mut m, "tmpl", "tok", 60_000);
    let future = now_us() + 3_600_000_000;
    let p = payload_with_fence(&mut m, "tmpl", future);
    restore(&mut m, "migrated", 0, &p).unwrap();
    for i in 0..5 {
        let f = grant(&mut m, &format!("hi{i}"), "t", 60_000);
        assert!(f > future);
        seen.push(f);
        // Released ones leave no key behind: only the replica's clock
        // remembers them.
        assert_eq!(release(&mut m, &format!("hi{i}"), "t"), 1);
    }
    let _: () = redis::cmd("DEL").arg("migrated").query(&mut m).unwrap();
    wait_replica(&mut m);
    let max_seen = *seen.iter().max().unwrap();
    assert_eq!(info(&mut r, "hi4"), None);
    assert_eq!(held(&mut r, "r9").fence, seen[9]);

    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut r)
        .unwrap();
    // Held locks stay held after promotion.
    assert_eq!(acquire(&mut r, "r9", "other", 1000), None);
    for res in ["r0", "r9", "hi0", "brand-new"] {
        let f = acquire(&mut r, res, "new-owner", 10_000);
        if res == "r9" {
            assert_eq!(f, None);
            continue;
        }
        let f = f.expect("granted on the promoted replica");
        assert!(f > max_seen, "{res}: fence {f} not above {max_seen}");
    }
}

#[test]
fn stalled_replica_applies_absolute_deadline() {
    let (master, replica) = pair();
    let mut m = master.conn();
    replica.stop();
    // Make sure the replica is resumed even if an assertion fails.
    struct Resume<'a>(&'a Server);
    impl Drop for Resume<'_> {
        fn drop(&mut self) {
            self.0.cont();
        }
    }
    let guard = Resume(&replica);
    let granted_at = Instant::now();
    let fence = grant(&mut m, "res", "owner", 5000);
    sleep(Duration::from_millis(2000));
    drop(guard); // SIGCONT
    let mut r = replica.conn();
    wait_until(
        Duration::from_secs(3),
        "lock on the resumed replica",
        || info(&mut r, "res").is_some(),
    );
    let p = pttl(&mut r, "res");
    let i = held(&mut r, "res");
    let elapsed = granted_at.elapsed().as_millis() as i64;
    assert_eq!(i.fence, fence);
    // A relative TTL replayed on arrival would show ~5000.
    assert!(
        p <= 3300 && p <= 5000 - elapsed + 100,
        "PTTL {p} after {elapsed} ms"
    );
    assert!(p >= 2000, "PTTL {p}: too low (elapsed {elapsed} ms)");
}

#[test]
fn forged_apply_is_refused_on_master_and_replica() {
    let (master, replica) = pair();
    let mut m = master.conn();
    let mut r = replica.conn();
    let apply = |c: &mut redis::Connection, key: &str| {
        err_of(
            redis::cmd("DLOCK.APPLY")
                .arg(key)
                .arg("tok")
                .arg(5)
                .arg(0)
                .query(c),
        )
    };
    let e = apply(&mut m, "res");
    assert!(e.starts_with("ERR DLOCK.APPLY is internal"), "master: {e}");
    assert!(!exists(&mut m, "res"));

    // Inside MULTI/EXEC and from a script: refused as well.
    let _: () = redis::cmd("MULTI").query(&mut m).unwrap();
    let _: Value = redis::cmd("DLOCK.APPLY")
        .arg("res")
        .arg("tok")
        .arg(5)
        .arg(0)
        .query(&mut m)
        .unwrap();
    let exec: Value = redis::cmd("EXEC").query(&mut m).unwrap_or(Value::Nil);
    assert!(
        !format!("{exec:?}").contains("Okay"),
        "APPLY in MULTI: {exec:?}"
    );
    assert!(!exists(&mut m, "res"));
    let e = err_of(
        redis::cmd("EVAL")
            .arg("return redis.call('DLOCK.APPLY', KEYS[1], 'tok', '5', '0')")
            .arg(1)
            .arg("res")
            .query(&mut m),
    );
    assert!(!e.is_empty());
    assert!(!exists(&mut m, "res"));

    // A legit grant afterwards is unaffected (the clock was not pushed).
    let f = grant(&mut m, "res2", "t", 10_000);
    assert!(f > 1_000_000_000_000_000 && f < now_us() + 60_000_000);

    // On the replica: refused by the server (read-only) or by the module.
    set_read_only(&mut r, true);
    let e = apply(&mut r, "res");
    assert!(e.starts_with("READONLY"), "read-only replica: {e}");
    set_read_only(&mut r, false);
    let e = apply(&mut r, "res");
    assert!(
        e.starts_with("ERR DLOCK.APPLY is internal"),
        "writable replica: {e}"
    );
    wait_replica(&mut m);
    assert!(!exists(&mut r, "res"));
    assert_eq!(info(&mut r, "res"), None);
    assert_eq!(held(&mut r, "res2").fence, f);
}

#[test]
fn replica_aof_survives_crash_and_resyncs() {
    let master = master();
    let mut replica = Server::builder().replica_of(&master).aof("always").start();
    replica.wait_for_sync(SYNC);
    // Redis 7.0: after a full sync a replica with AOF turns its AOF back on
    // through a rewrite (aof_status WAIT_REWRITE); until that finishes, the
    // new incr file is not in the manifest and a crash loses everything
    // written meanwhile, fsync always or not. Wait for it.
    let mut r = replica.conn();
    wait_until(
        Duration::from_secs(20),
        "replica's AOF rewrite after sync",
        || {
            info_field(&mut r, "persistence", "aof_rewrite_in_progress").as_deref() == Some("0")
                && info_field(&mut r, "persistence", "aof_rewrite_scheduled").as_deref()
                    == Some("0")
        },
    );
    let mut m = master.conn();
    let fa = grant(&mut m, "a", "ta", 60_000);
    grant(&mut m, "b", "tb", 60_000);
    assert_eq!(release(&mut m, "b", "tb"), 1);
    grant(&mut m, "c", "tc", 20_000);
    assert_eq!(extend(&mut m, "c", "tc", 40_000), 1);
    wait_replica(&mut m);
    let before_a = held(&mut r, "a");
    let before_c = held(&mut r, "c");

    // Freeze the master so that after the crash the replica's state can
    // only come from its own AOF (the effects it wrote there verbatim).
    master.stop();
    let mut r = replica.crash_and_restart();
    let a = held(&mut r, "a");
    let c = held(&mut r, "c");
    assert_eq!((&a.token, a.fence), (&before_a.token, before_a.fence));
    assert_eq!((&c.token, c.fence), (&before_c.token, before_c.fence));
    assert_eq!(a.fence, fa);
    assert!(a.ttl > 0 && a.ttl <= before_a.ttl, "{a:?} vs {before_a:?}");
    assert!(
        c.ttl > 0 && c.ttl <= before_c.ttl && c.ttl > 20_000,
        "{c:?}"
    );
    assert_eq!(info(&mut r, "b"), None);
    let e = err_of(
        redis::cmd("DLOCK.ACQUIRE")
            .arg("b")
            .arg("x")
            .arg(1000)
            .query(&mut r),
    );
    assert!(e.starts_with("READONLY"), "{e}");

    // Master back: resync, and both agree.
    master.cont();
    replica.wait_for_sync(SYNC);
    let mut r = replica.conn();
    let f = grant(&mut m, "d", "td", 60_000);
    assert!(f > fa);
    wait_replica(&mut m);
    for res in ["a", "c", "d"] {
        let mi = held(&mut m, res);
        let ri = held(&mut r, res);
        assert_eq!((&mi.token, mi.fence), (&ri.token, ri.fence), "{res}");
    }
    assert_eq!(info(&mut r, "b"), None);
}
