//! The command contract of dlock, one test per rule and per bad input.
//!
//! Every test starts its own server, so tests are independent and can run in
//! parallel. Bad-input tests first set up a held lock (or a key of another
//! type), send the bad command, check the exact error text and then check
//! that nothing changed.
mod common;

use common::*;
use redis::{Connection, RedisError, Value};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const MAX_TTL: u64 = 1 << 47;
const LONG_TTL: u64 = 60_000;
const TTL_ERR: &str = "ERR ttl_ms must be an integer from 1 to 140737488355328";
const EMPTY_TOKEN_ERR: &str = "ERR token must not be empty";
const LONG_TOKEN_ERR: &str = "ERR token is longer than 512 bytes";
const SYNTAX_ERR: &str = "ERR syntax error";
const WRONGTYPE_ERR: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

// ---------------------------------------------------------------- helpers

fn arity_err(cmd: &str) -> String {
    format!("ERR wrong number of arguments for '{cmd}' command")
}

/// `CODE detail`, i.e. the error line exactly as the server sent it.
fn err_text(e: &RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        _ => format!("{e}"),
    }
}

fn cmd_of(args: &[&[u8]]) -> redis::Cmd {
    let mut c = redis::cmd(std::str::from_utf8(args[0]).unwrap());
    for a in &args[1..] {
        c.arg(*a);
    }
    c
}

/// Sends a command that must fail; returns the error text.
fn expect_err(c: &mut Connection, args: &[&[u8]]) -> String {
    match cmd_of(args).query::<Value>(c) {
        Ok(v) => panic!("{:?}: expected an error, got {v:?}", show(args)),
        Err(e) => err_text(&e),
    }
}

