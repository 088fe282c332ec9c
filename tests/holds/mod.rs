//! One resource, many holders: `DLOCK.ACQUIRE resource token
//! ttl_ms [SHARED] [LIMIT n] [OWNER owner] [WAIT timeout_ms]` against real
//! servers.
//!
//! - `rw.rs` — 16 clients, random shared and exclusive holds with `WAIT`:
//!   exclusion and shared overlap proven from the replies alone.
//! - `fairness.rs` — no writer starvation, a reentrant read passes a queued
//!   writer, downgrade and upgrade.
//! - `retries.rs` — the same token asking for something else (exact error,
//!   nothing changes, no event, no replication), and reentrancy through the
//!   dropping proxy (lost replies).
//! - `queue.rs` — shared runs granted together, an owner's queued requests,
//!   mixed queues, waiters that leave, `DEL`, a shortened hold, replicas.
//! - `semaphore.rs` — `LIMIT 3` under 20 clients with abandoned permits,
//!   `EXTEND` of an expired permit, an abandoned permit handed over on time.
//! - `quarantine.rs` — a restart quarantine refuses every new hold.
//! - `intervals.rs` — the checks run on client-side hold intervals.
//! - `contract.rs` — MULTI/EXEC, Lua, WRONGTYPE, bad input, the INFO list
//!   form in RESP2 and RESP3, fences.
//! - `edges.rs` — where two paths meet: a retry and a grant in one turn, a
//!   pending handoff and the token limit, `RESTORE` of impossible holds,
//!   `INFO`'s form after a companion hold's deadline.
//!
//! Hold intervals are measured on the client: a hold is live on the server
//! at least from when its grant reply was received until its `RELEASE` was
//! sent (when that `RELEASE` answered 1), so overlaps found between such
//! intervals really happened, and their absence is implied by the server's.
//! Every wait has a deadline. Tests whose timing matters take `quiet()`
//! (`tests/main.rs`), so no load test of any suite runs beside them.
//!
//! - `durable/` — holds through everything that copies, moves or rebuilds a
//!   lock value.
//! - `big/` — a resource with very many holds.
use crate::common;
use crate::proxy;
use crate::quiet;

mod big;
mod contract;
pub(crate) mod durable;
mod edges;
mod fairness;
pub(crate) mod intervals;
mod quarantine;
mod queue;
mod retries;
mod rw;
mod semaphore;

use common::lock::*;
use common::*;
use intervals::*;
use redis::{Connection, ConnectionLike, RedisResult, Value};
use std::sync::mpsc::{channel, Receiver, TryRecvError};
use std::thread;
use std::time::{Duration, Instant};

const LONG_TTL: u64 = 60_000;
const TOKEN_IN_USE: &str =
    "ERR token already holds this resource with another mode, LIMIT or OWNER";
const UPGRADE_REFUSED: &str =
    "ERR upgrade refused: other owners hold the resource (an upgrade never waits)";
const SHARED_SEMAPHORE: &str = "ERR SHARED cannot be combined with LIMIT above 1";
const OWNER_SEMAPHORE: &str = "ERR OWNER cannot be combined with LIMIT above 1";
const EMPTY_OWNER: &str = "ERR owner must not be empty";
const LIMIT_RANGE: &str = "ERR LIMIT must be an integer from 1 to 1048576";
const SYNTAX: &str = "ERR syntax error";
const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

fn limit_mismatch(limit: u32) -> String {
    format!("ERR the resource is held with LIMIT {limit}: requests must ask for the same LIMIT")
}

fn connect(url: &str) -> Connection {
    connect_within(url, Duration::from_secs(10)).unwrap_or_else(|e| panic!("connect {url}: {e}"))
}

// ---------------------------------------------------------------- ACQUIRE

/// One `DLOCK.ACQUIRE` with its options.
#[derive(Clone, Debug)]
struct Acq {
    res: String,
    token: String,
    ttl: u64,
    shared: bool,
    limit: Option<u32>,
    owner: Option<String>,
    wait: Option<u64>,
}

fn acq(res: &str, token: &str, ttl: u64) -> Acq {
    Acq {
        res: res.into(),
        token: token.into(),
        ttl,
        shared: false,
        limit: None,
        owner: None,
        wait: None,
    }
}

impl Acq {
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
    fn cmd(&self) -> redis::Cmd {
        let mut c = redis::cmd("DLOCK.ACQUIRE");
        c.arg(&self.res).arg(&self.token).arg(self.ttl);
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
        c
    }
    fn send(&self, c: &mut impl ConnectionLike) -> RedisResult<Option<i64>> {
        self.cmd().query(c)
    }
    /// Must be granted: the fence.
    fn grant(&self, c: &mut impl ConnectionLike) -> i64 {
        match self.send(c) {
            Ok(Some(f)) => f,
            other => panic!("{self:?}: expected a grant, got {other:?}"),
        }
    }
    /// Must answer nil.
    fn busy(&self, c: &mut impl ConnectionLike) {
        match self.send(c) {
            Ok(None) => {}
            other => panic!("{self:?}: expected nil, got {other:?}"),
        }
    }
    /// Must fail: the error text.
    fn error(&self, c: &mut impl ConnectionLike) -> String {
        match self.send(c) {
            Err(e) => err_text(&e),
            other => panic!("{self:?}: expected an error, got {other:?}"),
        }
    }
    /// Sends on its own thread and connection; see `Pending`.
    fn spawn(&self, url: &str) -> Pending {
        let mut conn = connect(url);
        conn.set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let id: i64 = redis::cmd("CLIENT").arg("ID").query(&mut conn).unwrap();
        let (tx, rx) = channel();
        let me = self.clone();
        thread::spawn(move || {
            let r = me.send(&mut conn);
            let _ = tx.send((r, Instant::now(), conn));
        });
        Pending {
            what: format!("{self:?}"),
            id,
            rx,
        }
    }
}

