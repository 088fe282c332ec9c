//! `DLOCK.OBSERVE` in Redis Cluster: routed by its key like `DLOCK.INFO`,
//! and an observer whose resource's slot moves while it waits is sent away
//! (`TRYAGAIN`, as waiters are) to retry where the slot went: never shown
//! the key's absence on the old node as "free", never left waiting on a
//! node that no longer serves the slot.
use super::*;
use common::cluster::Cluster;
use redis::ErrorKind;

/// A hash tag `{prefix-N}` whose slot `master` serves.
fn tag_on(cl: &Cluster, master: usize, prefix: &str) -> String {
    (0..10_000)
        .map(|n| format!("{{{prefix}-{n}}}"))
        .find(|t| cl.node_for_slot(cl.key_slot(t)) == master)
        .unwrap_or_else(|| panic!("no tag on node {master}"))
}

fn observed(v: redis::RedisResult<Value>) -> Option<Observed> {
    parse(v.expect("an OBSERVE reply"))
}

fn assert_moved(v: redis::RedisResult<Value>, what: &str) {
    match v {
        Err(e) if e.kind() == ErrorKind::Moved => {}
        other => panic!("{what}: expected MOVED, got {other:?}"),
    }
}

#[test]
fn observe_is_routed_by_its_key_and_sent_away_when_its_slot_moves() {
    let cl = Cluster::start(3, 0);
    let mut cc = cl.conn();
    let masters = cl.masters();

    // Routing: a resource on each master, observed through a cluster
    // client, is answered by that master; another master redirects.
    for &m in &masters {
        let res = format!("{}:r", tag_on(&cl, m, "route"));
        grant(&mut cc, &res, "a", LONG_TTL);
        let got = observed(observe_cmd(&res, None, None).query(&mut cc)).unwrap();
        assert_eq!(got.info.unwrap().token, b"a");
        let direct = observe(&mut cl.node(m).conn(), &res);
        assert_eq!(direct.version, got.version, "{res}: its master's version");
        let other = *masters.iter().find(|&&o| o != m).unwrap();
        let mut oc = cl.node(other).conn();
        assert_moved(observe_cmd(&res, None, None).query(&mut oc), &res);
        // A wait through the cluster client ends on the same master.
        let v = observe_cmd(&res, Some(&got.version), Some(100)).query(&mut cc);
        assert!(observed(v).is_none(), "{res}: unchanged, nil");
    }

    // A held and a free resource of one slot, each with an observer
    // blocked on the slot's master; then the slot moves, keys and all.
    let (held, free) = ("{moving}:held", "{moving}:free");
    let slot = cl.key_slot(held);
    let src = cl.node_for_slot(slot);
    let dst = *masters.iter().find(|&&m| m != src).unwrap();
    grant(&mut cc, held, "owner", LONG_TTL);
    let fence = info(&mut cc, held).unwrap().fence;
    let mut sc = cl.node(src).conn();
    let (held_v, mut oh) = watch(cl.node(src), &mut sc, held);
    let (free_v, mut of) = watch(cl.node(src), &mut sc, free);
    assert_eq!(free_v, FREE);

    cl.migrate_slot(slot, src, dst);

    // The lock's key left the source (MIGRATE deletes it there) but the
    // lock is held: that observer is sent away, not told "free". Nothing
    // changes the free one on the source: it is sent away once the slot is
    // served elsewhere.
    let t = Instant::now();
    for (o, res) in [(&mut oh, held), (&mut of, free)] {
        match o.reply() {
            Err(e) => assert_eq!(e.code(), Some("TRYAGAIN"), "{res}: {e}"),
            Ok(got) => panic!("{res}: expected TRYAGAIN, got {got:?}"),
        }
    }
    assert!(t.elapsed() < SOON, "sent away only after {:?}", t.elapsed());
    wait_observers(&mut sc, 0);
    wait_blocked_clients(&mut sc, 0);
    assert_moved(observe_cmd(held, None, None).query(&mut sc), held);

    // Retried through the cluster client with the versions they had: the
    // destination answers at once for the lock (versions are per process),
    // with its owner and fence as they moved, and the free one still waits.
    let v = observe_cmd(held, Some(&held_v), Some(10_000)).query(&mut cc);
    let got = observed(v).expect("answered at once");
    let i = got.info.unwrap();
    assert_eq!((i.token.as_slice(), i.fence), (&b"owner"[..], fence));
    let v = observe_cmd(free, Some(FREE), Some(100)).query(&mut cc);
    assert!(observed(v).is_none(), "still free: nil");

    // Observers on the destination follow its changes.
    let mut dc = cl.node(dst).conn();
    let (v, mut o) = watch(cl.node(dst), &mut dc, held);
    assert_eq!(v, got.version);
    assert_eq!(release(&mut cc, held, "owner"), 1);
    let got = changed(&mut dc, &mut o, held, &v);
    assert_eq!(got.version, FREE);
}
