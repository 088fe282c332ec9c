//! The session subcommands for the tests: sending them, and parsing
//! `INFO`, `LIST` and `HOLDS` (their exact forms checked).
use super::*;
// ---------------------------------------------------------------- sessions

/// `DLOCK.SESSION sub args...`.
pub(super) fn session_cmd(sub: &str, args: &[&str]) -> redis::Cmd {
    let mut c = redis::cmd("DLOCK.SESSION");
    c.arg(sub).arg(args);
    c
}

/// The error text of a command that must fail.
pub(super) fn refused(c: &mut impl ConnectionLike, cmd: &redis::Cmd) -> String {
    err_of(cmd.query(c))
}

/// `OPEN id ttl extra...`: 1 (new) or 0 (kept alive).
pub(super) fn open_with(c: &mut impl ConnectionLike, id: &str, ttl: u64, extra: &[&str]) -> i64 {
    let ttl = ttl.to_string();
    let mut args = vec![id, ttl.as_str()];
    args.extend_from_slice(extra);
    session_cmd("OPEN", &args)
        .query(c)
        .unwrap_or_else(|e| panic!("OPEN {id} {ttl} {extra:?}: {e}"))
}

/// Opens a new session that must not exist yet.
pub(super) fn open(c: &mut impl ConnectionLike, id: &str, ttl: u64) {
    assert_eq!(open_with(c, id, ttl, &[]), 1, "OPEN {id}: a new session");
}

pub(super) fn try_keepalive(
    c: &mut impl ConnectionLike,
    id: &str,
    ttl: Option<u64>,
) -> RedisResult<i64> {
    let mut cmd = session_cmd("KEEPALIVE", &[id]);
    if let Some(t) = ttl {
        cmd.arg(t);
    }
    cmd.query(c)
}

pub(super) fn keepalive(c: &mut impl ConnectionLike, id: &str, ttl: Option<u64>) -> i64 {
    try_keepalive(c, id, ttl).unwrap_or_else(|e| panic!("KEEPALIVE {id}: {e}"))
}

pub(super) fn close(c: &mut impl ConnectionLike, id: &str) -> i64 {
    session_cmd("CLOSE", &[id]).query(c).expect("CLOSE")
}

pub(super) fn kill(c: &mut impl ConnectionLike, id: &str) -> i64 {
    session_cmd("KILL", &[id]).query(c).expect("KILL")
}

/// `DLOCK.SESSION INFO`, parsed (its field order checked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SessionInfo {
    pub(super) id: Vec<u8>,
    pub(super) ttl: i64,
    pub(super) deadline: i64,
    pub(super) session_ttl: i64,
    pub(super) lock_delay: i64,
    pub(super) bound: i64,
    pub(super) holds: i64,
    pub(super) waits: i64,
}

/// The pairs of a RESP3 map or of a RESP2 flat array.
pub(super) fn pairs(v: &Value) -> Vec<(Value, Value)> {
    match v {
        Value::Map(p) => p.clone(),
        Value::Array(items) => {
            assert!(items.len() % 2 == 0, "odd flat map {items:?}");
            items
                .chunks(2)
                .map(|p| (p[0].clone(), p[1].clone()))
                .collect()
        }
        other => panic!("expected a map, got {other:?}"),
    }
}

pub(super) fn text(v: &Value) -> String {
    String::from_utf8_lossy(&as_bytes(v)).into_owned()
}

pub(super) fn keys_of(p: &[(Value, Value)]) -> Vec<String> {
    p.iter().map(|(k, _)| text(k)).collect()
}

pub(super) fn parse_session(v: Value) -> Option<SessionInfo> {
    if v == Value::Nil {
        return None;
    }
    let p = pairs(&v);
    assert_eq!(
        keys_of(&p),
        [
            "id",
            "ttl",
            "deadline",
            "session-ttl",
            "lock-delay",
            "bound",
            "holds",
            "waits"
        ],
        "DLOCK.SESSION INFO fields"
    );
    let n = |i: usize| as_int(&p[i].1);
    Some(SessionInfo {
        id: as_bytes(&p[0].1),
        ttl: n(1),
        deadline: n(2),
        session_ttl: n(3),
        lock_delay: n(4),
        bound: n(5),
        holds: n(6),
        waits: n(7),
    })
}

pub(super) fn session_info(c: &mut impl ConnectionLike, id: &str) -> Option<SessionInfo> {
    let v: Value = session_cmd("INFO", &[id]).query(c).expect("SESSION INFO");
    parse_session(v)
}

