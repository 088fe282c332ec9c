//! A replica holds exactly the master's holds after every path that changes
//! them: grants, retries, an extension or release of one hold, the prune of
//! a hold past its deadline, queue handoffs (a shared run, a permit, back to
//! a plain lock) and a revoked grant. Compared after `WAIT 1` on the
//! connection that made the writes, value by value (`DUMP`), by digest and
//! by key expiry.
use super::kinds::Kinds;
use super::value::{info_agrees, list_info, must_store};
use super::*;

fn same_on_replica(what: &str, m: &mut Connection, r: &mut Connection, keys: &[String]) {
    assert_same(what, &snapshots(m, keys), &snapshots(r, keys));
}

fn keys(ks: &[&str]) -> Vec<String> {
    ks.iter().map(|k| k.to_string()).collect()
}

/// A change made on the master, named.
type Step<'a> = (&'a str, &'a dyn Fn(&mut Connection));

#[test]
fn replica_has_the_masters_holds_after_grants_retries_extends_releases() {
    let (master, replica) = pair(&[]);
    let (mut m, mut r) = (master.conn(), replica.conn());
    let k = Kinds::build(&mut m, "repl");
    wait_replica(&mut m);
    same_on_replica("built", &mut m, &mut r, &k.keys());
    k.check_built(&mut r);
    // Each kind changed once more, checked one by one.
    let steps: [Step; 5] = [
        ("a retry", &|c| {
            take(c, &k.sem, "p1", 55_000, &["LIMIT", "3"]);
        }),
        ("an extension", &|c| {
            assert_eq!(extend(c, &k.down, "dr", 97_000), 1);
        }),
        ("a release", &|c| {
            assert_eq!(release(c, &k.owner, "a1"), 1);
        }),
        ("the last release", &|c| {
            assert_eq!(release(c, &k.owner, "a2"), 1);
        }),
        ("a new hold", &|c| {
            take(c, &k.shared, "r5", 45_000, &["SHARED"]);
        }),
    ];
    for (what, step) in steps {
        let before = snapshots(&mut m, &k.keys());
        step(&mut m);
        assert_ne!(
            before,
            snapshots(&mut m, &k.keys()),
            "{what} changed nothing"
        );
        wait_replica(&mut m);
        same_on_replica(what, &mut m, &mut r, &k.keys());
    }
    assert!(!exists(&mut r, &k.owner), "released by its last hold");
}

#[test]
fn replica_hides_a_dead_hold_until_the_master_prunes_it() {
    let (master, replica) = pair(&[]);
    let (mut m, mut r) = (master.conn(), replica.conn());
    let k = Kinds::build(&mut m, "prune");
    take(&mut m, &k.shared, "short", 300, &["SHARED"]);
    take(&mut m, &k.sem, "p-short", 300, &["LIMIT", "3"]);
    wait_replica(&mut m);
    same_on_replica("short holds", &mut m, &mut r, &k.keys());
    let dead_at = [&k.shared, &k.sem]
        .map(|key| must_store(&mut m, key).holds()[2].deadline_ms)
        .into_iter()
        .max()
        .unwrap();
    wait_until(SOON, "the short holds' deadline", || {
        now_ms() > dead_at + 20
    });
    // Nothing touched the keys: both still store the dead holds, both
    // hide them from clients.
    same_on_replica("before the prune", &mut m, &mut r, &k.keys());
    assert_eq!(must_store(&mut r, &k.shared).holds().len(), 3);
    for c in [&mut m, &mut r] {
        k.check_built(c);
    }
    // The master prunes before deciding: a refused writer, a permit that
    // takes the dead permit's place.
    busy(&mut m, &k.shared, "w", &[]);
    take(&mut m, &k.sem, "p-new", 60_000, &["LIMIT", "3"]);
    wait_replica(&mut m);
    same_on_replica("after the prune", &mut m, &mut r, &k.keys());
    let tokens = |c: &mut Connection, key: &str| -> Vec<Vec<u8>> {
        must_store(c, key)
            .holds()
            .iter()
            .map(|h| h.token.clone())
            .collect()
    };
    assert_eq!(tokens(&mut r, &k.shared), [b"r1".to_vec(), b"r2".to_vec()]);
    let sem = tokens(&mut r, &k.sem);
    assert_eq!(sem, [b"p1".to_vec(), b"p3".to_vec(), b"p-new".to_vec()]);
}

