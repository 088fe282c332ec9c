//! Blocking acquire: `DLOCK.ACQUIRE res token ttl_ms WAIT timeout_ms`.
//!
//! Every test starts its own server(s). Blocked clients run on their own
//! threads, each with its own connection, and report back over channels.
//! Ordering is never established by sleeping: before acting, the main thread
//! polls `DLOCK.INFO res` until `waiters` shows the expected queue length.
//! Every wait has a deadline, so a hung module fails the test instead of
//! hanging it.
mod common;

use common::*;
use redis::{Connection, RedisError, RedisResult, Value};
use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::{Arc, Barrier};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

const LONG_TTL: u64 = 60_000;
/// Upper bound for anything that should happen "at once" or "within
/// milliseconds": generous, because the machine may be loaded.
const SOON: Duration = Duration::from_secs(5);
const WAIT_ERR: &str = "ERR timeout_ms must be an integer from 0 to 140737488355328";
const SYNTAX_ERR: &str = "ERR syntax error";
const WRONGTYPE_ERR: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

// ---------------------------------------------------------------- helpers

/// `CODE detail`, i.e. the error line exactly as the server sent it.
fn err_text(e: &RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        _ => format!("{e}"),
    }
}

fn acquire(c: &mut Connection, res: &str, tok: &str, ttl: u64) -> Option<i64> {
    redis::cmd("DLOCK.ACQUIRE")
        .arg(res)
        .arg(tok)
        .arg(ttl)
        .query(c)
        .expect("DLOCK.ACQUIRE")
}

fn acquire_wait(
    c: &mut Connection,
    res: &str,
    tok: &str,
    ttl: u64,
    wait: u64,
) -> RedisResult<Option<i64>> {
    redis::cmd("DLOCK.ACQUIRE")
        .arg(res)
        .arg(tok)
        .arg(ttl)
        .arg("WAIT")
        .arg(wait)
        .query(c)
}

fn release(c: &mut Connection, res: &str, tok: &str) -> i64 {
    redis::cmd("DLOCK.RELEASE")
        .arg(res)
        .arg(tok)
        .query(c)
        .expect("DLOCK.RELEASE")
}

fn client_id(c: &mut Connection) -> i64 {
    redis::cmd("CLIENT").arg("ID").query(c).expect("CLIENT ID")
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct LockInfo {
    token: String,
    fence: i64,
    ttl: i64,
    waiters: i64,
}

fn as_string(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        other => panic!("expected a string, got {other:?}"),
    }
}

fn as_int(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        other => panic!("expected an integer, got {other:?}"),
    }
}

/// Parses a DLOCK.INFO reply: nil, a RESP2 flat array or a RESP3 map.
fn parse_info(v: Value) -> Option<LockInfo> {
    let pairs: Vec<(Value, Value)> = match v {
        Value::Nil => return None,
        Value::Array(items) => items
            .chunks(2)
            .map(|p| (p[0].clone(), p[1].clone()))
            .collect(),
        Value::Map(pairs) => pairs,
        other => panic!("unexpected DLOCK.INFO reply {other:?}"),
    };
    let field = |name: &str| {
        pairs
            .iter()
            .find(|(k, _)| as_string(k) == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("DLOCK.INFO has no {name}: {pairs:?}"))
    };
    Some(LockInfo {
        token: as_string(&field("token")),
        fence: as_int(&field("fence")),
        ttl: as_int(&field("ttl")),
        waiters: as_int(&field("waiters")),
    })
}

fn info(c: &mut Connection, res: &str) -> Option<LockInfo> {
    let v: Value = redis::cmd("DLOCK.INFO")
        .arg(res)
        .query(c)
        .expect("DLOCK.INFO");
    parse_info(v)
}

fn waiters(c: &mut Connection, res: &str) -> i64 {
    info(c, res).map_or(0, |i| i.waiters)
}

/// Polls `DLOCK.INFO res` until `waiters == n`.
fn wait_waiters(c: &mut Connection, res: &str, n: i64) {
    let mut last = -1;
    wait_until(SOON, &format!("waiters on {res} == {n}"), || {
        last = waiters(c, res);
        last == n
    });
}

fn blocked_clients(c: &mut Connection) -> i64 {
    info_field(c, "clients", "blocked_clients")
        .expect("INFO clients blocked_clients")
        .parse()
        .unwrap()
}

fn wait_blocked_clients(c: &mut Connection, n: i64) {
    wait_until(SOON, &format!("blocked_clients == {n}"), || {
        blocked_clients(c) == n
    });
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
    assert_eq!(i.token, tok, "owner of {res}");
    assert_eq!(i.fence, fence, "fence of {res}");
    i
}

