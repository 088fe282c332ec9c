//! What `dlock top` shows, as plain data: the replies of `DLOCK.STATS`,
//! `DLOCK.STATS HOT`, `INFO dlock` and `DLOCK.INFO` read into structs (by
//! field name, unknown fields ignored: RESP3 maps and RESP2 flat arrays
//! alike), the nodes' hot resources merged into one ordering, and the
//! totals. No I/O here: `fetch` asks the servers, `view` renders.

use crate::backend::{fields, Bytes, Info};
use redis::Value;

/// The ordering of the hot resources (`DLOCK.STATS HOT BY ...`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum By {
    Contended,
    Wait,
    Expired,
}

impl By {
    pub fn parse(s: &str) -> Option<By> {
        Some(match s {
            "contended" => By::Contended,
            "wait" => By::Wait,
            "expired" => By::Expired,
            _ => return None,
        })
    }

    /// As the server and the docs name it.
    pub fn name(self) -> &'static str {
        match self {
            By::Contended => "contended",
            By::Wait => "wait",
            By::Expired => "expired",
        }
    }

    /// The key of the live view that chooses it.
    pub fn of_key(k: u8) -> Option<By> {
        Some(match k {
            b'c' => By::Contended,
            b'w' => By::Wait,
            b'e' => By::Expired,
            _ => return None,
        })
    }
}

/// A distribution of waits, in microseconds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Dist {
    pub count: i64,
    pub p50: i64,
    pub p99: i64,
    pub max: i64,
}

/// One node's `DLOCK.STATS` (its `total` figures) and `INFO dlock`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeStats {
    pub enabled: bool,
    /// Unix ms when counting started: a change means the figures were
    /// reset (no rate across it).
    pub since: i64,
    pub grants: i64,
    pub expired: i64,
    pub wait_timeouts: i64,
    pub wait: Dist,
    /// `dlock_waiters` of `INFO dlock`: clients waiting now.
    pub waiters: i64,
}

/// One resource of `DLOCK.STATS HOT`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Hot {
    pub resource: Bytes,
    pub db: i64,
    pub score: i64,
    pub error: i64,
    pub contended: i64,
    pub waited: i64,
    pub wait_timeouts: i64,
    pub expired: i64,
    pub wait: Dist,
}

/// Who holds a hot resource now, from its `DLOCK.INFO`.
#[derive(Clone, Debug, PartialEq)]
pub enum Live {
    /// Not asked (a name the server cut), or the answer was refused.
    Unknown,
    Free,
    /// Nobody holds it; it is kept for its queue.
    Reserved {
        waiters: i64,
    },
    /// A plain lock: its token's first 8 characters, held for `held_ms`.
    Lock {
        token8: String,
        held_ms: i64,
        waiters: i64,
    },
    /// Several holds (shared, a semaphore, reentrant).
    Holds {
        holders: usize,
        waiters: i64,
    },
}

impl Live {
    /// From a `DLOCK.INFO` reply, at the server's time `now_us` (a plain
    /// lock's fence is the server's clock in microseconds at the grant).
    pub fn of(info: Value, now_us: i64) -> Live {
        match Info::parse(info) {
            Ok(Info::Free) => Live::Free,
            Ok(Info::Lock {
                token: None,
                waiters,
                ..
            }) => Live::Reserved { waiters },
            Ok(Info::Lock {
                token: Some(t),
                fence,
                waiters,
                ..
            }) => Live::Lock {
                token8: t.text().chars().take(8).collect(),
                held_ms: now_us
                    .saturating_sub(i64::try_from(fence).unwrap_or(i64::MAX))
                    .max(0)
                    / 1000,
                waiters,
            },
            Ok(Info::Holds { holds, waiters, .. }) if holds.is_empty() => {
                Live::Reserved { waiters }
            }
            Ok(Info::Holds { holds, waiters, .. }) => Live::Holds {
                holders: holds.len(),
                waiters,
            },
            Err(_) => Live::Unknown,
        }
    }

    pub fn holders(&self) -> Option<usize> {
        match self {
            Live::Unknown => None,
            Live::Free | Live::Reserved { .. } => Some(0),
            Live::Lock { .. } => Some(1),
            Live::Holds { holders, .. } => Some(*holders),
        }
    }

    pub fn waiters(&self) -> Option<i64> {
        match self {
            Live::Unknown => None,
            Live::Free => Some(0),
            Live::Reserved { waiters }
            | Live::Lock { waiters, .. }
            | Live::Holds { waiters, .. } => Some(*waiters),
        }
    }
}

/// A hot resource of one node, with its holders now.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub node: String,
    pub hot: Hot,
    pub live: Live,
}

/// One node as the last refresh found it.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub name: String,
    /// None when it could not be read (`error` says why).
    pub stats: Option<NodeStats>,
    pub error: Option<String>,
    /// Grants per second since the previous refresh (None: the first
    /// refresh, or the figures were reset meanwhile).
    pub rate: Option<f64>,
}

/// One refresh: the nodes, their totals and the hottest resources.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    pub by: By,
    pub nodes: Vec<Node>,
    pub rows: Vec<Row>,
}