#[test]
fn replica_follows_queue_handoffs_of_a_shared_run_and_a_permit() {
    let (master, replica) = pair(&[]);
    let (mut m, mut r) = (master.conn(), replica.conn());
    let ks = keys(&["run", "permits"]);
    // A plain lock, readers queued behind it, then a writer.
    take(&mut m, "run", "holder", 60_000, &[]);
    let q1 = Waiter::queue(&master, &mut m, "run", "q1", &["SHARED"], 1);
    let q2 = Waiter::queue(&master, &mut m, "run", "q2", &["SHARED", "OWNER", "Q"], 2);
    let q3 = Waiter::queue(&master, &mut m, "run", "q3", &[], 3);
    wait_replica(&mut m);
    same_on_replica("queued", &mut m, &mut r, &ks);
    // The release hands the run of two readers the resource in one step.
    assert_eq!(release(&mut m, "run", "holder"), 1);
    let ((f1, _), (f2, mut q2c)) = (q1.granted(), q2.granted());
    assert!(f1 < f2, "each reader is a new owner: {f1} {f2}");
    assert!(q3.pending(), "the writer waits behind the readers");
    // A granted waiter's own `WAIT 1` covers its grant (the durability
    // recipe): the replica has both readers before the releaser waits.
    wait_replica(&mut q2c);
    let on_replica: Vec<(Vec<u8>, i64)> = must_store(&mut r, "run")
        .holds()
        .iter()
        .map(|h| (h.token.clone(), h.fence))
        .collect();
    assert_eq!(on_replica, [(b"q1".to_vec(), f1), (b"q2".to_vec(), f2)]);
    wait_replica(&mut m);
    same_on_replica("shared run granted", &mut m, &mut r, &ks);
    // The queue is the master's alone.
    let i = info_agrees(&mut m, "run");
    assert_eq!((i.holds.len(), i.waiters), (2, 1), "{i:?}");
    let shown = |i: &value::ListInfo| -> Vec<(Vec<u8>, i64)> {
        i.holds.iter().map(|h| (h.token.clone(), h.fence)).collect()
    };
    assert_eq!(shown(&info_agrees(&mut r, "run")), shown(&i));
    // The readers leave: the writer gets it, a plain lock again.
    assert_eq!(release(&mut m, "run", "q1"), 1);
    wait_replica(&mut m);
    same_on_replica("one reader left", &mut m, &mut r, &ks);
    assert_eq!(release(&mut m, "run", "q2"), 1);
    let (f3, _) = q3.granted();
    assert!(f3 > f2);
    wait_replica(&mut m);
    same_on_replica("writer granted", &mut m, &mut r, &ks);
    let plain = held(&mut r, "run");
    assert_eq!((plain.token.as_slice(), plain.fence), (&b"q3"[..], f3));

    // A semaphore's freed permit goes to its head waiter.
    let l2 = ["LIMIT", "2"];
    take(&mut m, "permits", "s1", 60_000, &l2);
    take(&mut m, "permits", "s2", 60_000, &l2);
    let s3 = Waiter::queue(&master, &mut m, "permits", "s3", &l2, 1);
    assert_eq!(release(&mut m, "permits", "s1"), 1);
    let (f, mut s3c) = s3.granted();
    wait_replica(&mut s3c);
    assert_eq!(must_store(&mut r, "permits").holds().len(), 2);
    wait_replica(&mut m);
    same_on_replica("permit handed over", &mut m, &mut r, &ks);
    let i = list_info(&mut r, "permits").unwrap();
    let last = i.holds.last().unwrap();
    assert_eq!((last.token.as_slice(), last.fence), (&b"s3"[..], f));
}