fn exec_values(c: &mut Connection, pipe: &redis::Pipeline) -> Vec<Value> {
    pipe.query(c).expect("MULTI/EXEC")
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

// ---------------------------------------------------------------- grants

#[test]
fn release_hands_off_to_waiter() {
    let s = Server::start();
    let mut holder = s.conn();
    let mut obs = s.conn();
    let url = s.url();
    const ROUNDS: usize = 20;
    // One persistent waiter thread: per round it waits for "go", blocks,
    // stamps the reply, releases, then reports.
    let (go_tx, go_rx) = channel::<usize>();
    let (tx, rx) = channel::<(usize, RedisResult<Option<i64>>, Instant)>();
    let waiter = thread::spawn(move || {
        let mut c = connect_within(&url, Duration::from_secs(10)).unwrap();
        while let Ok(round) = go_rx.recv() {
            let tok = format!("waiter{round}");
            let r = acquire_wait(&mut c, "res", &tok, 10_000, 10_000);
            let at = Instant::now();
            if let Ok(Some(_)) = r {
                assert_eq!(release(&mut c, "res", &tok), 1);
            }
            tx.send((round, r, at)).unwrap();
        }
    });
    let mut lat = Vec::with_capacity(ROUNDS);
    for round in 0..ROUNDS {
        let htok = format!("holder{round}");
        let hf = hold(&mut holder, "res", &htok);
        go_tx.send(round).unwrap();
        wait_waiters(&mut obs, "res", 1);
        let t0 = Instant::now();
        assert_eq!(release(&mut holder, "res", &htok), 1);
        let (r_round, r, at) = rx.recv_timeout(SOON).expect("waiter reply");
        assert_eq!(r_round, round);
        let f = r.expect("waiter reply").expect("waiter must be granted");
        assert!(f > hf, "round {round}: fence {f} must exceed holder's {hf}");
        lat.push(at - t0);
    }
    drop(go_tx);
    waiter.join().unwrap();
    let mut sorted = lat.clone();
    let med = median(&mut sorted);
    eprintln!(
        "handoff latency over {ROUNDS} rounds: median {med:?}, min {:?}, max {:?}",
        sorted[0],
        sorted[ROUNDS - 1]
    );
    assert!(
        med < Duration::from_millis(10),
        "median handoff latency {med:?} (all: {lat:?})"
    );
}

#[test]
fn fifo_order() {
    let s = Server::start();
    let mut c = s.conn();
    let hf = hold(&mut c, "res", "holder");
    let ws: Vec<Waiter> = (0..6)
        .map(|i| Waiter::queue(&mut c, &s.url(), "res", &format!("w{i}"), i + 1))
        .collect();
    assert_owner(&mut c, "res", "holder", hf);
    let mut prev_tok = "holder".to_string();
    let mut prev_fence = hf;
    for (i, w) in ws.iter().enumerate() {
        assert_eq!(release(&mut c, "res", &prev_tok), 1, "release {prev_tok}");
        // Handoff happens inside RELEASE: the owner is already the head.
        let now = info(&mut c, "res").expect("lock must be handed off");
        assert_eq!(now.token, w.tok, "grant #{i} went to the wrong waiter");
        assert_eq!(now.waiters, 5 - i as i64);
        let f = w.granted().fence();
        assert_eq!(f, now.fence);
        assert!(
            f > prev_fence,
            "fences must increase: {prev_fence} then {f}"
        );
        for later in &ws[i + 1..] {
            later.assert_pending();
        }
        prev_tok = w.tok.clone();
        prev_fence = f;
    }
    assert_eq!(release(&mut c, "res", &prev_tok), 1);
    assert_eq!(info(&mut c, "res"), None);
    assert_eq!(blocked_clients(&mut c), 0);
}

/// Waits for `w`'s grant after the lease (that ends `lease` after `t0`)
/// runs out; checks the grant came after the lease end and long before the
/// waiter's own 5 s timeout.
fn check_expiry_grant(w: &Waiter, t0: Instant, lease: Duration, what: &str) -> i64 {
    let o = w.outcome(Duration::from_secs(6));
    let f = o.fence();
    let after = o.at - t0;
    eprintln!("{what}: waiter granted {after:?} after a {lease:?} lease started");
    assert!(
        after >= lease - Duration::from_millis(50),
        "{what}: granted after {after:?}, before the {lease:?} lease ended"
    );
    assert!(
        after < lease + Duration::from_millis(1200),
        "{what}: granted only after {after:?} (lease {lease:?})"
    );
    f
}

#[test]
fn expiry_hands_off() {
    let s = Server::start();
    let mut c = s.conn();
    let mut obs = s.conn();
    let lease = Duration::from_millis(300);
    // The waiter must be queued before the 300 ms lease ends; its connection
    // is made in advance, and on a badly stalled machine the round is
    // retried rather than misjudged.
    let mut done = false;
    for attempt in 0..3 {
        let res = format!("res{attempt}");
        let mut w = Waiter::prepare(&s.url(), &res, "waiter", 10_000, 5_000);
        let t0 = Instant::now(); // before the holder's ACQUIRE is sent
        let hf = acquire(&mut c, &res, "holder", 300).expect("grant");
        w.send();
        let queued_by = t0 + Duration::from_millis(200);
        let mut queued = false;
        while Instant::now() < queued_by {
            if waiters(&mut obs, &res) == 1 {
                queued = true;
                break;
            }
            thread::sleep(Duration::from_millis(2));
        }
        if !queued {
            eprintln!("attempt {attempt}: waiter not queued within 200 ms, retrying");
            continue;
        }
        let f = check_expiry_grant(&w, t0, lease, "ACQUIRE 300");
        assert!(f > hf);
        assert_owner(&mut c, &res, "waiter", f);
        done = true;
        break;
    }
    assert!(
        done,
        "the waiter never got queued before a 300 ms lease ended"
    );

    // Same, but the short lease is set by EXTEND while the waiter is queued.
    let hf = hold(&mut c, "ext", "holder");
    let w = Waiter::start(&s.url(), "ext", "waiter", 10_000, 5_000);
    wait_waiters(&mut c, "ext", 1);
    let t0 = Instant::now();
    let n: i64 = redis::cmd("DLOCK.EXTEND")
        .arg("ext")
        .arg("holder")
        .arg(300)
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 1);
    let f = check_expiry_grant(&w, t0, lease, "EXTEND 300");
    assert!(f > hf);
    assert_owner(&mut c, "ext", "waiter", f);
    assert_eq!(blocked_clients(&mut c), 0);
}

/// A lease shortened while a waiter is queued must be handed off at its new
/// deadline by the module's timer, not whenever Redis's active-expire cycle
/// happens to notice the key. `--hz 1` makes that cycle run about once a
/// second, so a late handoff cannot hide inside the margin. Nothing reads
/// the key while waiting (a read would expire it lazily and hide the bug).
fn check_shortened_lease(what: &str, shorten: impl FnOnce(&mut Connection) -> i64) {
    let s = Server::builder().arg("--hz").arg("1").start();
    let mut c = s.conn();
    let hf = hold(&mut c, "res", "holder");
    let w = Waiter::start(&s.url(), "res", "waiter", 10_000, 5_000);
    wait_waiters(&mut c, "res", 1);
    let t0 = Instant::now();
    assert_eq!(shorten(&mut c), 1, "{what}");
    let o = w.outcome(Duration::from_secs(6));
    let after = o.at - t0;
    eprintln!("{what} with waiter queued (hz 1): granted {after:?} after the command");
    let f = o.fence();
    assert!(f > hf);
    assert!(
        after >= Duration::from_millis(250),
        "{what}: granted after {after:?}, before the 300 ms lease ended"
    );
    assert!(
        after < Duration::from_millis(500),
        "{what}: 300 ms lease handed off only after {after:?}: the expiry timer \
         was not re-armed for the shorter lease"
    );
    assert_owner(&mut c, "res", "waiter", f);
}

