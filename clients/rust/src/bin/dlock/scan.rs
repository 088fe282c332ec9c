//! What `dlock list` reads from the servers: which ones to scan (the server
//! a URL names, or every master of its cluster), their lock keys by `SCAN
//! ... TYPE dlocklock` (never `KEYS`, which blocks the server) and the
//! resources clients wait for by `DLOCK.QUEUED` (a resource nobody holds
//! has no key while its queue waits), and each one's `DLOCK.INFO` (and,
//! for those waited for, the head of the queue by `DLOCK.WAITERS`),
//! pipelined with the next `SCAN`.
//!
//! The connections are the `redis` crate's own, not the library's: a
//! listing needs commands the library has no reason to offer (`SCAN`,
//! `CLUSTER SHARDS`, a pipeline of `INFO`s to one node).

use crate::backend::{escaped, fields, int, text, Bytes, Info};
use dlock_client::{Error, TlsSettings};
use redis::{ConnectionAddr, ConnectionInfo, ConnectionLike, Value};
use std::collections::{HashMap, HashSet};
use std::sync::mpsc;
use std::time::Duration;

/// The module's data type, as `TYPE` shows it (src/server/persistence/data_type.rs).
pub const TYPE_NAME: &str = "dlocklock";
/// Buckets one `SCAN` call looks at: large enough that a server with
/// millions of keys is read in few round trips, small enough that one call
/// stays well under a millisecond of the server's time.
const COUNT: u32 = 1000;
/// Opening a connection, handshake included.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// One round trip (a `SCAN` and up to a few thousand `INFO`s).
const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// One lock as a server reported it.
#[derive(Debug)]
pub struct Listed {
    /// `host:port` of the server it lives on (`/N` added for a database
    /// other than 0).
    pub server: String,
    pub resource: Bytes,
    /// Never [`Info::Free`].
    pub info: Info,
    /// The token of the request its queue serves next (`DLOCK.WAITERS
    /// ... COUNT 1`), if anyone waits; `None` too from a server without
    /// that command.
    pub next: Option<Bytes>,
    /// The `PRIORITY` that request asked with (0 when it named none, and
    /// from a server whose `DLOCK.WAITERS` predates priorities); `None`
    /// when `next` is.
    pub next_priority: Option<u16>,
}

/// What a listing found.
pub struct Listing {
    pub locks: Vec<Listed>,
    /// The servers scanned (or tried).
    pub servers: usize,
    /// What kept a server, a master or some keys from being listed, by
    /// server; what was read before is in `locks`.
    pub errors: Vec<(String, Error)>,
}

/// A server to scan.
struct Target {
    name: String,
    info: ConnectionInfo,
    /// Servers of one group share one key space (the masters of a
    /// cluster): a resource seen twice in a group is listed once. A
    /// standalone server is a group of its own.
    group: usize,
}

/// Every lock, on each server `urls` name or on every master of the
/// cluster a URL's server belongs to, whose name matches `pattern` (a
/// `SCAN ... MATCH` glob).
pub fn list(urls: &[&str], tls: Option<&TlsSettings>, pattern: Option<&[u8]>) -> Listing {
    let (targets, mut errors) = targets(urls, tls);
    let servers = targets.len() + errors.len();
    // Each server on a thread of its own: a cluster's masters are read at
    // once, and a slow one delays no other.
    let results: Vec<(Vec<Listed>, Vec<Error>)> = std::thread::scope(|s| {
        let handles: Vec<_> = targets
            .iter()
            .map(|t| s.spawn(move || scan(t, pattern)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| (vec![], vec![Error::Server("a scan failed".into())]))
            })
            .collect()
    });
    let mut seen = HashSet::new();
    let mut locks = Vec::new();
    for (target, (found, errs)) in targets.iter().zip(results) {
        // SCAN may return a key twice (the server's table grew or shrank
        // meanwhile), and a key moved to another master (resharding) may
        // be found on both.
        locks.extend(
            found
                .into_iter()
                .filter(|l| seen.insert((target.group, l.resource.clone()))),
        );
        errors.extend(errs.into_iter().map(|e| (target.name.clone(), e)));
    }
    Listing {
        locks,
        servers,
        errors,
    }
}

