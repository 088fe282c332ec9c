//! dlock in Redis Cluster: routing through a cluster client, resharding a
//! slot that holds live locks, a slot migration under a queued waiter, and
//! manual and forced failover keeping owner, fence and absolute deadline.
//!
//! Each test builds its own cluster (a few seconds); the steps that can share
//! one do, to keep the file well under its time budget.
use crate::common;

use common::cluster::{setslot, Cluster};
use common::lock::*;
use common::*;
use redis::{ConnectionLike, ErrorKind, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::mpsc;
use std::time::Duration;

// ---------------------------------------------------------------- helpers

/// The waiter's reply must be TRYAGAIN (within 15 s).
fn expect_tryagain(rx: &mpsc::Receiver<redis::RedisResult<Value>>) {
    let reply = rx
        .recv_timeout(Duration::from_secs(15))
        .expect("the waiter got no reply within 15 s");
    match &reply {
        Err(e) if e.code() == Some("TRYAGAIN") => {}
        other => panic!("waiter: expected a TRYAGAIN error, got {other:?}"),
    }
}

/// A waiter on `url`: `DLOCK.ACQUIRE res waiter 30000 WAIT 10000` on its own
/// connection and thread; its reply comes over the channel.
fn spawn_waiter(url: String, res: &str) -> mpsc::Receiver<redis::RedisResult<Value>> {
    spawn_waiter_with(url, res, &[])
}

/// `spawn_waiter` with `options` (`SHARED`, ...) before its `WAIT`.
fn spawn_waiter_with(
    url: String,
    res: &str,
    options: &'static [&'static str],
) -> mpsc::Receiver<redis::RedisResult<Value>> {
    let (tx, rx) = mpsc::channel();
    let res = res.to_string();
    std::thread::spawn(move || {
        let mut c = connect_within(&url, Duration::from_secs(15)).expect("waiter connection");
        let r = redis::cmd("DLOCK.ACQUIRE")
            .arg(&res)
            .arg("waiter")
            .arg(30_000)
            .arg(options)
            .arg("WAIT")
            .arg(10_000)
            .query(&mut c);
        let _ = tx.send(r);
    });
    rx
}

fn last_fence(s: &Server) -> i64 {
    info_field(&mut s.conn(), "dlock", "dlock_last_fence")
        .expect("INFO dlock has dlock_last_fence")
        .parse()
        .unwrap()
}

/// `WAIT 1 2000`: the number of replicas that acknowledged the writes made
/// on `c` (WAIT counts this connection's writes only: on a connection that
/// wrote nothing it confirms nothing), so `c` must be a direct connection to
/// the master that made them.
fn wait_replica(c: &mut redis::Connection) -> i64 {
    redis::cmd("WAIT")
        .arg(1)
        .arg(2000)
        .query(c)
        .expect("WAIT 1 2000")
}

fn pexpiretime(c: &mut impl ConnectionLike, key: &str) -> i64 {
    redis::cmd("PEXPIRETIME").arg(key).query(c).unwrap()
}

/// A hash tag `{prefix-N}` whose slot is served by `master`.
fn tag_on(cl: &Cluster, master: usize, prefix: &str) -> String {
    (0..10_000)
        .map(|n| format!("{{{prefix}-{n}}}"))
        .find(|t| cl.node_for_slot(cl.key_slot(t)) == master)
        .unwrap_or_else(|| panic!("no tag on node {master}"))
}

fn assert_moved(r: redis::RedisResult<Option<LockInfo>>, what: &str) {
    match r {
        Err(e) if e.kind() == ErrorKind::Moved => {}
        other => panic!("{what}: expected MOVED, got {other:?}"),
    }
}

// ---------------------------------------------------------------- tests