fn show(args: &[&[u8]]) -> Vec<String> {
    args.iter()
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

fn acquire(c: &mut Connection, res: &[u8], tok: &[u8], ttl: u64) -> Option<i64> {
    redis::cmd("DLOCK.ACQUIRE")
        .arg(res)
        .arg(tok)
        .arg(ttl)
        .query(c)
        .expect("DLOCK.ACQUIRE")
}

fn release(c: &mut Connection, res: &[u8], tok: &[u8]) -> i64 {
    redis::cmd("DLOCK.RELEASE")
        .arg(res)
        .arg(tok)
        .query(c)
        .expect("DLOCK.RELEASE")
}

fn extend(c: &mut Connection, res: &[u8], tok: &[u8], ttl: u64) -> i64 {
    redis::cmd("DLOCK.EXTEND")
        .arg(res)
        .arg(tok)
        .arg(ttl)
        .query(c)
        .expect("DLOCK.EXTEND")
}

fn pttl(c: &mut Connection, key: &[u8]) -> i64 {
    redis::cmd("PTTL").arg(key).query(c).expect("PTTL")
}

fn exists(c: &mut Connection, key: &[u8]) -> bool {
    let n: i64 = redis::cmd("EXISTS").arg(key).query(c).expect("EXISTS");
    n == 1
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct LockInfo {
    token: Vec<u8>,
    fence: i64,
    ttl: i64,
    waiters: i64,
}

fn as_bytes(v: &Value) -> Vec<u8> {
    match v {
        Value::BulkString(b) => b.clone(),
        Value::SimpleString(s) => s.clone().into_bytes(),
        other => panic!("expected a string, got {other:?}"),
    }
}

fn as_int(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        other => panic!("expected an integer, got {other:?}"),
    }
}

/// Checks the exact layout of the INFO pairs: token, fence, ttl, waiters.
fn parse_pairs(pairs: &[(Value, Value)]) -> LockInfo {
    let keys: Vec<Vec<u8>> = pairs.iter().map(|(k, _)| as_bytes(k)).collect();
    assert_eq!(
        keys,
        vec![
            b"token".to_vec(),
            b"fence".to_vec(),
            b"ttl".to_vec(),
            b"waiters".to_vec()
        ],
        "DLOCK.INFO fields"
    );
    assert!(
        matches!(pairs[0].1, Value::BulkString(_)),
        "token must be a bulk string: {:?}",
        pairs[0].1
    );
    LockInfo {
        token: as_bytes(&pairs[0].1),
        fence: as_int(&pairs[1].1),
        ttl: as_int(&pairs[2].1),
        waiters: as_int(&pairs[3].1),
    }
}

/// Parses a DLOCK.INFO reply: nil, a RESP2 flat array or a RESP3 map.
fn parse_info(v: Value) -> Option<LockInfo> {
    match v {
        Value::Nil => None,
        Value::Array(items) => {
            assert_eq!(items.len(), 8, "RESP2 INFO is a flat array: {items:?}");
            let pairs: Vec<(Value, Value)> = items
                .chunks(2)
                .map(|p| (p[0].clone(), p[1].clone()))
                .collect();
            Some(parse_pairs(&pairs))
        }
        Value::Map(pairs) => Some(parse_pairs(&pairs)),
        other => panic!("unexpected DLOCK.INFO reply {other:?}"),
    }
}

fn info(c: &mut Connection, res: &[u8]) -> Option<LockInfo> {
    let v: Value = redis::cmd("DLOCK.INFO")
        .arg(res)
        .query(c)
        .expect("DLOCK.INFO");
    parse_info(v)
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}

/// A held lock to compare against after a command that must change nothing.
struct Held {
    res: Vec<u8>,
    token: Vec<u8>,
    fence: i64,
    pttl: i64,
}

fn hold(c: &mut Connection, res: &[u8], tok: &[u8]) -> Held {
    let fence = acquire(c, res, tok, LONG_TTL).expect("free lock must be granted");
    let pttl = pttl(c, res);
    assert!(pttl > 0 && pttl <= LONG_TTL as i64, "PTTL {pttl}");
    Held {
        res: res.to_vec(),
        token: tok.to_vec(),
        fence,
        pttl,
    }
}

impl Held {
    /// Same owner, same fence, TTL neither raised nor cut.
    fn assert_unchanged(&self, c: &mut Connection) {
        let i = info(c, &self.res).expect("lock must still be held");
        assert_eq!(i.token, self.token, "owner changed");
        assert_eq!(i.fence, self.fence, "fence changed");
        let now = pttl(c, &self.res);
        assert!(
            now > 0 && now <= self.pttl,
            "PTTL must stay positive and not increase: was {}, now {now}",
            self.pttl
        );
        // Generous margin for a loaded machine; a bad command that reset the
        // TTL to a short value would land far below it.
        assert!(
            now > self.pttl - 20_000,
            "PTTL cut: was {}, now {now}",
            self.pttl
        );
        let size: i64 = redis::cmd("DBSIZE").query(c).unwrap();
        assert_eq!(size, 1, "no other key may appear");
    }

    /// Same owner and fence, TTL not raised, other keys allowed.
    fn assert_unchanged_ttl_only(&self, c: &mut Connection) {
        let i = info(c, &self.res).expect("lock must still be held");
        assert_eq!((i.token.as_slice(), i.fence), (&self.token[..], self.fence));
        let now = pttl(c, &self.res);
        assert!(now > 0 && now <= self.pttl, "{} -> {now}", self.pttl);
    }
}

/// Holds `res` as `owner`, sends `args`, expects exactly `expected`, and
/// checks that the lock is untouched.
fn check_bad_input(args: &[Vec<u8>], expected: &str) {
    let s = Server::start();
    let mut c = s.conn();
    let held = hold(&mut c, b"res", b"owner");
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_slice()).collect();
    assert_eq!(expect_err(&mut c, &args), expected, "{:?}", show(&args));
    held.assert_unchanged(&mut c);
    // The lock still works normally afterwards.
    assert_eq!(release(&mut c, b"res", b"owner"), 1);
}

fn long_token() -> Vec<u8> {
    vec![b'x'; 513]
}

macro_rules! bad_input {
    ($($name:ident: [$($arg:expr),+] => $err:expr;)+) => {
        $(
            #[test]
            fn $name() {
                let args: Vec<Vec<u8>> = vec![$(AsRef::<[u8]>::as_ref(&$arg).to_vec()),+];
                check_bad_input(&args, &$err);
            }
        )+
    };
}

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
    acquire_token_too_long: ["DLOCK.ACQUIRE", "res", long_token(), "1000"] => LONG_TOKEN_ERR;
    acquire_unknown_argument: ["DLOCK.ACQUIRE", "res", "owner", "100", "BOGUS"] => SYNTAX_ERR;
    acquire_unknown_arguments_other_token: ["DLOCK.ACQUIRE", "res", "other", "100", "BOGUS", "X"] => SYNTAX_ERR;
    // 16 arguments in all: still parsed as options.
    acquire_twelve_unknown_arguments: ["DLOCK.ACQUIRE", "res", "owner", "100",
        "A", "B", "C", "D", "E", "F", "G", "H", "I", "J", "K", "L"] => SYNTAX_ERR;
    // 17 arguments in all. Currently FAILS (module bug): the module caps argv
    // at 16 entries (src/server/ffi.rs MAX_ARGS) and answers "wrong number of
    // arguments" instead of a syntax error for unknown options.
    acquire_thirteen_unknown_arguments: ["DLOCK.ACQUIRE", "res", "owner", "100",
        "A", "B", "C", "D", "E", "F", "G", "H", "I", "J", "K", "L", "M"] => SYNTAX_ERR;
}

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
    release_token_too_long: ["DLOCK.RELEASE", "res", long_token()] => LONG_TOKEN_ERR;
}

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
    extend_arity_extra_argument: ["DLOCK.EXTEND", "res", "owner", "100", "x"] => arity_err("dlock.extend");
    extend_ttl_abc: ["DLOCK.EXTEND", "res", "owner", "abc"] => TTL_ERR;
    extend_ttl_zero: ["DLOCK.EXTEND", "res", "owner", "0"] => TTL_ERR;
    extend_ttl_negative: ["DLOCK.EXTEND", "res", "owner", "-5"] => TTL_ERR;
    extend_ttl_fraction: ["DLOCK.EXTEND", "res", "owner", "1.5"] => TTL_ERR;
    extend_ttl_above_max: ["DLOCK.EXTEND", "res", "owner", "140737488355329"] => TTL_ERR;
    extend_ttl_overflow: ["DLOCK.EXTEND", "res", "owner", "99999999999999999999999"] => TTL_ERR;
    extend_empty_token: ["DLOCK.EXTEND", "res", "", "1000"] => EMPTY_TOKEN_ERR;
    extend_token_too_long: ["DLOCK.EXTEND", "res", long_token(), "1000"] => LONG_TOKEN_ERR;
}

