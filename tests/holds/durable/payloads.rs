//! Every kind through `DUMP`/`RESTORE`, `COPY` and `MIGRATE`: the same holds
//! and deadlines on the other side, and two independent resources where
//! there are two keys. `MEMORY USAGE` counts every hold.
use super::kinds::Kinds;
use super::value::{info_agrees, must_store};
use super::*;

/// The same kinds under other key names (`<key><suffix>`).
fn renamed(k: &Kinds, suffix: &str) -> Kinds {
    Kinds {
        shared: format!("{}{suffix}", k.shared),
        sem: format!("{}{suffix}", k.sem),
        owner: format!("{}{suffix}", k.owner),
        down: format!("{}{suffix}", k.down),
    }
}

/// `a` and `b` hold the same values, digests and expiries, under other names.
fn same_but_name(what: &str, a: &[Snapshot], b: &[Snapshot]) {
    for (x, y) in a.iter().zip(b) {
        let y = Snapshot {
            key: x.key.clone(),
            ..y.clone()
        };
        assert_eq!(x, &y, "{what}: {} differs", x.key);
    }
}

fn memory_usage(c: &mut Connection, key: &str) -> i64 {
    redis::cmd("MEMORY").arg("USAGE").arg(key).query(c).unwrap()
}

#[test]
fn dump_restore_keeps_every_hold_and_deadline() {
    let s = Server::start();
    let mut c = s.conn();
    let k = Kinds::build(&mut c, "dr");
    let before = snapshots(&mut c, &k.keys());
    let r = renamed(&k, ":restored");
    for (key, new) in k.keys().iter().zip(r.keys()) {
        let p = dump(&mut c, key);
        let _: () = redis::cmd("RESTORE")
            .arg(&new)
            .arg(pexpiretime(&mut c, key))
            .arg(&p)
            .arg("ABSTTL")
            .query(&mut c)
            .unwrap();
        // Without a key TTL the holds still end at their own deadlines.
        restore(&mut c, &format!("{new}:no-ttl"), 0, &p).unwrap();
        assert_eq!(pexpiretime(&mut c, &format!("{new}:no-ttl")), -1);
        assert_eq!(
            must_store(&mut c, &format!("{new}:no-ttl")),
            must_store(&mut c, key)
        );
        info_agrees(&mut c, &format!("{new}:no-ttl"));
    }
    same_but_name("RESTORE ... ABSTTL", &before, &snapshots(&mut c, &r.keys()));
    r.check_built(&mut c);
    r.behave(&mut c);
    // Two resources now: releasing on one leaves the other alone.
    assert_eq!(release(&mut c, &r.shared, "r1"), 1);
    assert_eq!(release(&mut c, &r.sem, "p1"), 1);
    assert_same("originals", &before, &snapshots(&mut c, &k.keys()));
    k.behave(&mut c);
}

#[test]
fn copy_makes_an_independent_resource_with_the_same_holds() {
    let s = Server::start();
    let mut c = s.conn();
    let k = Kinds::build(&mut c, "cp");
    let before = snapshots(&mut c, &k.keys());
    let cp = renamed(&k, ":copy");
    for (key, new) in k.keys().iter().zip(cp.keys()) {
        let n: i64 = redis::cmd("COPY").arg(key).arg(&new).query(&mut c).unwrap();
        assert_eq!(n, 1, "COPY {key} {new}");
    }
    same_but_name("COPY", &before, &snapshots(&mut c, &cp.keys()));
    cp.check_built(&mut c);
    cp.behave(&mut c);
    // Changes to the copy stay there, and the other way round.
    assert_eq!(release(&mut c, &cp.shared, "r2"), 1);
    assert_eq!(extend(&mut c, &cp.owner, "a2", 99_000), 1);
    take(&mut c, &cp.sem, "p4", 60_000, &["LIMIT", "3"]);
    assert_eq!(release(&mut c, &cp.down, "dw"), 1);
    assert_same("originals", &before, &snapshots(&mut c, &k.keys()));
    let copies = snapshots(&mut c, &cp.keys());
    assert_eq!(release(&mut c, &k.sem, "p3"), 1);
    assert_eq!(extend(&mut c, &k.down, "dr", 99_000), 1);
    assert_eq!(snapshots(&mut c, &cp.keys()), copies, "copies changed");
}

#[test]
fn memory_usage_counts_every_hold() {
    let s = Server::start();
    let mut c = s.conn();
    let mut usage = Vec::new();
    for n in 1..=64 {
        take(
            &mut c,
            "many",
            &format!("permit-{n:04}"),
            60_000,
            &["LIMIT", "64"],
        );
        take(
            &mut c,
            "readers",
            &format!("reader-{n:04}"),
            60_000,
            &["SHARED"],
        );
        if [1, 2, 8, 64].contains(&n) {
            usage.push((
                n,
                memory_usage(&mut c, "many"),
                memory_usage(&mut c, "readers"),
            ));
        }
    }
    eprintln!("MEMORY USAGE (holds, semaphore, readers): {usage:?}");
    for w in usage.windows(2) {
        let ((n0, s0, r0), (n1, s1, r1)) = (w[0], w[1]);
        // At least each new hold's token (11 bytes).
        let least = (n1 - n0) * 11;
        assert!(s1 - s0 >= least, "semaphore: {usage:?}");
        assert!(r1 - r0 >= least, "readers: {usage:?}");
    }
    // A plain lock stays small: one block.
    take(&mut c, "plain", "permit-0001", 60_000, &[]);
    assert!(memory_usage(&mut c, "plain") < usage[0].1, "{usage:?}");
}

#[test]
fn migrate_moves_every_kind_to_another_server() {
    let (a, b) = (Server::start(), Server::start());
    let (mut ac, mut bc) = (a.conn(), b.conn());
    let k = Kinds::build(&mut ac, "mig");
    let before = snapshots(&mut ac, &k.keys());
    let newest = before
        .iter()
        .flat_map(|s| s.value.as_ref().unwrap().holds().to_vec())
        .map(|h| h.fence)
        .max()
        .unwrap();
    let t0 = now_ms();
    let ok: String = redis::cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(b.port())
        .arg("")
        .arg(0)
        .arg(5000)
        .arg("KEYS")
        .arg(k.keys())
        .query(&mut ac)
        .unwrap();
    assert_eq!(ok, "OK");
    let elapsed = now_ms() - t0 + 1;
    for key in k.keys() {
        assert!(!exists(&mut ac, &key), "{key} left behind");
    }
    // MIGRATE sends the key's TTL as relative time: the key may end a few
    // ms later there; every hold keeps its own deadline exactly.
    let after = snapshots(&mut bc, &k.keys());
    for (x, y) in before.iter().zip(&after) {
        assert_eq!((&x.value, &x.digest), (&y.value, &y.digest), "{}", x.key);
        let late = y.expires_at - x.expires_at;
        assert!(
            (0..=elapsed).contains(&late),
            "{}: key TTL {late} ms later",
            x.key
        );
    }
    k.check_holds(&mut bc);
    assert!(counter(&mut bc, "dlock", "dlock_last_fence") >= newest);
    k.behave(&mut bc);
}