/// a. Routing over all slots, then b. resharding a slot with live locks.
#[test]
fn routing_and_resharding_with_live_locks() {
    let cl = Cluster::start(3, 1);
    let mut cc = cl.conn();
    let masters = cl.masters();
    assert_eq!(masters.len(), 3);

    // ---- 0. `dlock.*` settings are per node (docs/cluster.md#setting-up-a-cluster):
    // CONFIG SET on one master changes neither another master nor its own
    // replica, and each node applies its own value.
    let (set_on, other) = (masters[0], masters[1]);
    let mut one = cl.node(set_on).conn();
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "dlock.max-ttl", "60000"])
        .query(&mut one)
        .unwrap();
    for node in [other, cl.replicas_of(set_on)[0]] {
        let (_, v): (String, String) = redis::cmd("CONFIG")
            .arg(&["GET", "dlock.max-ttl"])
            .query(&mut cl.node(node).conn())
            .unwrap();
        assert_eq!(v, "0", "node {node} took the setting of node {set_on}");
    }
    let here = format!("{}:ttl", tag_on(&cl, set_on, "ttl"));
    let there = format!("{}:ttl", tag_on(&cl, other, "ttl"));
    let e = try_acquire(&mut cc, &here, "t", 120_000).unwrap_err();
    assert!(e.to_string().contains("above dlock.max-ttl"), "{e}");
    assert!(try_acquire(&mut cc, &there, "t", 120_000)
        .unwrap()
        .is_some());
    release(&mut cc, &there, "t");
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "dlock.max-ttl", "0"])
        .query(&mut one)
        .unwrap();

    // ---- a. ~200 resources over all slots, each command on its owner.
    let resources: Vec<String> = (0..200).map(|i| format!("route:{i}")).collect();
    let owner: Vec<usize> = resources
        .iter()
        .map(|r| cl.node_for_slot(cl.key_slot(r)))
        .collect();
    for m in &masters {
        let n = owner.iter().filter(|o| *o == m).count();
        assert!(n > 0, "no resource on master {m}");
    }
    let mut last_by_master: BTreeMap<usize, i64> = BTreeMap::new();
    let mut fences = Vec::new();
    for (r, m) in resources.iter().zip(&owner) {
        let before = now_us();
        let f = grant(&mut cc, r, "tok-a", 30_000);
        // Fence is ~unix µs and strictly increasing per server.
        assert!(
            (before - 60_000_000..=now_us() + 60_000_000).contains(&f),
            "fence {f} far from the clock"
        );
        if let Some(prev) = last_by_master.insert(*m, f) {
            assert!(f > prev, "fence {f} not above {prev} on master {m}");
        }
        fences.push(f);
        assert_eq!(acquire(&mut cc, r, "tok-b", 30_000), None, "{r} held twice");
    }
    for (r, f) in resources.iter().zip(&fences) {
        let i = info(&mut cc, r).expect("held");
        assert_eq!(
            (i.token.as_slice(), i.fence, i.waiters),
            (&b"tok-a"[..], *f, 0)
        );
        assert!(0 < i.ttl && i.ttl <= 30_000, "ttl {}", i.ttl);
        assert_eq!(extend(&mut cc, r, "tok-a", 45_000), 1);
        assert_eq!(extend(&mut cc, r, "tok-b", 45_000), 0);
        let i = info(&mut cc, r).unwrap();
        assert!(30_000 < i.ttl && i.ttl <= 45_000, "extended ttl {}", i.ttl);
        assert_eq!(i.fence, *f, "EXTEND changed the fence");
    }
    for (r, m) in resources.iter().zip(&owner) {
        // The lock lives on the owning master, and only there.
        assert!(info(&mut cl.node(*m).conn(), r).is_some(), "{r} not on {m}");
        assert_eq!(release(&mut cc, r, "tok-b"), 0);
        assert_eq!(release(&mut cc, r, "tok-a"), 1);
        assert_eq!(release(&mut cc, r, "tok-a"), 0);
        assert_eq!(info(&mut cc, r), None);
    }
    for m in &masters {
        assert!(last_fence(cl.node(*m)) >= last_by_master[m]);
    }

    // ---- b. resharding a slot that holds live locks.
    let slot = cl.key_slot("{grp}");
    let src = cl.node_for_slot(slot);
    let dst = *masters.iter().find(|&&m| m != src).unwrap();
    let keys: Vec<String> = (1..=10).map(|i| format!("{{grp}}:{i}")).collect();
    let mut held = Vec::new();
    for (n, k) in keys.iter().enumerate() {
        assert_eq!(cl.key_slot(k), slot);
        let tok = format!("owner-{n}");
        let f = grant(&mut cc, k, &tok, 60_000);
        held.push((k.clone(), tok, f));
    }
    // A free resource in the same slot, last granted (high) on the source.
    let free = "{grp}:free";
    let mut free_fence = 0;
    for _ in 0..50 {
        let f = grant(&mut cc, free, "passer", 60_000);
        assert!(f > free_fence);
        free_fence = f;
        assert_eq!(release(&mut cc, free, "passer"), 1);
    }
    let src_last = last_fence(cl.node(src));
    assert!(src_last >= free_fence);
    let max_fence = held.iter().map(|h| h.2).max().unwrap();
    let before: Vec<LockInfo> = keys.iter().map(|k| info(&mut cc, k).unwrap()).collect();

    cl.migrate_slot(slot, src, dst);

    let mut sc = cl.node(src).conn();
    let mut dc = cl.node(dst).conn();
    for ((k, tok, f), b) in held.iter().zip(&before) {
        let i = info(&mut cc, k).unwrap_or_else(|| panic!("{k} lost in migration"));
        assert_eq!(i.token, tok.as_bytes(), "{k} owner");
        assert_eq!(i.fence, *f, "{k} fence");
        assert!(
            0 < i.ttl && i.ttl <= b.ttl,
            "{k} ttl {} (was {})",
            i.ttl,
            b.ttl
        );
        assert_eq!(
            info(&mut dc, k).map(|i| i.fence),
            Some(*f),
            "{k} not on dst"
        );
        assert_moved(try_info(&mut sc, k), k);
    }
    assert!(
        last_fence(cl.node(dst)) >= max_fence,
        "destination clock {} below migrated fence {max_fence}",
        last_fence(cl.node(dst))
    );
    // The owners keep working on the new node, through the cluster client.
    for (n, (k, tok, f)) in held.iter().enumerate() {
        assert_eq!(extend(&mut cc, k, "intruder", 60_000), 0);
        assert_eq!(release(&mut cc, k, "intruder"), 0);
        if n % 2 == 0 {
            assert_eq!(extend(&mut cc, k, tok, 90_000), 1, "{k} EXTEND");
            let i = info(&mut dc, k).unwrap();
            assert!(60_000 < i.ttl && i.ttl <= 90_000, "{k} ttl {}", i.ttl);
            assert_eq!(i.fence, *f);
        } else {
            assert_eq!(release(&mut cc, k, tok), 1, "{k} RELEASE");
            assert_eq!(info(&mut dc, k), None);
            let g = grant(&mut cc, k, "next", 10_000);
            assert!(
                g > max_fence,
                "{k}: fence {g} after migration <= {max_fence}"
            );
        }
    }
    // The free resource: the destination's clock is past the source's.
    let g = grant(&mut cc, free, "after", 10_000);
    assert!(
        g > src_last && g > free_fence,
        "fence {g} on the destination <= source's last fence {src_last}"
    );
    // The destination's replica has the migrated locks too.
    let rep = cl.replicas_of(dst);
    assert_eq!(rep.len(), 1);
    assert_eq!(wait_replica(&mut dc), 1);
    let mut rc = cl.node(rep[0]).conn();
    let _: () = redis::cmd("READONLY").query(&mut rc).unwrap();
    let (k, tok, f) = &held[0];
    let i = info(&mut rc, k).expect("lock on the destination's replica");
    assert_eq!((i.token.as_slice(), i.fence), (tok.as_bytes(), *f));
}