#[test]
fn extend_shortened_lease_hands_off_at_new_deadline() {
    check_shortened_lease("DLOCK.EXTEND res holder 300", |c| {
        redis::cmd("DLOCK.EXTEND")
            .arg("res")
            .arg("holder")
            .arg(300)
            .query(c)
            .unwrap()
    });
}

/// An admin's PEXPIRE bypasses the module (README, "Admin overrides"), so no
/// module timer follows it: the shortened lease is handed over when Redis's
/// own expiry notices the key (active expiry, about every 1000/hz ms) or when
/// any client touches it. With `--hz 1` that is within ~1 s; it is never
/// early and never lost.
#[test]
fn pexpire_shortened_lease_hands_off_by_redis_expiry() {
    let s = Server::builder().arg("--hz").arg("1").start();
    let mut c = s.conn();
    let hf = hold(&mut c, "res", "holder");
    let w = Waiter::start(&s.url(), "res", "waiter", 10_000, 5_000);
    wait_waiters(&mut c, "res", 1);
    let t0 = Instant::now();
    let n: i64 = redis::cmd("PEXPIRE")
        .arg("res")
        .arg(300)
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 1);
    let o = w.outcome(Duration::from_secs(6));
    let after = o.at - t0;
    eprintln!("PEXPIRE res 300 with waiter queued (hz 1): granted {after:?} after the command");
    assert!(after >= Duration::from_millis(250), "early: {after:?}");
    assert!(after < Duration::from_millis(2500), "late: {after:?}");
    let f = o.fence();
    assert!(f > hf);
    assert_owner(&mut c, "res", "waiter", f);
}

#[test]
fn reacquire_shortened_lease_hands_off_at_new_deadline() {
    check_shortened_lease("DLOCK.ACQUIRE res holder 300 (owner refresh)", |c| {
        let f = acquire(c, "res", "holder", 300);
        assert!(f.is_some(), "the owner's re-ACQUIRE must succeed");
        1
    });
}

/// Lengthening works: the timer that fires at the old deadline must not
/// grant early, and the waiter is granted at the new one.
#[test]
fn extend_lengthened_lease_hands_off_at_new_deadline() {
    let s = Server::builder().arg("--hz").arg("1").start();
    let mut c = s.conn();
    let hf = acquire(&mut c, "res", "holder", 300).expect("grant");
    let w = Waiter::start(&s.url(), "res", "waiter", 10_000, 5_000);
    wait_waiters(&mut c, "res", 1);
    let t0 = Instant::now();
    let n: i64 = redis::cmd("DLOCK.EXTEND")
        .arg("res")
        .arg("holder")
        .arg(800)
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 1, "EXTEND must succeed while the lease is still running");
    let o = w.outcome(Duration::from_secs(6));
    let after = o.at - t0;
    eprintln!("EXTEND 800 with waiter queued (hz 1): granted {after:?} after the command");
    assert!(
        after >= Duration::from_millis(750),
        "granted early: {after:?}"
    );
    assert!(
        after < Duration::from_millis(1000),
        "granted late: {after:?}"
    );
    let f = o.fence();
    assert!(f > hf);
    assert_owner(&mut c, "res", "waiter", f);
}

/// While the server must not produce writes (`CLIENT PAUSE WRITE`, which a
/// manual failover also uses), a deferred handoff waits: a grant is a write
/// that replicas would miss. It happens as soon as the pause ends.
#[test]
fn paused_writes_hold_back_expiry_handoff() {
    let s = Server::start();
    let mut c = s.conn();
    let hf = acquire(&mut c, "res", "holder", 200).expect("grant");
    let w = Waiter::start(&s.url(), "res", "waiter", 10_000, 5_000);
    wait_waiters(&mut c, "res", 1);
    let t0 = Instant::now();
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1000)
        .arg("WRITE")
        .query(&mut c)
        .unwrap();
    let o = w.outcome(Duration::from_secs(6));
    let after = o.at - t0;
    eprintln!("lease ended 200 ms into a 1000 ms write pause: granted after {after:?}");
    assert!(
        after >= Duration::from_millis(950),
        "granted during the write pause: {after:?}"
    );
    assert!(after < Duration::from_millis(3000), "late: {after:?}");
    let f = o.fence();
    assert!(f > hf);
    assert_owner(&mut c, "res", "waiter", f);
}

#[test]
fn wait_times_out() {
    let s = Server::start();
    let mut c = s.conn();
    let hf = hold(&mut c, "res", "holder");
    let mut w = s.conn();
    let t0 = Instant::now();
    let r = acquire_wait(&mut w, "res", "waiter", 10_000, 200).unwrap();
    let took = t0.elapsed();
    eprintln!("WAIT 200 timed out after {took:?}");
    assert_eq!(r, None, "WAIT 200 on a held lock must time out with nil");
    assert!(
        took >= Duration::from_millis(190),
        "timed out early: {took:?}"
    );
    assert!(took < Duration::from_secs(2), "timed out late: {took:?}");
    let i = assert_owner(&mut c, "res", "holder", hf);
    assert_eq!(i.waiters, 0);
    assert_eq!(blocked_clients(&mut c), 0);
    // The timed-out waiter is never granted later.
    assert_eq!(release(&mut c, "res", "holder"), 1);
    assert_eq!(info(&mut c, "res"), None);

    // Free lock: WAIT n and WAIT 0 grant at once.
    for (res, wait) in [("free1", 200), ("free2", 0), ("free3", 1 << 47)] {
        let t0 = Instant::now();
        let f = acquire_wait(&mut w, res, "tok", 10_000, wait)
            .unwrap()
            .unwrap_or_else(|| panic!("WAIT {wait} on a free lock must grant"));
        assert!(
            t0.elapsed() < Duration::from_secs(1),
            "WAIT {wait} on a free lock took {:?}",
            t0.elapsed()
        );
        let i = assert_owner(&mut c, res, "tok", f);
        assert!(i.ttl > 9_000 && i.ttl <= 10_000, "ttl {}", i.ttl);
        assert_eq!(i.waiters, 0);
    }
    assert_eq!(blocked_clients(&mut c), 0);
}

