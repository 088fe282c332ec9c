//! Upgrades: data written by an older release loads in this build.
//!
//! The RDB files in tests/fixtures/ are bytes written by old builds (how each
//! was made, and its recorded fences and deadlines, are in
//! tests/fixtures/README.md). They must never be regenerated with a newer
//! build: their point is to be what the old release wrote.
use crate::common;

use common::lock::*;
use common::*;
use std::path::PathBuf;

/// The TTL every fixture lock was taken with: 100 Julian years in ms.
const TTL_MS: i64 = 3_155_760_000_000;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// A lock as recorded when the fixture was written.
struct Recorded {
    db: i64,
    res: &'static [u8],
    token: Vec<u8>,
    fence: i64,
    /// Absolute deadline, unix ms (`PEXPIRETIME` when written).
    deadline_ms: i64,
}

/// The held locks of `plain-locks-v2.rdb`, written by the 49e65eb release
/// build on Redis 7.0.15 (encoding version 2).
fn plain_locks_v2() -> Vec<Recorded> {
    let binary = b"bin\x00tok\xffen\x00\xff".to_vec();
    let long: Vec<u8> = (0..300u32).map(|i| ((i * 37 + 11) % 256) as u8).collect();
    let lock = |db, res, token: &[u8], fence, deadline_ms| Recorded {
        db,
        res,
        token: token.to_vec(),
        fence,
        deadline_ms,
    };
    vec![
        lock(
            0,
            b"plain",
            b"tok-plain",
            1_795_366_037_458_587,
            4_951_126_037_458,
        ),
        lock(
            0,
            b"binary",
            &binary,
            1_795_366_037_458_660,
            4_951_126_037_458,
        ),
        lock(0, b"long", &long, 5_000_000_000_000_001, 4_951_126_037_459),
        lock(
            3,
            b"plain",
            b"tok-db3-plain",
            5_000_000_000_000_002,
            4_951_126_037_459,
        ),
        lock(
            3,
            b"db3-only",
            b"tok-db3",
            5_000_000_000_000_003,
            4_951_126_037_459,
        ),
    ]
}

/// The lock of db 0 that was released before the SAVE: only the fence
/// clock's high-water mark (RDB aux data) remembers its fence, the highest
/// in the file.
const RELEASED: (&[u8], i64) = (b"released", 5_000_000_000_000_004);

fn select(c: &mut redis::Connection, db: i64) {
    let _: () = redis::cmd("SELECT").arg(db).query(c).expect("SELECT");
}

/// Every recorded lock is held with its token byte for byte, its fence and
/// its absolute deadline, and is still exclusive; the released one is free.
fn check_locks(c: &mut redis::Connection, locks: &[Recorded], when: &str) {
    for l in locks {
        let name = format!("{when}: db {} {}", l.db, l.res.text());
        select(c, l.db);
        let i = held(c, l.res);
        assert_eq!(i.token, l.token, "{name}: token");
        assert_eq!(i.fence, l.fence, "{name}: fence");
        assert_eq!(i.waiters, 0, "{name}: waiters");
        assert!(i.ttl > 0 && i.ttl <= TTL_MS, "{name}: ttl {}", i.ttl);
        let at: i64 = redis::cmd("PEXPIRETIME")
            .arg(l.res)
            .query(c)
            .expect("PEXPIRETIME");
        assert_eq!(at, l.deadline_ms, "{name}: absolute deadline");
        let ty: String = redis::cmd("TYPE").arg(l.res).query(c).unwrap();
        assert_eq!(ty, "dlocklock", "{name}: type");
        assert_eq!(acquire(c, l.res, "intruder", 1000), None, "{name}");
    }
    select(c, 0);
    assert_eq!(info(c, RELEASED.0), None, "{when}: released lock is free");
}

/// A grant on `res` in `db` (released again) must be above `last`.
fn next_fence(c: &mut redis::Connection, db: i64, res: &[u8], last: &mut i64, when: &str) {
    select(c, db);
    let f = grant(c, res, "newcomer", 60_000);
    assert!(
        f > *last,
        "{when}: fence {f} on db {db} {} not above {last}",
        res.text()
    );
    assert_eq!(release(c, res, "newcomer"), 1);
    *last = f;
    select(c, 0);
}

fn info_dlock(c: &mut redis::Connection, field: &str) -> i64 {
    info_field(c, "dlock", field)
        .unwrap_or_else(|| panic!("INFO dlock has no {field}"))
        .parse()
        .unwrap()
}

