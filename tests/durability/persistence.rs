//! Crash safety and the lock data type: AOF (fsync always, rewrite with and
//! without RDB preamble), RDB snapshots, absolute deadlines, the fence
//! clock's high-water mark, DEBUG RELOAD, DIGEST, DUMP/RESTORE (including
//! corrupt payloads), MEMORY USAGE and TYPE.
use crate::common;

use common::dump::*;
use common::lock::*;
use common::*;
use std::thread::sleep;
use std::time::Duration;

// ---------------------------------------------------------------- helpers

fn save(c: &mut redis::Connection) {
    let _: () = redis::cmd("SAVE").query(c).unwrap();
}

// ------------------------------------------------------------------ tests

#[test]
fn crc64_matches_redis_check_value() {
    assert_eq!(crc64(b"123456789"), 0xe9c6_d914_c4b8_d9ca);
}

/// Shared scenario: a mix of held, released and extended locks.
struct Scenario {
    held: Vec<(&'static str, LockInfo)>,
    freed: Vec<&'static str>,
    max_fence: i64,
}

fn build_scenario(c: &mut redis::Connection) -> Scenario {
    let mut fences = vec![];
    for (res, tok) in [
        ("a", "ta"),
        ("b", "tb"),
        ("c", "tc"),
        ("d", "td"),
        ("e", "te"),
    ] {
        fences.push(grant(c, res, tok, 30_000));
    }
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
    assert!(
        fences[0] > 1_000_000_000_000_000,
        "fence is unix us: {fences:?}"
    );
    assert_eq!(release(c, "b", "tb"), 1);
    assert_eq!(release(c, "d", "td"), 1);
    assert_eq!(release(c, "c", "wrong"), 0);
    assert_eq!(extend(c, "e", "te", 60_000), 1);
    // A same-token re-acquire keeps the fence.
    assert_eq!(grant(c, "a", "ta", 40_000), fences[0]);
    let held_infos: Vec<(&str, LockInfo)> = ["a", "c", "e"]
        .into_iter()
        .map(|r| (r, held(c, r)))
        .collect();
    let e = &held_infos[2].1;
    assert!(e.ttl > 50_000 && e.ttl <= 60_000, "extended ttl {e:?}");
    assert_eq!(e.waiters, 0);
    for r in ["b", "d"] {
        assert_eq!(info(c, r), None);
    }
    Scenario {
        held: held_infos,
        freed: vec!["b", "d"],
        max_fence: *fences.iter().max().unwrap(),
    }
}

fn check_scenario(c: &mut redis::Connection, s: &Scenario) {
    for (res, before) in &s.held {
        let after = held(c, res);
        assert_eq!(after.token, before.token, "{res}");
        assert_eq!(after.fence, before.fence, "{res}");
        assert!(
            after.ttl > 0 && after.ttl <= before.ttl,
            "{res}: ttl before {} after {}",
            before.ttl,
            after.ttl
        );
        let p = pttl(c, res);
        assert!(p > 0 && p <= before.ttl, "{res}: PTTL {p}");
        let ty: String = redis::cmd("TYPE").arg(*res).query(c).unwrap();
        assert_eq!(ty, "dlocklock");
        // Still exclusive.
        assert_eq!(acquire(c, res, "intruder", 1000), None, "{res}");
    }
    let mut next = vec![];
    for res in &s.freed {
        assert_eq!(info(c, res), None, "{res} was released");
        next.push(grant(c, res, "newcomer", 10_000));
    }
    next.push(grant(c, "fresh-after-restart", "t", 10_000));
    for f in next {
        assert!(f > s.max_fence, "fence {f} not above {}", s.max_fence);
    }
}

#[test]
fn aof_fsync_always_survives_kill9() {
    let mut s = Server::builder().aof("always").start();
    let mut c = s.conn();
    let sc = build_scenario(&mut c);
    let mut c = s.crash_and_restart();
    check_scenario(&mut c, &sc);
}

/// RDB-only persistence can lose acknowledged grants, so after a kill -9 the
/// module's restart quarantine would refuse new grants for the longest TTL.
/// These tests are about what survives and about fences, and need grants
/// right after the restart; the quarantine has its own tests
/// (tests/durability/quarantine.rs).
fn rdb_only_without_quarantine() -> Server {
    Server::builder()
        .arg("--appendonly")
        .arg("no")
        .arg("--dlock.restart-quarantine")
        .arg("off")
        .start()
}

#[test]
fn rdb_save_survives_kill9() {
    let mut s = rdb_only_without_quarantine();
    let mut c = s.conn();
    let sc = build_scenario(&mut c);
    save(&mut c);
    let mut c = s.crash_and_restart();
    check_scenario(&mut c, &sc);
}

fn aof_rewrite_then_kill9(preamble: &str) {
    let mut s = Server::builder()
        .aof("always")
        .arg("--aof-use-rdb-preamble")
        .arg(preamble)
        .start();
    let mut c = s.conn();
    let first = build_scenario(&mut c);
    rewrite_aof(&mut c);
    // The rewrite produced a base of the requested kind (redis 7 multi-part AOF).
    let base_ext = if preamble == "yes" {
        ".base.rdb"
    } else {
        ".base.aof"
    };
    let names: Vec<String> = std::fs::read_dir(s.dir().join("appendonlydir"))
        .expect("appendonlydir")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().any(|n| n.ends_with(base_ext)),
        "no *{base_ext} in {names:?}"
    );
    // More activity after the rewrite goes to the new incremental file.
    let f = grant(&mut c, "post", "tp", 30_000);
    assert!(f > first.max_fence);
    assert_eq!(release(&mut c, "c", "tc"), 1);
    let g = grant(&mut c, "post2", "tq", 30_000);
    assert_eq!(release(&mut c, "post2", "tq"), 1);
    assert_eq!(extend(&mut c, "a", "ta", 50_000), 1);
    let sc = Scenario {
        held: ["a", "e", "post"]
            .into_iter()
            .map(|r| (r, held(&mut c, r)))
            .collect(),
        freed: vec!["b", "c", "d", "post2"],
        max_fence: g,
    };
    let mut c = s.crash_and_restart();
    check_scenario(&mut c, &sc);
}

