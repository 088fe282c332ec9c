//! `DLOCK.OBSERVE resource [SINCE version] [WAIT timeout_ms]`: a client
//! learns of every change of a resource's holders without polling.
//!
//! Every test starts its own server(s). Observers block on connections of
//! their own: their commands are sent without waiting for the reply, and
//! the replies read later with a deadline, so a hung module fails the test
//! instead of hanging it. Ordering is never established by sleeping: before
//! acting, a test waits until `INFO dlock` counts the observers blocked.
use crate::common;

mod contract;
mod hostile;
mod in_cluster;
mod leaving;
mod many;
mod pace;
mod replicas;
mod reserved;
mod wakes;

use common::lock::*;
use common::*;
use redis::{Connection, Value};
use std::time::{Duration, Instant};

const LONG_TTL: u64 = 60_000;
const FREE: &str = "0000000000000000";
/// How long an observer may take to hear of a change on a loaded machine.
const SOON: Duration = Duration::from_secs(10);

/// A reply of `DLOCK.OBSERVE`: the version, and what `DLOCK.INFO` shows.
#[derive(Debug)]
struct Observed {
    version: String,
    info: Option<LockInfo>,
    /// The info part as it came (a multi-hold resource's map).
    raw: Value,
}

fn parse(v: Value) -> Option<Observed> {
    match v {
        Value::Nil => None,
        Value::Array(mut parts) if parts.len() == 2 => {
            let raw = parts.pop().unwrap();
            let version = String::from_utf8(as_bytes(&parts.pop().unwrap())).unwrap();
            assert_eq!(version.len(), 16, "a version is 16 hex digits: {version}");
            assert!(
                version.chars().all(|ch| ch.is_ascii_hexdigit()),
                "{version}"
            );
            let info = is_plain(&raw).then(|| parse_info(raw.clone())).flatten();
            Some(Observed { version, info, raw })
        }
        other => panic!("not an OBSERVE reply: {other:?}"),
    }
}

/// Whether an INFO reply is a held plain lock's map (its first field is
/// the token, a string), not a multi-hold resource's nor the reserved map
/// (whose token is nil).
fn is_plain(v: &Value) -> bool {
    let token = |k: &Value, v: &Value| as_bytes(k) == b"token" && matches!(v, Value::BulkString(_));
    match v {
        Value::Array(items) => items.len() >= 2 && token(&items[0], &items[1]),
        Value::Map(pairs) => pairs.first().is_some_and(|(k, v)| token(k, v)),
        _ => false,
    }
}

fn observe_cmd(res: &str, since: Option<&str>, wait_ms: Option<u64>) -> redis::Cmd {
    let mut cmd = redis::cmd("DLOCK.OBSERVE");
    cmd.arg(res);
    if let Some(v) = since {
        cmd.arg("SINCE").arg(v);
    }
    if let Some(w) = wait_ms {
        cmd.arg("WAIT").arg(w);
    }
    cmd
}

/// `DLOCK.OBSERVE res` answered at once.
fn observe(c: &mut Connection, res: &str) -> Observed {
    parse(observe_cmd(res, None, None).query(c).unwrap()).expect("an answer")
}

/// An observer blocked (or answered) on a connection of its own.
struct Observer {
    conn: Connection,
    /// Its connection's `CLIENT ID` (for `CLIENT KILL`/`UNBLOCK`).
    id: i64,
}

impl Observer {
    /// Sends `DLOCK.OBSERVE res SINCE since WAIT wait_ms` and does not read
    /// the reply.
    fn start(s: &Server, res: &str, since: &str, wait_ms: u64) -> Observer {
        let mut conn = s.conn();
        conn.set_read_timeout(Some(SOON + Duration::from_secs(20)))
            .unwrap();
        let id: i64 = redis::cmd("CLIENT").arg("ID").query(&mut conn).unwrap();
        let packed = observe_cmd(res, Some(since), Some(wait_ms)).get_packed_command();
        conn.send_packed_command(&packed).unwrap();
        Observer { conn, id }
    }

    /// The reply (`None`: the wait ran out).
    fn reply(&mut self) -> redis::RedisResult<Option<Observed>> {
        match self.conn.recv_response()? {
            Value::ServerError(e) => Err(e.into()),
            v => Ok(parse(v)),
        }
    }

    /// Whether a reply has arrived within `d`.
    fn answered_within(&mut self, d: Duration) -> bool {
        self.conn.set_read_timeout(Some(d)).unwrap();
        let r = self.conn.recv_response();
        self.conn
            .set_read_timeout(Some(SOON + Duration::from_secs(20)))
            .unwrap();
        match r {
            Ok(_) => true,
            Err(e) if e.is_timeout() => false,
            Err(e) => panic!("observer failed: {e}"),
        }
    }
}

/// `EVAL`s `first` (Lua, on `KEYS[1]` = `key`, `ARGV[1]` = `ttl_ms`), then
/// keeps the event loop busy for `busy_ms`: whatever `first` changed and
/// whatever falls due meanwhile meet in the turn after the script.
fn eval_then_busy(c: &mut Connection, key: &str, first: &str, ttl_ms: u64, busy_ms: u64) {
    let script = format!(
        "{first} local t = redis.call('TIME') local start = t[1] * 1000000 + t[2] \
         local n = 0 \
         while n < {cap} do n = n + 1 t = redis.call('TIME') \
         if t[1] * 1000000 + t[2] - start > {us} then break end end \
         return 1",
        cap = busy_ms * 2500,
        us = busy_ms * 1000
    );
    let _: i64 = redis::cmd("EVAL")
        .arg(script)
        .arg(1)
        .arg(key)
        .arg(ttl_ms)
        .query(c)
        .unwrap();
}

fn observers(c: &mut Connection) -> i64 {
    info_field(c, "dlock", "dlock_observers")
        .unwrap()
        .parse()
        .unwrap()
}

/// `CONFIG SET dlock.observe-rate per_sec`.
fn set_rate(c: &mut Connection, per_sec: u64) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("dlock.observe-rate")
        .arg(per_sec)
        .query(c)
        .unwrap();
}

/// The deferred jobs queued (`INFO dlock`).
fn deferred_jobs(c: &mut Connection) -> i64 {
    info_field(c, "dlock", "dlock_deferred_jobs")
        .unwrap()
        .parse()
        .unwrap()
}

/// Waits until `n` observers are registered (and blocked).
fn wait_observers(c: &mut Connection, n: i64) {
    wait_until(SOON, &format!("{n} observers blocked"), || {
        observers(c) == n
    });
}

/// Observes `res` from now on: its current version, and one observer
/// blocked on it.
fn watch(s: &Server, c: &mut Connection, res: &str) -> (String, Observer) {
    let before = observers(c);
    let v = observe(c, res).version;
    let o = Observer::start(s, res, &v, 30_000);
    wait_observers(c, before + 1);
    (v, o)
}

/// The observer's reply after a change: a version other than `old`, and
/// the same view `DLOCK.INFO` gives now.
fn changed(c: &mut Connection, o: &mut Observer, res: &str, old: &str) -> Observed {
    let t = Instant::now();
    let got = o
        .reply()
        .expect("an answer")
        .expect("a change, not the end of the wait");
    assert!(t.elapsed() < SOON, "answered only after {:?}", t.elapsed());
    assert_ne!(got.version, old, "woken by a change: another version");
    let now = observe(c, res);
    assert_eq!(got.version, now.version, "the latest state");
    got
}