#[test]
fn replica_follows_a_revoked_grant_of_a_shared_run() {
    let (master, replica) = pair(&[]);
    let (mut m, mut r) = (master.conn(), replica.conn());
    let ks = keys(&["rev"]);
    take(&mut m, "rev", "holder", 60_000, &["OWNER", "H"]);
    let v1 = Waiter::queue(&master, &mut m, "rev", "v1", &["SHARED"], 1);
    let v2 = Waiter::queue(&master, &mut m, "rev", "v2", &["SHARED"], 2);
    let revoked = counter(&mut m, "dlock", "dlock_revoked_grants");
    // The run is granted and v1 leaves in the same event-loop turn.
    let mut pipe = redis::pipe();
    pipe.atomic()
        .cmd("DLOCK.RELEASE")
        .arg("rev")
        .arg("holder")
        .cmd("CLIENT")
        .arg("UNBLOCK")
        .arg(v1.id);
    let (rel, unblocked): (i64, i64) = pipe.query(&mut m).unwrap();
    assert_eq!((rel, unblocked), (1, 1));
    assert!(matches!(v1.reply().0, Ok(None)), "unblocked: nil");
    let (f2, _) = v2.granted();
    wait_until(SOON, "v1's grant revoked", || {
        counter(&mut m, "dlock", "dlock_revoked_grants") == revoked + 1
    });
    let i = info_agrees(&mut m, "rev");
    let tokens: Vec<&[u8]> = i.holds.iter().map(|h| &h.token[..]).collect();
    assert_eq!(tokens, [&b"v2"[..]], "{i:?}");
    assert_eq!(i.holds[0].fence, f2);
    sync_replica(&mut m);
    same_on_replica("revoked", &mut m, &mut r, &ks);
}

#[test]
fn replica_follows_the_expiry_of_every_hold() {
    let (master, replica) = pair(&[]);
    let (mut m, mut r) = (master.conn(), replica.conn());
    take(&mut m, "gone", "e1", 200, &["SHARED"]);
    take(&mut m, "gone", "e2", 300, &["SHARED"]);
    wait_replica(&mut m);
    same_on_replica("short", &mut m, &mut r, &keys(&["gone"]));
    // The key lives as long as its latest hold; the master deletes it.
    wait_until(SOON, "the master expires the key", || {
        !exists(&mut m, "gone")
    });
    sync_replica(&mut m);
    assert!(!exists(&mut r, "gone"));
    assert_eq!(list_info(&mut r, "gone"), None);
}

#[test]
fn a_late_replica_and_its_own_aof_rebuild_the_masters_holds() {
    let master = Server::start();
    let mut m = master.conn();
    let k = Kinds::build(&mut m, "late");
    // A full sync carries every kind as RDB; the replica's own AOF gets the
    // effects that follow, on top of a rewrite without the RDB preamble.
    let mut replica = Server::builder()
        .aof("always")
        .arg("--aof-use-rdb-preamble")
        .arg("no")
        .start();
    replica.replica_of(&master);
    replica.wait_for_sync(SYNC);
    let mut r = replica.conn();
    wait_until(SYNC, "the replica's AOF rewrite after its sync", || {
        info_field(&mut r, "persistence", "aof_rewrite_in_progress").as_deref() == Some("0")
            && info_field(&mut r, "persistence", "aof_rewrite_scheduled").as_deref() == Some("0")
    });
    same_on_replica("full sync", &mut m, &mut r, &k.keys());
    rewrite_aof(&mut r);
    take(&mut m, &k.shared, "r6", 50_000, &["SHARED"]);
    assert_eq!(extend(&mut m, &k.sem, "p1", 99_000), 1);
    assert_eq!(release(&mut m, &k.down, "dr"), 1);
    wait_replica(&mut m);
    same_on_replica("effects after the sync", &mut m, &mut r, &k.keys());
    let before = snapshots(&mut r, &k.keys());
    // Restarted on its own data (it was made a replica at runtime, so it
    // comes back as a master).
    let mut r = replica.crash_and_restart();
    assert_same("the replica's AOF", &before, &snapshots(&mut r, &k.keys()));
}