/// Holder + waiters A and B; `free` removes the key; A must be granted
/// within milliseconds and B must keep waiting.
fn check_admin_free_wakes_head(what: &str, free: impl FnOnce(&mut Connection)) {
    let s = Server::start();
    let mut c = s.conn();
    let hf = hold(&mut c, "res", "holder");
    let a = Waiter::queue(&mut c, &s.url(), "res", "A", 1);
    let b = Waiter::queue(&mut c, &s.url(), "res", "B", 2);
    let t0 = Instant::now();
    free(&mut c);
    let oa = a.granted();
    let took = oa.at - t0;
    eprintln!("{what}: head waiter granted after {took:?}");
    assert!(took < Duration::from_secs(1), "{what}: grant took {took:?}");
    let fa = oa.fence();
    assert!(fa > hf, "{what}: fence {fa} must exceed {hf}");
    let i = assert_owner(&mut c, "res", "A", fa);
    assert_eq!(i.waiters, 1, "{what}: B must still be queued");
    b.assert_pending();
    assert_eq!(release(&mut c, "res", "A"), 1);
    let fb = b.granted().fence();
    assert!(fb > fa);
    assert_owner(&mut c, "res", "B", fb);
    assert_eq!(blocked_clients(&mut c), 0);
}

#[test]
fn del_wakes_head_waiter() {
    check_admin_free_wakes_head("DEL", |c| {
        let n: i64 = redis::cmd("DEL").arg("res").query(c).unwrap();
        assert_eq!(n, 1);
    });
}

#[test]
fn unlink_wakes_head_waiter() {
    check_admin_free_wakes_head("UNLINK", |c| {
        let n: i64 = redis::cmd("UNLINK").arg("res").query(c).unwrap();
        assert_eq!(n, 1);
    });
}

#[test]
fn flushdb_wakes_head_waiter() {
    check_admin_free_wakes_head("FLUSHDB", |c| {
        let _: () = redis::cmd("FLUSHDB").query(c).unwrap();
    });
}

#[test]
fn flushall_wakes_head_waiter() {
    check_admin_free_wakes_head("FLUSHALL", |c| {
        let _: () = redis::cmd("FLUSHALL").query(c).unwrap();
    });
}

#[test]
fn flushall_async_wakes_head_waiter() {
    check_admin_free_wakes_head("FLUSHALL ASYNC", |c| {
        let _: () = redis::cmd("FLUSHALL").arg("ASYNC").query(c).unwrap();
    });
}

// ---------------------------------------------------------------- leaving the queue

#[test]
fn disconnected_waiter_is_skipped() {
    let s = Server::start();
    let mut c = s.conn();
    let hf = hold(&mut c, "res", "holder");
    let a = Waiter::queue(&mut c, &s.url(), "res", "A", 1);
    let b = Waiter::queue(&mut c, &s.url(), "res", "B", 2);
    assert_eq!(blocked_clients(&mut c), 2);
    let n: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(a.id)
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 1);
    wait_waiters(&mut c, "res", 1);
    let oa = a.outcome(SOON);
    assert!(oa.reply.is_err(), "killed waiter got {:?}", oa.reply);
    wait_blocked_clients(&mut c, 1);
    assert_eq!(release(&mut c, "res", "holder"), 1);
    let fb = b.granted().fence();
    assert!(fb > hf);
    let i = assert_owner(&mut c, "res", "B", fb);
    assert_eq!(i.waiters, 0);
    assert_eq!(blocked_clients(&mut c), 0);
}

/// RESP for one command, for clients that just vanish.
fn resp(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    out
}

#[test]
fn closed_waiter_connection_is_skipped() {
    let s = Server::start();
    let mut c = s.conn();
    hold(&mut c, "res", "holder");
    // A raw client queues (WAIT 0: forever), then closes its socket.
    let mut raw = TcpStream::connect(("127.0.0.1", s.port())).unwrap();
    raw.write_all(&resp(&[
        "DLOCK.ACQUIRE",
        "res",
        "gone",
        "10000",
        "WAIT",
        "0",
    ]))
    .unwrap();
    wait_waiters(&mut c, "res", 1);
    let b = Waiter::queue(&mut c, &s.url(), "res", "B", 2);
    drop(raw);
    wait_waiters(&mut c, "res", 1);
    wait_blocked_clients(&mut c, 1);
    assert_eq!(release(&mut c, "res", "holder"), 1);
    let fb = b.granted().fence();
    assert_owner(&mut c, "res", "B", fb);
    assert_eq!(blocked_clients(&mut c), 0);
}

#[test]
fn client_unblock_gives_nil_and_leaves_queue() {
    let s = Server::start();
    let mut c = s.conn();
    hold(&mut c, "res", "holder");
    let a = Waiter::queue(&mut c, &s.url(), "res", "A", 1);
    let n: i64 = redis::cmd("CLIENT")
        .arg("UNBLOCK")
        .arg(a.id)
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 1, "CLIENT UNBLOCK must find the blocked waiter");
    let oa = a.outcome(SOON);
    assert!(
        matches!(oa.reply, Ok(None)),
        "CLIENT UNBLOCK (TIMEOUT) must reply nil, got {:?}",
        oa.reply
    );
    assert_eq!(waiters(&mut c, "res"), 0);
    assert_eq!(blocked_clients(&mut c), 0);
    // A never gets the lock: after the release nobody owns it.
    assert_eq!(release(&mut c, "res", "holder"), 1);
    assert_eq!(info(&mut c, "res"), None);
    // Its connection still works.
    let mut ca = oa.conn.expect("connection kept");
    let pong: String = redis::cmd("PING").query(&mut ca).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn client_unblock_error_gives_unblocked_error() {
    let s = Server::start();
    let mut c = s.conn();
    hold(&mut c, "res", "holder");
    let a = Waiter::queue(&mut c, &s.url(), "res", "A", 1);
    let b = Waiter::queue(&mut c, &s.url(), "res", "B", 2);
    let n: i64 = redis::cmd("CLIENT")
        .arg("UNBLOCK")
        .arg(a.id)
        .arg("ERROR")
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 1);
    let e = a.outcome(SOON).error();
    assert!(e.starts_with("UNBLOCKED"), "error reply {e:?}");
    wait_waiters(&mut c, "res", 1);
    assert_eq!(blocked_clients(&mut c), 1);
    assert_eq!(release(&mut c, "res", "holder"), 1);
    let fb = b.granted().fence();
    assert_owner(&mut c, "res", "B", fb);
    assert_eq!(blocked_clients(&mut c), 0);
}