/// A server to read: its name (`host:port`) and how to reach it.
pub type Named = (String, ConnectionInfo);

/// The servers to read, named: each URL's server, or every master of its
/// cluster (see `targets`); and those that could not be found.
pub fn servers(urls: &[&str], tls: Option<&TlsSettings>) -> (Vec<Named>, Vec<(String, Error)>) {
    let (targets, errors) = targets(urls, tls);
    let named = targets.into_iter().map(|t| (t.name, t.info)).collect();
    (named, errors)
}

/// The servers to scan: each URL's server, or, for a cluster node, every
/// master of its cluster (once, however many of its nodes are named).
fn targets(urls: &[&str], tls: Option<&TlsSettings>) -> (Vec<Target>, Vec<(String, Error)>) {
    let mut targets = Vec::new();
    let mut errors = Vec::new();
    // Cluster node id -> group.
    let mut groups: HashMap<String, usize> = HashMap::new();
    let mut next_group = 0;
    for url in urls {
        // Through Sentinel: the master it names now.
        let info = match tls {
            Some(tls) => tls.connection_info(url),
            None => dlock_client::sentinel::current_master(url, CONNECT_TIMEOUT),
        };
        let info = match info {
            Ok(i) => i,
            // A bad URL was refused by `Backend::from_urls` before.
            Err(e) => {
                errors.push((dlock_client::redact_url(url), e));
                continue;
            }
        };
        let name = server_name(&info);
        match masters(&info, &name) {
            Ok(None) => {
                targets.push(Target {
                    name,
                    info,
                    group: next_group,
                });
                next_group += 1;
            }
            Ok(Some(masters)) => {
                let group = masters
                    .iter()
                    .find_map(|m| groups.get(&m.id).copied())
                    .unwrap_or_else(|| {
                        next_group += 1;
                        next_group - 1
                    });
                for m in masters {
                    if groups.insert(m.id.clone(), group).is_none() {
                        targets.push(Target {
                            name: format!("{}:{}", m.host, m.port),
                            info: dlock_client::same_login_at(&info, &m.host, m.port),
                            group,
                        });
                    }
                }
            }
            Err(e) => errors.push((name, e)),
        }
    }
    (targets, errors)
}

/// `host:port` (or a socket's path), and `/N` for database N other than 0.
fn server_name(info: &ConnectionInfo) -> String {
    let addr = match &info.addr {
        ConnectionAddr::Tcp(h, p)
        | ConnectionAddr::TcpTls {
            host: h, port: p, ..
        } => {
            format!("{h}:{p}")
        }
        ConnectionAddr::Unix(path) => path.display().to_string(),
    };
    match info.redis.db {
        0 => addr,
        db => format!("{addr}/{db}"),
    }
}

/// A master as `CLUSTER SHARDS` names it.
#[derive(Debug, PartialEq)]
struct Master {
    id: String,
    host: String,
    port: u16,
}

/// The masters of the cluster the server belongs to, or None when it is
/// not a cluster node.
fn masters(info: &ConnectionInfo, name: &str) -> Result<Option<Vec<Master>>, Error> {
    let mut c = connect(info, name)?;
    match redis::cmd("CLUSTER").arg("SHARDS").query::<Value>(&mut c) {
        Ok(v) => {
            let seed_host = match &info.addr {
                ConnectionAddr::Tcp(h, _) | ConnectionAddr::TcpTls { host: h, .. } => h.as_str(),
                ConnectionAddr::Unix(_) => "127.0.0.1",
            };
            let tls = matches!(info.addr, ConnectionAddr::TcpTls { .. });
            parse_shards(v, seed_host, tls)
                .map(Some)
                .ok_or_else(|| Error::Server("unexpected CLUSTER SHARDS reply".into()))
        }
        // The server's words when it runs without cluster support.
        Err(e)
            if e.detail()
                .is_some_and(|d| d.contains("cluster support disabled")) =>
        {
            Ok(None)
        }
        Err(e) => Err(match error(e, name) {
            Error::Denied { addr, detail } if detail.starts_with("NOPERM") => Error::Denied {
                addr,
                detail: format!("{detail} (list asks whether the server is a cluster node)"),
            },
            e => e,
        }),
    }
}