#[test]
fn aof_rewrite_with_rdb_preamble_survives_kill9() {
    aof_rewrite_then_kill9("yes");
}

#[test]
fn aof_rewrite_without_rdb_preamble_survives_kill9() {
    aof_rewrite_then_kill9("no");
}

#[test]
fn aof_replay_keeps_absolute_deadline() {
    let mut s = Server::builder().aof("always").start();
    let mut c = s.conn();
    let fence = grant(&mut c, "dl", "tok", 3000);
    sleep(Duration::from_millis(1500));
    let mut c = s.crash_and_restart();
    // At least 1500 ms have passed since the grant: a replay that re-applied
    // the relative TTL would show ~3000 here.
    match info(&mut c, "dl") {
        None => {} // restart took > 1.5 s on a loaded machine: expired, fine.
        Some(i) => {
            assert_eq!(i.fence, fence);
            assert!(i.ttl > 0 && i.ttl <= 1600, "ttl {} (not ~3000)", i.ttl);
            let p = pttl(&mut c, "dl");
            assert!(p <= 1600, "PTTL {p} (not ~3000)");
        }
    }
}

#[test]
fn rdb_only_lost_grants_do_not_repeat_fences() {
    let mut s = rdb_only_without_quarantine();
    let mut c = s.conn();
    let mut all = vec![];
    for i in 0..5 {
        all.push(grant(&mut c, &format!("saved{i}"), "t", 60_000));
    }
    save(&mut c);
    // Everything below is lost by the crash.
    for i in 0..50 {
        all.push(grant(&mut c, &format!("lost{i}"), "t", 60_000));
    }
    for _ in 0..200 {
        let f = grant(&mut c, "burn", "t", 60_000);
        assert_eq!(release(&mut c, "burn", "t"), 1);
        all.push(f);
    }
    let max_before = *all.iter().max().unwrap();
    let mut sorted = all.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), all.len(), "a fence repeated before the crash");
    let mut c = s.crash_and_restart();
    for i in 0..5 {
        assert!(info(&mut c, &format!("saved{i}")).is_some());
    }
    assert_eq!(info(&mut c, "lost0"), None, "grant after SAVE survived?");
    // lost0..: free again after the crash; their new fences must not reuse
    // any fence handed out before the crash.
    for i in 0..50 {
        let f = grant(&mut c, &format!("lost{i}"), "t2", 60_000);
        assert!(f > max_before, "fence {f} <= pre-crash {max_before}");
    }
    let f = grant(&mut c, "burn", "t2", 60_000);
    assert!(f > max_before);
}