// ---------------------------------------------------------------- INFO

#[test]
fn info_of_free_resource_is_nil() {
    let s = Server::start();
    let mut c = s.conn();
    let v: Value = redis::cmd("DLOCK.INFO").arg("res").query(&mut c).unwrap();
    assert_eq!(v, Value::Nil);
    let mut c3 = s.conn_resp3();
    let v: Value = redis::cmd("DLOCK.INFO").arg("res").query(&mut c3).unwrap();
    assert_eq!(v, Value::Nil);
    assert!(!exists(&mut c, b"res"));
}

#[test]
fn info_resp2_is_a_flat_array() {
    let s = Server::start();
    let mut c = s.conn();
    let fence = acquire(&mut c, b"res", b"tok", 30_000).unwrap();
    let v: Value = redis::cmd("DLOCK.INFO").arg("res").query(&mut c).unwrap();
    let Value::Array(items) = &v else {
        panic!("RESP2 DLOCK.INFO must be an array, got {v:?}");
    };
    assert_eq!(items.len(), 8);
    let i = parse_info(v).unwrap();
    assert_eq!(i.token, b"tok");
    assert_eq!(i.fence, fence);
    assert!(i.ttl > 20_000 && i.ttl <= 30_000, "ttl {}", i.ttl);
    assert_eq!(i.waiters, 0);
}

#[test]
fn info_resp3_is_a_map() {
    let s = Server::start();
    let mut c = s.conn_resp3();
    let fence = acquire(&mut c, b"res", b"tok", 30_000).unwrap();
    let v: Value = redis::cmd("DLOCK.INFO").arg("res").query(&mut c).unwrap();
    let Value::Map(pairs) = &v else {
        panic!("RESP3 DLOCK.INFO must be a map, got {v:?}");
    };
    assert_eq!(pairs.len(), 4);
    let i = parse_info(v).unwrap();
    assert_eq!(i.token, b"tok");
    assert_eq!(i.fence, fence);
    assert!(i.ttl > 20_000 && i.ttl <= 30_000, "ttl {}", i.ttl);
    assert_eq!(i.waiters, 0);
}

#[test]
fn info_ttl_tracks_pttl_and_is_minus_one_after_persist() {
    let s = Server::start();
    let mut c = s.conn();
    let fence = acquire(&mut c, b"res", b"tok", 30_000).unwrap();
    let before = pttl(&mut c, b"res");
    let i = info(&mut c, b"res").unwrap();
    let after = pttl(&mut c, b"res");
    assert!(
        i.ttl <= before && i.ttl >= after,
        "{before} {} {after}",
        i.ttl
    );
    let n: i64 = redis::cmd("PERSIST").arg("res").query(&mut c).unwrap();
    assert_eq!(n, 1);
    assert_eq!(pttl(&mut c, b"res"), -1);
    let i = info(&mut c, b"res").unwrap();
    assert_eq!(
        (i.token.as_slice(), i.fence, i.ttl),
        (&b"tok"[..], fence, -1)
    );
}

bad_input! {
    info_arity_no_arguments: ["DLOCK.INFO"] => arity_err("dlock.info");
    info_arity_extra_argument: ["DLOCK.INFO", "res", "x"] => arity_err("dlock.info");
}

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