/// c. Migrating a slot with a waiter queued on the source is not a release:
/// the waiter gets TRYAGAIN (a cluster client retries on the new owner), and
/// the lock arrives on the destination with its owner and fence.
#[test]
fn migration_with_a_queued_waiter_is_not_a_release() {
    let cl = Cluster::start(3, 0);
    let mut cc = cl.conn();
    let res = "{w}:res";
    let slot = cl.key_slot(res);
    let src = cl.node_for_slot(slot);
    let dst = *cl.masters().iter().find(|&&m| m != src).unwrap();
    let fence = grant(&mut cc, res, "holder", 60_000);

    let rx = spawn_waiter(cl.node(src).url(), res);
    let mut sc = cl.node(src).conn();
    wait_until(Duration::from_secs(10), "the waiter to queue", || {
        info(&mut sc, res).is_some_and(|i| i.waiters == 1)
    });

    cl.migrate_slot(slot, src, dst);

    expect_tryagain(&rx);
    let i = info(&mut cl.node(dst).conn(), res).expect("lock on the destination");
    assert_eq!((i.token.as_slice(), i.fence), (&b"holder"[..], fence));
    let i = info(&mut cc, res).expect("lock via the cluster client");
    assert_eq!((i.token.as_slice(), i.fence), (&b"holder"[..], fence));
    let n: i64 = redis::cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(slot)
        .query(&mut sc)
        .unwrap();
    assert_eq!(n, 0, "a key was left (or granted) on the source");
    assert_eq!(release(&mut cc, res, "holder"), 1);
}

/// d. A RELEASE on a node whose slot is MIGRATING releases the lock but
/// grants no local waiter: a grant there would be made on a slot that is
/// leaving. The waiter gets TRYAGAIN and retries where the slot goes.
#[test]
fn release_on_a_migrating_slot_hands_over_nothing() {
    release_on_a_migrating_slot("{m}:res", &[]);
}