fn next_fence(c: &mut redis::Connection, last: &mut i64, what: &str) {
    let f = grant(c, "mono", "t", 60_000);
    assert!(f > *last, "{what}: fence {f} not above {last}");
    assert_eq!(release(c, "mono", "t"), 1);
    *last = f;
}

#[test]
fn fences_never_repeat_across_expiry_del_flush_reload_restart() {
    let mut s = rdb_only_without_quarantine();
    let mut c = s.conn();
    let mut last = 0;
    next_fence(&mut c, &mut last, "first");

    // Expiry.
    let f = grant(&mut c, "exp", "t", 50);
    assert!(f > last);
    last = f;
    wait_until(Duration::from_secs(5), "lock expiry", || {
        info(&mut c, "exp").is_none()
    });
    let f = grant(&mut c, "exp", "t", 60_000);
    assert!(f > last, "after expiry: {f} <= {last}");
    last = f;

    // DEL.
    let n: i64 = redis::cmd("DEL").arg("exp").query(&mut c).unwrap();
    assert_eq!(n, 1);
    next_fence(&mut c, &mut last, "after DEL");

    // FLUSHALL.
    grant(&mut c, "x", "t", 60_000);
    let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
    next_fence(&mut c, &mut last, "after FLUSHALL");

    // DEBUG RELOAD with no lock keys at all.
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut c).unwrap();
    next_fence(&mut c, &mut last, "after DEBUG RELOAD");

    // Restart from an RDB that holds no lock key.
    let dbsize: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(dbsize, 0);
    save(&mut c);
    let mut c = s.crash_and_restart();
    next_fence(&mut c, &mut last, "after restart");
}

/// The wall clock hides whether the high-water mark is really persisted;
/// a lock restored with a fence one hour ahead (as if migrated from a server
/// whose fences run ahead) takes it out of the picture.
fn future_fence(c: &mut redis::Connection) -> i64 {
    grant(c, "tmpl", "tok", 60_000);
    let future = now_us() + 3_600_000_000;
    let p = payload_with_fence(c, "tmpl", future);
    restore(c, "migrated", 0, &p).expect("RESTORE of a re-fenced payload");
    assert_eq!(held(c, "migrated").fence, future);
    // Observed: the next grant is above it, not at the wall clock.
    let f = grant(c, "after-migrated", "t", 60_000);
    assert!(
        f > future,
        "RESTORE did not raise the fence clock: {f} <= {future}"
    );
    // Now remove every key: only the clock remembers.
    let _: () = redis::cmd("FLUSHALL").query(c).unwrap();
    f
}

#[test]
fn high_water_mark_survives_rdb_restart_without_keys() {
    let mut s = rdb_only_without_quarantine();
    let mut c = s.conn();
    let high = future_fence(&mut c);
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut c).unwrap();
    let f = grant(&mut c, "r", "t", 60_000);
    assert!(f > high, "after DEBUG RELOAD: {f} <= {high}");
    let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
    save(&mut c);
    let mut c = s.crash_and_restart();
    let g = grant(&mut c, "r", "t", 60_000);
    assert!(g > f, "after RDB restart: {g} <= {f}");
}

fn high_water_mark_after_aof_rewrite(preamble: &str) {
    let mut s = Server::builder()
        .aof("always")
        .arg("--aof-use-rdb-preamble")
        .arg(preamble)
        .start();
    let mut c = s.conn();
    let high = future_fence(&mut c);
    if preamble == "no" {
        // Without the preamble there is no aux data: the mark can only travel
        // inside rewritten locks. Leave one whose own fence is far below it.
        grant(&mut c, "x", "tok", 60_000);
        let p = payload_with_fence(&mut c, "x", 1_000);
        restore(&mut c, "old", 0, &p).expect("RESTORE of a low-fence payload");
        let _: () = redis::cmd("DEL").arg("x").query(&mut c).unwrap();
        assert_eq!(held(&mut c, "old").fence, 1_000);
    }
    rewrite_aof(&mut c);
    let mut c = s.crash_and_restart();
    let f = grant(&mut c, "r", "t", 60_000);
    assert!(
        f > high,
        "aof-use-rdb-preamble {preamble}: fence went backwards after rewrite + restart: {f} <= {high}"
    );
}