#[test]
fn demotion_to_replica_errors_waiters() {
    let other = Server::start();
    let s = Server::start();
    let mut c = s.conn();
    hold(&mut c, "res", "holder");
    hold(&mut c, "res2", "holder");
    let a = Waiter::queue(&mut c, &s.url(), "res", "A", 1);
    let b = Waiter::queue(&mut c, &s.url(), "res", "B", 2);
    let d = Waiter::queue(&mut c, &s.url(), "res2", "D", 1);
    assert_eq!(blocked_clients(&mut c), 3);
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(other.port())
        .query(&mut c)
        .unwrap();
    // Every waiter gets an error reply (none is granted or left hanging).
    let errors: Vec<String> = [&a, &b, &d]
        .iter()
        .map(|w| format!("{}: {}", w.tok, w.outcome(SOON).error()))
        .collect();
    eprintln!("errors after REPLICAOF: {errors:?}");
    wait_blocked_clients(&mut c, 0);
    assert_eq!(waiters(&mut c, "res"), 0);
    assert_eq!(waiters(&mut c, "res2"), 0);
    // Redis 7.0 itself unblocks every blocked client when it turns into a
    // replica, before modules hear of the role change, with an error that
    // tells the client to retry elsewhere (README, "Waiting without polling").
    for e in &errors {
        let text = e.split_once(": ").unwrap().1;
        assert!(
            text.starts_with(
                "UNBLOCKED force unblock from blocking operation, instance state changed"
            ),
            "waiter {e:?}"
        );
    }
}

#[test]
fn overwritten_with_string_gives_wrongtype() {
    let s = Server::start();
    let mut c = s.conn();
    hold(&mut c, "res", "holder");
    let a = Waiter::queue(&mut c, &s.url(), "res", "A", 1);
    let b = Waiter::queue(&mut c, &s.url(), "res", "B", 2);
    let _: () = redis::cmd("SET").arg("res").arg("x").query(&mut c).unwrap();
    for w in [&a, &b] {
        let e = w.outcome(SOON).error();
        assert_eq!(e, WRONGTYPE_ERR, "waiter {}", w.tok);
    }
    wait_blocked_clients(&mut c, 0);
    let v: String = redis::cmd("GET").arg("res").query(&mut c).unwrap();
    assert_eq!(v, "x", "the string must be untouched");
}

fn select(c: &mut Connection, db: i64) {
    let _: () = redis::cmd("SELECT").arg(db).query(c).unwrap();
}

fn swapdb(c: &mut Connection) {
    let _: () = redis::cmd("SWAPDB").arg(0).arg(1).query(c).unwrap();
}

#[test]
fn swapdb_with_lock_in_other_db_keeps_waiting() {
    let s = Server::start();
    let mut c = s.conn();
    let mut c1 = s.conn();
    select(&mut c1, 1);
    hold(&mut c, "res", "holder0");
    let f1 = hold(&mut c1, "res", "holder1");
    let a = Waiter::queue(&mut c, &s.url(), "res", "A", 1);
    swapdb(&mut c);
    // db0 now holds db1's lock; A keeps waiting on it.
    let i = assert_owner(&mut c, "res", "holder1", f1);
    assert_eq!(i.waiters, 1, "A must still be queued on db0 res");
    assert_eq!(blocked_clients(&mut c), 1);
    // Not granted a moment later either (a re-evaluation must not grant).
    thread::sleep(Duration::from_millis(100));
    a.assert_pending();
    assert_eq!(release(&mut c, "res", "holder1"), 1);
    let fa = a.granted().fence();
    assert!(fa > f1);
    assert_owner(&mut c, "res", "A", fa);
    // db1 now has the old db0 lock, untouched.
    assert_eq!(info(&mut c1, "res").unwrap().token, "holder0");
}

#[test]
fn swapdb_with_empty_other_db_grants_waiter() {
    let s = Server::start();
    let mut c = s.conn();
    let hf = hold(&mut c, "res", "holder0");
    let a = Waiter::queue(&mut c, &s.url(), "res", "A", 1);
    let b = Waiter::queue(&mut c, &s.url(), "res", "B", 2);
    swapdb(&mut c);
    let fa = a.granted().fence();
    assert!(fa > hf);
    let i = assert_owner(&mut c, "res", "A", fa);
    assert_eq!(i.waiters, 1);
    b.assert_pending();
    let mut c1 = s.conn();
    select(&mut c1, 1);
    assert_owner(&mut c1, "res", "holder0", hf);
    assert_eq!(release(&mut c, "res", "A"), 1);
    let fb = b.granted().fence();
    assert_owner(&mut c, "res", "B", fb);
}

#[test]
fn swapdb_with_string_in_other_db_gives_wrongtype() {
    let s = Server::start();
    let mut c = s.conn();
    let mut c1 = s.conn();
    select(&mut c1, 1);
    let _: () = redis::cmd("SET")
        .arg("res")
        .arg("x")
        .query(&mut c1)
        .unwrap();
    hold(&mut c, "res", "holder0");
    let a = Waiter::queue(&mut c, &s.url(), "res", "A", 1);
    swapdb(&mut c);
    assert_eq!(a.outcome(SOON).error(), WRONGTYPE_ERR);
    wait_blocked_clients(&mut c, 0);
}

// ---------------------------------------------------------------- no barging

#[test]
fn no_barging_release_then_acquire_in_multi() {
    let s = Server::start();
    let mut c = s.conn();
    hold(&mut c, "res", "holder");
    let w = Waiter::queue(&mut c, &s.url(), "res", "waiter", 1);
    let v = exec_values(
        &mut c,
        redis::pipe()
            .atomic()
            .cmd("DLOCK.RELEASE")
            .arg("res")
            .arg("holder")
            .cmd("DLOCK.ACQUIRE")
            .arg("res")
            .arg("barger")
            .arg(1000),
    );
    assert_eq!(v, vec![Value::Int(1), Value::Nil], "MULTI replies");
    let f = w.granted().fence();
    assert_owner(&mut c, "res", "waiter", f);
}

