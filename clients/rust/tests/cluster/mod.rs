//! `Locker::cluster` on a real Redis Cluster: every command (sets too) and
//! its `WAIT n` go to the master of the resource's slot; `MOVED` and `ASK`
//! are followed.

use crate::common;

use common::server::cluster::{setslot, Cluster};
use common::{holder, ms, SEC};
use dlock_client::{Error, Locker};

fn locker(cluster: &Cluster) -> Locker {
    let seed = cluster.node(cluster.masters()[0]).url();
    Locker::cluster(&[seed]).unwrap()
}

#[test]
fn commands_go_to_the_master_of_the_slot_and_follow_moved_and_ask() {
    let cluster = Cluster::start(3, 1);
    let locker = locker(&cluster);
    // Resources on every master.
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..30 {
        let res = format!("res:{i}");
        let g = locker.try_lock(&res, 30 * SEC).unwrap().expect("free");
        let owner = cluster.node_for_slot(cluster.key_slot(&res));
        seen.insert(owner);
        let mut c = cluster.node(owner).conn();
        assert_eq!(
            holder(&mut c, &res),
            Some((g.token().to_string(), g.fence()))
        );
        assert!(g.extend(30 * SEC).unwrap());
        assert!(g.release().unwrap());
        assert_eq!(holder(&mut c, &res), None);
    }
    assert_eq!(seen.len(), 3, "resources spread over every master");

    // A set sharing a hash tag goes to its slot's master; a set across
    // slots is refused by the server.
    let set = locker
        .request_set(["{order:1}:rows", "{order:1}:stock"])
        .acquire()
        .unwrap()
        .unwrap();
    let owner = cluster.node_for_slot(cluster.key_slot("{order:1}"));
    let mut c = cluster.node(owner).conn();
    assert_eq!(
        holder(&mut c, "{order:1}:stock").map(|h| h.1),
        Some(set.fence())
    );
    assert!(set.release().unwrap());
    let e = locker.request_set(["a", "b"]).acquire().unwrap_err();
    assert!(
        matches!(&e, Error::Server(m) if m.starts_with("CROSSSLOT")),
        "{e}"
    );

    // MOVED: the slot moves after the locker learned the map.
    let res = "moving";
    let slot = cluster.key_slot(res);
    let from = cluster.node_for_slot(slot);
    let to = *cluster.masters().iter().find(|&&m| m != from).unwrap();
    cluster.migrate_slot(slot, from, to);
    let g = locker
        .try_lock(res, 30 * SEC)
        .unwrap()
        .expect("granted on the new owner");
    assert_eq!(
        holder(&mut cluster.node(to).conn(), res).map(|h| h.1),
        Some(g.fence())
    );
    drop(g);

    // ASK: the slot is migrating and the key is not on the source.
    let res = "asked";
    let slot = cluster.key_slot(res);
    let from = cluster.node_for_slot(slot);
    let to = *cluster.masters().iter().find(|&&m| m != from).unwrap();
    setslot(
        &mut cluster.node(to).conn(),
        slot,
        "IMPORTING",
        cluster.id(from),
    );
    setslot(
        &mut cluster.node(from).conn(),
        slot,
        "MIGRATING",
        cluster.id(to),
    );
    let g = locker
        .try_lock(res, 30 * SEC)
        .unwrap()
        .expect("granted by the importing node");
    let mut t = cluster.node(to).conn();
    let _: () = redis::cmd("ASKING").query(&mut t).unwrap();
    assert_eq!(holder(&mut t, res).map(|h| h.1), Some(g.fence()));
}

#[test]
fn min_replicas_and_waiting_on_the_slots_master() {
    let cluster = Cluster::start(3, 1);
    // A generous acknowledgement timeout: CI is a loaded 2-core machine.
    let locker = locker(&cluster).with_min_replicas(1, 5 * SEC);
    let g = locker
        .try_lock("res", 30 * SEC)
        .unwrap()
        .expect("confirmed by the replica");
    let owner = cluster.node_for_slot(cluster.key_slot("res"));
    let replica = cluster.replicas_of(owner)[0];
    let mut r = cluster.node(replica).conn();
    let _: () = redis::cmd("READONLY").query(&mut r).unwrap();
    assert_eq!(
        holder(&mut r, "res").map(|h| h.1),
        Some(g.fence()),
        "the replica has it"
    );
    assert!(g.extend(30 * SEC).unwrap());

    // A waiting acquire queues on the master and is granted by the release.
    let l2 = locker.clone();
    let waiter = std::thread::spawn(move || {
        l2.request("res")
            .ttl(30 * SEC)
            .wait(20 * SEC)
            .acquire()
            .unwrap()
    });
    let mut m = cluster.node(owner).conn();
    common::server::wait_until(10 * SEC, "the waiter queued", || {
        common::waiters(&mut m, "res") == 1
    });
    let fence = g.fence();
    assert!(g.release().unwrap());
    let g2 = waiter.join().unwrap().expect("granted by handoff");
    assert!(g2.fence() > fence);
    assert!(g2.remaining() > 25 * SEC && g2.remaining() <= 30 * SEC + ms(1));
}