/// `CLUSTER SHARDS`: per shard its `slots` and its `nodes` (`id`, `port`,
/// `ip`, `endpoint`, `role`, `health`, ...). A shard's masters that are
/// not marked failed; all of them if none is left and the shard serves
/// slots (its keys are then unreachable, which the scan reports); none for
/// a shard without slots whose masters all failed (a master that was
/// replaced). Over TLS (`tls`) a node's `tls-port` is taken, else its
/// `port`.
fn parse_shards(v: Value, seed_host: &str, tls: bool) -> Option<Vec<Master>> {
    let Value::Array(shards) = v else { return None };
    let mut out = Vec::new();
    for shard in shards {
        let f = fields(shard)?;
        let get = |k: &str| f.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let has_slots = matches!(get("slots"), Some(Value::Array(s)) if !s.is_empty());
        let Some(Value::Array(nodes)) = get("nodes") else {
            return None;
        };
        let mut masters = Vec::new();
        for node in nodes {
            let nf = fields(node)?;
            let g = |k: &str| nf.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
            if g("role").and_then(text).as_deref() != Some("master") {
                continue;
            }
            let id = g("id").and_then(text)?;
            let port = if tls {
                g("tls-port").or_else(|| g("port"))
            } else {
                g("port").or_else(|| g("tls-port"))
            };
            let port = port.map(|v| int(&v))?;
            let port = u16::try_from(port).ok()?;
            let usable = |h: &String| !h.is_empty() && h != "?";
            let host = g("endpoint")
                .and_then(text)
                .filter(usable)
                .or_else(|| g("ip").and_then(text).filter(usable))
                .unwrap_or_else(|| seed_host.to_string());
            let failed = g("health").and_then(text).as_deref() == Some("failed");
            masters.push((Master { id, host, port }, failed));
        }
        let any_up = masters.iter().any(|(_, failed)| !failed);
        out.extend(
            masters
                .into_iter()
                .filter(|(_, failed)| !failed || (!any_up && has_slots))
                .map(|(m, _)| m),
        );
    }
    Some(out)
}

/// A connection whose handshake (login, `SELECT`) is bounded too: the
/// `redis` crate bounds only the TCP connect, so a paused server would hold
/// the listing until it runs again. The handshake runs on a thread of its
/// own, abandoned after the timeout.
pub fn connect(info: &ConnectionInfo, name: &str) -> Result<redis::Connection, Error> {
    let client = redis::Client::open(info.clone()).map_err(|e| error(e, name))?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(client.get_connection_with_timeout(CONNECT_TIMEOUT));
    });
    let c = rx.recv_timeout(CONNECT_TIMEOUT).unwrap_or_else(|_| {
        Err(redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no connection within {CONNECT_TIMEOUT:?}"),
        )))
    });
    let c = c.map_err(|e| error(e, name))?;
    c.set_read_timeout(Some(IO_TIMEOUT))
        .and_then(|_| c.set_write_timeout(Some(IO_TIMEOUT)))
        .map_err(|e| error(e, name))?;
    Ok(c)
}

/// A `redis` error as the library reports one from server `name` (the
/// refusals name it; the caller names it for the others), for the exit
/// code (`codes::of`).
pub fn error(e: redis::RedisError, name: &str) -> Error {
    if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() {
        return Error::Unavailable(e.to_string());
    }
    if e.kind() == redis::ErrorKind::AuthenticationFailed {
        return denied(name, "authentication failed".into());
    }
    reply_error(e.code(), e.detail(), name).unwrap_or_else(|| Error::Server(e.to_string()))
}

fn denied(name: &str, detail: String) -> Error {
    Error::Denied {
        addr: name.to_string(),
        detail,
    }
}

