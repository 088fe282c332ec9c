//! The lock as a key: TYPE and PTTL, admin DEL / UNLINK / PERSIST /
//! PEXPIRE / RENAME / COPY, and binary-safe names and tokens.
use super::*;

// ---------------------------------------------------------------- the key

#[test]
fn lock_key_type_is_dlocklock_and_pttl_works() {
    let s = Server::start();
    let mut c = s.conn();
    acquire(&mut c, b"res", b"tok", 30_000).unwrap();
    let t: String = redis::cmd("TYPE").arg("res").query(&mut c).unwrap();
    assert_eq!(t, "dlocklock");
    let p = pttl(&mut c, b"res");
    assert!(p > 20_000 && p <= 30_000, "PTTL {p}");
}

#[test]
fn admin_del_and_unlink_free_the_lock() {
    let s = Server::start();
    let mut c = s.conn();
    let f1 = acquire(&mut c, b"res", b"a", LONG_TTL).unwrap();
    let n: i64 = redis::cmd("DEL").arg("res").query(&mut c).unwrap();
    assert_eq!(n, 1);
    assert_eq!(info(&mut c, b"res"), None);
    assert_eq!(release(&mut c, b"res", b"a"), 0);
    let f2 = acquire(&mut c, b"res", b"b", LONG_TTL).expect("free after DEL");
    let n: i64 = redis::cmd("UNLINK").arg("res").query(&mut c).unwrap();
    assert_eq!(n, 1);
    assert_eq!(info(&mut c, b"res"), None);
    assert_eq!(extend(&mut c, b"res", b"b", 1_000), 0);
    let f3 = acquire(&mut c, b"res", b"c", LONG_TTL).expect("free after UNLINK");
    assert!(f1 < f2 && f2 < f3);
}

#[test]
fn admin_persist_keeps_lock_forever_until_released() {
    let s = Server::start();
    let mut c = s.conn();
    // 1 s is plenty to send PERSIST even on a loaded machine.
    let fence = acquire(&mut c, b"res", b"tok", 1_000).unwrap();
    let n: i64 = redis::cmd("PERSIST").arg("res").query(&mut c).unwrap();
    assert_eq!(n, 1);
    std::thread::sleep(Duration::from_millis(1_200));
    let i = info(&mut c, b"res").expect("persisted lock must not expire");
    assert_eq!((i.fence, i.ttl), (fence, -1));
    assert_eq!(acquire(&mut c, b"res", b"other", 1_000), None);
    // EXTEND by the owner gives it a TTL again.
    assert_eq!(extend(&mut c, b"res", b"tok", 30_000), 1);
    let p = pttl(&mut c, b"res");
    assert!(p > 20_000 && p <= 30_000, "PTTL {p}");
    assert_eq!(release(&mut c, b"res", b"tok"), 1);
}

#[test]
fn admin_pexpire_changes_the_lease_end() {
    let s = Server::start();
    let mut c = s.conn();
    let fence = acquire(&mut c, b"res", b"tok", LONG_TTL).unwrap();
    let n: i64 = redis::cmd("PEXPIRE")
        .arg("res")
        .arg(1_000)
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 1);
    let i = info(&mut c, b"res").expect("still held right after PEXPIRE");
    assert!(i.ttl <= 1_000, "ttl {}", i.ttl);
    assert_eq!(i.fence, fence);
    wait_until(Duration::from_secs(5), "expiry after PEXPIRE", || {
        info(&mut c, b"res").is_none()
    });
    assert!(acquire(&mut c, b"res", b"other", 1_000).unwrap() > fence);
}

#[test]
fn admin_rename_moves_the_lock() {
    let s = Server::start();
    let mut c = s.conn();
    let fence = acquire(&mut c, b"res", b"tok", LONG_TTL).unwrap();
    let _: () = redis::cmd("RENAME")
        .arg("res")
        .arg("res2")
        .query(&mut c)
        .unwrap();
    assert_eq!(info(&mut c, b"res"), None);
    let i = info(&mut c, b"res2").unwrap();
    assert_eq!((i.token.as_slice(), i.fence), (&b"tok"[..], fence));
    let p = pttl(&mut c, b"res2");
    assert!(p > 0 && p <= LONG_TTL as i64, "RENAME keeps the TTL: {p}");
    assert_eq!(release(&mut c, b"res", b"tok"), 0);
    assert_eq!(acquire(&mut c, b"res2", b"other", 1_000), None);
    assert_eq!(release(&mut c, b"res2", b"tok"), 1);
}

