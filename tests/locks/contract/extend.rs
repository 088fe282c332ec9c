//! DLOCK.EXTEND: owner-only, TTL from now, fence kept, and bad input.
use super::*;

// ---------------------------------------------------------------- EXTEND

#[test]
fn extend_by_owner_sets_ttl_from_now_and_keeps_fence() {
    let s = Server::start();
    let mut c = s.conn();
    let fence = acquire(&mut c, b"res", b"tok", 5_000).unwrap();
    assert_eq!(extend(&mut c, b"res", b"tok", 120_000), 1);
    let t = pttl(&mut c, b"res");
    assert!(t > 100_000 && t <= 120_000, "PTTL {t}");
    // Shortening is allowed: the TTL is exactly ttl_ms from now.
    assert_eq!(extend(&mut c, b"res", b"tok", 3_000), 1);
    let t = pttl(&mut c, b"res");
    assert!(t > 0 && t <= 3_000, "PTTL {t}");
    let i = info(&mut c, b"res").unwrap();
    assert_eq!((i.token.as_slice(), i.fence), (&b"tok"[..], fence));
    assert!(i.ttl > 0 && i.ttl <= 3_000, "ttl {}", i.ttl);
}

#[test]
fn extend_by_non_owner_is_zero() {
    let s = Server::start();
    let mut c = s.conn();
    let held = hold(&mut c, b"res", b"owner");
    assert_eq!(extend(&mut c, b"res", b"other", 100), 0);
    assert_eq!(extend(&mut c, b"res", b"other", MAX_TTL), 0);
    held.assert_unchanged(&mut c);
}

#[test]
fn extend_of_free_resource_is_zero_and_creates_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(extend(&mut c, b"res", b"tok", 10_000), 0);
    assert!(!exists(&mut c, b"res"));
    assert_eq!(info(&mut c, b"res"), None);
}

bad_input! {
    extend_arity_no_arguments: ["DLOCK.EXTEND"] => arity_err("dlock.extend");
    extend_arity_missing_ttl: ["DLOCK.EXTEND", "res", "owner"] => arity_err("dlock.extend");
    // WANTED is the only option.
    extend_unknown_option: ["DLOCK.EXTEND", "res", "owner", "100", "x"] => SYNTAX_ERR;
    extend_ttl_abc: ["DLOCK.EXTEND", "res", "owner", "abc"] => TTL_ERR;
    extend_ttl_zero: ["DLOCK.EXTEND", "res", "owner", "0"] => TTL_ERR;
    extend_ttl_negative: ["DLOCK.EXTEND", "res", "owner", "-5"] => TTL_ERR;
    extend_ttl_fraction: ["DLOCK.EXTEND", "res", "owner", "1.5"] => TTL_ERR;
    extend_ttl_above_max: ["DLOCK.EXTEND", "res", "owner", "140737488355329"] => TTL_ERR;
    extend_ttl_overflow: ["DLOCK.EXTEND", "res", "owner", "99999999999999999999999"] => TTL_ERR;
    extend_empty_token: ["DLOCK.EXTEND", "res", "", "1000"] => EMPTY_TOKEN_ERR;
    // Any token a lock can store is accepted (max-token-length limits new
    // grants only); a longer one cannot belong to anyone.
    extend_token_unstorable: ["DLOCK.EXTEND", "res", unstorable_token(), "1000"] => STORED_TOKEN_ERR;
}
