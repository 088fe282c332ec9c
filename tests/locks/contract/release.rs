//! DLOCK.RELEASE: owner-only, deletes the key, idempotent, and bad input.
use super::*;

// ---------------------------------------------------------------- RELEASE

#[test]
fn release_by_owner_deletes_the_key() {
    let s = Server::start();
    let mut c = s.conn();
    acquire(&mut c, b"res", b"tok", LONG_TTL).unwrap();
    assert_eq!(release(&mut c, b"res", b"tok"), 1);
    assert!(!exists(&mut c, b"res"));
    assert_eq!(info(&mut c, b"res"), None);
}

#[test]
fn release_by_non_owner_is_zero_and_lock_stays() {
    let s = Server::start();
    let mut c = s.conn();
    let held = hold(&mut c, b"res", b"owner");
    assert_eq!(release(&mut c, b"res", b"other"), 0);
    assert_eq!(release(&mut c, b"res", b"OWNER"), 0);
    assert_eq!(release(&mut c, b"res", b"owner "), 0);
    held.assert_unchanged(&mut c);
}

#[test]
fn second_release_by_same_token_is_zero() {
    let s = Server::start();
    let mut c = s.conn();
    acquire(&mut c, b"res", b"tok", LONG_TTL).unwrap();
    assert_eq!(release(&mut c, b"res", b"tok"), 1);
    assert_eq!(release(&mut c, b"res", b"tok"), 0);
    // ... and does not release a later owner's lock either.
    acquire(&mut c, b"res", b"next", LONG_TTL).unwrap();
    assert_eq!(release(&mut c, b"res", b"tok"), 0);
    assert_eq!(info(&mut c, b"res").unwrap().token, b"next");
}

#[test]
fn release_of_free_resource_is_zero_and_creates_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(release(&mut c, b"res", b"tok"), 0);
    assert!(!exists(&mut c, b"res"));
    let size: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(size, 0);
}

bad_input! {
    release_arity_no_arguments: ["DLOCK.RELEASE"] => arity_err("dlock.release");
    release_arity_key_only: ["DLOCK.RELEASE", "res"] => arity_err("dlock.release");
    release_arity_extra_argument: ["DLOCK.RELEASE", "res", "owner", "x"] => arity_err("dlock.release");
    release_empty_token: ["DLOCK.RELEASE", "res", ""] => EMPTY_TOKEN_ERR;
    // Any token a lock can store is accepted (max-token-length limits new
    // grants only); a longer one cannot belong to anyone.
    release_token_unstorable: ["DLOCK.RELEASE", "res", unstorable_token()] => STORED_TOKEN_ERR;
}
