//! How `dlock top` reads the nodes: the servers `dlock list` would read
//! (each URL's, or every master of its cluster: `scan::servers`), each on
//! a connection kept from one refresh to the next, all at once on threads
//! of their own. Per node and refresh two round trips: `TIME`,
//! `DLOCK.STATS`, `DLOCK.STATS HOT BY .. COUNT n` and `INFO dlock`
//! pipelined, then `DLOCK.INFO` of each hot resource (in its database).

use super::data::{self, By, Hot, Live, Node, NodeStats, Row, Snapshot};
use crate::list::explain;
use crate::scan;
use dlock_client::{Error, TlsSettings};
use redis::{ConnectionInfo, Value};
use std::time::Instant;

/// One node to read.
struct Source {
    name: String,
    info: ConnectionInfo,
    conn: Option<redis::Connection>,
    /// The previous reading, for the rate of grants.
    last: Option<(NodeStats, Instant)>,
}

/// Every node, and the URLs whose nodes could not be found.
pub struct Sources {
    urls: Vec<String>,
    tls: Option<TlsSettings>,
    nodes: Vec<Source>,
    /// URLs (or clusters) not found, by name: found again at each refresh
    /// until they are.
    missing: Vec<(String, Error)>,
}

/// A refresh: what it read, and each node's error (for the exit code).
pub struct Refresh {
    pub snapshot: Snapshot,
    pub errors: Vec<(String, Error)>,
}

impl Sources {
    pub fn new(urls: Vec<String>, tls: Option<TlsSettings>) -> Sources {
        let mut s = Sources {
            urls,
            tls,
            nodes: Vec::new(),
            missing: Vec::new(),
        };
        s.discover();
        s
    }

    /// The nodes of the URLs, those known kept with their connection.
    fn discover(&mut self) {
        let urls: Vec<&str> = self.urls.iter().map(String::as_str).collect();
        let (found, missing) = scan::servers(&urls, self.tls.as_ref());
        let mut known = std::mem::take(&mut self.nodes);
        for (name, info) in found {
            match known.iter().position(|s| s.name == name) {
                Some(i) => self.nodes.push(known.swap_remove(i)),
                None => self.nodes.push(Source {
                    name,
                    info,
                    conn: None,
                    last: None,
                }),
            }
        }
        self.missing = missing;
    }

    /// Reads every node: the hottest `count` resources `by` the ordering,
    /// merged.
    pub fn refresh(&mut self, by: By, count: usize) -> Refresh {
        if !self.missing.is_empty() {
            self.discover();
        }
        let read: Vec<Result<(NodeStats, Vec<Row>), Error>> = std::thread::scope(|s| {
            let handles: Vec<_> = self
                .nodes
                .iter_mut()
                .map(|src| s.spawn(move || src.read(by, count)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(Error::Server("a read failed".into())))
                })
                .collect()
        });
        let mut nodes = Vec::new();
        let mut rows = Vec::new();
        let mut errors = Vec::new();
        let now = Instant::now();
        for (src, r) in self.nodes.iter_mut().zip(read) {
            match r {
                Ok((stats, found)) => {
                    let rate = src.last.as_ref().and_then(|(before, at)| {
                        data::rate(before, &stats, now.duration_since(*at).as_secs_f64())
                    });
                    src.last = Some((stats.clone(), now));
                    rows.extend(found);
                    nodes.push(Node {
                        name: src.name.clone(),
                        stats: Some(stats),
                        error: None,
                        rate,
                    });
                }
                Err(e) => {
                    src.conn = None;
                    src.last = None;
                    nodes.push(down(&src.name, &e));
                    errors.push((src.name.clone(), e));
                }
            }
        }
        for (name, e) in &self.missing {
            nodes.push(down(name, e));
            errors.push((name.clone(), clone_error(e)));
        }
        Refresh {
            snapshot: Snapshot {
                by,
                nodes,
                rows: data::merge(rows, count),
            },
            errors,
        }
    }
}

fn down(name: &str, e: &Error) -> Node {
    Node {
        name: name.to_string(),
        stats: None,
        error: Some(explain(name, e)),
        rate: None,
    }
}

