//! One of two holds extended and acknowledged with `WAIT`, the master
//! killed, the replica promoted: the extended hold lives there with its new
//! deadline, the other ends at its old one.
use super::value::{info_agrees, must_store};
use super::*;

#[test]
fn an_extended_hold_survives_failover_and_the_other_ends_at_its_old_deadline() {
    let (mut master, replica) = pair(&[]);
    let mut m = master.conn();
    take(&mut m, "fo", "h1", 2_000, &["SHARED"]);
    take(&mut m, "fo", "h2", 2_000, &["SHARED", "OWNER", "two"]);
    assert_eq!(extend(&mut m, "fo", "h1", 60_000), 1);
    wait_replica(&mut m);
    let before = must_store(&mut m, "fo");
    let (d1, d2) = match before.holds() {
        [h1, h2] => (h1.deadline_ms, h2.deadline_ms),
        other => panic!("two holds expected: {other:?}"),
    };
    assert!(d1 >= d2 + 50_000, "h1 extended: {d1} vs {d2}");

    master.kill9();
    let mut p = replica.conn();
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut p)
        .unwrap();
    assert_eq!(
        info_field(&mut p, "replication", "role").as_deref(),
        Some("master")
    );
    // Exactly the master's holds, deadlines included; the key lives until
    // the extended hold ends.
    assert_eq!(must_store(&mut p, "fo"), before);
    assert_eq!(pexpiretime(&mut p, "fo"), d1);
    if now_ms() + 200 < d2 {
        // Reached before h2's deadline (not guaranteed on a loaded machine).
        assert_eq!(info_agrees(&mut p, "fo").holds.len(), 2);
    }

    wait_until(SOON, "h2's old deadline", || now_ms() > d2 + 20);
    let i = info_agrees(&mut p, "fo");
    assert_eq!(i.holds.len(), 1, "only h1 is left: {i:?}");
    assert_eq!(i.holds[0].token, b"h1");
    assert!(i.holds[0].ttl > 40_000, "h1 keeps its new deadline: {i:?}");
    // h2 is gone for every command; h1 still excludes a writer.
    assert_eq!(extend(&mut p, "fo", "h2", 60_000), 0);
    assert_eq!(release(&mut p, "fo", "h2"), 0);
    busy(&mut p, "fo", "writer", &[]);
    let after = must_store(&mut p, "fo");
    assert_eq!(
        after.holds(),
        &before.holds()[..1],
        "h2 pruned, h1 as it was"
    );
    assert_eq!(pexpiretime(&mut p, "fo"), d1);
    assert_eq!(extend(&mut p, "fo", "h1", 30_000), 1, "h1 is live");
}
