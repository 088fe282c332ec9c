//! Observers on a replica wake when the master's effects change the
//! resource there, and when a hold's deadline passes (a replica never
//! expires a key itself, but hides holds past their deadline).
use super::*;

#[test]
fn an_observer_on_a_replica_follows_the_masters_changes() {
    let m = Server::start();
    let r = Server::builder().replica_of(&m).start();
    r.wait_for_sync(SOON);
    let mut mc = m.conn();
    let mut rc = r.conn();
    // Warm the link up: the first WAIT after a sync can take a second.
    let _: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut mc).unwrap();
    let (v, mut o) = watch(&r, &mut rc, "r");
    grant(&mut mc, "r", "a", LONG_TTL);
    let got = changed(&mut rc, &mut o, "r", &v);
    assert_eq!(got.info.unwrap().token, b"a");
    // Versions are the replica's own: marks are keyed per server process.
    // A semaphore's permits, replicated as effects on its holds.
    let permit = |c: &mut Connection, tok: &str| {
        let f: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
            .arg("sem")
            .arg(tok)
            .arg(LONG_TTL)
            .arg("LIMIT")
            .arg(2)
            .query(c)
            .unwrap();
        assert!(f.is_some());
    };
    permit(&mut mc, "p1");
    let _: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut mc).unwrap();
    let (v, mut o) = watch(&r, &mut rc, "sem");
    permit(&mut mc, "p2");
    changed(&mut rc, &mut o, "sem", &v);
}

#[test]
fn an_observer_on_a_replica_sees_a_lease_end_by_its_deadline() {
    let m = Server::start();
    let r = Server::builder().replica_of(&m).start();
    r.wait_for_sync(SOON);
    let mut mc = m.conn();
    let mut rc = r.conn();
    // Warm the link up: the first WAIT after a sync can take a second.
    grant(&mut mc, "warm", "w", LONG_TTL);
    let _: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut mc).unwrap();
    // Long enough to be seen held on a loaded machine, short for the test.
    grant(&mut mc, "r", "a", 2_000);
    let _: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut mc).unwrap();
    let (v, mut o) = watch(&r, &mut rc, "r");
    assert_ne!(v, FREE, "held on the replica");
    let got = o.reply().unwrap().expect("the end of the lease");
    assert_eq!(got.version, FREE);
}
