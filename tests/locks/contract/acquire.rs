//! DLOCK.ACQUIRE: grants, time-based fences, TTL bounds, expiry, and every
//! bad input.
use super::*;

// ---------------------------------------------------------------- ACQUIRE

#[test]
fn acquire_free_grants_a_time_based_fence_and_the_ttl() {
    let s = Server::start();
    let mut c = s.conn();
    let before = now_us();
    let fence = acquire(&mut c, b"res", b"tok", 30_000).expect("granted");
    let after = now_us();
    assert!(fence >= 1);
    // fence = max(last + 1, unix µs): on a fresh server that is the clock.
    assert!(
        fence >= before - 5_000_000 && fence <= after + 5_000_000,
        "fence {fence} not near unix µs {before}..{after}"
    );
    let t = pttl(&mut c, b"res");
    assert!(t > 20_000 && t <= 30_000, "PTTL {t}");
    let i = info(&mut c, b"res").expect("held");
    assert_eq!(i.token, b"tok");
    assert_eq!(i.fence, fence);
    assert!(i.ttl > 20_000 && i.ttl <= 30_000, "ttl {}", i.ttl);
    assert_eq!(i.waiters, 0);
}

#[test]
fn acquire_same_token_resets_ttl_and_returns_same_fence() {
    let s = Server::start();
    let mut c = s.conn();
    let fence = acquire(&mut c, b"res", b"tok", 1_000).unwrap();
    assert!(pttl(&mut c, b"res") <= 1_000);
    assert_eq!(acquire(&mut c, b"res", b"tok", 60_000), Some(fence));
    let t = pttl(&mut c, b"res");
    assert!(t > 50_000, "PTTL {t} after re-acquire with 60000");
    // Resetting works downwards too: TTL = ttl_ms, not max.
    assert_eq!(acquire(&mut c, b"res", b"tok", 5_000), Some(fence));
    let t = pttl(&mut c, b"res");
    assert!(t > 0 && t <= 5_000, "PTTL {t} after re-acquire with 5000");
    assert_eq!(info(&mut c, b"res").unwrap().fence, fence);
}

#[test]
fn acquire_held_by_other_token_is_nil_and_changes_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    let held = hold(&mut c, b"res", b"owner");
    assert_eq!(acquire(&mut c, b"res", b"other", 100), None);
    assert_eq!(acquire(&mut c, b"res", b"other", MAX_TTL), None);
    held.assert_unchanged(&mut c);
    // A refused acquire consumed no fence worth noticing: the next grant is
    // still above the held one.
    assert_eq!(release(&mut c, b"res", b"owner"), 1);
    let next = acquire(&mut c, b"res", b"other", 1_000).unwrap();
    assert!(next > held.fence);
}

#[test]
fn acquire_accepts_ttl_bounds_and_512_byte_token() {
    let s = Server::start();
    let mut c = s.conn();
    acquire(&mut c, b"one", b"t", 1).expect("ttl 1 is valid");
    acquire(&mut c, b"max", b"t", MAX_TTL).expect("ttl 2^47 is valid");
    let t = pttl(&mut c, b"max");
    assert!(t > MAX_TTL as i64 - 60_000 && t <= MAX_TTL as i64, "{t}");
    let tok = vec![b'y'; 512];
    acquire(&mut c, b"long", &tok, 10_000).expect("512-byte token is valid");
    assert_eq!(info(&mut c, b"long").unwrap().token, tok);
    assert_eq!(extend(&mut c, b"long", &tok, 20_000), 1);
    assert_eq!(release(&mut c, b"long", &tok), 1);
}

/// `dlock.max-token-length` limits new grants and new waiters only: a holder
/// whose token was accepted before the limit was lowered can still refresh,
/// extend and release.
#[test]
fn lowering_max_token_length_keeps_holders_with_longer_tokens() {
    let s = Server::start();
    let mut c = s.conn();
    let set_max = |c: &mut Connection, n: usize| {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("dlock.max-token-length")
            .arg(n)
            .query(c)
            .unwrap();
    };
    set_max(&mut c, 1000);
    let holder = vec![b'h'; 800];
    let fence = acquire(&mut c, b"res", &holder, LONG_TTL).unwrap();
    set_max(&mut c, 100);
    let too_long = "ERR token is longer than 100 bytes";

    assert_eq!(extend(&mut c, b"res", &holder, LONG_TTL), 1);
    assert_eq!(acquire(&mut c, b"res", &holder, LONG_TTL), Some(fence));
    // A long token that would neither be granted nor wait: just busy.
    let other = vec![b'o'; 200];
    assert_eq!(acquire(&mut c, b"res", &other, LONG_TTL), None);
    // As a new waiter it is refused, and not queued.
    let e = acquire_wait(&mut c, b"res", &other, LONG_TTL, 100).unwrap_err();
    assert_eq!(err_text(&e), too_long);
    assert_eq!(info(&mut c, b"res").unwrap().waiters, 0);
    assert_eq!(release(&mut c, b"res", &holder), 1);
    // Free now: a new grant needs a token within the limit.
    let e = try_acquire(&mut c, b"res", &holder, LONG_TTL).unwrap_err();
    assert_eq!(err_text(&e), too_long);
    assert!(!exists(&mut c, b"res"), "a refused grant stored nothing");
    let fits = vec![b'f'; 100];
    assert!(acquire(&mut c, b"res", &fits, LONG_TTL).unwrap() > fence);
}