// ---------------------------------------------------------------- WRONGTYPE

/// A string key with a TTL; `args` must fail with WRONGTYPE and leave it.
fn check_wrongtype_string(args: &[&[u8]]) {
    let s = Server::start();
    let mut c = s.conn();
    let _: () = redis::cmd("SET")
        .arg("s")
        .arg("v")
        .arg("PX")
        .arg(LONG_TTL)
        .query(&mut c)
        .unwrap();
    let before = pttl(&mut c, b"s");
    assert_eq!(expect_err(&mut c, args), WRONGTYPE_ERR, "{:?}", show(args));
    let v: Option<String> = redis::cmd("GET").arg("s").query(&mut c).unwrap();
    assert_eq!(v.as_deref(), Some("v"));
    let t: String = redis::cmd("TYPE").arg("s").query(&mut c).unwrap();
    assert_eq!(t, "string");
    let after = pttl(&mut c, b"s");
    assert!(
        after > 0 && after <= before && after > before - 20_000,
        "string TTL changed: {before} -> {after}"
    );
}

/// A list key without TTL; `args` must fail with WRONGTYPE and leave it.
fn check_wrongtype_list(args: &[&[u8]]) {
    let s = Server::start();
    let mut c = s.conn();
    let _: i64 = redis::cmd("RPUSH")
        .arg("s")
        .arg("a")
        .arg("b")
        .query(&mut c)
        .unwrap();
    assert_eq!(expect_err(&mut c, args), WRONGTYPE_ERR, "{:?}", show(args));
    let v: Vec<String> = redis::cmd("LRANGE")
        .arg("s")
        .arg(0)
        .arg(-1)
        .query(&mut c)
        .unwrap();
    assert_eq!(v, vec!["a", "b"]);
    assert_eq!(pttl(&mut c, b"s"), -1);
}

#[test]
fn wrongtype_acquire_on_string() {
    check_wrongtype_string(&[b"DLOCK.ACQUIRE", b"s", b"tok", b"1000"]);
}

#[test]
fn wrongtype_release_on_string() {
    check_wrongtype_string(&[b"DLOCK.RELEASE", b"s", b"tok"]);
}

#[test]
fn wrongtype_extend_on_string() {
    check_wrongtype_string(&[b"DLOCK.EXTEND", b"s", b"tok", b"1000"]);
}

#[test]
fn wrongtype_info_on_string() {
    check_wrongtype_string(&[b"DLOCK.INFO", b"s"]);
}

#[test]
fn wrongtype_acquire_on_list() {
    check_wrongtype_list(&[b"DLOCK.ACQUIRE", b"s", b"tok", b"1000"]);
}

#[test]
fn wrongtype_release_on_list() {
    check_wrongtype_list(&[b"DLOCK.RELEASE", b"s", b"tok"]);
}

#[test]
fn wrongtype_extend_on_list() {
    check_wrongtype_list(&[b"DLOCK.EXTEND", b"s", b"tok", b"1000"]);
}