/// An error reply: refusals and a server busy or loading; None for any
/// other.
fn reply_error(code: Option<&str>, detail: Option<&str>, name: &str) -> Option<Error> {
    let detail = detail.unwrap_or("");
    match code? {
        "WRONGPASS" => Some(denied(name, "authentication failed".into())),
        c @ ("NOPERM" | "NOAUTH") => Some(denied(name, format!("{c} {detail}"))),
        "ERR" if detail.starts_with("unknown command") => {
            Some(Error::ModuleMissing(name.to_string()))
        }
        c @ ("LOADING" | "BUSY" | "MASTERDOWN" | "CLUSTERDOWN" | "TRYAGAIN") => {
            Some(Error::Unavailable(format!("{c} {detail}")))
        }
        _ => None,
    }
}

/// An error reply to one command of a pipeline.
pub fn server_error(code: &str, detail: Option<&str>, name: &str) -> Error {
    reply_error(Some(code), detail, name)
        .unwrap_or_else(|| Error::Server(format!("{code} {}", detail.unwrap_or(""))))
}

fn scan_cmd(cursor: &str, pattern: Option<&[u8]>) -> redis::Cmd {
    let mut c = redis::cmd("SCAN");
    c.arg(cursor);
    if let Some(p) = pattern {
        c.arg("MATCH").arg(p);
    }
    c.arg("COUNT").arg(COUNT).arg("TYPE").arg(TYPE_NAME);
    c
}

/// Sends `pipe`; one reply per command, an error reply as
/// [`Value::ServerError`].
pub fn send(
    c: &mut redis::Connection,
    pipe: &redis::Pipeline,
    n: usize,
) -> redis::RedisResult<Vec<Value>> {
    c.req_packed_commands(&pipe.get_packed_pipeline(), 0, n)
}

/// The locks of one server: every `SCAN` batch's keys are asked for their
/// `DLOCK.INFO` in one pipeline that also carries the next `SCAN`.
/// What was read stays when a later call fails; locks a key permission
/// hid are counted in one error.
fn scan(t: &Target, pattern: Option<&[u8]>) -> (Vec<Listed>, Vec<Error>) {
    let mut locks = Vec::new();
    let mut denied = Denied::default();
    let mut errors = Vec::new();
    if let Err(e) = scan_into(t, pattern, &mut locks, &mut denied) {
        errors.push(e);
    }
    if let Some(first) = denied.first {
        errors.insert(0, denied_keys(&t.name, denied.count, first));
    }
    if let Some(refused) = denied.queued {
        errors.insert(0, denied_queued(&t.name, refused));
    }
    (locks, errors)
}

/// Keys whose `DLOCK.INFO` a permission refused.
#[derive(Default)]
struct Denied {
    count: usize,
    /// The first refusal, as the server worded it.
    first: Option<String>,
    /// `DLOCK.QUEUED`'s refusal: resources waited for that have no key
    /// are missing.
    queued: Option<String>,
}

