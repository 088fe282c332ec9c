//! Lock command helpers shared by the test binaries: ACQUIRE / RELEASE /
//! EXTEND (panicking and `try_` variants), DLOCK.INFO parsed from RESP2 and
//! RESP3 into [`LockInfo`], error texts, and waiting on the queue.
//!
//! Resource names and tokens are anything [`Name`]: `&str`, `String`,
//! `&[u8]`, `b"..."`, `Vec<u8>`. Connections are anything `ConnectionLike`,
//! so the same helpers serve plain and cluster connections.
use super::{info_field, wait_until};
use redis::{ConnectionLike, RedisError, RedisResult, Value};
use std::borrow::Cow;
use std::time::Duration;

/// Upper bound for anything that should happen "at once" or "within
/// milliseconds": generous, because the machine may be loaded.
pub const SOON: Duration = Duration::from_secs(5);

/// A resource name or token, text or binary.
pub trait Name {
    fn bytes(&self) -> &[u8];
    /// Lossy text, for panic messages.
    fn text(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(self.bytes())
    }
}
impl Name for str {
    fn bytes(&self) -> &[u8] {
        self.as_bytes()
    }
}
impl Name for String {
    fn bytes(&self) -> &[u8] {
        self.as_bytes()
    }
}
impl Name for [u8] {
    fn bytes(&self) -> &[u8] {
        self
    }
}
impl<const N: usize> Name for [u8; N] {
    fn bytes(&self) -> &[u8] {
        self
    }
}
impl Name for Vec<u8> {
    fn bytes(&self) -> &[u8] {
        self
    }
}
impl<T: Name + ?Sized> Name for &T {
    fn bytes(&self) -> &[u8] {
        (**self).bytes()
    }
}

// ---------------------------------------------------------------- commands

/// `DLOCK.ACQUIRE res tok ttl_ms`: the fence, or None if held by another.
pub fn try_acquire(
    c: &mut impl ConnectionLike,
    res: &(impl Name + ?Sized),
    tok: &(impl Name + ?Sized),
    ttl_ms: u64,
) -> RedisResult<Option<i64>> {
    redis::cmd("DLOCK.ACQUIRE")
        .arg(res.bytes())
        .arg(tok.bytes())
        .arg(ttl_ms)
        .query(c)
}

/// `try_acquire` that must not fail.
pub fn acquire(
    c: &mut impl ConnectionLike,
    res: &(impl Name + ?Sized),
    tok: &(impl Name + ?Sized),
    ttl_ms: u64,
) -> Option<i64> {
    try_acquire(c, res, tok, ttl_ms)
        .unwrap_or_else(|e| panic!("DLOCK.ACQUIRE {} {} {ttl_ms}: {e}", res.text(), tok.text()))
}

/// Acquire that must be granted; returns the fence.
pub fn grant(
    c: &mut impl ConnectionLike,
    res: &(impl Name + ?Sized),
    tok: &(impl Name + ?Sized),
    ttl_ms: u64,
) -> i64 {
    acquire(c, res, tok, ttl_ms)
        .unwrap_or_else(|| panic!("{} not granted to {}", res.text(), tok.text()))
}

/// `DLOCK.ACQUIRE res tok ttl_ms WAIT wait_ms`.
pub fn acquire_wait(
    c: &mut impl ConnectionLike,
    res: &(impl Name + ?Sized),
    tok: &(impl Name + ?Sized),
    ttl_ms: u64,
    wait_ms: u64,
) -> RedisResult<Option<i64>> {
    redis::cmd("DLOCK.ACQUIRE")
        .arg(res.bytes())
        .arg(tok.bytes())
        .arg(ttl_ms)
        .arg("WAIT")
        .arg(wait_ms)
        .query(c)
}

/// `DLOCK.RELEASE res tok`: 1 if released, 0 if not the owner.
pub fn try_release(
    c: &mut impl ConnectionLike,
    res: &(impl Name + ?Sized),
    tok: &(impl Name + ?Sized),
) -> RedisResult<i64> {
    redis::cmd("DLOCK.RELEASE")
        .arg(res.bytes())
        .arg(tok.bytes())
        .query(c)
}

pub fn release(
    c: &mut impl ConnectionLike,
    res: &(impl Name + ?Sized),
    tok: &(impl Name + ?Sized),
) -> i64 {
    try_release(c, res, tok)
        .unwrap_or_else(|e| panic!("DLOCK.RELEASE {} {}: {e}", res.text(), tok.text()))
}

/// `DLOCK.EXTEND res tok ttl_ms`: 1 if extended, 0 if not the owner.
pub fn try_extend(
    c: &mut impl ConnectionLike,
    res: &(impl Name + ?Sized),
    tok: &(impl Name + ?Sized),
    ttl_ms: u64,
) -> RedisResult<i64> {
    redis::cmd("DLOCK.EXTEND")
        .arg(res.bytes())
        .arg(tok.bytes())
        .arg(ttl_ms)
        .query(c)
}