#[test]
fn wrongtype_info_on_list() {
    check_wrongtype_list(&[b"DLOCK.INFO", b"s"]);
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

// ---------------------------------------------------------------- WATCH

/// `owner` holds `res` on conn O; conn A WATCHes it; `meddle` runs on conn
/// B; returns whether A's MULTI/EXEC still ran.
fn watch_survives(meddle: impl FnOnce(&mut Connection)) -> bool {
    let s = Server::start();
    let mut o = s.conn();
    let mut a = s.conn();
    let mut b = s.conn();
    hold(&mut o, b"res", b"owner");
    let _: () = redis::cmd("WATCH").arg("res").query(&mut a).unwrap();
    meddle(&mut b);
    let _: () = redis::cmd("MULTI").query(&mut a).unwrap();
    let q: String = redis::cmd("SET").arg("x").arg("1").query(&mut a).unwrap();
    assert_eq!(q, "QUEUED");
    let v: Value = redis::cmd("EXEC").query(&mut a).unwrap();
    match v {
        Value::Nil => false,
        Value::Array(r) => {
            assert_eq!(r, vec![Value::Okay]);
            true
        }
        other => panic!("unexpected EXEC reply {other:?}"),
    }
}

#[test]
fn watch_survives_failed_acquire() {
    assert!(watch_survives(|b| {
        assert_eq!(acquire(b, b"res", b"other", 10_000), None);
    }));
}

#[test]
fn watch_survives_failed_release() {
    assert!(watch_survives(|b| {
        assert_eq!(release(b, b"res", b"other"), 0);
    }));
}

#[test]
fn watch_survives_failed_extend() {
    assert!(watch_survives(|b| {
        assert_eq!(extend(b, b"res", b"other", 10_000), 0);
    }));
}

#[test]
fn watch_survives_refused_bad_input() {
    assert!(watch_survives(|b| {
        assert_eq!(
            expect_err(b, &[b"DLOCK.ACQUIRE", b"res", b"owner", b"abc"]),
            TTL_ERR
        );
        assert_eq!(
            expect_err(b, &[b"DLOCK.EXTEND", b"res", b"owner", b"0"]),
            TTL_ERR
        );
        assert_eq!(
            expect_err(b, &[b"DLOCK.RELEASE", b"res", b""]),
            EMPTY_TOKEN_ERR
        );
        assert_eq!(
            expect_err(b, &[b"DLOCK.ACQUIRE", b"res", b"owner", b"10", b"X"]),
            SYNTAX_ERR
        );
    }));
}

#[test]
fn watch_survives_info() {
    assert!(watch_survives(|b| {
        assert!(info(b, b"res").is_some());
    }));
}

#[test]
fn watch_aborted_by_successful_extend() {
    assert!(!watch_survives(|b| {
        assert_eq!(extend(b, b"res", b"owner", 10_000), 1);
    }));
}

#[test]
fn watch_aborted_by_successful_reacquire() {
    assert!(!watch_survives(|b| {
        assert!(acquire(b, b"res", b"owner", 10_000).is_some());
    }));
}

#[test]
fn watch_aborted_by_successful_release() {
    assert!(!watch_survives(|b| {
        assert_eq!(release(b, b"res", b"owner"), 1);
    }));
}

#[test]
fn watch_on_other_type_survives_wrongtype() {
    let s = Server::start();
    let mut a = s.conn();
    let mut b = s.conn();
    let _: () = redis::cmd("SET").arg("s").arg("v").query(&mut a).unwrap();
    let _: () = redis::cmd("WATCH").arg("s").query(&mut a).unwrap();
    for args in [
        &[&b"DLOCK.ACQUIRE"[..], b"s", b"t", b"1000"][..],
        &[b"DLOCK.RELEASE", b"s", b"t"],
        &[b"DLOCK.EXTEND", b"s", b"t", b"1000"],
        &[b"DLOCK.INFO", b"s"],
    ] {
        assert_eq!(expect_err(&mut b, args), WRONGTYPE_ERR);
    }
    let _: () = redis::cmd("MULTI").query(&mut a).unwrap();
    let _: String = redis::cmd("PING").query(&mut a).unwrap();
    let v: Value = redis::cmd("EXEC").query(&mut a).unwrap();
    assert_ne!(v, Value::Nil, "WRONGTYPE refusals aborted WATCH");
}

#[test]
fn watch_on_free_key_aborted_by_grant_not_by_failed_ops() {
    let s = Server::start();
    let mut a = s.conn();
    let mut b = s.conn();
    // Failed ops on a free key do not touch the watch...
    let _: () = redis::cmd("WATCH").arg("free").query(&mut a).unwrap();
    assert_eq!(release(&mut b, b"free", b"t"), 0);
    assert_eq!(extend(&mut b, b"free", b"t", 1_000), 0);
    assert_eq!(info(&mut b, b"free"), None);
    let _: () = redis::cmd("MULTI").query(&mut a).unwrap();
    let _: String = redis::cmd("PING").query(&mut a).unwrap();
    let v: Value = redis::cmd("EXEC").query(&mut a).unwrap();
    assert_ne!(v, Value::Nil, "failed ops on a free key aborted WATCH");
    // ... a grant does.
    let _: () = redis::cmd("WATCH").arg("free").query(&mut a).unwrap();
    assert!(acquire(&mut b, b"free", b"t", 10_000).is_some());
    let _: () = redis::cmd("MULTI").query(&mut a).unwrap();
    let _: String = redis::cmd("PING").query(&mut a).unwrap();
    let v: Value = redis::cmd("EXEC").query(&mut a).unwrap();
    assert_eq!(v, Value::Nil, "a grant must abort WATCH");
}

// ---------------------------------------------------------------- MULTI, Lua

#[test]
fn works_inside_multi_exec() {
    let s = Server::start();
    let mut c = s.conn();
    let v: Vec<Value> = redis::pipe()
        .atomic()
        .cmd("DLOCK.ACQUIRE")
        .arg("res")
        .arg("tok")
        .arg(10_000)
        .cmd("DLOCK.ACQUIRE")
        .arg("res")
        .arg("other")
        .arg(10_000)
        .cmd("DLOCK.EXTEND")
        .arg("res")
        .arg("tok")
        .arg(20_000)
        .cmd("DLOCK.INFO")
        .arg("res")
        .cmd("DLOCK.RELEASE")
        .arg("res")
        .arg("tok")
        .cmd("DLOCK.INFO")
        .arg("res")
        .query(&mut c)
        .unwrap();
    assert_eq!(v.len(), 6, "{v:?}");
    let fence = as_int(&v[0]);
    assert!(fence >= 1);
    assert_eq!(v[1], Value::Nil);
    assert_eq!(v[2], Value::Int(1));
    let i = parse_info(v[3].clone()).unwrap();
    assert_eq!((i.token.as_slice(), i.fence), (&b"tok"[..], fence));
    assert!(i.ttl > 0 && i.ttl <= 20_000);
    assert_eq!(v[4], Value::Int(1));
    assert_eq!(v[5], Value::Nil);
    assert!(!exists(&mut c, b"res"));
    // A bad command inside MULTI is an error entry (the client surfaces it
    // as the query's error); the rest of the transaction still runs.
    let e = redis::pipe()
        .atomic()
        .cmd("DLOCK.ACQUIRE")
        .arg("res")
        .arg("tok")
        .arg("abc")
        .cmd("DLOCK.ACQUIRE")
        .arg("res")
        .arg("tok")
        .arg(10_000)
        .query::<Vec<Value>>(&mut c)
        .unwrap_err();
    assert_eq!(err_text(&e), TTL_ERR);
    let i = info(&mut c, b"res").expect("second command of the MULTI ran");
    assert_eq!(i.token, b"tok");
    assert!(i.fence > fence);
}

#[test]
fn works_in_lua() {
    let s = Server::start();
    let mut c = s.conn();
    let script = "return redis.call('DLOCK.ACQUIRE', KEYS[1], ARGV[1], ARGV[2])";
    let fence: Option<i64> = redis::cmd("EVAL")
        .arg(script)
        .arg(1)
        .arg("res")
        .arg("tok")
        .arg(5000)
        .query(&mut c)
        .unwrap();
    let fence = fence.expect("granted from Lua");
    let i = info(&mut c, b"res").unwrap();
    assert_eq!((i.token.as_slice(), i.fence), (&b"tok"[..], fence));
    let p = pttl(&mut c, b"res");
    assert!(p > 0 && p <= 5000, "PTTL {p}");
    // Idempotent from Lua too, and nil (false) for another token.
    let again: Option<i64> = redis::cmd("EVAL")
        .arg(script)
        .arg(1)
        .arg("res")
        .arg("tok")
        .arg(5000)
        .query(&mut c)
        .unwrap();
    assert_eq!(again, Some(fence));
    let other: Option<i64> = redis::cmd("EVAL")
        .arg(script)
        .arg(1)
        .arg("res")
        .arg("other")
        .arg(5000)
        .query(&mut c)
        .unwrap();
    assert_eq!(other, None);
    // INFO from Lua comes back as the flat RESP2 layout.
    let v: Value = redis::cmd("EVAL")
        .arg("return redis.call('DLOCK.INFO', KEYS[1])")
        .arg(1)
        .arg("res")
        .query(&mut c)
        .unwrap();
    let i = parse_info(v).unwrap();
    assert_eq!((i.token.as_slice(), i.fence), (&b"tok"[..], fence));
    // Errors reach the script caller with their text.
    let e = redis::cmd("EVAL")
        .arg(script)
        .arg(1)
        .arg("res")
        .arg("tok")
        .arg("abc")
        .query::<Value>(&mut c)
        .unwrap_err();
    assert!(err_text(&e).contains("ttl_ms must be an integer"), "{e}");
    let released: i64 = redis::cmd("EVAL")
        .arg("return redis.call('DLOCK.RELEASE', KEYS[1], ARGV[1])")
        .arg(1)
        .arg("res")
        .arg("tok")
        .query(&mut c)
        .unwrap();
    assert_eq!(released, 1);
    assert!(!exists(&mut c, b"res"));
}

// ---------------------------------------------------------------- COMMAND

#[test]
fn command_info_declares_one_key_at_position_one() {
    let s = Server::start();
    let mut c = s.conn();
    let expected_flags: [(&str, &[&str]); 4] = [
        ("dlock.acquire", &["write", "denyoom"]),
        ("dlock.release", &["write"]),
        ("dlock.extend", &["write", "fast"]),
        ("dlock.info", &["readonly", "fast"]),
    ];
    for (name, flags) in expected_flags {
        let v: Vec<Value> = redis::cmd("COMMAND")
            .arg("INFO")
            .arg(name)
            .query(&mut c)
            .unwrap();
        assert_eq!(v.len(), 1);
        let Value::Array(entry) = &v[0] else {
            panic!("{name}: no COMMAND INFO entry: {v:?}");
        };
        assert_eq!(as_bytes(&entry[0]), name.as_bytes());
        assert_eq!(
            (as_int(&entry[3]), as_int(&entry[4]), as_int(&entry[5])),
            (1, 1, 1),
            "{name}: first/last/step"
        );
        let Value::Array(got) = &entry[2] else {
            panic!("{name}: flags {:?}", entry[2]);
        };
        let got: Vec<String> = got
            .iter()
            .map(|f| String::from_utf8(as_bytes(f)).unwrap())
            .collect();
        for f in flags {
            assert!(got.iter().any(|g| g == f), "{name}: flags {got:?} lack {f}");
        }
        if name != "dlock.info" {
            assert!(!got.iter().any(|g| g == "readonly"), "{name}: {got:?}");
        } else {
            assert!(!got.iter().any(|g| g == "write"), "{name}: {got:?}");
        }
    }
}

#[test]
fn command_getkeys_returns_the_resource() {
    let s = Server::start();
    let mut c = s.conn();
    let cases: [&[&str]; 4] = [
        &["DLOCK.ACQUIRE", "res", "tok", "100"],
        &["DLOCK.RELEASE", "res", "tok"],
        &["DLOCK.EXTEND", "res", "tok", "100"],
        &["DLOCK.INFO", "res"],
    ];
    for args in cases {
        let keys: Vec<String> = redis::cmd("COMMAND")
            .arg("GETKEYS")
            .arg(args)
            .query(&mut c)
            .unwrap();
        assert_eq!(keys, vec!["res"], "{args:?}");
    }
}

// ---------------------------------------------------------------- ACL

#[test]
fn acl_key_patterns_apply_to_the_resource() {
    let s = Server::start();
    let mut admin = s.conn();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("locker")
        .arg("on")
        .arg(">pw")
        .arg("~lock:*")
        .arg("+dlock.acquire")
        .arg("+dlock.release")
        .arg("+dlock.info")
        .arg("+dlock.extend")
        .query(&mut admin)
        .unwrap();
    let client = redis::Client::open(format!("redis://locker:pw@127.0.0.1:{}/", s.port())).unwrap();
    let mut c = client
        .get_connection_with_timeout(Duration::from_secs(10))
        .unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let fence = acquire(&mut c, b"lock:a", b"tok", LONG_TTL).expect("allowed key");
    assert_eq!(info(&mut c, b"lock:a").unwrap().fence, fence);
    assert_eq!(extend(&mut c, b"lock:a", b"tok", LONG_TTL), 1);
    for args in [
        &[&b"DLOCK.ACQUIRE"[..], b"other:a", b"tok", b"1000"][..],
        &[b"DLOCK.RELEASE", b"other:a", b"tok"],
        &[b"DLOCK.EXTEND", b"other:a", b"tok", b"1000"],
        &[b"DLOCK.INFO", b"other:a"],
    ] {
        let e = expect_err(&mut c, args);
        assert!(e.starts_with("NOPERM"), "{:?}: {e}", show(args));
    }
    // Not a command the user was granted.
    let e = expect_err(&mut c, &[b"GET", b"lock:a"]);
    assert!(e.starts_with("NOPERM"), "{e}");
    assert!(!exists(&mut admin, b"other:a"));
    assert_eq!(release(&mut c, b"lock:a", b"tok"), 1);
}

// ---------------------------------------------------------------- DLOCK.APPLY

#[test]
fn forged_apply_is_refused_and_changes_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    let held = hold(&mut c, b"res", b"owner");
    let far = (now_us() / 1000 + 3_600_000).to_string();
    let huge_fence = "9000000000000000000";
    for (key, tok) in [(&b"res"[..], &b"attacker"[..]), (b"free", b"attacker")] {
        let args: [&[u8]; 5] = [
            b"DLOCK.APPLY",
            key,
            tok,
            huge_fence.as_bytes(),
            far.as_bytes(),
        ];
        let e = expect_err(&mut c, &args);
        assert!(e.starts_with("ERR DLOCK.APPLY is internal"), "{e}");
    }
    // Malformed too: refused as internal before anything is parsed.
    let e = expect_err(&mut c, &[b"DLOCK.APPLY", b"res"]);
    assert!(e.starts_with("ERR DLOCK.APPLY is internal"), "{e}");
    // Not inside MULTI either (the client surfaces the entry's error).
    let e = redis::pipe()
        .atomic()
        .cmd("DLOCK.APPLY")
        .arg("res")
        .arg("attacker")
        .arg(huge_fence)
        .arg(&far)
        .cmd("PING")
        .query::<Vec<Value>>(&mut c)
        .unwrap_err();
    assert!(
        err_text(&e).starts_with("ERR DLOCK.APPLY is internal"),
        "{}",
        err_text(&e)
    );
    held.assert_unchanged(&mut c);
    assert!(!exists(&mut c, b"free"));
    // The fence clock was not pushed up by the forged fence.
    let f = acquire(&mut c, b"other", b"t", 1_000).unwrap();
    assert!(f > held.fence && f < 9_000_000_000_000_000_000, "{f}");
    assert!((f - now_us()).abs() < 60_000_000, "fence {f} far from now");
}