fn scan_into(
    t: &Target,
    pattern: Option<&[u8]>,
    locks: &mut Vec<Listed>,
    denied: &mut Denied,
) -> Result<(), Error> {
    let name = &t.name;
    let mut c = connect(&t.info, name)?;
    let io = |e| error(e, name);
    // `DLOCK.INFO` without a key: its arity error says the module is
    // loaded (without it: an unknown command), and it touches no key, so
    // no key permission is needed. Without the module, `SCAN ... TYPE`
    // would find nothing, as on a server without locks.
    let mut pipe = redis::pipe();
    pipe.cmd("DLOCK.INFO");
    pipe.add_command(queued_cmd(pattern));
    pipe.add_command(scan_cmd("0", pattern));
    let mut replies = send(&mut c, &pipe, 3).map_err(io)?;
    let mut next = replies.pop();
    let queued_reply = replies.pop();
    if let Some(Value::ServerError(e)) = replies.pop() {
        let e = server_error(e.code(), e.details(), name);
        if matches!(e, Error::ModuleMissing(_)) {
            return Err(e);
        }
    }
    // Asked first, with the first SCAN batch; a key SCAN returns that is
    // among them is not asked twice.
    let mut pending = match queued_reply.map(|r| queued(r, name)) {
        Some(Ok(names)) => names,
        Some(Err(Refused::Denied(detail))) => {
            denied.queued = Some(detail);
            Vec::new()
        }
        Some(Err(Refused::Failed(e))) => return Err(e),
        None => return Err(Error::Server("no reply to DLOCK.QUEUED".into())),
    };
    let asked: HashSet<Vec<u8>> = pending.iter().cloned().collect();
    while let Some(reply) = next.take() {
        let (cursor, found) = scanned(reply, name)?;
        let more = cursor != "0";
        let mut keys = std::mem::take(&mut pending);
        keys.extend(found.into_iter().filter(|k| !asked.contains(k)));
        if keys.is_empty() && !more {
            break;
        }
        // The resources waited for are the first batch's, from
        // `DLOCK.QUEUED`: their queue's head is asked with them.
        let waited: Vec<&Vec<u8>> = keys.iter().filter(|k| asked.contains(*k)).collect();
        let mut pipe = redis::pipe();
        for k in &keys {
            pipe.cmd("DLOCK.INFO").arg(k.as_slice());
        }
        for k in &waited {
            pipe.cmd("DLOCK.WAITERS")
                .arg(k.as_slice())
                .arg("COUNT")
                .arg(1);
        }
        if more {
            pipe.add_command(scan_cmd(&cursor, pattern));
        }
        let n = keys.len() + waited.len() + usize::from(more);
        let mut replies = send(&mut c, &pipe, n).map_err(io)?;
        if more {
            next = replies.pop();
        }
        let head_replies = replies.split_off(keys.len().min(replies.len()));
        let heads: HashMap<&Vec<u8>, (Bytes, u16)> = waited
            .into_iter()
            .zip(head_replies)
            .filter_map(|(k, r)| Some((k, head(r)?)))
            .collect();
        for (key, reply) in keys.iter().zip(replies) {
            match reply {
                Value::ServerError(e) => match e.code() {
                    // Gone from this server between the SCAN and the INFO
                    // (released, expired, moved by resharding), or
                    // replaced by a value of another type.
                    "MOVED" | "ASK" | "TRYAGAIN" | "WRONGTYPE" => {}
                    "NOPERM" => {
                        denied.count += 1;
                        denied
                            .first
                            .get_or_insert_with(|| format!("NOPERM {}", e.details().unwrap_or("")));
                    }
                    _ => return Err(server_error(e.code(), e.details(), name)),
                },
                v => match Info::parse(v) {
                    // Gone between the SCAN and the INFO.
                    Ok(Info::Free) => {}
                    Ok(info) => locks.push(Listed {
                        server: name.clone(),
                        resource: Bytes(key.clone()),
                        info,
                        next: heads.get(key).map(|(t, _)| t.clone()),
                        next_priority: heads.get(key).map(|(_, p)| *p),
                    }),
                    Err(_) => {
                        return Err(Error::Server(format!(
                            "unexpected DLOCK.INFO reply for {}",
                            escaped(key)
                        )))
                    }
                },
            }
        }
    }
    Ok(())
}

/// The head's token and priority from a `DLOCK.WAITERS ... COUNT 1`
/// reply (priority 0 when the reply has none: a module older than
/// priorities); `None` for an empty queue or an error (a server without
/// the command, a user refused it: the listing goes on without the head).
fn head(reply: Value) -> Option<(Bytes, u16)> {
    let Value::Array(mut items) = reply else {
        return None;
    };
    let first = fields(items.drain(..).next()?)?;
    let token = first
        .iter()
        .find(|(k, _)| k == "token")
        .and_then(|(_, v)| match v {
            Value::BulkString(b) => Some(Bytes(b.clone())),
            _ => None,
        })?;
    let priority = first
        .iter()
        .find(|(k, _)| k == "priority")
        .map_or(0, |(_, v)| u16::try_from(int(v)).unwrap_or(0));
    Some((token, priority))
}

/// Why `DLOCK.QUEUED` gave no names.
enum Refused {
    /// The user may not run it.
    Denied(String),
    Failed(Error),
}

fn queued_cmd(pattern: Option<&[u8]>) -> redis::Cmd {
    let mut c = redis::cmd("DLOCK.QUEUED");
    if let Some(p) = pattern {
        c.arg(p);
    }
    c
}

