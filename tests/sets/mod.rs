//! Sets of resources under load: `DLOCK.MACQUIRE numkeys
//! resource [resource ...] token ttl_ms [SHARED] [WAIT timeout_ms]`,
//! `DLOCK.MRELEASE` and `DLOCK.MEXTEND` against real servers.
//!
//! - `atomic.rs` — all or nothing: random set and single requests from 12
//!   clients while a checker takes `MULTI`/`DLOCK.INFO`/`EXEC` snapshots of
//!   every resource; no snapshot shows part of a set.
//! - `liveness.rs` — no set waits forever: 20 clients that hold nothing while
//!   they wait lock random subsets with `WAIT 0` for 20 s; every request is
//!   granted, no two owners overlap, grants in every second.
//! - `order.rs` — FIFO across single and set requests (a reserved member is
//!   not passed), and hold-and-wait with a bounded `WAIT`.
//! - `leaving.rs` — a queued set that times out, is unblocked or killed
//!   leaves every queue at once, and the requests behind it proceed.
//! - `races.rs` — a set grant and its waiter's end in one event-loop turn:
//!   revoked on every member, counted once.
//! - `transactions.rs` — a transaction of `DLOCK.INFO`s reads one instant,
//!   across a waiter's timeout and (Redis 7.2+, Valkey) a shared set's end.
//! - `shown.rs` — `DLOCK.INFO` parsed, and `MULTI`/`EXEC` snapshots.
//! - `cost.rs` — a cascade of grants (a chain of shared sets, 10,000
//!   shared waiters) is served a bounded part per event-loop turn: the
//!   server time of the release that starts it does not grow with it.
//!
//! Hold intervals are measured on the client (see `../holds/intervals.rs`):
//! a hold is live on the server at least from when its grant reply was
//! received until its release was sent (when that release answered for
//! every member). Every wait has a deadline. Every test of this module's
//! own files takes `quiet()` (`tests/main.rs`): the load tests and the
//! timing tests of every suite never run side by side, so a 2-core machine
//! only ever carries one of them.
//!
//! - `contract.rs` — the commands' replies and errors, one test per rule.
//! - `durable/` — sets through replicas, the AOF, restarts, a real cluster,
//!   ACL key patterns, and memory.
use crate::common;
use crate::holds::intervals;
use crate::proxy;
use crate::quiet;

mod atomic;
mod contract;
mod cost;
mod durable;
mod leaving;
mod liveness;
mod order;
mod races;
mod shown;
mod transactions;

use common::lock::*;
use common::*;
use redis::{Connection, ConnectionLike, RedisResult, Value};
use shown::*;
use std::sync::mpsc::{channel, Receiver, TryRecvError};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

const LONG_TTL: u64 = 60_000;
/// The `WAIT` of requests that must not time out in a test.
const LONG_WAIT: u64 = 60_000;

fn connect(url: &str) -> Connection {
    connect_within(url, Duration::from_secs(10)).unwrap_or_else(|e| panic!("connect {url}: {e}"))
}

fn client_id(c: &mut Connection) -> i64 {
    redis::cmd("CLIENT").arg("ID").query(c).expect("CLIENT ID")
}

// ---------------------------------------------------------------- requests

/// One `DLOCK.MACQUIRE` (or, with one member and `single`, one
/// `DLOCK.ACQUIRE`).
#[derive(Clone, Debug)]
struct Req {
    members: Vec<String>,
    token: String,
    ttl: u64,
    shared: bool,
    wait: Option<u64>,
    /// Sent as `DLOCK.ACQUIRE` (one member).
    single: bool,
}

/// `DLOCK.MACQUIRE` of `members` for `token`.
fn set(members: &[&str], token: &str) -> Req {
    Req {
        members: members.iter().map(|m| m.to_string()).collect(),
        token: token.into(),
        ttl: LONG_TTL,
        shared: false,
        wait: None,
        single: false,
    }
}

/// `DLOCK.ACQUIRE` of `res` for `token`.
fn one(res: &str, token: &str) -> Req {
    Req {
        single: true,
        ..set(&[res], token)
    }
}

