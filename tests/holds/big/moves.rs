//! N holds moved as a key: `DUMP`/`RESTORE` (`ABSTTL`, then `REPLACE`
//! over a changed copy) and `MIGRATE` to another server (`COPY`, then
//! `REPLACE` without `COPY`). The copy is the same value, digest and
//! expiry, and an independent resource: changing one leaves the other.
use super::*;

/// `MIGRATE 127.0.0.1 <port> "" 0 <timeout> <flags> KEYS <keys>`, with
/// the timeout (the longest the source waits on any read or write of the
/// transfer) the budget of N holds.
pub fn migrate(
    c: &mut Connection,
    to: &Server,
    flags: &[&str],
    keys: &[String],
    n: usize,
) -> redis::RedisResult<String> {
    let t = Instant::now();
    let r = redis::cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(to.port())
        .arg("")
        .arg(0)
        .arg(budget(n).as_millis() as u64)
        .arg(flags)
        .arg("KEYS")
        .arg(keys)
        .query(c);
    eprintln!(
        "MIGRATE {flags:?} of {keys:?}: {:?} in {:?}",
        r,
        t.elapsed()
    );
    r
}

/// `RESTORE key <abs ms> payload ABSTTL [REPLACE]`.
fn restore_at(c: &mut Connection, key: &str, at: i64, payload: &[u8], replace: bool) {
    let mut cmd = redis::cmd("RESTORE");
    cmd.arg(key).arg(at).arg(payload).arg("ABSTTL");
    if replace {
        cmd.arg("REPLACE");
    }
    let r: redis::RedisResult<()> = cmd.query(c);
    r.unwrap_or_else(|e| panic!("RESTORE {key} ({} bytes): {e}", payload.len()));
}

#[test]
fn dump_restore_of_every_hold_makes_an_identical_independent_resource() {
    let _quiet = crate::quiet();
    let n = holds_n();
    let s = Server::start();
    let mut c = big_conn(&s, n);
    let big = Big::fill(&mut c, n, "dr");
    let before = big.snaps(&mut c);
    let copy = big.renamed(":restored");
    let mut payloads = Vec::new();
    for (snap, new) in before.iter().zip(copy.keys()) {
        let t = Instant::now();
        let p = dump(&mut c, &snap.key);
        eprintln!("DUMP {}: {} bytes in {:?}", snap.key, p.len(), t.elapsed());
        let t = Instant::now();
        restore_at(&mut c, &new, snap.expires_at, &p, false);
        eprintln!("RESTORE {new}: {:?}", t.elapsed());
        payloads.push(p);
    }
    same("RESTORE ABSTTL", &before, &copy.snaps(&mut c), 0);
    copy.check(&mut c, "restored");
    copy.behave(&mut c, "restored");
    same(
        "originals, the copy changed",
        &before,
        &big.snaps(&mut c),
        0,
    );
    // REPLACE puts the dumped values back over the changed copies.
    for ((snap, new), p) in before.iter().zip(copy.keys()).zip(&payloads) {
        restore_at(&mut c, &new, snap.expires_at, p, true);
    }
    same("RESTORE REPLACE", &before, &copy.snaps(&mut c), 0);
    copy.check(&mut c, "restored again");
    big.behave(&mut c, "originals");
}

#[test]
fn migrate_copies_and_moves_every_hold_to_another_server() {
    let _quiet = crate::quiet();
    let n = holds_n();
    let (a, b) = (Server::start(), Server::start());
    let (mut ac, mut bc) = (big_conn(&a, n), big_conn(&b, n));
    let big = Big::fill(&mut ac, n, "mig");
    let before = big.snaps(&mut ac);
    let newest = before
        .iter()
        .flat_map(|s| s.holds.iter().map(|h| h.fence))
        .max()
        .unwrap();

    // MIGRATE sends the key's TTL as relative time: the key may end up to
    // the transfer's duration later there; every hold keeps its deadline.
    let t0 = now_ms();
    assert_eq!(
        migrate(&mut ac, &b, &["COPY"], &big.keys(), n).unwrap(),
        "OK"
    );
    let slack = now_ms() - t0 + 1;
    same("MIGRATE COPY: source", &before, &big.snaps(&mut ac), 0);
    same("MIGRATE COPY: target", &before, &big.snaps(&mut bc), slack);
    big.sem.check(&mut bc, "MIGRATE COPY", slack);
    big.readers.check(&mut bc, "MIGRATE COPY", slack);
    assert!(last_fence(&mut bc) >= newest, "the target's fence clock");
    big.behave(&mut bc, "after MIGRATE COPY");
    same(
        "source, the target changed",
        &before,
        &big.snaps(&mut ac),
        0,
    );

    // Moved for good, over the changed values: the source's replace them.
    let t0 = now_ms();
    let r = migrate(&mut ac, &b, &["REPLACE"], &big.keys(), n);
    assert_eq!(r.unwrap(), "OK");
    let slack = now_ms() - t0 + 1;
    for key in big.keys() {
        assert!(!exists(&mut ac, &key), "{key} left behind");
    }
    same("MIGRATE REPLACE", &before, &big.snaps(&mut bc), slack);
    big.sem.check(&mut bc, "MIGRATE REPLACE", slack);
    big.readers.check(&mut bc, "MIGRATE REPLACE", slack);
    big.behave(&mut bc, "after MIGRATE REPLACE");
}