#[test]
fn a_paused_slot_master_costs_a_waiting_acquire_about_its_wait_not_twice() {
    // The acquire's own deadline is wait + io timeout; the slot map refresh
    // that follows its timeout must not use that same, wait-inflated,
    // timeout on the paused master again.
    let cluster = Cluster::start(3, 0);
    let seed = cluster.masters()[0];
    let locker = Locker::cluster(&[cluster.node(seed).url()])
        .unwrap()
        .with_io_timeout(ms(300))
        .with_retry_for(ms(300));
    // A resource whose master is not the seed.
    let res = (0..)
        .map(|i| format!("res:{i}"))
        .find(|r| cluster.node_for_slot(cluster.key_slot(r)) != seed)
        .unwrap();
    let master = cluster.node_for_slot(cluster.key_slot(&res));
    // Warm the pool of that master.
    assert!(locker
        .try_lock(&res, SEC)
        .unwrap()
        .unwrap()
        .release()
        .unwrap());
    cluster.node(master).stop();
    let t = std::time::Instant::now();
    let r = locker.request(&res).ttl(10 * SEC).wait(ms(1500)).acquire();
    let took = t.elapsed();
    cluster.node(master).cont();
    assert!(matches!(r, Err(Error::Unavailable(_))), "{r:?}");
    // The wait, one io timeout, and the abandoning RELEASE's retries.
    assert!(took < ms(3000), "{took:?}");
}

/// Sessions belong to a server: renewed guards on one master share that
/// master's session, and each master has its own (needs a server with
/// sessions; skips, saying so, without).
#[test]
fn session_one_per_master() {
    let cluster = Cluster::start(3, 0);
    let first = cluster.masters()[0];
    if !common::has_sessions(&mut cluster.node(first).conn()) {
        eprintln!("skipped: the server has no sessions (DLOCK.SESSION)");
        return;
    }
    let locker = locker(&cluster);
    let mut by_master: std::collections::BTreeMap<usize, String> = Default::default();
    let mut guards = Vec::new();
    for i in 0..30 {
        let res = format!("res:{i}");
        let g = locker
            .request(res.as_str())
            .ttl(10 * SEC)
            .watchdog()
            .acquire()
            .unwrap()
            .expect("free");
        let owner = cluster.node_for_slot(cluster.key_slot(&res));
        let id = g.session().expect("bound").to_string();
        let known = by_master.entry(owner).or_insert_with(|| id.clone());
        assert_eq!(*known, id, "{res}: one session per master");
        let mut c = cluster.node(owner).conn();
        assert!(common::session_field(&mut c, &id, "holds").is_some_and(|h| h >= 1));
        guards.push(g);
    }
    assert_eq!(by_master.len(), 3, "a session on every master");
    let ids: std::collections::BTreeSet<_> = by_master.values().collect();
    assert_eq!(ids.len(), 3, "each master's own");
    for g in guards {
        assert!(g.release().unwrap());
    }
}

/// Guarded writes go to the master of the resource's slot, and follow the
/// lock when resharding moves it (keys and lock together): written on the
/// new master with the same fence. A key in another slot is refused with
/// `CROSSSLOT`, nothing written.
#[test]
fn guarded_writes_go_to_the_slots_master_and_follow_the_lock_when_it_moves() {
    use dlock_client::redis::{self, Value};
    let cluster = Cluster::start(3, 0);
    let locker = locker(&cluster);
    let g = locker.try_lock("{order:2}", 60 * SEC).unwrap().unwrap();
    let get = |node: usize, key: &str| -> Option<String> {
        redis::cmd("GET")
            .arg(key)
            .query(&mut cluster.node(node).conn())
            .unwrap()
    };
    let slot = cluster.key_slot("{order:2}");
    let from = cluster.node_for_slot(slot);
    let _: () = g
        .write(redis::cmd("SET").arg("{order:2}:state").arg("paid"))
        .unwrap();
    assert_eq!(get(from, "{order:2}:state").as_deref(), Some("paid"));
    let r = g.write::<Value>(redis::cmd("SET").arg("elsewhere").arg("x"));
    assert!(
        matches!(&r, Err(Error::Refused { code, .. }) if code == "CROSSSLOT"),
        "{r:?}"
    );
    let to = *cluster.masters().iter().find(|&&m| m != from).unwrap();
    cluster.migrate_slot(slot, from, to);
    let n: i64 = g
        .write(redis::cmd("INCR").arg("{order:2}:version"))
        .unwrap();
    assert_eq!(n, 1);
    assert_eq!(get(to, "{order:2}:version").as_deref(), Some("1"));
    assert_eq!(get(to, "{order:2}:state").as_deref(), Some("paid"));
    assert!(g.check().unwrap());
    assert!(locker.check("{order:2}", g.fence()).unwrap());
    let fence = g.fence();
    assert!(g.release().unwrap());
    assert!(!locker.check("{order:2}", fence).unwrap());
}