/// The nodes' figures added up. Percentiles cannot be added: `wait_p99`
/// and `wait_max` are the highest of the nodes'.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Totals {
    pub grants: i64,
    /// None unless every node read has a rate.
    pub rate: Option<f64>,
    pub wait_p99: i64,
    pub wait_max: i64,
    pub expired: i64,
    pub wait_timeouts: i64,
    pub waiters: i64,
    pub up: usize,
}

impl Snapshot {
    pub fn totals(&self) -> Totals {
        let mut t = Totals {
            rate: Some(0.0),
            ..Totals::default()
        };
        for n in &self.nodes {
            let Some(s) = &n.stats else { continue };
            t.up += 1;
            t.grants += s.grants;
            t.expired += s.expired;
            t.wait_timeouts += s.wait_timeouts;
            t.waiters += s.waiters;
            t.wait_p99 = t.wait_p99.max(s.wait.p99);
            t.wait_max = t.wait_max.max(s.wait.max);
            t.rate = t.rate.zip(n.rate).map(|(a, b)| a + b);
        }
        if t.up == 0 {
            t.rate = None;
        }
        t
    }
}

/// Grants per second between two readings of a node, `secs` apart; None
/// across a reset (another `since`, or fewer grants).
pub fn rate(before: &NodeStats, now: &NodeStats, secs: f64) -> Option<f64> {
    if before.since != now.since || now.grants < before.grants || secs <= 0.0 {
        return None;
    }
    Some((now.grants - before.grants) as f64 / secs)
}

/// The hottest `count` of every node's hot resources: by score, highest
/// first; ties by name, then node, so that the order is stable.
pub fn merge(mut rows: Vec<Row>, count: usize) -> Vec<Row> {
    rows.sort_by(|a, b| {
        b.hot
            .score
            .cmp(&a.hot.score)
            .then_with(|| a.hot.resource.cmp(&b.hot.resource))
            .then_with(|| a.node.cmp(&b.node))
    });
    rows.truncate(count);
    rows
}

fn get<'a>(f: &'a [(String, Value)], name: &str) -> Option<&'a Value> {
    f.iter().find(|(n, _)| n == name).map(|(_, v)| v)
}

/// An integer field: RESP integers, and numbers sent as strings.
fn int_of(f: &[(String, Value)], name: &str) -> i64 {
    match get(f, name) {
        Some(Value::Int(n)) => *n,
        Some(Value::BulkString(b)) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
        Some(Value::SimpleString(s)) => s.parse().unwrap_or(0),
        Some(Value::Double(d)) => *d as i64,
        _ => 0,
    }
}

fn dist(v: Option<&Value>) -> Dist {
    let Some(f) = v.cloned().and_then(fields) else {
        return Dist::default();
    };
    Dist {
        count: int_of(&f, "count"),
        p50: int_of(&f, "p50"),
        p99: int_of(&f, "p99"),
        max: int_of(&f, "max"),
    }
}

/// `DLOCK.STATS`: its `total` figures (None: not the documented shape).
/// `waiters` is left 0 (it comes from `INFO dlock`).
pub fn parse_stats(v: Value) -> Option<NodeStats> {
    let f = fields(v)?;
    let total = fields(get(&f, "total")?.clone())?;
    Some(NodeStats {
        enabled: int_of(&f, "enabled") != 0,
        since: int_of(&f, "since"),
        grants: int_of(&total, "grants"),
        expired: int_of(&total, "expired"),
        wait_timeouts: int_of(&total, "wait_timeouts"),
        wait: dist(get(&total, "wait")),
        waiters: 0,
    })
}

/// `DLOCK.STATS HOT`: the resources in the server's order (None: not the
/// documented shape).
pub fn parse_hot(v: Value) -> Option<Vec<Hot>> {
    let items = match v {
        Value::Array(a) | Value::Set(a) => a,
        _ => return None,
    };
    items
        .into_iter()
        .map(|item| {
            let f = fields(item)?;
            let resource = match get(&f, "resource")? {
                Value::BulkString(b) => Bytes(b.clone()),
                Value::SimpleString(s) => Bytes(s.clone().into_bytes()),
                _ => return None,
            };
            Some(Hot {
                resource,
                db: int_of(&f, "db"),
                score: int_of(&f, "score"),
                error: int_of(&f, "error"),
                contended: int_of(&f, "contended"),
                waited: int_of(&f, "waited"),
                wait_timeouts: int_of(&f, "wait_timeouts"),
                expired: int_of(&f, "expired"),
                wait: dist(get(&f, "wait")),
            })
        })
        .collect()
}

/// `dlock_waiters` of an `INFO dlock` reply (0 if missing).
pub fn info_waiters(info: &str) -> i64 {
    info.lines()
        .find_map(|l| l.trim_end().strip_prefix("dlock_waiters:"))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// `TIME`: the server's clock in microseconds.
pub fn time_us(v: &Value) -> Option<i64> {
    let Value::Array(a) = v else { return None };
    let n = |v: &Value| -> Option<i64> {
        match v {
            Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
            Value::Int(n) => Some(*n),
            _ => None,
        }
    };
    Some(n(a.first()?)?.checked_mul(1_000_000)? + n(a.get(1)?)?)
}

/// A name the server cut (longer than 256 bytes): it names no resource.
pub fn is_cut(name: &Bytes) -> bool {
    name.0.len() > 256 && name.0.ends_with(b"...")
}