impl Req {
    fn shared(mut self) -> Self {
        self.shared = true;
        self
    }
    fn wait(mut self, ms: u64) -> Self {
        self.wait = Some(ms);
        self
    }
    fn cmd(&self) -> redis::Cmd {
        let mut c;
        if self.single {
            c = redis::cmd("DLOCK.ACQUIRE");
            c.arg(&self.members[0]);
        } else {
            c = redis::cmd("DLOCK.MACQUIRE");
            c.arg(self.members.len()).arg(&self.members);
        }
        c.arg(&self.token).arg(self.ttl);
        if self.shared {
            c.arg("SHARED");
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
    /// The release for this request: `DLOCK.RELEASE` or `DLOCK.MRELEASE`.
    fn release_cmd(&self) -> redis::Cmd {
        release_cmd(&self.members, &self.token, self.single)
    }
    /// Releases every member: must release all of them.
    fn release(&self, c: &mut impl ConnectionLike) {
        let n: i64 = self.release_cmd().query(c).unwrap();
        let want = if self.single { 1 } else { self.members.len() };
        assert_eq!(n as usize, want, "{self:?}: released");
    }
    /// Sends on its own thread and connection; see `Pending`.
    fn spawn(&self, url: &str) -> Pending {
        let mut conn = connect(url);
        conn.set_read_timeout(Some(Duration::from_secs(90)))
            .unwrap();
        let id = client_id(&mut conn);
        let (tx, rx) = channel();
        let me = self.clone();
        let sent = Instant::now();
        thread::spawn(move || {
            let reply = me.send(&mut conn);
            let conn = match &reply {
                Err(e) if e.is_io_error() || e.is_connection_dropped() => None,
                _ => Some(conn),
            };
            let _ = tx.send(Outcome {
                reply,
                at: Instant::now(),
                conn,
            });
        });
        Pending {
            what: format!("{self:?}"),
            id,
            sent,
            rx,
        }
    }
}

/// `DLOCK.RELEASE res token` (`single`) or `DLOCK.MRELEASE`.
fn release_cmd(members: &[String], token: &str, single: bool) -> redis::Cmd {
    let mut c;
    if single {
        c = redis::cmd("DLOCK.RELEASE");
        c.arg(&members[0]);
    } else {
        c = redis::cmd("DLOCK.MRELEASE");
        c.arg(members.len()).arg(members);
    }
    c.arg(token);
    c
}

/// A reply to a request sent on its own thread, when it arrived, and the
/// connection (None when the reply was an I/O error: it is gone).
struct Outcome {
    reply: RedisResult<Option<i64>>,
    at: Instant,
    conn: Option<Connection>,
}

/// A request sent on its own thread and connection.
struct Pending {
    what: String,
    /// Its connection's `CLIENT ID`.
    id: i64,
    /// When it was handed to its thread (just before sending).
    sent: Instant,
    rx: Receiver<Outcome>,
}

impl Pending {
    fn outcome(&self, within: Duration) -> Outcome {
        self.rx
            .recv_timeout(within)
            .unwrap_or_else(|e| panic!("{}: no reply within {within:?}: {e:?}", self.what))
    }
    /// Must be granted within `SOON`: the fence and the connection.
    fn granted(&self) -> (i64, Connection) {
        match self.outcome(SOON) {
            Outcome {
                reply: Ok(Some(f)),
                conn: Some(c),
                ..
            } => (f, c),
            o => panic!("{}: expected a grant, got {:?}", self.what, o.reply),
        }
    }
    /// No reply yet.
    fn assert_pending(&self) {
        match self.rx.try_recv() {
            Err(TryRecvError::Empty) => {}
            Ok(o) => panic!("{} must still wait, got {:?}", self.what, o.reply),
            Err(e) => panic!("{}: thread gone: {e:?}", self.what),
        }
    }
}

/// `dlock_<name>` of `INFO dlock`.
fn counter(c: &mut Connection, name: &str) -> i64 {
    info_field(c, "dlock", &format!("dlock_{name}"))
        .unwrap_or_else(|| panic!("INFO dlock has no dlock_{name}"))
        .parse()
        .unwrap()
}

/// Nothing held or queued on `resources`, no waiter anywhere.
fn assert_all_free(c: &mut Connection, resources: &[&str]) {
    wait_blocked_clients(c, 0);
    for r in resources {
        assert_eq!(shown(c, r), Shown::Free, "{r} left held or reserved");
    }
    assert_eq!(counter(c, "waiters"), 0, "dlock_waiters");
}

/// Joins a scoped thread, re-raising its panic.
fn join<T>(h: thread::ScopedJoinHandle<'_, T>) -> T {
    h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))
}

// ---------------------------------------------------------------- load

/// The resources of the load tests.
const RESOURCES: [&str; 6] = ["r0", "r1", "r2", "r3", "r4", "r5"];

/// The load tests' seed: `SETS_SEED`, else a fixed one.
fn seed() -> u64 {
    std::env::var("SETS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5e75_0012)
}

/// `k` distinct resources out of `RESOURCES`, in random order.
fn random_members(rng: &mut proxy::Rng, k: usize) -> Vec<String> {
    let mut pool: Vec<&str> = RESOURCES.to_vec();
    (0..k)
        .map(|_| {
            pool.remove(rng.below(pool.len() as u64) as usize)
                .to_string()
        })
        .collect()
}

/// Random microseconds below `max`, as a duration.
fn micros(rng: &mut proxy::Rng, max: u64) -> Duration {
    Duration::from_micros(rng.below(max))
}