/// INFO of a session that must be live.
pub(super) fn live(c: &mut impl ConnectionLike, id: &str) -> SessionInfo {
    session_info(c, id).unwrap_or_else(|| panic!("session {id} must be live"))
}

/// Polls until the session is gone.
pub(super) fn wait_ended(c: &mut impl ConnectionLike, id: &str) {
    wait_until(RELEASED, &format!("session {id} to end"), || {
        session_info(c, id).is_none()
    });
}

/// The cursor of a page: nil, or what to pass as `AFTER`.
pub(super) fn cursor(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::Nil => None,
        Value::Int(n) => Some(n.to_string().into_bytes()),
        other => Some(as_bytes(other)),
    }
}

/// `[next, [items]]`.
pub(super) fn page(v: Value) -> (Option<Vec<u8>>, Vec<Value>) {
    match v {
        Value::Array(mut parts) if parts.len() == 2 => {
            let items = match parts.pop().unwrap() {
                Value::Array(items) => items,
                other => panic!("a page's items must be an array, got {other:?}"),
            };
            (cursor(&parts[0]), items)
        }
        other => panic!("expected [next, [items]], got {other:?}"),
    }
}

/// One `LIST` page: `next` and the ids.
pub(super) fn list_page(
    c: &mut impl ConnectionLike,
    after: Option<&[u8]>,
    pattern: Option<&str>,
    count: Option<u64>,
) -> (Option<Vec<u8>>, Vec<String>) {
    let mut cmd = session_cmd("LIST", &[]);
    if let Some(a) = after {
        cmd.arg("AFTER").arg(a);
    }
    if let Some(p) = pattern {
        cmd.arg("MATCH").arg(p);
    }
    if let Some(n) = count {
        cmd.arg("COUNT").arg(n);
    }
    let (next, items) = page(cmd.query(c).expect("SESSION LIST"));
    (next, items.iter().map(text).collect())
}

/// Every id `LIST` gives, page by page (at most 10,000 pages).
pub(super) fn list_all(
    c: &mut impl ConnectionLike,
    pattern: Option<&str>,
    count: Option<u64>,
) -> Vec<String> {
    let mut all = Vec::new();
    let mut after: Option<Vec<u8>> = None;
    for _ in 0..10_000 {
        let (next, ids) = list_page(c, after.as_deref(), pattern, count);
        if let Some(n) = count {
            assert!(ids.len() as u64 <= n, "a page above COUNT {n}: {ids:?}");
        }
        all.extend(ids);
        match next {
            None => return all,
            Some(n) => after = Some(n),
        }
    }
    panic!("LIST never ended");
}

/// One bound hold as `HOLDS` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Bound {
    pub(super) db: i64,
    pub(super) resource: String,
    pub(super) token: String,
}

pub(super) fn bound(db: i64, resource: &str, token: &str) -> Bound {
    Bound {
        db,
        resource: resource.into(),
        token: token.into(),
    }
}

pub(super) fn holds_page(
    c: &mut impl ConnectionLike,
    id: &str,
    after: Option<&[u8]>,
    count: Option<u64>,
) -> (Option<Vec<u8>>, Vec<Bound>) {
    let mut cmd = session_cmd("HOLDS", &[id]);
    if let Some(a) = after {
        cmd.arg("AFTER").arg(a);
    }
    if let Some(n) = count {
        cmd.arg("COUNT").arg(n);
    }
    let (next, items) = page(cmd.query(c).expect("SESSION HOLDS"));
    assert!(items.len() % 3 == 0, "three entries per hold: {items:?}");
    let holds = items
        .chunks(3)
        .map(|h| Bound {
            db: as_int(&h[0]),
            resource: text(&h[1]),
            token: text(&h[2]),
        })
        .collect();
    (next, holds)
}

/// Every hold of a session, page by page.
pub(super) fn holds_all(c: &mut impl ConnectionLike, id: &str, count: Option<u64>) -> Vec<Bound> {
    let mut all = Vec::new();
    let mut after: Option<Vec<u8>> = None;
    for _ in 0..10_000 {
        let (next, hs) = holds_page(c, id, after.as_deref(), count);
        if let Some(n) = count {
            assert!(hs.len() as u64 <= n, "a page above COUNT {n}");
        }
        all.extend(hs);
        match next {
            None => return all,
            Some(n) => after = Some(n),
        }
    }
    panic!("HOLDS never ended");
}
