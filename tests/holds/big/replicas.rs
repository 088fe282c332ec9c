//! Replicas of a master with N holds per resource: one attached before the
//! fill follows the effects stream (one `DLOCK.ADDHOLD` per hold), one
//! attached after gets the value by full sync (RDB). Both must hold exactly
//! what the master holds, and keep following it.
use super::*;

/// `WAIT replicas <budget>` on the connection that made the writes: the
/// replicas have everything it propagated.
fn wait_replicas(c: &mut Connection, replicas: i64, n: usize) {
    let ms = budget(n).as_millis() as u64;
    let t = Instant::now();
    let got: i64 = redis::cmd("WAIT").arg(replicas).arg(ms).query(c).unwrap();
    assert_eq!(got, replicas, "WAIT {replicas} {ms}");
    eprintln!("WAIT {replicas}: {:?}", t.elapsed());
}

fn stat(c: &mut Connection, field: &str) -> i64 {
    info_field(c, "stats", field)
        .unwrap_or_else(|| panic!("INFO stats has no {field}"))
        .parse()
        .unwrap()
}

#[test]
fn replicas_attached_before_and_after_the_fill_hold_exactly_the_masters_holds() {
    let _quiet = crate::quiet();
    let n = holds_n();
    // No periodic PING: the stream carries only the effects.
    let master = Server::builder()
        .arg("--repl-ping-replica-period")
        .arg("3600")
        .start();
    let early = Server::builder().replica_of(&master).start();
    early.wait_for_sync(budget(n));
    let mut m = big_conn(&master, n);
    let big = Big::fill(&mut m, n, "repl");
    big.check(&mut m, "master");
    wait_replicas(&mut m, 1, n);
    let want = big.snaps(&mut m);
    let mut e = big_conn(&early, n);
    same("replica attached before", &want, &big.snaps(&mut e), 0);
    big.check(&mut e, "replica attached before");

    let t = Instant::now();
    let late = Server::builder().replica_of(&master).start();
    late.wait_for_sync(budget(n));
    eprintln!("full sync of 2 x {n} holds in {:?}", t.elapsed());
    assert_eq!(stat(&mut m, "sync_full"), 2, "one full sync per replica");
    let mut l = big_conn(&late, n);
    same("replica attached after", &want, &big.snaps(&mut l), 0);
    big.check(&mut l, "replica attached after");

    // Both follow the changes that come next.
    big.behave(&mut m, "master");
    wait_replicas(&mut m, 2, n);
    let want = big.snaps(&mut m);
    same(
        "replica attached before, changed",
        &want,
        &big.snaps(&mut e),
        0,
    );
    same(
        "replica attached after, changed",
        &want,
        &big.snaps(&mut l),
        0,
    );
    for (what, c) in [("before", &mut e), ("after", &mut l)] {
        for key in big.keys() {
            info_matches(c, &key, &format!("replica attached {what}, changed"));
        }
    }
}