/// A `DLOCK.QUEUED` reply: the names of the resources clients wait for.
/// A module that predates the command has none to give: the listing is
/// then the keys alone.
fn queued(reply: Value, name: &str) -> Result<Vec<Vec<u8>>, Refused> {
    let bad = || Refused::Failed(Error::Server("unexpected DLOCK.QUEUED reply".into()));
    match reply {
        Value::Array(names) | Value::Set(names) => names
            .into_iter()
            .map(|n| match n {
                Value::BulkString(b) => Ok(b),
                Value::SimpleString(s) => Ok(s.into_bytes()),
                _ => Err(bad()),
            })
            .collect(),
        Value::ServerError(e) => match reply_error(Some(e.code()), e.details(), name) {
            Some(Error::ModuleMissing(_)) => Ok(Vec::new()),
            Some(Error::Denied { detail, .. }) => Err(Refused::Denied(detail)),
            Some(other) => Err(Refused::Failed(other)),
            None => Err(Refused::Failed(server_error(e.code(), e.details(), name))),
        },
        _ => Err(bad()),
    }
}

fn denied_queued(name: &str, detail: String) -> Error {
    denied(
        name,
        format!("resources clients wait for that have no key not shown: {detail}"),
    )
}

fn denied_keys(name: &str, n: usize, first: String) -> Error {
    let s = if n == 1 { "" } else { "s" };
    denied(name, format!("{n} lock{s} not shown: {first}"))
}

