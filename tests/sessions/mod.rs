//! Sessions: `DLOCK.SESSION OPEN|KEEPALIVE|CLOSE|KILL|INFO|LIST|HOLDS` and
//! holds and waits bound to a session with `SESSION id`
//! (docs/commands/dlock.session.md is the contract).
//!
//! - `contract.rs` — every subcommand, its replies and errors, replicas,
//!   ACL; `bound.rs` — `SESSION id` on `ACQUIRE`/`MACQUIRE` of every kind,
//!   retries, `EXTEND`, `RELEASE`; `paging.rs` — `LIST`/`HOLDS` pages.
//! - `ending.rs` — a session ends (ttl, `CLOSE`, `KILL`, its `BIND`
//!   connection): every hold released and handed on, bound waiters answered
//!   `NOSESSION`, the lock-delay, counters and events.
//! - `races.rs` — an end in the same event-loop turn as a grant, an
//!   `ACQUIRE`, a keep-alive or a connection's close.
//! - `durability.rs` — RDB, AOF, replicas, promotion, `DUMP`/`RESTORE`.
//! - `memory.rs` — thousands of sessions ended each way: `used_memory` flat.
//! - `big.rs` — one session with 100,000 holds ended by `CLOSE`.
//!
//! A session ends in one command but its holds are released by later
//! event-loop turns, so every check of a release polls, with a deadline.
use crate::common;
use crate::quiet;

mod big;
mod bound;
mod contract;
mod durability;
mod ending;
mod memory;
mod paging;
mod races;

use common::lock::*;
use common::*;
use redis::{Connection, ConnectionLike, RedisResult, Value};
use std::sync::mpsc::{channel, Receiver, TryRecvError};
use std::time::{Duration, Instant};

const NOSESSION: &str =
    "NOSESSION no such session (it ended or was never opened): its holds are released";
const OTHER_SESSION: &str = "ERR the token holds this resource under another session (or none)";
const BOUND: &str =
    "ERR the hold is bound to a session: keep the session alive (DLOCK.SESSION KEEPALIVE)";
const READONLY: &str =
    "READONLY dlock: locks are granted, extended and released on the master only";
const ID_LENGTH: &str = "ERR session id must be 1 to 256 bytes";
const TTL_RANGE: &str = "ERR ttl_ms must be an integer from 1 to 140737488355328";
const LOCKDELAY_RANGE: &str = "ERR LOCKDELAY must be an integer from 0 to 60000";
const BIND_NEEDS_CLIENT: &str =
    "ERR BIND needs a client connection (not a script or MULTI from another client)";
const SYNTAX: &str = "ERR syntax error";
/// How long the release of an ended session's holds may take on a loaded
/// machine (it is bounded batches in later event-loop turns).
const RELEASED: Duration = Duration::from_secs(20);

fn connect(url: &str) -> Connection {
    connect_within(url, Duration::from_secs(10)).unwrap_or_else(|e| panic!("connect {url}: {e}"))
}

// ---------------------------------------------------------------- sessions

/// `DLOCK.SESSION sub args...`.
fn session_cmd(sub: &str, args: &[&str]) -> redis::Cmd {
    let mut c = redis::cmd("DLOCK.SESSION");
    c.arg(sub).arg(args);
    c
}

/// The error text of a command that must fail.
fn refused(c: &mut impl ConnectionLike, cmd: &redis::Cmd) -> String {
    err_of(cmd.query(c))
}

/// `OPEN id ttl extra...`: 1 (new) or 0 (kept alive).
fn open_with(c: &mut impl ConnectionLike, id: &str, ttl: u64, extra: &[&str]) -> i64 {
    let ttl = ttl.to_string();
    let mut args = vec![id, ttl.as_str()];
    args.extend_from_slice(extra);
    session_cmd("OPEN", &args)
        .query(c)
        .unwrap_or_else(|e| panic!("OPEN {id} {ttl} {extra:?}: {e}"))
}

/// Opens a new session that must not exist yet.
fn open(c: &mut impl ConnectionLike, id: &str, ttl: u64) {
    assert_eq!(open_with(c, id, ttl, &[]), 1, "OPEN {id}: a new session");
}