#[test]
fn no_barging_del_then_acquire_in_multi() {
    let s = Server::start();
    let mut c = s.conn();
    hold(&mut c, "res", "holder");
    let w = Waiter::queue(&mut c, &s.url(), "res", "waiter", 1);
    let v = exec_values(
        &mut c,
        redis::pipe()
            .atomic()
            .cmd("DEL")
            .arg("res")
            .cmd("DLOCK.ACQUIRE")
            .arg("res")
            .arg("barger")
            .arg(1000),
    );
    assert_eq!(v, vec![Value::Int(1), Value::Nil], "MULTI replies");
    let f = w.granted().fence();
    assert_owner(&mut c, "res", "waiter", f);
}

#[test]
fn no_barging_del_then_acquire_in_lua() {
    let s = Server::start();
    let mut c = s.conn();
    hold(&mut c, "res", "holder");
    let w = Waiter::queue(&mut c, &s.url(), "res", "waiter", 1);
    let v: Value = redis::cmd("EVAL")
        .arg(
            "redis.call('DEL', KEYS[1]); \
             return redis.call('DLOCK.ACQUIRE', KEYS[1], 'barger', 1000)",
        )
        .arg(1)
        .arg("res")
        .query(&mut c)
        .unwrap();
    assert_eq!(v, Value::Nil, "the script must not barge");
    let f = w.granted().fence();
    assert_owner(&mut c, "res", "waiter", f);
}

#[test]
fn release_and_info_in_multi_shows_waiter_as_owner() {
    let s = Server::start();
    let mut c = s.conn();
    let hf = hold(&mut c, "res", "holder");
    let w = Waiter::queue(&mut c, &s.url(), "res", "waiter", 1);
    let v = exec_values(
        &mut c,
        redis::pipe()
            .atomic()
            .cmd("DLOCK.RELEASE")
            .arg("res")
            .arg("holder")
            .cmd("DLOCK.INFO")
            .arg("res"),
    );
    assert_eq!(v.len(), 2);
    assert_eq!(v[0], Value::Int(1));
    let i = parse_info(v[1].clone()).expect("INFO inside EXEC must show the new owner");
    assert_eq!(i.token, "waiter");
    assert!(i.fence > hf);
    assert_eq!(i.waiters, 0);
    assert!(i.ttl > 9_000 && i.ttl <= 10_000, "ttl {}", i.ttl);
    assert_eq!(w.granted().fence(), i.fence);
}

/// A lease expires with a waiter queued while a barger hammers plain
/// ACQUIREs from before the expiry until the waiter has its grant.
#[test]
fn no_barging_at_expiry() {
    let s = Server::start();
    let mut c = s.conn();
    for round in 0..3 {
        let res = format!("res{round}");
        let hf = hold(&mut c, &res, "holder");
        let w = Waiter::queue(&mut c, &s.url(), &res, "waiter", 1);
        let stop = Arc::new(AtomicBool::new(false));
        let started = Arc::new(Barrier::new(2));
        let barger = {
            let (stop, started, res) = (stop.clone(), started.clone(), res.clone());
            let mut b = s.conn();
            thread::spawn(move || {
                started.wait();
                let (mut tries, mut got) = (0u64, Vec::new());
                while !stop.load(Ordering::Relaxed) {
                    if let Some(f) = acquire(&mut b, &res, "barger", 1000) {
                        got.push(f);
                    }
                    tries += 1;
                }
                (tries, got)
            })
        };
        started.wait();
        let n: i64 = redis::cmd("PEXPIRE")
            .arg(&res)
            .arg(150)
            .query(&mut c)
            .unwrap();
        assert_eq!(n, 1);
        let o = w.outcome(Duration::from_secs(5));
        stop.store(true, Ordering::Relaxed);
        let (tries, got) = barger.join().unwrap();
        eprintln!("round {round}: barger sent {tries} ACQUIREs around the expiry");
        assert!(got.is_empty(), "round {round}: barger got fences {got:?}");
        let f = o.fence();
        assert!(f > hf);
        assert_owner(&mut c, &res, "waiter", f);
    }
}

/// Same, with the lease set by the holder's own ACQUIRE (no admin command).
#[test]
fn no_barging_at_natural_expiry() {
    let s = Server::start();
    let mut c = s.conn();
    let mut obs = s.conn();
    let mut b = s.conn();
    let mut checked = 0;
    for round in 0..4 {
        let res = format!("res{round}");
        let mut w = Waiter::prepare(&s.url(), &res, "waiter", 10_000, 5_000);
        acquire(&mut c, &res, "holder", 400).expect("grant");
        let t0 = Instant::now();
        w.send();
        // Barge from now on; count only rounds where the waiter was seen
        // queued before the lease ended.
        let mut queued = false;
        let mut got = Vec::new();
        let outcome = loop {
            if !queued && t0.elapsed() < Duration::from_millis(300) {
                queued = waiters(&mut obs, &res) == 1;
            }
            if let Some(f) = acquire(&mut b, &res, "barger", 1000) {
                got.push(f);
            }
            match w.rx.recv_timeout(Duration::from_micros(200)) {
                Ok(o) => break o,
                Err(RecvTimeoutError::Timeout) => {}
                Err(e) => panic!("waiter thread: {e:?}"),
            }
            assert!(t0.elapsed() < Duration::from_secs(6), "no grant");
        };
        if !queued {
            eprintln!("round {round}: waiter not seen queued in time; not counted");
            continue;
        }
        checked += 1;
        assert!(got.is_empty(), "round {round}: barger got fences {got:?}");
        let f = outcome.fence();
        assert_owner(&mut c, &res, "waiter", f);
    }
    assert!(checked >= 2, "only {checked} rounds could be checked");
}

// ---------------------------------------------------------------- MULTI / Lua