#[test]
fn high_water_mark_survives_aof_rewrite_with_preamble() {
    high_water_mark_after_aof_rewrite("yes");
}

/// Known limit (docs/fencing.md#where-the-order-ends): with the preamble off
/// and no lock key left at rewrite time, nothing carries the mark; the wall
/// clock alone orders fences then. This test keeps one low-fence lock alive.
#[test]
fn high_water_mark_survives_aof_rewrite_without_preamble() {
    high_water_mark_after_aof_rewrite("no");
}

#[test]
fn high_water_mark_survives_aof_replay_without_rewrite() {
    let mut s = Server::builder().aof("always").start();
    let mut c = s.conn();
    let high = future_fence(&mut c);
    let mut c = s.crash_and_restart();
    let f = grant(&mut c, "r", "t", 60_000);
    assert!(f > high, "{f} <= {high}");
}

fn digest(c: &mut redis::Connection, key: &str) -> String {
    let v: Vec<String> = redis::cmd("DEBUG")
        .arg("DIGEST-VALUE")
        .arg(key)
        .query(c)
        .unwrap();
    assert_eq!(v.len(), 1);
    v[0].clone()
}

#[test]
fn debug_reload_digest_dump_restore_memory_type() {
    let s = Server::start();
    let mut c = s.conn();
    let f1 = grant(&mut c, "res", "owner-1", 60_000);
    let f2 = grant(&mut c, "other", "owner-2", 60_000);
    let before = held(&mut c, "res");
    let d1 = digest(&mut c, "res");
    let d2 = digest(&mut c, "other");
    assert_ne!(d1, d2, "different locks, same digest");
    assert_ne!(d1, "0".repeat(40));

    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut c).unwrap();
    let after = held(&mut c, "res");
    assert_eq!((&after.token, after.fence), (&before.token, before.fence));
    assert!(after.ttl > 0 && after.ttl <= before.ttl);
    assert_eq!(digest(&mut c, "res"), d1);
    assert_eq!(digest(&mut c, "other"), d2);
    assert_eq!(held(&mut c, "other").fence, f2);
    assert_eq!(acquire(&mut c, "res", "intruder", 1000), None);

    let ty: String = redis::cmd("TYPE").arg("res").query(&mut c).unwrap();
    assert_eq!(ty, "dlocklock");
    let mem: Option<i64> = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg("res")
        .query(&mut c)
        .unwrap();
    assert!(mem.unwrap_or(0) > 0, "MEMORY USAGE {mem:?}");

    // DUMP / RESTORE round trip to a new name, without and with a TTL.
    let p = dump(&mut c, "res");
    restore(&mut c, "copy", 0, &p).unwrap();
    let copy = held(&mut c, "copy");
    assert_eq!((copy.token.as_slice(), copy.fence), (&b"owner-1"[..], f1));
    assert_eq!(copy.ttl, -1, "RESTORE ttl 0: no expiry");
    // DIGEST-VALUE covers the expiry too: same value + same absolute expiry
    // (RESTORE ... ABSTTL) gives the same digest.
    let at: i64 = redis::cmd("PEXPIRETIME").arg("res").query(&mut c).unwrap();
    assert!(at > 0);
    let _: () = redis::cmd("RESTORE")
        .arg("copy-abs")
        .arg(at)
        .arg(&p)
        .arg("ABSTTL")
        .query(&mut c)
        .unwrap();
    assert_eq!(digest(&mut c, "copy-abs"), d1);
    restore(&mut c, "copy2", 5000, &p).unwrap();
    let copy2 = held(&mut c, "copy2");
    assert_eq!(copy2.fence, f1);
    assert!(copy2.ttl > 3000 && copy2.ttl <= 5000, "{copy2:?}");
    let p2 = pttl(&mut c, "copy2");
    assert!(p2 > 3000 && p2 <= 5000, "PTTL {p2}");
    // The restored copy behaves as a lock: its owner can release it.
    assert_eq!(release(&mut c, "copy2", "owner-1"), 1);
    // RESTORE onto an existing key needs REPLACE.
    let busy = restore(&mut c, "copy", 0, &p).unwrap_err();
    assert!(busy.to_string().contains("BUSYKEY"), "{busy}");
    ping(&mut c);
}