fn try_keepalive(c: &mut impl ConnectionLike, id: &str, ttl: Option<u64>) -> RedisResult<i64> {
    let mut cmd = session_cmd("KEEPALIVE", &[id]);
    if let Some(t) = ttl {
        cmd.arg(t);
    }
    cmd.query(c)
}

fn keepalive(c: &mut impl ConnectionLike, id: &str, ttl: Option<u64>) -> i64 {
    try_keepalive(c, id, ttl).unwrap_or_else(|e| panic!("KEEPALIVE {id}: {e}"))
}

fn close(c: &mut impl ConnectionLike, id: &str) -> i64 {
    session_cmd("CLOSE", &[id]).query(c).expect("CLOSE")
}

fn kill(c: &mut impl ConnectionLike, id: &str) -> i64 {
    session_cmd("KILL", &[id]).query(c).expect("KILL")
}

/// `DLOCK.SESSION INFO`, parsed (its field order checked).
#[derive(Debug, Clone, PartialEq, Eq)]
struct SessionInfo {
    id: Vec<u8>,
    ttl: i64,
    deadline: i64,
    session_ttl: i64,
    lock_delay: i64,
    bound: i64,
    holds: i64,
    waits: i64,
}

/// The pairs of a RESP3 map or of a RESP2 flat array.
fn pairs(v: &Value) -> Vec<(Value, Value)> {
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

fn text(v: &Value) -> String {
    String::from_utf8_lossy(&as_bytes(v)).into_owned()
}

fn keys_of(p: &[(Value, Value)]) -> Vec<String> {
    p.iter().map(|(k, _)| text(k)).collect()
}

fn parse_session(v: Value) -> Option<SessionInfo> {
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

fn session_info(c: &mut impl ConnectionLike, id: &str) -> Option<SessionInfo> {
    let v: Value = session_cmd("INFO", &[id]).query(c).expect("SESSION INFO");
    parse_session(v)
}

/// INFO of a session that must be live.
fn live(c: &mut impl ConnectionLike, id: &str) -> SessionInfo {
    session_info(c, id).unwrap_or_else(|| panic!("session {id} must be live"))
}

/// Polls until the session is gone.
fn wait_ended(c: &mut impl ConnectionLike, id: &str) {
    wait_until(RELEASED, &format!("session {id} to end"), || {
        session_info(c, id).is_none()
    });
}

/// The cursor of a page: nil, or what to pass as `AFTER`.
fn cursor(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::Nil => None,
        Value::Int(n) => Some(n.to_string().into_bytes()),
        other => Some(as_bytes(other)),
    }
}

/// `[next, [items]]`.
fn page(v: Value) -> (Option<Vec<u8>>, Vec<Value>) {
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
fn list_page(
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
fn list_all(c: &mut impl ConnectionLike, pattern: Option<&str>, count: Option<u64>) -> Vec<String> {
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
struct Bound {
    db: i64,
    resource: String,
    token: String,
}

fn bound(db: i64, resource: &str, token: &str) -> Bound {
    Bound {
        db,
        resource: resource.into(),
        token: token.into(),
    }
}

fn holds_page(
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
fn holds_all(c: &mut impl ConnectionLike, id: &str, count: Option<u64>) -> Vec<Bound> {
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

// ---------------------------------------------------------------- ACQUIRE

/// One `DLOCK.ACQUIRE` (or, with `set`, `DLOCK.MACQUIRE`), maybe bound.
#[derive(Clone, Debug)]
struct Req {
    set: Vec<String>,
    token: String,
    ttl: String,
    shared: bool,
    limit: Option<u32>,
    owner: Option<String>,
    wait: Option<u64>,
    session: Option<String>,
}

/// `DLOCK.ACQUIRE res token 0`: add `.session(id)`.
fn req(res: &str, token: &str) -> Req {
    mreq(&[res], token)
}

/// `DLOCK.MACQUIRE n res... token 0` (one resource: `DLOCK.ACQUIRE`).
fn mreq(set: &[&str], token: &str) -> Req {
    Req {
        set: set.iter().map(|s| s.to_string()).collect(),
        token: token.into(),
        ttl: "0".into(),
        shared: false,
        limit: None,
        owner: None,
        wait: None,
        session: None,
    }
}

impl Req {
    fn session(mut self, id: &str) -> Self {
        self.session = Some(id.into());
        self
    }
    fn ttl(mut self, ttl: &str) -> Self {
        self.ttl = ttl.into();
        self
    }
    fn shared(mut self) -> Self {
        self.shared = true;
        self
    }
    fn limit(mut self, n: u32) -> Self {
        self.limit = Some(n);
        self
    }
    fn owner(mut self, o: &str) -> Self {
        self.owner = Some(o.into());
        self
    }
    fn wait(mut self, ms: u64) -> Self {
        self.wait = Some(ms);
        self
    }
    /// A set of more than one resource goes as `MACQUIRE`.
    fn cmd(&self) -> redis::Cmd {
        let mut c = if self.set.len() == 1 {
            let mut c = redis::cmd("DLOCK.ACQUIRE");
            c.arg(&self.set[0]);
            c
        } else {
            let mut c = redis::cmd("DLOCK.MACQUIRE");
            c.arg(self.set.len()).arg(&self.set);
            c
        };
        c.arg(&self.token).arg(&self.ttl);
        if self.shared {
            c.arg("SHARED");
        }
        if let Some(n) = self.limit {
            c.arg("LIMIT").arg(n);
        }
        if let Some(o) = &self.owner {
            c.arg("OWNER").arg(o);
        }
        if let Some(w) = self.wait {
            c.arg("WAIT").arg(w);
        }
        if let Some(s) = &self.session {
            c.arg("SESSION").arg(s);
        }
        c
    }
    fn send(&self, c: &mut impl ConnectionLike) -> RedisResult<Option<i64>> {
        self.cmd().query(c)
    }
    fn grant(&self, c: &mut impl ConnectionLike) -> i64 {
        match self.send(c) {
            Ok(Some(f)) => f,
            other => panic!("{self:?}: expected a grant, got {other:?}"),
        }
    }
    fn busy(&self, c: &mut impl ConnectionLike) {
        match self.send(c) {
            Ok(None) => {}
            other => panic!("{self:?}: expected nil, got {other:?}"),
        }
    }
    fn error(&self, c: &mut impl ConnectionLike) -> String {
        match self.send(c) {
            Err(e) => err_text(&e),
            other => panic!("{self:?}: expected an error, got {other:?}"),
        }
    }
    /// Sends on a new connection of its own thread (it may block).
    fn spawn(&self, s: &Server) -> Blocked {
        Blocked::send(connect(&s.url()), self.cmd(), format!("{self:?}"))
    }
}

/// A command sent on its own thread and connection, its reply collected.
struct Blocked {
    what: String,
    /// Its connection's `CLIENT ID`.
    id: i64,
    rx: Receiver<(RedisResult<Option<i64>>, Instant, Connection)>,
}

impl Blocked {
    /// Sends `cmd` on `conn` (which may own a `BIND` session).
    fn send(mut conn: Connection, cmd: redis::Cmd, what: String) -> Blocked {
        conn.set_read_timeout(Some(Duration::from_secs(90)))
            .unwrap();
        let id: i64 = redis::cmd("CLIENT").arg("ID").query(&mut conn).unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let r = cmd.query(&mut conn);
            let _ = tx.send((r, Instant::now(), conn));
        });
        Blocked { what, id, rx }
    }
    /// The reply, when it arrived, and the connection (a `BIND` session
    /// on it ends when it is dropped).
    fn outcome(&self, within: Duration) -> (RedisResult<Option<i64>>, Instant, Connection) {
        self.rx
            .recv_timeout(within)
            .unwrap_or_else(|e| panic!("{}: no reply within {within:?}: {e:?}", self.what))
    }
    /// Granted within `within`: the fence and when the reply arrived.
    fn granted_within(&self, within: Duration) -> (i64, Instant) {
        match self.outcome(within) {
            (Ok(Some(f)), at, _) => (f, at),
            (other, ..) => panic!("{}: expected a grant, got {other:?}", self.what),
        }
    }
    fn granted(&self) -> i64 {
        self.granted_within(RELEASED).0
    }
    /// Answered with an error within `RELEASED`: its text.
    fn error(&self) -> String {
        match self.outcome(RELEASED) {
            (Err(e), ..) => err_text(&e),
            (other, ..) => panic!("{}: expected an error, got {other:?}", self.what),
        }
    }
    fn assert_pending(&self) {
        match self.rx.try_recv() {
            Err(TryRecvError::Empty) => {}
            Ok((r, ..)) => panic!("{} must still wait, got {r:?}", self.what),
            Err(e) => panic!("{}: thread gone: {e:?}", self.what),
        }
    }
}

// ---------------------------------------------------------------- DLOCK.INFO

/// One hold as the list form of `DLOCK.INFO` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct HoldShown {
    token: String,
    owner: String,
    fence: i64,
    ttl: i64,
    mode: String,
    session: Option<String>,
}

/// What `DLOCK.INFO` shows.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Shown {
    Free,
    Plain(LockInfo),
    List {
        kind: String,
        limit: i64,
        waiters: i64,
        holds: Vec<HoldShown>,
    },
}

impl Shown {
    /// The holds, whatever the form (a plain lock is one exclusive hold).
    fn holds(&self) -> Vec<HoldShown> {
        match self {
            Shown::Free => vec![],
            Shown::Plain(i) => vec![HoldShown {
                token: String::from_utf8_lossy(&i.token).into_owned(),
                owner: String::from_utf8_lossy(&i.token).into_owned(),
                fence: i.fence,
                ttl: i.ttl,
                mode: "exclusive".into(),
                session: None,
            }],
            Shown::List { holds, .. } => holds.clone(),
        }
    }
    fn hold(&self, token: &str) -> HoldShown {
        let h = self.holds().into_iter().find(|h| h.token == token);
        h.unwrap_or_else(|| panic!("no hold of {token} in {self:?}"))
    }
    fn tokens(&self) -> Vec<String> {
        self.holds().into_iter().map(|h| h.token).collect()
    }
}

fn parse_hold(v: &Value) -> HoldShown {
    let p = pairs(v);
    let keys = keys_of(&p);
    let base = ["token", "owner", "fence", "ttl", "mode"];
    let session = if keys.len() == 6 {
        assert_eq!(keys, [&base[..], &["session"]].concat(), "hold fields");
        Some(text(&p[5].1))
    } else {
        assert_eq!(keys, base, "hold fields");
        None
    };
    HoldShown {
        token: text(&p[0].1),
        owner: text(&p[1].1),
        fence: as_int(&p[2].1),
        ttl: as_int(&p[3].1),
        mode: text(&p[4].1),
        session,
    }
}

fn parse_shown(v: Value) -> Shown {
    if v == Value::Nil {
        return Shown::Free;
    }
    let p = pairs(&v);
    if keys_of(&p).first().map(String::as_str) == Some("token") {
        return Shown::Plain(parse_pairs(&p));
    }
    assert_eq!(keys_of(&p), ["kind", "limit", "waiters", "holds"]);
    let holds = match &p[3].1 {
        Value::Array(hs) => hs.iter().map(parse_hold).collect(),
        other => panic!("holds must be an array, got {other:?}"),
    };
    Shown::List {
        kind: text(&p[0].1),
        limit: as_int(&p[1].1),
        waiters: as_int(&p[2].1),
        holds,
    }
}

fn shown(c: &mut impl ConnectionLike, res: &str) -> Shown {
    let v: Value = redis::cmd("DLOCK.INFO")
        .arg(res)
        .query(c)
        .unwrap_or_else(|e| panic!("DLOCK.INFO {res}: {e}"));
    parse_shown(v)
}

/// `res` holds `token`'s hold bound to `id`, shown as the contract says:
/// the list form, ttl -1, the session named, and no TTL on the key.
fn assert_bound(c: &mut impl ConnectionLike, res: &str, token: &str, id: &str) -> HoldShown {
    let s = shown(c, res);
    assert!(
        matches!(s, Shown::List { .. }),
        "{res}: the list form: {s:?}"
    );
    let h = s.hold(token);
    assert_eq!(h.session.as_deref(), Some(id), "{res}: {h:?}");
    assert_eq!(h.ttl, -1, "{res}: a bound hold has no deadline: {h:?}");
    assert_eq!(pttl(c, res), -1, "{res}: no TTL on the key of a bound hold");
    h
}

/// Requests queued on `res`, whatever the form.
fn queued(c: &mut impl ConnectionLike, res: &str) -> i64 {
    match shown(c, res) {
        Shown::Free => 0,
        Shown::Plain(i) => i.waiters,
        Shown::List { waiters, .. } => waiters,
    }
}

fn wait_queued(c: &mut impl ConnectionLike, res: &str, n: i64) {
    wait_until(SOON, &format!("{n} queued on {res}"), || {
        queued(c, res) == n
    });
}

// ---------------------------------------------------------------- counters

/// `dlock_<name>` of `INFO dlock`.
fn stat(c: &mut Connection, name: &str) -> i64 {
    info_field(c, "dlock", &format!("dlock_{name}"))
        .unwrap_or_else(|| panic!("INFO dlock has no dlock_{name}"))
        .parse()
        .unwrap()
}

const END_COUNTERS: [&str; 5] = [
    "sessions_opened",
    "sessions_closed",
    "sessions_expired",
    "sessions_killed",
    "sessions_disconnected",
];

fn end_counters(c: &mut Connection) -> [i64; 5] {
    END_COUNTERS.map(|n| stat(c, n))
}

/// Polls until no session hold is bound or being released.
fn wait_no_session_holds(c: &mut Connection) {
    wait_until(RELEASED, "no session holds left", || {
        stat(c, "session_holds") == 0 && stat(c, "session_holds_ending") == 0
    });
}

/// A server whose restarts start no quarantine (tests that restart to see
/// what survives; the quarantine has tests of its own).
fn no_quarantine() -> ServerBuilder {
    Server::builder()
        .arg("--dlock.restart-quarantine")
        .arg("off")
}

/// `WAIT 1 5000` must report the replica.
fn wait_replica(m: &mut Connection) {
    let n: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(m).unwrap();
    assert_eq!(n, 1, "WAIT 1 5000");
}

/// A connection subscribed to the keyspace channels of `keys` in db 0,
/// with lock events (class `d`) on.
fn events(s: &Server, keys: &[&str]) -> Connection {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("Kd")
        .query(&mut s.conn())
        .unwrap();
    let mut sub = s.conn();
    sub.set_read_timeout(Some(SOON)).unwrap();
    let channels: Vec<String> = keys.iter().map(|k| format!("__keyspace@0__:{k}")).collect();
    let mut cmd = redis::cmd("SUBSCRIBE");
    cmd.arg(&channels);
    sub.send_packed_command(&cmd.get_packed_command()).unwrap();
    for _ in keys {
        let _confirm: Value = sub.recv_response().unwrap();
    }
    sub
}

/// The next event on a connection from `events`: (key, event).
fn next_event(sub: &mut Connection) -> (String, String) {
    match sub.recv_response().expect("an event within 5 s") {
        Value::Array(parts) | Value::Push { data: parts, .. } => {
            assert_eq!(parts.len(), 3, "{parts:?}");
            let channel = text(&parts[1]);
            let key = channel
                .strip_prefix("__keyspace@0__:")
                .unwrap_or_else(|| panic!("channel {channel}"))
                .to_string();
            (key, text(&parts[2]))
        }
        other => panic!("unexpected message {other:?}"),
    }
}

/// Events until `n` have come for `key` (events of other keys are kept
/// in order in the returned list too).
fn events_until(sub: &mut Connection, n: usize, key: &str) -> Vec<(String, String)> {
    let mut got = Vec::new();
    while got.iter().filter(|(k, _)| k == key).count() < n {
        got.push(next_event(sub));
        assert!(got.len() < 1000, "event flood: {got:?}");
    }
    got
}

/// The events of `key` in `got`.
fn of(got: &[(String, String)], key: &str) -> Vec<String> {
    got.iter()
        .filter(|(k, _)| k == key)
        .map(|(_, e)| e.clone())
        .collect()
}

/// The error text of an error inside a list of replies (`EXEC`'s).
fn value_err(v: &Value) -> String {
    match v {
        Value::ServerError(e) => match e.details() {
            Some(d) => format!("{} {d}", e.code()),
            None => e.code().to_string(),
        },
        other => panic!("expected an error, got {other:?}"),
    }
}
