//! A master and a replica of different releases: the replica's full sync
//! (an RDB with aux data) and the effects streamed after it.
use super::*;

/// Every kind before the replica attaches (it arrives by full sync), then
/// deleted and made again (by effects): the replica has exactly the
/// master's keys both times.
fn replicates(master: ServerBuilder, replica: ServerBuilder, what: &str) {
    let master = master.start();
    let mut c = master.conn();
    make_kinds(&mut c, "sync");
    let want = snapshots(&mut c);
    let replica = replica.replica_of(&master).start();
    replica.wait_for_sync(SYNC);
    let mut rc = replica.conn();
    assert_same(&format!("{what}, full sync"), &want, &snapshots(&mut rc));
    for key in keys() {
        let _: i64 = redis::cmd("DEL").arg(&key).query(&mut c).unwrap();
    }
    make_kinds(&mut c, "stream");
    let n: i64 = redis::cmd("WAIT").arg(1).arg(10_000).query(&mut c).unwrap();
    assert_eq!(n, 1, "{what}: WAIT 1");
    let want = snapshots(&mut c);
    assert_same(&format!("{what}, effects"), &want, &snapshots(&mut rc));
    // Nothing the master sent was refused.
    assert!(
        !replica.log().contains("sending an error to its master"),
        "{what}: the replica refused an effect:\n{}",
        replica.log()
    );
}

#[test]
fn a_master_of_this_build_replicates_to_a_previous_release() {
    replicates(current(), previous(), "this build -> previous release");
}

#[test]
fn a_master_of_the_previous_release_replicates_to_this_build() {
    replicates(previous(), current(), "previous release -> this build");
}