#[test]
fn fences_strictly_increase_across_grants() {
    let s = Server::start();
    let mut c = s.conn();
    let mut fences = vec![];
    for round in 0..5 {
        let tok = format!("t{round}");
        fences.push(acquire(&mut c, b"res", tok.as_bytes(), 10_000).unwrap());
        assert_eq!(release(&mut c, b"res", tok.as_bytes()), 1);
    }
    // After an admin DEL.
    fences.push(acquire(&mut c, b"res", b"a", 10_000).unwrap());
    let _: i64 = redis::cmd("DEL").arg("res").query(&mut c).unwrap();
    fences.push(acquire(&mut c, b"res", b"b", 10_000).unwrap());
    // After FLUSHALL.
    let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
    fences.push(acquire(&mut c, b"res", b"c", 10_000).unwrap());
    // Other resources share the same clock.
    fences.push(acquire(&mut c, b"res2", b"d", 10_000).unwrap());
    for w in fences.windows(2) {
        assert!(w[0] < w[1], "fences not strictly increasing: {fences:?}");
    }
}

#[test]
fn expiry_frees_the_lock() {
    let s = Server::start();
    let mut c = s.conn();
    let first = acquire(&mut c, b"res", b"a", 100).unwrap();
    wait_until(Duration::from_secs(5), "lock expiry", || {
        info(&mut c, b"res").is_none()
    });
    assert!(!exists(&mut c, b"res"));
    let second = acquire(&mut c, b"res", b"b", 10_000).expect("free after expiry");
    assert!(second > first, "{second} <= {first}");
    assert_eq!(info(&mut c, b"res").unwrap().token, b"b");
    // The expired owner no longer owns anything.
    assert_eq!(release(&mut c, b"res", b"a"), 0);
    assert_eq!(extend(&mut c, b"res", b"a", 10_000), 0);
    assert_eq!(info(&mut c, b"res").unwrap().token, b"b");
}

bad_input! {
    acquire_arity_no_arguments: ["DLOCK.ACQUIRE"] => arity_err("dlock.acquire");
    acquire_arity_key_only: ["DLOCK.ACQUIRE", "res"] => arity_err("dlock.acquire");
    acquire_arity_missing_ttl: ["DLOCK.ACQUIRE", "res", "owner"] => arity_err("dlock.acquire");
    acquire_ttl_abc: ["DLOCK.ACQUIRE", "res", "owner", "abc"] => TTL_ERR;
    acquire_ttl_zero: ["DLOCK.ACQUIRE", "res", "owner", "0"] => TTL_ERR;
    acquire_ttl_negative: ["DLOCK.ACQUIRE", "res", "owner", "-5"] => TTL_ERR;
    acquire_ttl_fraction: ["DLOCK.ACQUIRE", "res", "owner", "1.5"] => TTL_ERR;
    acquire_ttl_above_max: ["DLOCK.ACQUIRE", "res", "owner", "140737488355329"] => TTL_ERR;
    acquire_ttl_overflow: ["DLOCK.ACQUIRE", "res", "owner", "99999999999999999999999"] => TTL_ERR;
    acquire_ttl_empty: ["DLOCK.ACQUIRE", "res", "owner", ""] => TTL_ERR;
    acquire_ttl_bad_for_other_token: ["DLOCK.ACQUIRE", "res", "other", "abc"] => TTL_ERR;
    acquire_empty_token: ["DLOCK.ACQUIRE", "res", "", "1000"] => EMPTY_TOKEN_ERR;
    // A new grant (on a free resource) or a new waiter needs a token within
    // dlock.max-token-length; nothing takes a token a lock cannot store.
    acquire_token_too_long: ["DLOCK.ACQUIRE", "free", long_token(), "1000"] => LONG_TOKEN_ERR;
    acquire_token_too_long_to_wait: ["DLOCK.ACQUIRE", "res", long_token(), "1000", "WAIT", "100"] => LONG_TOKEN_ERR;
    acquire_token_unstorable: ["DLOCK.ACQUIRE", "res", unstorable_token(), "1000"] => STORED_TOKEN_ERR;
    acquire_unknown_argument: ["DLOCK.ACQUIRE", "res", "owner", "100", "BOGUS"] => SYNTAX_ERR;
    acquire_unknown_arguments_other_token: ["DLOCK.ACQUIRE", "res", "other", "100", "BOGUS", "X"] => SYNTAX_ERR;
    // 16 arguments in all: still parsed as options.
    acquire_twelve_unknown_arguments: ["DLOCK.ACQUIRE", "res", "owner", "100",
        "A", "B", "C", "D", "E", "F", "G", "H", "I", "J", "K", "L"] => SYNTAX_ERR;
    // 17 arguments in all: past the 16 the module looks at (src/server/edge/ffi.rs
    // MAX_ARGS), still a syntax error, not a wrong-arity one.
    acquire_thirteen_unknown_arguments: ["DLOCK.ACQUIRE", "res", "owner", "100",
        "A", "B", "C", "D", "E", "F", "G", "H", "I", "J", "K", "L", "M"] => SYNTAX_ERR;
}