type Outcome = (RedisResult<Option<i64>>, Instant, Connection);

/// An `ACQUIRE` sent on its own thread: its reply and when it arrived.
struct Pending {
    what: String,
    /// Its connection's `CLIENT ID`.
    id: i64,
    rx: Receiver<Outcome>,
}

impl Pending {
    fn outcome(&self, within: Duration) -> Outcome {
        self.rx
            .recv_timeout(within)
            .unwrap_or_else(|e| panic!("{}: no reply within {within:?}: {e:?}", self.what))
    }
    /// Must be granted within `SOON`: the fence, when the reply arrived
    /// and the connection.
    fn granted(&self) -> (i64, Instant, Connection) {
        match self.outcome(SOON) {
            (Ok(Some(f)), at, c) => (f, at, c),
            (other, ..) => panic!("{}: expected a grant, got {other:?}", self.what),
        }
    }
    /// No reply yet.
    fn assert_pending(&self) {
        match self.rx.try_recv() {
            Err(TryRecvError::Empty) => {}
            Ok((r, ..)) => panic!("{} must still wait, got {r:?}", self.what),
            Err(e) => panic!("{}: thread gone: {e:?}", self.what),
        }
    }
}

// ---------------------------------------------------------------- DLOCK.INFO

/// One hold as `DLOCK.INFO` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct HoldInfo {
    token: String,
    owner: String,
    fence: i64,
    ttl: i64,
    mode: String,
}

/// The list form of `DLOCK.INFO`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Holds {
    kind: String,
    limit: i64,
    waiters: i64,
    holds: Vec<HoldInfo>,
}

impl Holds {
    fn tokens(&self) -> Vec<&str> {
        self.holds.iter().map(|h| h.token.as_str()).collect()
    }
    fn hold(&self, token: &str) -> &HoldInfo {
        let h = self.holds.iter().find(|h| h.token == token);
        h.unwrap_or_else(|| panic!("no hold {token} in {self:?}"))
    }
    /// Same holds (owner, fence, mode, order) and queue; no TTL raised or
    /// cut by more than a loaded machine's delay.
    fn assert_same(&self, now: &Holds) {
        let strip = |h: &Holds| {
            let mut h = h.clone();
            h.holds.iter_mut().for_each(|x| x.ttl = 0);
            h
        };
        assert_eq!(strip(now), strip(self), "the resource changed");
        for (a, b) in self.holds.iter().zip(&now.holds) {
            assert!(
                b.ttl <= a.ttl && b.ttl > a.ttl - 20_000,
                "ttl of {} moved: {} -> {}",
                a.token,
                a.ttl,
                b.ttl
            );
        }
    }
}

/// What `DLOCK.INFO` shows.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Shown {
    Free,
    Plain(LockInfo),
    Holds(Holds),
}

fn text(v: &Value) -> String {
    String::from_utf8(as_bytes(v)).expect("utf-8")
}

/// The pairs of a RESP3 map or a RESP2 flat array.
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

fn keys_of(p: &[(Value, Value)]) -> Vec<String> {
    p.iter().map(|(k, _)| text(k)).collect()
}

fn parse_hold(v: &Value) -> HoldInfo {
    let p = pairs(v);
    assert_eq!(keys_of(&p), ["token", "owner", "fence", "ttl", "mode"]);
    HoldInfo {
        token: text(&p[0].1),
        owner: text(&p[1].1),
        fence: as_int(&p[2].1),
        ttl: as_int(&p[3].1),
        mode: text(&p[4].1),
    }
}

/// Parses any `DLOCK.INFO` reply, checking the exact field order.
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
    Shown::Holds(Holds {
        kind: text(&p[0].1),
        limit: as_int(&p[1].1),
        waiters: as_int(&p[2].1),
        holds,
    })
}

fn shown(c: &mut impl ConnectionLike, res: &str) -> Shown {
    let v: Value = redis::cmd("DLOCK.INFO")
        .arg(res)
        .query(c)
        .unwrap_or_else(|e| panic!("DLOCK.INFO {res}: {e}"));
    parse_shown(v)
}

/// `DLOCK.INFO` of a resource that must answer in the list form.
fn holds(c: &mut impl ConnectionLike, res: &str) -> Holds {
    match shown(c, res) {
        Shown::Holds(h) => h,
        other => panic!("{res}: expected the list form, got {other:?}"),
    }
}

/// Requests queued on `res`, whatever form `DLOCK.INFO` answers in.
fn queue_len(c: &mut impl ConnectionLike, res: &str) -> i64 {
    match shown(c, res) {
        Shown::Free => 0,
        Shown::Plain(i) => i.waiters,
        Shown::Holds(h) => h.waiters,
    }
}

/// Polls until `n` requests are queued on `res`.
fn wait_queue(c: &mut impl ConnectionLike, res: &str, n: i64) {
    wait_until(SOON, &format!("{n} queued on {res}"), || {
        queue_len(c, res) == n
    });
}

/// Joins a scoped thread, re-raising its panic.
fn join<T>(h: thread::ScopedJoinHandle<'_, T>) -> T {
    h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))
}
