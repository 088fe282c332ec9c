//! Blocking acquire: `DLOCK.ACQUIRE res token ttl_ms WAIT timeout_ms`.
//!
//! Every test starts its own server(s). Blocked clients run on their own
//! threads, each with its own connection, and report back over channels.
//! Ordering is never established by sleeping: before acting, the main thread
//! polls `DLOCK.INFO res` until `waiters` shows the expected queue length.
//! Every wait has a deadline, so a hung module fails the test instead of
//! hanging it.
use crate::common;

mod barging;
mod expiry;
mod flush_swap;
mod given_up;
mod handoff;
mod held_back;
mod leaving;
mod races;
mod replica;
mod requests;
mod stress;

use common::lock::*;
use common::*;
use redis::{Connection, RedisResult, Value};
use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::{Arc, Barrier};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

const LONG_TTL: u64 = 60_000;
const WAIT_ERR: &str = "ERR timeout_ms must be an integer from 0 to 140737488355328";
const SYNTAX_ERR: &str = "ERR syntax error";
const WRONGTYPE_ERR: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

// ---------------------------------------------------------------- helpers

fn client_id(c: &mut Connection) -> i64 {
    redis::cmd("CLIENT").arg("ID").query(c).expect("CLIENT ID")
}

/// What a blocked client got back, when, and its connection (None if the
/// reply was an I/O error, i.e. the connection is gone).
struct Outcome {
    reply: RedisResult<Option<i64>>,
    at: Instant,
    conn: Option<Connection>,
}

impl Outcome {
    fn fence(&self) -> i64 {
        match &self.reply {
            Ok(Some(f)) => *f,
            other => panic!("expected a grant, got {other:?}"),
        }
    }
    fn error(&self) -> String {
        match &self.reply {
            Err(e) => err_text(e),
            other => panic!("expected an error reply, got {other:?}"),
        }
    }
}

/// A client on its own thread and connection that sends one
/// `DLOCK.ACQUIRE res tok ttl WAIT wait` when told to.
struct Waiter {
    id: i64,
    tok: String,
    go: Option<std::sync::mpsc::Sender<()>>,
    rx: Receiver<Outcome>,
    handle: Option<JoinHandle<()>>,
}

impl Waiter {
    /// Connects (and learns its CLIENT ID) but does not send yet.
    fn prepare(url: &str, res: &str, tok: &str, ttl: u64, wait: u64) -> Waiter {
        let mut conn = connect_within(url, Duration::from_secs(10)).expect("connect");
        // Longer than any WAIT used here, so the read never times out first.
        conn.set_read_timeout(Some(Duration::from_secs(40)))
            .unwrap();
        let id = client_id(&mut conn);
        let (go_tx, go_rx) = channel::<()>();
        let (tx, rx) = channel();
        let (res, tok2) = (res.to_string(), tok.to_string());
        let handle = thread::spawn(move || {
            if go_rx.recv().is_err() {
                return;
            }
            let reply = acquire_wait(&mut conn, &res, &tok2, ttl, wait);
            let at = Instant::now();
            let conn = match &reply {
                Err(e) if e.is_io_error() || e.is_connection_dropped() => None,
                _ => Some(conn),
            };
            let _ = tx.send(Outcome { reply, at, conn });
        });
        Waiter {
            id,
            tok: tok.to_string(),
            go: Some(go_tx),
            rx,
            handle: Some(handle),
        }
    }
    fn send(&mut self) {
        self.go.take().expect("sent twice").send(()).unwrap();
    }
    /// Connects and sends at once.
    fn start(url: &str, res: &str, tok: &str, ttl: u64, wait: u64) -> Waiter {
        let mut w = Waiter::prepare(url, res, tok, ttl, wait);
        w.send();
        w
    }
    /// Starts a waiter and returns once the queue on `res` has grown to
    /// `queued` (checked on `c`), so queue order is known.
    fn queue(c: &mut Connection, url: &str, res: &str, tok: &str, queued: i64) -> Waiter {
        let w = Waiter::start(url, res, tok, 10_000, 20_000);
        wait_waiters(c, res, queued);
        w
    }
    fn outcome(&self, within: Duration) -> Outcome {
        match self.rx.recv_timeout(within) {
            Ok(o) => o,
            Err(e) => panic!("waiter {} got no reply within {within:?}: {e:?}", self.tok),
        }
    }
    /// Asserts the waiter has had no reply yet.
    fn assert_pending(&self) {
        match self.rx.try_recv() {
            Err(std::sync::mpsc::TryRecvError::Empty) => {}
            Ok(o) => panic!("waiter {} must still wait, got {:?}", self.tok, o.reply),
            Err(e) => panic!("waiter {} thread gone: {e:?}", self.tok),
        }
    }
    fn granted(&self) -> Outcome {
        let o = self.outcome(SOON);
        o.fence();
        o
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        // A waiter never told to go just exits; others end when the server
        // (dropped after them or killed) closes the socket. Do not join:
        // a still-blocked thread must not hang a failing test.
        self.go.take();
        self.handle.take();
    }
}

/// Holds `res` for `tok` with a long lease; returns the fence.
fn hold(c: &mut Connection, res: &str, tok: &str) -> i64 {
    acquire(c, res, tok, LONG_TTL).expect("free lock must be granted")
}

fn assert_owner(c: &mut Connection, res: &str, tok: &str, fence: i64) -> LockInfo {
    let i = info(c, res).unwrap_or_else(|| panic!("{res} must be held by {tok}"));
    assert_eq!(i.token, tok.as_bytes(), "owner of {res}");
    assert_eq!(i.fence, fence, "fence of {res}");
    i
}

fn select(c: &mut Connection, db: i64) {
    let _: () = redis::cmd("SELECT").arg(db).query(c).unwrap();
}

fn swapdb(c: &mut Connection) {
    let _: () = redis::cmd("SWAPDB").arg(0).arg(1).query(c).unwrap();
}

fn exec_values(c: &mut Connection, pipe: &redis::Pipeline) -> Vec<Value> {
    pipe.query(c).expect("MULTI/EXEC")
}