// ---------------------------------------------------------------- failures write nothing

/// Every way a command can fail against a held lock (and a string key).
fn failed_commands(c: &mut Connection) {
    assert_eq!(acquire(c, b"res", b"other", 10_000), None);
    assert_eq!(release(c, b"res", b"other"), 0);
    assert_eq!(extend(c, b"res", b"other", 10_000), 0);
    assert_eq!(release(c, b"free", b"t"), 0);
    assert_eq!(extend(c, b"free", b"t", 10_000), 0);
    assert_eq!(
        expect_err(c, &[b"DLOCK.ACQUIRE", b"res", b"owner", b"0"]),
        TTL_ERR
    );
    assert_eq!(
        expect_err(c, &[b"DLOCK.EXTEND", b"res", b"owner", b"-5"]),
        TTL_ERR
    );
    assert_eq!(
        expect_err(c, &[b"DLOCK.ACQUIRE", b"res", b"owner", b"10", b"X"]),
        SYNTAX_ERR
    );
    assert_eq!(
        expect_err(c, &[b"DLOCK.RELEASE", b"res", b"owner", b"x"]),
        arity_err("dlock.release")
    );
    assert_eq!(
        expect_err(c, &[b"DLOCK.ACQUIRE", b"str", b"t", b"10"]),
        WRONGTYPE_ERR
    );
    assert_eq!(
        expect_err(c, &[b"DLOCK.RELEASE", b"str", b"t"]),
        WRONGTYPE_ERR
    );
}