/// e. As d, with a SHARED waiter: its queue is not a plain one, so a step
/// decides the RELEASE, and the planner (asked whether this node may grant
/// the slot) sends the waiter away instead of granting it on a slot that
/// is leaving.
#[test]
fn release_on_a_migrating_slot_grants_no_shared_waiter() {
    release_on_a_migrating_slot("{s}:res", &["SHARED"]);
}

/// A holder releases `res` while a waiter (its ACQUIRE with `options`)
/// queues and the slot migrates: released, nothing granted, the waiter
/// sent away.
fn release_on_a_migrating_slot(res: &str, options: &'static [&'static str]) {
    let cl = Cluster::start(3, 0);
    let slot = cl.key_slot(res);
    let src = cl.node_for_slot(slot);
    let dst = *cl.masters().iter().find(|&&m| m != src).unwrap();
    let mut sc = cl.node(src).conn();
    grant(&mut sc, res, "holder", 60_000);
    let rx = spawn_waiter_with(cl.node(src).url(), res, options);
    wait_until(Duration::from_secs(10), "the waiter to queue", || {
        blocked_clients(&mut sc) == 1
    });
    setslot(&mut cl.node(dst).conn(), slot, "IMPORTING", cl.id(src));
    setslot(&mut sc, slot, "MIGRATING", cl.id(dst));
    let grants = info_field(&mut sc, "dlock", "dlock_grants");

    assert_eq!(release(&mut sc, res, "holder"), 1);
    expect_tryagain(&rx);
    assert_eq!(
        info_field(&mut sc, "dlock", "dlock_grants"),
        grants,
        "no grant on a migrating slot"
    );
    let n: i64 = redis::cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(slot)
        .query(&mut sc)
        .unwrap();
    assert_eq!(
        n, 0,
        "the lock is released, and nothing granted in its place"
    );
    for i in [src, dst] {
        setslot(&mut cl.node(i).conn(), slot, "STABLE", "");
    }
}

struct Held {
    key: String,
    token: String,
    fence: i64,
    deadline: i64,
}

/// Acquires `n` locks under `tag` on `master`, EXTENDs the first, and checks
/// that `WAIT 1 2000` confirms both steps on the replica. The writes go over
/// a direct connection to `master` (`tag`'s slot is served there), the one
/// that then sends WAIT.
fn hold_confirmed(cl: &Cluster, master: usize, tag: &str, n: usize) -> Vec<Held> {
    let mut mc = cl.node(master).conn();
    let mut held = Vec::new();
    for i in 0..n {
        let key = format!("{tag}:{i}");
        let token = format!("own-{i}");
        let fence = grant(&mut mc, &key, &token, 30_000);
        held.push(Held {
            key,
            token,
            fence,
            deadline: 0,
        });
    }
    assert_eq!(wait_replica(&mut mc), 1, "WAIT after ACQUIRE");
    assert_eq!(extend(&mut mc, &held[0].key, &held[0].token, 50_000), 1);
    assert_eq!(wait_replica(&mut mc), 1, "WAIT after EXTEND");
    for h in &mut held {
        h.deadline = pexpiretime(&mut mc, &h.key);
        assert!(h.deadline > now_ms(), "{} has no future deadline", h.key);
    }
    held
}

/// Same owner, fence and absolute deadline, read from the new master.
fn check_held(cl: &Cluster, new_master: usize, held: &[Held]) {
    let mut cc = cl.conn();
    let mut nc = cl.node(new_master).conn();
    for h in held {
        let i = info(&mut cc, &h.key).unwrap_or_else(|| panic!("{} lost", h.key));
        assert_eq!(i.token, h.token.as_bytes(), "{} owner", h.key);
        assert_eq!(i.fence, h.fence, "{} fence", h.key);
        assert_eq!(
            pexpiretime(&mut nc, &h.key),
            h.deadline,
            "{} deadline",
            h.key
        );
        let expected = h.deadline - now_ms();
        let pttl: i64 = redis::cmd("PTTL").arg(&h.key).query(&mut nc).unwrap();
        assert!(
            (pttl - expected).abs() <= 250,
            "{}: PTTL {pttl}, expected ~{expected}",
            h.key
        );
        assert!((i.ttl - expected).abs() <= 250, "{}: ttl {}", h.key, i.ttl);
    }
}

