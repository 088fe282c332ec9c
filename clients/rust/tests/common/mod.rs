//! The client's tests run against real servers started by the module's own
//! harness (`tests/common/`): free port, temp dir, `--loadmodule`, killed on
//! drop.
#![allow(dead_code, unused_imports)]

#[path = "../../../../tests/common/mod.rs"]
pub mod server;

pub use server::Server;
use std::time::Duration;

/// `DLOCK.INFO`'s token and fence of a plain lock (None when free), bound
/// to a session or not (a bound hold is shown in the list form, with its
/// `session`).
pub fn holder(c: &mut redis::Connection, resource: &str) -> Option<(String, u64)> {
    let v: redis::Value = redis::cmd("DLOCK.INFO").arg(resource).query(c).unwrap();
    let redis::Value::Array(f) = v else {
        return None;
    };
    if let Some(h) = token_and_fence(&f) {
        return Some(h);
    }
    let hold = one_hold(&f)?;
    let bound = hold
        .chunks(2)
        .any(|kv| matches!(&kv[0], redis::Value::BulkString(k) if k == b"session"));
    bound.then(|| token_and_fence(hold)).flatten()
}

/// The `token` and `fence` fields of a flat map.
fn token_and_fence(fields: &[redis::Value]) -> Option<(String, u64)> {
    let mut token = None;
    let mut fence = None;
    for kv in fields.chunks(2) {
        match (&kv[0], kv.get(1)) {
            (redis::Value::BulkString(k), Some(redis::Value::BulkString(t))) if k == b"token" => {
                token = Some(String::from_utf8_lossy(t).into_owned())
            }
            (redis::Value::BulkString(k), Some(redis::Value::Int(n))) if k == b"fence" => {
                fence = Some(*n as u64)
            }
            _ => {}
        }
    }
    Some((token?, fence?))
}

/// The fields of the one hold of `DLOCK.INFO`'s list form.
fn one_hold(fields: &[redis::Value]) -> Option<&[redis::Value]> {
    let holds = fields.chunks(2).find_map(|kv| match (&kv[0], kv.get(1)) {
        (redis::Value::BulkString(k), Some(redis::Value::Array(h))) if k == b"holds" => Some(h),
        _ => None,
    })?;
    match holds.as_slice() {
        [redis::Value::Array(hold)] => Some(hold),
        _ => None,
    }
}

/// Nobody holds or waits for `resource`: `DLOCK.INFO` answers nil.
pub fn is_free(c: &mut redis::Connection, resource: &str) -> bool {
    let v: redis::Value = redis::cmd("DLOCK.INFO").arg(resource).query(c).unwrap();
    v == redis::Value::Nil
}

/// `DLOCK.INFO`'s `waiters` field (0 when free).
pub fn waiters(c: &mut redis::Connection, resource: &str) -> i64 {
    let v: redis::Value = redis::cmd("DLOCK.INFO").arg(resource).query(c).unwrap();
    let redis::Value::Array(f) = v else {
        return 0;
    };
    f.chunks(2)
        .find_map(|kv| match (&kv[0], &kv[1]) {
            (redis::Value::BulkString(k), redis::Value::Int(n)) if k == b"waiters" => Some(*n),
            _ => None,
        })
        .unwrap_or(0)
}

/// The key's remaining TTL in ms (`PTTL`).
pub fn pttl(c: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(c).unwrap()
}

/// Whether the server has sessions (`DLOCK.SESSION`, issue 38): the
/// session tests need them and say so when they skip.
pub fn has_sessions(c: &mut redis::Connection) -> bool {
    let r: redis::RedisResult<redis::Value> = redis::cmd("DLOCK.SESSION")
        .arg("LIST")
        .arg("COUNT")
        .arg(1)
        .query(c);
    r.is_ok()
}

/// `DLOCK.SESSION INFO id` as (field, integer) pairs; None when no such
/// session.
pub fn session_info(c: &mut redis::Connection, id: &str) -> Option<Vec<(String, i64)>> {
    let v: redis::Value = redis::cmd("DLOCK.SESSION")
        .arg("INFO")
        .arg(id)
        .query(c)
        .unwrap();
    let pairs = match v {
        redis::Value::Nil => return None,
        redis::Value::Array(a) => a,
        redis::Value::Map(m) => m.into_iter().flat_map(|(k, v)| [k, v]).collect(),
        other => panic!("unexpected DLOCK.SESSION INFO reply {other:?}"),
    };
    let mut out = Vec::new();
    for kv in pairs.chunks(2) {
        if let (redis::Value::BulkString(k), redis::Value::Int(n)) = (&kv[0], &kv[1]) {
            out.push((String::from_utf8_lossy(k).into_owned(), *n));
        }
    }
    Some(out)
}

/// One integer field of `DLOCK.SESSION INFO id` (None: no such session).
pub fn session_field(c: &mut redis::Connection, id: &str, field: &str) -> Option<i64> {
    session_info(c, id).map(|f| {
        f.into_iter()
            .find(|(k, _)| k == field)
            .unwrap_or_else(|| panic!("no {field} in DLOCK.SESSION INFO"))
            .1
    })
}

pub const SEC: Duration = Duration::from_secs(1);

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A URL where nothing listens.
pub fn dead_url() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    format!("redis://127.0.0.1:{port}/")
}

/// Demotes `server` to a replica of `other` (its data, locks included,
/// replaced by `other`'s, and every write answered `READONLY`), and returns
/// a thread that promotes it back `after` from now.
pub fn demote_then_promote(
    server: &Server,
    other: &Server,
    after: Duration,
) -> std::thread::JoinHandle<()> {
    server.replica_of(other);
    server.wait_for_sync(10 * SEC);
    let mut c = server.conn();
    std::thread::spawn(move || {
        std::thread::sleep(after);
        let _: () = redis::cmd("REPLICAOF")
            .arg("NO")
            .arg("ONE")
            .query(&mut c)
            .unwrap();
    })
}

/// How many `MAXHOLD` refusals the server has sent (`INFO errorstats`).
pub fn maxhold_refusals(c: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("errorstats").query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("errorstat_MAXHOLD:count="))
        .map_or(0, |n| n.trim().parse().unwrap())
}