#[test]
fn wait_inside_multi_and_lua_does_not_block() {
    let s = Server::start();
    let mut c = s.conn();
    let hf = hold(&mut c, "res", "holder");
    let t0 = Instant::now();
    let v = exec_values(
        &mut c,
        redis::pipe()
            .atomic()
            .cmd("DLOCK.ACQUIRE")
            .arg("res")
            .arg("b")
            .arg(1000)
            .arg("WAIT")
            .arg(5000)
            .cmd("DLOCK.ACQUIRE")
            .arg("free")
            .arg("b")
            .arg(1000)
            .arg("WAIT")
            .arg(0),
    );
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert_eq!(v.len(), 2);
    assert_eq!(v[0], Value::Nil, "busy lock inside MULTI: nil at once");
    assert!(
        matches!(v[1], Value::Int(_)),
        "free lock inside MULTI: {v:?}"
    );

    let t0 = Instant::now();
    let v: Value = redis::cmd("EVAL")
        .arg("return redis.call('DLOCK.ACQUIRE', KEYS[1], 'b', 1000, 'WAIT', 0)")
        .arg(1)
        .arg("res")
        .query(&mut c)
        .unwrap();
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert_eq!(v, Value::Nil, "busy lock inside Lua: nil at once");
    let v: Value = redis::cmd("EVAL")
        .arg("return redis.call('DLOCK.ACQUIRE', KEYS[1], 'b', 1000, 'WAIT', 5000)")
        .arg(1)
        .arg("free2")
        .query(&mut c)
        .unwrap();
    assert!(matches!(v, Value::Int(_)), "free lock inside Lua: {v:?}");

    let i = assert_owner(&mut c, "res", "holder", hf);
    assert_eq!(i.waiters, 0);
    assert_eq!(blocked_clients(&mut c), 0);
}

// ---------------------------------------------------------------- same token

#[test]
fn same_token_waiting_on_own_lock_is_immediate() {
    let s = Server::start();
    let mut c = s.conn();
    let hf = hold(&mut c, "res", "tok");
    let mut other = s.conn();
    for conn in [&mut c, &mut other] {
        let t0 = Instant::now();
        let f = acquire_wait(conn, "res", "tok", 5_000, 10_000).unwrap();
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
        assert_eq!(f, Some(hf), "same token: same fence at once");
    }
    let i = assert_owner(&mut c, "res", "tok", hf);
    assert!(
        i.ttl > 4_000 && i.ttl <= 5_000,
        "ttl reset to 5000: {}",
        i.ttl
    );
    assert_eq!(i.waiters, 0);
}

#[test]
fn same_token_queued_twice_gets_one_grant() {
    let s = Server::start();
    let mut c = s.conn();
    let hf = hold(&mut c, "res", "holder");
    let a = Waiter::queue(&mut c, &s.url(), "res", "T", 1);
    let b = Waiter::queue(&mut c, &s.url(), "res", "T", 2);
    let z = Waiter::queue(&mut c, &s.url(), "res", "Z", 3);
    assert_eq!(release(&mut c, "res", "holder"), 1);
    let (fa, fb) = (a.granted().fence(), b.granted().fence());
    assert_eq!(fa, fb, "one grant answers both");
    assert!(fa > hf);
    let i = assert_owner(&mut c, "res", "T", fa);
    assert_eq!(i.waiters, 1, "only Z is left");
    z.assert_pending();
    assert_eq!(release(&mut c, "res", "T"), 1);
    let fz = z.granted().fence();
    assert_owner(&mut c, "res", "Z", fz);
    assert_eq!(blocked_clients(&mut c), 0);
}

// ---------------------------------------------------------------- bad input

#[test]
fn bad_wait_arguments() {
    let s = Server::start();
    let mut c = s.conn();
    let hf = hold(&mut c, "res", "holder");
    let cases: &[(&[&str], &str)] = &[
        (&["WAIT"], SYNTAX_ERR),
        (&["WAIT", "1", "WAIT", "1"], SYNTAX_ERR),
        (&["WAIT", "100", "WAIT"], SYNTAX_ERR),
        (&["WAIT", "100", "NX"], SYNTAX_ERR),
        (&["WAIT", "-1"], WAIT_ERR),
        (&["WAIT", "abc"], WAIT_ERR),
        (&["WAIT", "1.5"], WAIT_ERR),
        (&["WAIT", ""], WAIT_ERR),
        (&["WAIT", "140737488355329"], WAIT_ERR),
        (&["WAIT", "99999999999999999999999"], WAIT_ERR),
    ];
    for res in ["res", "free"] {
        for (extra, expected) in cases {
            let mut cmd = redis::cmd("DLOCK.ACQUIRE");
            cmd.arg(res).arg("other").arg(1000);
            for a in *extra {
                cmd.arg(*a);
            }
            let t0 = Instant::now();
            match cmd.query::<Value>(&mut c) {
                Ok(v) => panic!("{res} {extra:?}: expected {expected:?}, got {v:?}"),
                Err(e) => assert_eq!(err_text(&e), *expected, "{res} {extra:?}"),
            }
            assert!(t0.elapsed() < Duration::from_secs(2), "{extra:?} blocked");
        }
    }
    let i = assert_owner(&mut c, "res", "holder", hf);
    assert!(i.ttl > LONG_TTL as i64 - 10_000, "ttl {}", i.ttl);
    assert_eq!(i.waiters, 0);
    assert_eq!(info(&mut c, "free"), None, "bad input must create nothing");
    assert_eq!(blocked_clients(&mut c), 0);
    // Lowercase `wait` and the maximum timeout are accepted.
    let f = acquire_wait(&mut c, "free", "tok", 1000, 1 << 47).unwrap();
    assert!(f.is_some());
    let f: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
        .arg("free2")
        .arg("tok")
        .arg(1000)
        .arg("wait")
        .arg(10)
        .query(&mut c)
        .unwrap();
    assert!(f.is_some());
}

// ---------------------------------------------------------------- stress