fn changes_since_save(c: &mut Connection) -> i64 {
    info_field(c, "persistence", "rdb_changes_since_last_save")
        .expect("rdb_changes_since_last_save")
        .parse()
        .unwrap()
}

#[test]
fn failed_commands_do_not_dirty_the_dataset() {
    let s = Server::start();
    let mut c = s.conn();
    let held = hold(&mut c, b"res", b"owner");
    let _: () = redis::cmd("SET").arg("str").arg("v").query(&mut c).unwrap();
    let before = changes_since_save(&mut c);
    failed_commands(&mut c);
    assert_eq!(changes_since_save(&mut c), before, "a failed command wrote");
    let _: i64 = redis::cmd("DEL").arg("str").query(&mut c).unwrap();
    held.assert_unchanged(&mut c);
    // Successes do count (so save points trigger on lock changes).
    let before = changes_since_save(&mut c);
    assert_eq!(extend(&mut c, b"res", b"owner", LONG_TTL), 1);
    assert_eq!(release(&mut c, b"res", b"owner"), 1);
    assert!(changes_since_save(&mut c) >= before + 2);
}

fn repl_offset(c: &mut Connection) -> i64 {
    info_field(c, "replication", "master_repl_offset")
        .expect("master_repl_offset")
        .parse()
        .unwrap()
}