#[test]
fn admin_copy_duplicates_the_lock() {
    let s = Server::start();
    let mut c = s.conn();
    let fence = acquire(&mut c, b"res", b"tok", LONG_TTL).unwrap();
    let n: i64 = redis::cmd("COPY")
        .arg("res")
        .arg("res2")
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 1);
    for k in [&b"res"[..], b"res2"] {
        let i = info(&mut c, k).unwrap();
        assert_eq!((i.token.as_slice(), i.fence), (&b"tok"[..], fence));
        let p = pttl(&mut c, k);
        assert!(p > 0 && p <= LONG_TTL as i64, "{p}");
    }
    // Independent values: releasing one leaves the other.
    assert_eq!(release(&mut c, b"res", b"tok"), 1);
    let i = info(&mut c, b"res2").unwrap();
    assert_eq!((i.token.as_slice(), i.fence), (&b"tok"[..], fence));
    assert_eq!(release(&mut c, b"res2", b"tok"), 1);
}

// ---------------------------------------------------------------- binary safety

#[test]
fn binary_tokens_round_trip() {
    let s = Server::start();
    let mut c = s.conn();
    let tok: &[u8] = b"a\0b\r\nc\xff\xfe\0";
    let fence = acquire(&mut c, b"res", tok, LONG_TTL).unwrap();
    assert_eq!(acquire(&mut c, b"res", tok, LONG_TTL), Some(fence));
    let i = info(&mut c, b"res").unwrap();
    assert_eq!(i.token, tok);
    let mut c3 = s.conn_resp3();
    assert_eq!(info(&mut c3, b"res").unwrap().token, tok);
    assert_eq!(extend(&mut c, b"res", tok, 30_000), 1);
    assert_eq!(release(&mut c, b"res", tok), 1);
}

#[test]
fn tokens_differing_after_nul_are_different_owners() {
    let s = Server::start();
    let mut c = s.conn();
    let held = hold(&mut c, b"res", b"tok\0a");
    for other in [&b"tok\0b"[..], b"tok", b"tok\0", b"tok\0a\0", b"tok\0A"] {
        assert_eq!(acquire(&mut c, b"res", other, 1_000), None, "{other:?}");
        assert_eq!(release(&mut c, b"res", other), 0, "{other:?}");
        assert_eq!(extend(&mut c, b"res", other, 1_000), 0, "{other:?}");
    }
    held.assert_unchanged(&mut c);
    assert_eq!(release(&mut c, b"res", b"tok\0a"), 1);
}

#[test]
fn binary_resource_names_are_distinct_keys() {
    let s = Server::start();
    let mut c = s.conn();
    let names: [&[u8]; 5] = [b"r\0x", b"r\0y", b"r", b"r\r\n\xff", b"\xff\0"];
    let mut fences = vec![];
    for (n, name) in names.iter().enumerate() {
        let tok = format!("t{n}");
        fences.push(acquire(&mut c, name, tok.as_bytes(), LONG_TTL).unwrap());
    }
    let size: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(size, names.len() as i64);
    for (n, name) in names.iter().enumerate() {
        let i = info(&mut c, name).unwrap();
        assert_eq!(i.token, format!("t{n}").into_bytes());
        assert_eq!(i.fence, fences[n]);
        let t: String = redis::cmd("TYPE").arg(*name).query(&mut c).unwrap();
        assert_eq!(t, "dlocklock");
    }
    assert_eq!(release(&mut c, b"r\0x", b"t0"), 1);
    assert!(!exists(&mut c, b"r\0x"));
    assert!(exists(&mut c, b"r\0y") && exists(&mut c, b"r"));
    assert_eq!(release(&mut c, b"r\r\n\xff", b"t3"), 1);
    assert_eq!(info(&mut c, b"\xff\0").unwrap().token, b"t4");
}