#[test]
fn stress_twenty_clients_hundred_rounds() {
    const CLIENTS: usize = 20;
    const ROUNDS: usize = 100;
    let s = Server::start();
    let deadline = Instant::now() + Duration::from_secs(60);
    let barrier = Arc::new(Barrier::new(CLIENTS));
    let (tx, rx) = channel();
    for id in 0..CLIENTS {
        let (url, barrier, tx) = (s.url(), barrier.clone(), tx.clone());
        thread::spawn(move || {
            let r = (|| -> Result<Vec<(i64, Instant, Instant)>, String> {
                let mut c = connect_within(&url, Duration::from_secs(10))
                    .map_err(|e| format!("connect: {e}"))?;
                c.set_read_timeout(Some(Duration::from_secs(35))).unwrap();
                barrier.wait();
                let mut holds = Vec::with_capacity(ROUNDS);
                for round in 0..ROUNDS {
                    if Instant::now() > deadline {
                        return Err(format!("round {round}: past the 60 s deadline"));
                    }
                    let tok = format!("c{id}-r{round}");
                    let f = acquire_wait(&mut c, "lock", &tok, 10_000, 30_000)
                        .map_err(|e| format!("round {round}: ACQUIRE: {e}"))?
                        .ok_or_else(|| format!("round {round}: WAIT 30000 timed out"))?;
                    let start = Instant::now();
                    let v: Option<i64> = redis::cmd("GET")
                        .arg("counter")
                        .query(&mut c)
                        .map_err(|e| format!("GET: {e}"))?;
                    let _: () = redis::cmd("SET")
                        .arg("counter")
                        .arg(v.unwrap_or(0) + 1)
                        .query(&mut c)
                        .map_err(|e| format!("SET: {e}"))?;
                    let end = Instant::now();
                    let n: i64 = redis::cmd("DLOCK.RELEASE")
                        .arg("lock")
                        .arg(&tok)
                        .query(&mut c)
                        .map_err(|e| format!("RELEASE: {e}"))?;
                    if n != 1 {
                        return Err(format!("round {round}: RELEASE replied {n}"));
                    }
                    holds.push((f, start, end));
                }
                Ok(holds)
            })();
            let _ = tx.send((id, r));
        });
    }
    drop(tx);
    let t0 = Instant::now();
    let mut all = Vec::new();
    for _ in 0..CLIENTS {
        let left = deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(5);
        let (id, r) = rx
            .recv_timeout(left)
            .expect("a client did not finish within 60 s");
        let holds = r.unwrap_or_else(|e| panic!("client {id}: {e}"));
        assert_eq!(holds.len(), ROUNDS, "client {id}");
        all.extend(holds);
    }
    eprintln!("stress: {} grants in {:?}", CLIENTS * ROUNDS, t0.elapsed());
    let mut c = s.conn();
    let v: i64 = redis::cmd("GET").arg("counter").query(&mut c).unwrap();
    assert_eq!(v, (CLIENTS * ROUNDS) as i64, "lost updates");
    all.sort_by_key(|h| h.1);
    for w in all.windows(2) {
        assert!(w[0].0 < w[1].0, "fences out of grant order: {w:?}");
        assert!(w[0].2 < w[1].1, "holds overlap: {w:?}");
    }
    assert_eq!(info(&mut c, "lock"), None);
    assert_eq!(blocked_clients(&mut c), 0);
}

// ---------------------------------------------------------------- replication

fn replica_wait(conn: &mut Connection) -> i64 {
    redis::cmd("WAIT")
        .arg(1)
        .arg(2000)
        .query(conn)
        .expect("WAIT 1 2000")
}

/// After the handoff: WAIT 1 on the waiter's own connection reaches the
/// replica, and the replica shows the same owner and fence.
fn check_replica(o: Outcome, replica: &Server, res: &str, tok: &str, what: &str) {
    let f = o.fence();
    let mut wc = o.conn.expect("waiter connection");
    assert_eq!(replica_wait(&mut wc), 1, "{what}: WAIT 1 after the grant");
    let mut rc = replica.conn();
    let i = info(&mut rc, res).unwrap_or_else(|| panic!("{what}: replica has no lock"));
    assert_eq!((i.token.as_str(), i.fence), (tok, f), "{what}: replica");
}

#[test]
fn replica_in_sync_after_handoffs() {
    let m = Server::start();
    let r = Server::builder().replica_of(&m).start();
    r.wait_for_sync(Duration::from_secs(10));
    let mut c = m.conn();

    // By release.
    hold(&mut c, "rel", "holder");
    let w = Waiter::queue(&mut c, &m.url(), "rel", "w-rel", 1);
    assert_eq!(release(&mut c, "rel", "holder"), 1);
    check_replica(w.granted(), &r, "rel", "w-rel", "release");

    // By expiry.
    hold(&mut c, "exp", "holder");
    let w = Waiter::queue(&mut c, &m.url(), "exp", "w-exp", 1);
    let n: i64 = redis::cmd("DLOCK.EXTEND")
        .arg("exp")
        .arg("holder")
        .arg(200)
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 1);
    check_replica(w.outcome(SOON), &r, "exp", "w-exp", "expiry");

    // By DEL.
    hold(&mut c, "del", "holder");
    let w = Waiter::queue(&mut c, &m.url(), "del", "w-del", 1);
    let n: i64 = redis::cmd("DEL").arg("del").query(&mut c).unwrap();
    assert_eq!(n, 1);
    check_replica(w.granted(), &r, "del", "w-del", "DEL");

    // And the master agrees.
    let mut rc = r.conn();
    for res in ["rel", "exp", "del"] {
        let (mi, ri) = (info(&mut c, res).unwrap(), info(&mut rc, res).unwrap());
        assert_eq!((mi.token, mi.fence), (ri.token, ri.fence), "{res}");
    }
}

/// Queues are per database: a waiter on `res` in db 2 is not woken by a
/// release of `res` in db 0, and is handed the lock by a release in db 2.
#[test]
fn queues_are_per_database() {
    let s = Server::start();
    let mut c0 = s.conn();
    let mut c2 = s.conn();
    select(&mut c2, 2);
    hold(&mut c0, "res", "holder0");
    let h2 = hold(&mut c2, "res", "holder2");
    let w = Waiter::start(&format!("{}2", s.url()), "res", "w2", 10_000, 10_000);
    wait_waiters(&mut c2, "res", 1);
    assert_eq!(waiters(&mut c0, "res"), 0, "db0 res has no waiters");
    assert_eq!(release(&mut c0, "res", "holder0"), 1);
    assert_eq!(info(&mut c0, "res"), None, "db0: nobody granted");
    thread::sleep(Duration::from_millis(50));
    w.assert_pending();
    assert_eq!(release(&mut c2, "res", "holder2"), 1);
    let f = w.granted().fence();
    assert!(f > h2);
    assert_owner(&mut c2, "res", "w2", f);
}