/// The RDB written by the 49e65eb release (plain locks, encoding version 2)
/// loads: every lock with its token, fence and deadline, the fence clock's
/// mark above all of them (also the released lock's), the longest TTL for
/// the quarantine; and it stays so through `DEBUG RELOAD` and `SAVE` +
/// restart, after which the owners release their locks.
#[test]
fn plain_locks_v2_rdb_from_49e65eb_loads() {
    let locks = plain_locks_v2();
    let recorded_max = RELEASED.1;
    assert!(locks.iter().all(|l| l.fence < recorded_max));
    // The fixture's run persisted nothing but the SAVE (a lossy run with a
    // 100-year TTL): a restart of this test after a shutdown without saving
    // would quarantine new grants for 100 years. The quarantine is not what
    // this test is about (tests/durability/quarantine.rs).
    let mut s = Server::builder()
        .with_rdb(fixture("plain-locks-v2.rdb"))
        .arg("--dlock.restart-quarantine")
        .arg("off")
        .start();
    let mut c = s.conn();

    check_locks(&mut c, &locks, "loaded");
    assert_eq!(dbsize(&mut c), 3, "db 0: plain, binary, long");
    select(&mut c, 3);
    assert_eq!(dbsize(&mut c), 2, "db 3: plain, db3-only");
    select(&mut c, 0);
    assert_eq!(info_dlock(&mut c, "dlock_locks"), 5);
    // The fences lie far ahead of the wall clock (the fixture's clock was
    // raised to 5e15 us, the year 2128): only the loaded mark can explain
    // grants above them.
    assert!(
        now_us() < 5_000_000_000_000_000,
        "the fixture's clock jump is in the past"
    );
    assert_eq!(info_dlock(&mut c, "dlock_last_fence"), recorded_max);
    assert_eq!(info_dlock(&mut c, "dlock_longest_ttl"), TTL_MS);

    // New grants, on the released resource and on a new one, in both dbs.
    let mut last = recorded_max;
    next_fence(&mut c, 0, RELEASED.0, &mut last, "loaded");
    next_fence(&mut c, 0, b"fresh", &mut last, "loaded");
    next_fence(&mut c, 3, b"fresh", &mut last, "loaded");

    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut c).unwrap();
    check_locks(&mut c, &locks, "after DEBUG RELOAD");
    next_fence(&mut c, 0, b"fresh", &mut last, "after DEBUG RELOAD");

    let _: () = redis::cmd("SAVE").query(&mut c).unwrap();
    s.restart();
    let mut c = s.conn();
    check_locks(&mut c, &locks, "after SAVE and restart");
    next_fence(&mut c, 0, RELEASED.0, &mut last, "after SAVE and restart");

    // The owners release: not with a near-miss token (a prefix up to a NUL
    // byte, the last byte changed), with their own at once; each resource
    // then grants above every fence seen.
    for l in &locks {
        let name = format!("db {} {}", l.db, l.res.text());
        select(&mut c, l.db);
        let cut = l
            .token
            .iter()
            .position(|b| *b == 0)
            .unwrap_or(l.token.len() - 1);
        let mut changed = l.token.clone();
        *changed.last_mut().unwrap() ^= 0x01;
        for wrong in [&l.token[..cut], &changed[..]] {
            assert_eq!(release(&mut c, l.res, wrong), 0, "{name}: near-miss token");
        }
        assert_eq!(
            release(&mut c, l.res, &l.token),
            1,
            "{name}: owner's RELEASE"
        );
        assert_eq!(info(&mut c, l.res), None, "{name}: free after RELEASE");
        next_fence(&mut c, l.db, l.res, &mut last, "after RELEASE");
    }
    assert_eq!(info_dlock(&mut c, "dlock_locks"), 0);
}

/// The held locks of `plain-locks-v3.rdb`, written by the dc76b00 build
/// (encoding version 3 on every value, aux data with a quarantine end of
/// 0): the same locks as the v2 fixture, other fences and deadlines.
fn plain_locks_v3() -> Vec<Recorded> {
    let deadline_ms = 4_951_677_978_221;
    plain_locks_v2()
        .into_iter()
        .zip([
            1_795_917_978_221_456,
            1_795_917_978_221_506,
            5_000_000_000_000_001,
            5_000_000_000_000_002,
            5_000_000_000_000_003,
        ])
        .map(|(l, fence)| Recorded {
            fence,
            deadline_ms,
            ..l
        })
        .collect()
}

/// Values and aux data of encoding version 3, which this build reads but no
/// longer writes, load with every lock's token, fence and deadline, the
/// fence clock's mark and the longest TTL; and stay so through a save (now
/// of version 2) and a restart.
#[test]
fn plain_locks_v3_rdb_from_dc76b00_loads() {
    let locks = plain_locks_v3();
    let mut s = Server::builder()
        .with_rdb(fixture("plain-locks-v3.rdb"))
        .arg("--dlock.restart-quarantine")
        .arg("off")
        .start();
    let mut c = s.conn();
    check_locks(&mut c, &locks, "loaded");
    assert_eq!(info_dlock(&mut c, "dlock_locks"), 5);
    assert_eq!(info_dlock(&mut c, "dlock_last_fence"), RELEASED.1);
    assert_eq!(info_dlock(&mut c, "dlock_longest_ttl"), TTL_MS);
    let mut last = RELEASED.1;
    next_fence(&mut c, 0, RELEASED.0, &mut last, "loaded");

    let _: () = redis::cmd("SAVE").query(&mut c).unwrap();
    s.restart();
    let mut c = s.conn();
    check_locks(&mut c, &locks, "after SAVE and restart");
    next_fence(&mut c, 3, b"fresh", &mut last, "after SAVE and restart");
}
