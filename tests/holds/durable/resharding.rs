//! Resharding a cluster slot that holds every kind: the holds arrive with
//! their deadlines, the destination's fence clock is above their fences,
//! and the resources keep working there through a cluster client.
use super::kinds::Kinds;
use super::value::list_info;
use super::*;
use common::cluster::Cluster;

#[test]
fn resharding_a_slot_keeps_every_kind() {
    let cl = Cluster::start(3, 0);
    let mut cc = cl.conn();
    let k = Kinds::build(&mut cc, "{kinds}");
    let slot = cl.key_slot("{kinds}");
    let src = cl.node_for_slot(slot);
    let dst = *cl.masters().iter().find(|&&m| m != src).unwrap();
    let mut sc = cl.node(src).conn();
    let before = snapshots(&mut sc, &k.keys());
    let newest = before
        .iter()
        .flat_map(|s| s.value.as_ref().unwrap().holds().to_vec())
        .map(|h| h.fence)
        .max()
        .unwrap();
    let t0 = now_ms();

    cl.migrate_slot(slot, src, dst);

    let elapsed = now_ms() - t0 + 1;
    let mut dc = cl.node(dst).conn();
    let after = snapshots(&mut dc, &k.keys());
    for (x, y) in before.iter().zip(&after) {
        // Every hold's own deadline exactly; the key's TTL travels as
        // relative time (MIGRATE), so it may end a few ms later.
        assert_eq!((&x.value, &x.digest), (&y.value, &y.digest), "{}", x.key);
        let late = y.expires_at - x.expires_at;
        assert!((0..=elapsed).contains(&late), "{}: {late} ms later", x.key);
    }
    let left: i64 = redis::cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(slot)
        .query(&mut sc)
        .unwrap();
    assert_eq!(left, 0, "keys left on the source");
    k.check_holds(&mut dc);
    assert!(counter(&mut dc, "dlock", "dlock_last_fence") >= newest);
    k.behave(&mut dc);
    // Through the cluster client, which follows the slot to its new node.
    assert_eq!(extend(&mut cc, &k.shared, "r2", 80_000), 1);
    assert_eq!(release(&mut cc, &k.sem, "p1"), 1);
    take(&mut cc, &k.sem, "p5", 60_000, &["LIMIT", "3"]);
    let i = list_info(&mut cc, &k.sem).unwrap();
    let tokens: Vec<&[u8]> = i.holds.iter().map(|h| &h.token[..]).collect();
    assert_eq!(tokens, [&b"p3"[..], &b"p5"[..]]);
    busy(&mut cc, &k.shared, "writer", &[]);
}