#[test]
fn failed_commands_propagate_nothing_to_replicas() {
    // No periodic PING into the replication stream during the test.
    let master = Server::builder()
        .arg("--repl-ping-replica-period")
        .arg("3600")
        .arg("--repl-diskless-sync-delay")
        .arg("0")
        .start();
    let replica = Server::builder().replica_of(&master).start();
    replica.wait_for_sync(Duration::from_secs(20));
    let mut c = master.conn();
    let held = hold(&mut c, b"res", b"owner");
    let _: () = redis::cmd("SET").arg("str").arg("v").query(&mut c).unwrap();
    let before = repl_offset(&mut c);
    failed_commands(&mut c);
    assert_eq!(
        repl_offset(&mut c),
        before,
        "a failed command was propagated"
    );
    // The replica holds exactly the master's lock.
    let _: () = redis::cmd("SET")
        .arg("marker")
        .arg("1")
        .query(&mut c)
        .unwrap();
    let mut r = replica.conn();
    wait_until(Duration::from_secs(10), "marker on the replica", || {
        exists(&mut r, b"marker")
    });
    let i = info(&mut r, b"res").expect("lock replicated");
    assert_eq!((i.token, i.fence), (held.token.clone(), held.fence));
    held.assert_unchanged_ttl_only(&mut c);
}