/// New grants on the shard beat every earlier fence, and the owners can
/// still extend and release.
fn check_fences_move_on(cl: &Cluster, tag: &str, held: &[Held], old_master_last: i64) {
    let mut cc = cl.conn();
    let max = held
        .iter()
        .map(|h| h.fence)
        .max()
        .unwrap()
        .max(old_master_last);
    let g = grant(&mut cc, &format!("{tag}:new"), "newcomer", 10_000);
    assert!(g > max, "fence {g} after failover <= earlier {max}");
    assert_eq!(acquire(&mut cc, &held[0].key, "newcomer", 10_000), None);
    assert_eq!(extend(&mut cc, &held[0].key, &held[0].token, 20_000), 1);
    assert_eq!(release(&mut cc, &held[1].key, &held[1].token), 1);
    let g2 = grant(&mut cc, &held[1].key, "newcomer", 10_000);
    assert!(g2 > g, "fence {g2} not above {g}");
}

/// d. Manual `CLUSTER FAILOVER`, then e. forced failover after `kill -9` of
/// another master, on one cluster.
#[test]
fn failover_keeps_owner_fence_and_deadline() {
    let mut cl = Cluster::start(3, 1);
    let masters = cl.masters();

    // ---- d. manual failover.
    let m = masters[0];
    let r = cl.replicas_of(m)[0];
    let tag = tag_on(&cl, m, "fo");
    let held = hold_confirmed(&cl, m, &tag, 5);
    let m_last = last_fence(cl.node(m));
    let _: () = redis::cmd("CLUSTER")
        .arg("FAILOVER")
        .query(&mut cl.node(r).conn())
        .expect("CLUSTER FAILOVER");
    cl.wait_role(r, "master");
    cl.wait_role(m, "slave");
    cl.wait_stable();
    assert_eq!(cl.node_for_slot(cl.key_slot(&tag)), r);
    assert_eq!(cl.replicas_of(r), vec![m]);
    check_held(&cl, r, &held);
    // A planned failover (link up) loses nothing: no quarantine.
    assert_eq!(
        info_field(&mut cl.node(r).conn(), "dlock", "dlock_quarantine_ms_left").as_deref(),
        Some("0")
    );
    check_fences_move_on(&cl, &tag, &held, m_last);

    // ---- e. kill -9 of another master, then CLUSTER FAILOVER FORCE.
    let m2 = masters[1];
    let r2 = cl.replicas_of(m2)[0];
    let tag2 = tag_on(&cl, m2, "ko");
    let held2 = hold_confirmed(&cl, m2, &tag2, 5);
    let m2_last = last_fence(cl.node(m2));
    cl.kill9(m2);
    let _: () = redis::cmd("CLUSTER")
        .arg("FAILOVER")
        .arg("FORCE")
        .query(&mut cl.node(r2).conn())
        .expect("CLUSTER FAILOVER FORCE");
    cl.wait_role(r2, "master");
    cl.wait_stable();
    assert_eq!(cl.node_for_slot(cl.key_slot(&tag2)), r2);
    check_held(&cl, r2, &held2);
    // An unplanned promotion may have missed grants: new ones wait out the
    // longest TTL (50 s, from the EXTEND), while confirmed holders go on.
    let mut cc = cl.conn();
    let mut rc = cl.node(r2).conn();
    assert_eq!(
        info_field(&mut rc, "dlock", "dlock_quarantine_reason").as_deref(),
        Some("promotion")
    );
    let left: i64 = info_field(&mut rc, "dlock", "dlock_quarantine_ms_left")
        .unwrap()
        .parse()
        .unwrap();
    assert!(30_000 < left && left <= 50_000, "quarantine {left} ms");
    let refused = try_acquire(&mut cc, &format!("{tag2}:new"), "newcomer", 10_000);
    match &refused {
        Err(e) if e.code() == Some("QUARANTINE") => {}
        other => panic!("grant during quarantine: {other:?}"),
    }
    assert_eq!(acquire(&mut cc, &held2[2].key, "newcomer", 10_000), None);
    assert_eq!(extend(&mut cc, &held2[2].key, &held2[2].token, 30_000), 1);
    // The operator's override lifts it; fences then continue upwards.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("dlock.restart-quarantine")
        .arg("off")
        .query(&mut rc)
        .unwrap();
    check_fences_move_on(&cl, &tag2, &held2, m2_last);
    // The first shard is unaffected.
    check_held(&cl, r, &held[2..]);

    let live: BTreeSet<usize> = cl.live().into_iter().collect();
    assert!(!live.contains(&m2));
}