/// A `SCAN` reply: the next cursor and the keys.
fn scanned(reply: Value, name: &str) -> Result<(String, Vec<Vec<u8>>), Error> {
    let bad = || Error::Server("unexpected SCAN reply".into());
    let f = match reply {
        Value::ServerError(e) => return Err(server_error(e.code(), e.details(), name)),
        Value::Array(f) if f.len() == 2 => f,
        _ => return Err(bad()),
    };
    let mut f = f.into_iter();
    let cursor = f.next().and_then(text).ok_or_else(bad)?;
    let Some(Value::Array(keys)) = f.next() else {
        return Err(bad());
    };
    let keys = keys
        .into_iter()
        .map(|k| match k {
            Value::BulkString(b) => Some(b),
            Value::SimpleString(s) => Some(s.into_bytes()),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()
        .ok_or_else(bad)?;
    Ok((cursor, keys))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn node(id: &str, ip: &str, endpoint: &str, port: i64, role: &str, health: &str) -> Value {
        Value::Array(vec![
            bulk("id"),
            bulk(id),
            bulk("port"),
            Value::Int(port),
            bulk("ip"),
            bulk(ip),
            bulk("endpoint"),
            bulk(endpoint),
            bulk("role"),
            bulk(role),
            bulk("replication-offset"),
            Value::Int(0),
            bulk("health"),
            bulk(health),
        ])
    }

    fn shard(slots: &[i64], nodes: Vec<Value>) -> Value {
        Value::Array(vec![
            bulk("slots"),
            Value::Array(slots.iter().map(|s| Value::Int(*s)).collect()),
            bulk("nodes"),
            Value::Array(nodes),
        ])
    }

    #[test]
    fn shards_give_their_live_masters_only() {
        let v = Value::Array(vec![
            shard(
                &[0, 8191],
                vec![
                    node("a", "10.0.0.1", "10.0.0.1", 7000, "master", "online"),
                    node("b", "10.0.0.2", "10.0.0.2", 7001, "replica", "online"),
                ],
            ),
            // A replica took over; the old master is down.
            shard(
                &[8192, 16383],
                vec![
                    node("c", "10.0.0.3", "?", 7002, "master", "failed"),
                    node("d", "", "", 7003, "master", "online"),
                ],
            ),
            // The whole shard is down: its master is scanned (and fails).
            shard(
                &[100, 200],
                vec![node("e", "10.0.0.5", "host-e", 7004, "master", "failed")],
            ),
            // A replaced master, no slots left.
            shard(
                &[],
                vec![node("f", "10.0.0.6", "", 7005, "master", "failed")],
            ),
        ]);
        let m = |id: &str, host: &str, port| Master {
            id: id.into(),
            host: host.into(),
            port,
        };
        assert_eq!(
            parse_shards(v, "seed", false).unwrap(),
            vec![
                m("a", "10.0.0.1", 7000),
                m("d", "seed", 7003),
                m("e", "host-e", 7004)
            ]
        );
        assert_eq!(parse_shards(Value::Int(1), "seed", false), None);
        assert_eq!(
            parse_shards(
                Value::Array(vec![Value::Array(vec![bulk("slots")])]),
                "seed",
                false
            ),
            None
        );
    }

    #[test]
    fn a_tls_client_takes_the_tls_port() {
        let both = Value::Array(vec![
            bulk("id"),
            bulk("a"),
            bulk("port"),
            Value::Int(7000),
            bulk("tls-port"),
            Value::Int(8000),
            bulk("endpoint"),
            bulk("10.0.0.1"),
            bulk("role"),
            bulk("master"),
            bulk("health"),
            bulk("online"),
        ]);
        let shards = || Value::Array(vec![shard(&[0, 16383], vec![both.clone()])]);
        let port = |tls| parse_shards(shards(), "seed", tls).unwrap()[0].port;
        assert_eq!((port(false), port(true)), (7000, 8000));
    }

    #[test]
    fn scan_replies_and_errors_are_read() {
        let (cursor, keys) = scanned(
            Value::Array(vec![
                bulk("17"),
                Value::Array(vec![bulk("a"), Value::BulkString(vec![0xff])]),
            ]),
            "s",
        )
        .unwrap();
        assert_eq!(
            (cursor.as_str(), keys),
            ("17", vec![b"a".to_vec(), vec![0xff]])
        );
        assert!(scanned(Value::Int(3), "s").is_err());
        assert!(matches!(
            reply_error(Some("ERR"), Some("unknown command 'DLOCK.INFO'"), "s"),
            Some(Error::ModuleMissing(a)) if a == "s"
        ));
        assert!(matches!(
            reply_error(Some("NOPERM"), Some("no"), "s"),
            Some(Error::Denied { .. })
        ));
        assert!(reply_error(Some("ERR"), Some("wrong number of arguments"), "s").is_none());
        assert_eq!(
            denied_keys("s", 2, "NOPERM x".into()).to_string(),
            "2 locks not shown: NOPERM x on s"
        );
    }

    #[test]
    fn queued_names_and_refusals_are_read() {
        let names = queued(
            Value::Array(vec![bulk("a"), Value::BulkString(vec![0xff])]),
            "s",
        );
        assert!(matches!(names, Ok(n) if n == [b"a".to_vec(), vec![0xff]]));
        let err = |code: &str, detail: &str| {
            redis::parse_redis_value(format!("-{code} {detail}\r\n").as_bytes()).unwrap()
        };
        // A module without the command: the keys alone.
        assert!(matches!(
            queued(err("ERR", "unknown command 'DLOCK.QUEUED'"), "s"),
            Ok(n) if n.is_empty()
        ));
        assert!(matches!(
            queued(err("NOPERM", "no"), "s"),
            Err(Refused::Denied(d)) if d == "NOPERM no"
        ));
        assert!(matches!(
            queued(err("LOADING", "x"), "s"),
            Err(Refused::Failed(Error::Unavailable(_)))
        ));
        assert!(matches!(
            queued(Value::Int(1), "s"),
            Err(Refused::Failed(_))
        ));
        assert!(matches!(
            queued(Value::Array(vec![Value::Int(1)]), "s"),
            Err(Refused::Failed(_))
        ));
        assert_eq!(
            denied_queued("s", "NOPERM x".into()).to_string(),
            "resources clients wait for that have no key not shown: NOPERM x on s"
        );
    }

    #[test]
    fn names_show_the_database() {
        use redis::IntoConnectionInfo;
        let i = |u: &str| u.into_connection_info().unwrap();
        assert_eq!(server_name(&i("redis://127.0.0.1:7000/")), "127.0.0.1:7000");
        assert_eq!(server_name(&i("redis://h:7000/2")), "h:7000/2");
    }
}