#[test]
fn restore_refuses_corrupt_payloads_and_server_survives() {
    let s = Server::start();
    let mut c = s.conn();
    let fence = grant(&mut c, "res", "tok-A", 60_000);
    let p = dump(&mut c, "res");
    let (body, ver) = split_payload(&p);
    assert_eq!(seal(&body, ver), p, "CRC-64 helper disagrees with DUMP");
    let fpos = fence_pos(&body, fence);
    let mut k = 0;
    let mut key = || {
        k += 1;
        format!("bad{k}")
    };

    // The server's own checksum catches naive damage.
    let err = restore(&mut c, &key(), 0, &p[..p.len() - 3]).unwrap_err();
    assert!(err.to_string().contains("checksum"), "{err}");
    let mut flipped = p.clone();
    flipped[fpos] ^= 0x01;
    assert!(restore(&mut c, &key(), 0, &flipped).is_err());
    ping(&mut c);

    // Truncated bodies with a valid footer reach the module's loader. RESTORE
    // parses from the whole payload, footer included, and does not insist
    // that the value ends where the footer starts: a body missing its last
    // few bytes can "borrow" them from the footer (e.g. token byte 0x0a and
    // EOF 0x00 from the RDB version). Only cuts that leave more than 10
    // bytes missing are certain short reads; any other cut must be refused
    // or yield a well-formed lock.
    let string_end = fpos + 8 + b"tok-A".len();
    for cut in 0..body.len() {
        let name = key();
        let r = restore(&mut c, &name, 0, &seal(&body[..cut], ver));
        ping(&mut c);
        if cut + 10 < string_end {
            assert!(
                r.is_err(),
                "truncated body ({cut} of {} bytes) accepted",
                body.len()
            );
        }
        match r {
            Ok(()) => {
                let i = held(&mut c, &name);
                assert!(i.fence > 0 && !i.token.is_empty(), "{i:?}");
            }
            Err(_) => {
                let exists: i64 = redis::cmd("EXISTS").arg(&name).query(&mut c).unwrap();
                assert_eq!(exists, 0);
            }
        }
    }

    // Values the loader must refuse: fence 0, fence above 2^63-1, empty token.
    let mut zero = body.clone();
    zero[fpos..fpos + 8].fill(0);
    let mut huge = body.clone();
    huge[fpos + 7] ^= 0x80;
    for (what, b) in [("fence 0", zero), ("fence >= 2^63", huge)] {
        let r = restore(&mut c, &key(), 0, &seal(&b, ver));
        assert!(r.is_err(), "{what} accepted");
        ping(&mut c);
    }
    // The string holding the lease is right before the fence: its length
    // byte, then the module opcode. Shorten it to 8 (fence only, no token).
    let mut empty_tok = body.clone();
    assert_eq!(
        empty_tok[fpos - 1] as usize,
        8 + b"tok-A".len(),
        "length byte"
    );
    empty_tok[fpos - 1] = 8;
    empty_tok.drain(fpos + 8..fpos + 8 + 5);
    assert!(restore(&mut c, &key(), 0, &seal(&empty_tok, ver)).is_err());

    // Every single-byte flip with a valid footer: never a crash; refused, or
    // (for token/fence bits that still decode) a well-formed lock.
    for i in 0..body.len() {
        let mut b = body.clone();
        b[i] ^= 0xff;
        let name = key();
        let r = restore(&mut c, &name, 0, &seal(&b, ver));
        ping(&mut c);
        let in_token = (fpos + 8..fpos + 8 + 5).contains(&i);
        let in_fence_low = (fpos..fpos + 7).contains(&i);
        if in_token || in_fence_low {
            continue; // may decode to a different but valid lease
        }
        assert!(
            r.is_err(),
            "flip at byte {i} of {} accepted: {b:?}",
            body.len()
        );
        let exists: i64 = redis::cmd("EXISTS").arg(&name).query(&mut c).unwrap();
        assert_eq!(exists, 0);
    }
    // The original is untouched and the server healthy.
    assert_eq!(held(&mut c, "res").fence, fence);
    assert_eq!(s.log().matches("crashed").count(), 0);
}