pub fn extend(
    c: &mut impl ConnectionLike,
    res: &(impl Name + ?Sized),
    tok: &(impl Name + ?Sized),
    ttl_ms: u64,
) -> i64 {
    try_extend(c, res, tok, ttl_ms)
        .unwrap_or_else(|e| panic!("DLOCK.EXTEND {} {} {ttl_ms}: {e}", res.text(), tok.text()))
}

pub fn pttl(c: &mut impl ConnectionLike, key: &(impl Name + ?Sized)) -> i64 {
    redis::cmd("PTTL").arg(key.bytes()).query(c).expect("PTTL")
}

pub fn exists(c: &mut impl ConnectionLike, key: &(impl Name + ?Sized)) -> bool {
    let n: i64 = redis::cmd("EXISTS")
        .arg(key.bytes())
        .query(c)
        .expect("EXISTS");
    n == 1
}

// ---------------------------------------------------------------- DLOCK.INFO

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockInfo {
    pub token: Vec<u8>,
    pub fence: i64,
    pub ttl: i64,
    pub waiters: i64,
}

pub fn as_bytes(v: &Value) -> Vec<u8> {
    match v {
        Value::BulkString(b) => b.clone(),
        Value::SimpleString(s) => s.clone().into_bytes(),
        other => panic!("expected a string, got {other:?}"),
    }
}

pub fn as_int(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        other => panic!("expected an integer, got {other:?}"),
    }
}

/// Checks the exact layout of the INFO pairs: token, fence, ttl, waiters,
/// and `priority` (above 0) last only while a request queued there named
/// one (docs/commands/dlock.info.md).
pub fn parse_pairs(pairs: &[(Value, Value)]) -> LockInfo {
    let keys: Vec<Vec<u8>> = pairs.iter().map(|(k, _)| as_bytes(k)).collect();
    let mut want = vec![
        b"token".to_vec(),
        b"fence".to_vec(),
        b"ttl".to_vec(),
        b"waiters".to_vec(),
    ];
    if pairs.len() == 5 {
        want.push(b"priority".to_vec());
        assert!(as_int(&pairs[4].1) > 0, "priority shown only above 0");
    }
    assert_eq!(keys, want, "DLOCK.INFO fields");
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
pub fn parse_info(v: Value) -> Option<LockInfo> {
    match v {
        Value::Nil => None,
        Value::Array(items) => {
            assert!(
                items.len() == 8 || items.len() == 10,
                "RESP2 INFO is a flat array: {items:?}"
            );
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

/// `DLOCK.INFO res`, parsed; a server error (e.g. MOVED) is returned.
pub fn try_info(
    c: &mut impl ConnectionLike,
    res: &(impl Name + ?Sized),
) -> RedisResult<Option<LockInfo>> {
    let v: Value = redis::cmd("DLOCK.INFO").arg(res.bytes()).query(c)?;
    Ok(parse_info(v))
}

pub fn info(c: &mut impl ConnectionLike, res: &(impl Name + ?Sized)) -> Option<LockInfo> {
    try_info(c, res).unwrap_or_else(|e| panic!("DLOCK.INFO {}: {e}", res.text()))
}

/// INFO of a lock that must be held.
pub fn held(c: &mut impl ConnectionLike, res: &(impl Name + ?Sized)) -> LockInfo {
    info(c, res).unwrap_or_else(|| panic!("{} should be held", res.text()))
}

// ---------------------------------------------------------------- errors

/// `CODE detail`, i.e. the error line exactly as the server sent it.
pub fn err_text(e: &RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        _ => format!("{e}"),
    }
}

/// The error text of a reply that must be an error.
pub fn err_of(r: RedisResult<Value>) -> String {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => err_text(&e),
    }
}

// ---------------------------------------------------------------- waiting

/// Queue length on `res` (0 when free).
pub fn waiters(c: &mut impl ConnectionLike, res: &(impl Name + ?Sized)) -> i64 {
    info(c, res).map_or(0, |i| i.waiters)
}

/// Polls `DLOCK.INFO res` until `waiters == n`.
pub fn wait_waiters(c: &mut impl ConnectionLike, res: &(impl Name + ?Sized), n: i64) {
    wait_until(SOON, &format!("waiters on {} == {n}", res.text()), || {
        waiters(c, res) == n
    });
}

pub fn blocked_clients(c: &mut redis::Connection) -> i64 {
    info_field(c, "clients", "blocked_clients")
        .expect("INFO clients blocked_clients")
        .parse()
        .unwrap()
}

pub fn wait_blocked_clients(c: &mut redis::Connection, n: i64) {
    wait_until(SOON, &format!("blocked_clients == {n}"), || {
        blocked_clients(c) == n
    });
}