/// The same error again (`Error` is not `Clone`): its kind, for the exit
/// code, and its words.
fn clone_error(e: &Error) -> Error {
    match e {
        Error::Unavailable(m) => Error::Unavailable(m.clone()),
        Error::ModuleMissing(m) => Error::ModuleMissing(m.clone()),
        Error::Denied { addr, detail } => Error::Denied {
            addr: addr.clone(),
            detail: detail.clone(),
        },
        Error::Invalid(m) => Error::Invalid(m.clone()),
        other => Error::Server(other.to_string()),
    }
}

/// An error reply as an error of node `name`; a server without
/// `DLOCK.STATS` is said to be one.
fn reply_error(v: &Value, name: &str) -> Option<Error> {
    let Value::ServerError(e) = v else {
        return None;
    };
    Some(match scan::server_error(e.code(), e.details(), name) {
        Error::ModuleMissing(_) => Error::Unavailable(format!(
            "{name}: DLOCK.STATS is unknown there: the dlock module is missing \
             or older than statistics"
        )),
        other => other,
    })
}

impl Source {
    fn read(&mut self, by: By, count: usize) -> Result<(NodeStats, Vec<Row>), Error> {
        let name = self.name.clone();
        if self.conn.is_none() {
            self.conn = Some(scan::connect(&self.info, &name)?);
        }
        let Some(c) = self.conn.as_mut() else {
            return Err(Error::Unavailable(format!("{name}: no connection")));
        };
        let io = |e| scan::error(e, &name);
        let bad = |what: &str| Error::Server(format!("{name}: unexpected {what} reply"));
        let mut pipe = redis::pipe();
        pipe.cmd("TIME");
        pipe.cmd("DLOCK.STATS");
        pipe.cmd("DLOCK.STATS")
            .arg("HOT")
            .arg("BY")
            .arg(by.name())
            .arg("COUNT")
            .arg(count);
        pipe.cmd("INFO").arg("dlock");
        let replies = scan::send(c, &pipe, 4).map_err(io)?;
        if let Some(e) = replies.iter().find_map(|v| reply_error(v, &name)) {
            return Err(e);
        }
        let [time, stats, hot, info] =
            <[Value; 4]>::try_from(replies).map_err(|_| bad("pipeline"))?;
        let now_us = data::time_us(&time).ok_or_else(|| bad("TIME"))?;
        let mut stats = data::parse_stats(stats).ok_or_else(|| bad("DLOCK.STATS"))?;
        let hot = data::parse_hot(hot).ok_or_else(|| bad("DLOCK.STATS HOT"))?;
        stats.waiters = match info {
            Value::BulkString(b) => data::info_waiters(&String::from_utf8_lossy(&b)),
            Value::VerbatimString { text, .. } | Value::SimpleString(text) => {
                data::info_waiters(&text)
            }
            _ => 0,
        };
        let lives = live(c, &hot, self.info.redis.db, now_us).map_err(io)?;
        let rows = hot
            .into_iter()
            .zip(lives)
            .map(|(hot, live)| Row {
                node: name.clone(),
                hot,
                live,
            })
            .collect();
        Ok((stats, rows))
    }
}

/// Each hot resource's holders now: its `DLOCK.INFO`, in its database
/// (`SELECT`ed for it, then the connection's again). A name the server
/// cut is not asked.
fn live(
    c: &mut redis::Connection,
    hot: &[Hot],
    conn_db: i64,
    now_us: i64,
) -> redis::RedisResult<Vec<Live>> {
    let mut pipe = redis::pipe();
    let mut n = 0;
    for h in hot.iter().filter(|h| !data::is_cut(&h.resource)) {
        if h.db != conn_db {
            pipe.cmd("SELECT").arg(h.db);
            n += 1;
        }
        pipe.cmd("DLOCK.INFO").arg(&h.resource.0);
        n += 1;
        if h.db != conn_db {
            pipe.cmd("SELECT").arg(conn_db);
            n += 1;
        }
    }
    let mut replies = if n == 0 {
        Vec::new()
    } else {
        scan::send(c, &pipe, n)?
    }
    .into_iter();
    Ok(hot
        .iter()
        .map(|h| {
            if data::is_cut(&h.resource) {
                return Live::Unknown;
            }
            let selected = if h.db != conn_db {
                matches!(replies.next(), Some(Value::Okay))
            } else {
                true
            };
            let info = replies.next();
            if h.db != conn_db {
                replies.next();
            }
            match info {
                Some(v @ (Value::Nil | Value::Map(_) | Value::Array(_))) if selected => {
                    Live::of(v, now_us)
                }
                _ => Live::Unknown,
            }
        })
        .collect())
}
