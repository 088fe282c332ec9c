//! Which server a resource's commands go to: the one server, or in Redis
//! Cluster the master of the resource's slot. Cluster routing is done here,
//! not by the `redis` crate's cluster connection, because a lock needs what
//! that connection does not give: a `WAIT n` on the very connection that
//! made the write, and a blocking `ACQUIRE ... WAIT` on a connection of its
//! own. `MOVED` refreshes the slot map and retries, `ASK` sends `ASKING`
//! and the command to the importing node on one connection.

use crate::error::Failure;
use crate::node::Node;
use redis::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

/// Redirects followed for one command before giving up (a slot map in
/// flux answers again on the caller's next retry).
const MAX_REDIRECTS: usize = 5;

pub(crate) enum Topology {
    Single(Arc<Node>),
    Cluster(ClusterMap),
}

pub(crate) struct ClusterMap {
    /// Nodes to ask for the slot map when none of the known masters answers.
    seeds: Vec<Arc<Node>>,
    /// (first slot, last slot, master address), from `CLUSTER SLOTS`.
    slots: RwLock<Vec<(u16, u16, String)>>,
    nodes: Mutex<HashMap<String, Arc<Node>>>,
}

impl Topology {
    /// Runs `op` on the server that owns `key`. `op` gets the connection and
    /// whether it must send `ASKING` first (in the same pipeline). Its
    /// replies are awaited for `io_timeout + extra` (`extra`: a blocking
    /// command's own wait); a slot map refresh gets `io_timeout` only.
    pub(crate) fn run<T>(
        &self,
        key: &str,
        io_timeout: Duration,
        extra: Duration,
        op: impl FnMut(&mut redis::Connection, bool) -> redis::RedisResult<T>,
    ) -> Result<T, Failure> {
        self.run_with(key, io_timeout, extra, false, op)
    }

    /// The server `key`'s commands go to now: the one server, or the master
    /// of its slot (sessions are per server).
    pub(crate) fn node_for(&self, key: &str, io_timeout: Duration) -> Result<Arc<Node>, Failure> {
        match self {
            Topology::Single(node) => Ok(node.clone()),
            Topology::Cluster(map) => map.master_for(key, io_timeout),
        }
    }

    /// [`Topology::run`] on connections known open when `op` begins (see
    /// [`Node::with_live_conn`]).
    pub(crate) fn run_live<T>(
        &self,
        key: &str,
        io_timeout: Duration,
        op: impl FnMut(&mut redis::Connection, bool) -> redis::RedisResult<T>,
    ) -> Result<T, Failure> {
        self.run_with(key, io_timeout, Duration::ZERO, true, op)
    }

    fn run_with<T>(
        &self,
        key: &str,
        io_timeout: Duration,
        extra: Duration,
        live: bool,
        mut op: impl FnMut(&mut redis::Connection, bool) -> redis::RedisResult<T>,
    ) -> Result<T, Failure> {
        let op_timeout = io_timeout.saturating_add(extra);
        let on =
            |node: &Node, op: &mut dyn FnMut(&mut redis::Connection) -> redis::RedisResult<T>| {
                if live {
                    node.with_live_conn(op_timeout, op)
                } else {
                    node.with_conn(op_timeout, op)
                }
            };
        match self {
            Topology::Single(node) => on(node, &mut |c| op(c, false)),
            Topology::Cluster(map) => {
                let mut node = map.master_for(key, io_timeout)?;
                let mut asking = false;
                for _ in 0..MAX_REDIRECTS {
                    match on(&node, &mut |c| op(c, asking)) {
                        Err(Failure::Moved { addr }) => {
                            // The map is stale: learn the new one, and go
                            // where the server said meanwhile.
                            let _ = map.refresh(io_timeout);
                            node = map.node(&addr);
                            asking = false;
                        }
                        Err(Failure::Ask { addr }) => {
                            node = map.node(&addr);
                            asking = true;
                        }
                        Err(Failure::Retry(e)) => {
                            // A failover or a dead master: ask again next time.
                            let _ = map.refresh(io_timeout);
                            return Err(Failure::Retry(e));
                        }
                        other => return other,
                    }
                }
                Err(Failure::Retry(crate::Error::Unavailable(format!(
                    "more than {MAX_REDIRECTS} redirects for {key}"
                ))))
            }
        }
    }
}

impl ClusterMap {
    pub(crate) fn new(seeds: Vec<Node>, io_timeout: Duration) -> Result<ClusterMap, Failure> {
        let map = ClusterMap {
            seeds: seeds.into_iter().map(Arc::new).collect(),
            slots: RwLock::new(Vec::new()),
            nodes: Mutex::new(HashMap::new()),
        };
        map.refresh(io_timeout)?;
        Ok(map)
    }

    fn node(&self, addr: &str) -> Arc<Node> {
        let mut nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = nodes.get(addr) {
            return n.clone();
        }
        let (host, port) = split_addr(addr);
        let node = Arc::new(self.seeds[0].sibling(host, port));
        nodes.insert(addr.to_string(), node.clone());
        node
    }

    fn master_for(&self, key: &str, io_timeout: Duration) -> Result<Arc<Node>, Failure> {
        let slot = redis::cluster_routing::get_slot(key.as_bytes());
        if let Some(addr) = self.lookup(slot) {
            return Ok(self.node(&addr));
        }
        self.refresh(io_timeout)?;
        match self.lookup(slot) {
            Some(addr) => Ok(self.node(&addr)),
            None => Err(Failure::Retry(crate::Error::Unavailable(format!(
                "no master serves slot {slot}"
            )))),
        }
    }

    fn lookup(&self, slot: u16) -> Option<String> {
        let slots = self.slots.read().unwrap_or_else(|p| p.into_inner());
        slots
            .iter()
            .find(|(lo, hi, _)| (*lo..=*hi).contains(&slot))
            .map(|(_, _, a)| a.clone())
    }

    /// Reads `CLUSTER SLOTS` from the first known node that answers.
    fn refresh(&self, io_timeout: Duration) -> Result<(), Failure> {
        let known: Vec<Arc<Node>> = {
            let nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
            nodes
                .values()
                .cloned()
                .chain(self.seeds.iter().cloned())
                .collect()
        };
        let mut last = None;
        for node in known {
            let reply = node.with_conn(io_timeout, |c| {
                redis::cmd("CLUSTER").arg("SLOTS").query::<Value>(c)
            });
            match reply.map(|v| parse_slots(&v, &node.addr())) {
                Ok(Some(slots)) if !slots.is_empty() => {
                    *self.slots.write().unwrap_or_else(|p| p.into_inner()) = slots;
                    return Ok(());
                }
                Ok(_) => {}
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            Failure::Retry(crate::Error::Unavailable(
                "no cluster node returned a slot map".into(),
            ))
        }))
    }
}

fn split_addr(addr: &str) -> (&str, u16) {
    match addr.rsplit_once(':') {
        Some((h, p)) => (h, p.parse().unwrap_or(6379)),
        None => (addr, 6379),
    }
}

/// `CLUSTER SLOTS`: `[[start, end, [ip, port, id, ...], replicas...], ...]`.
/// An empty ip means "the address you reached me on".
fn parse_slots(v: &Value, asked: &str) -> Option<Vec<(u16, u16, String)>> {
    let Value::Array(ranges) = v else { return None };
    let mut out = Vec::new();
    for r in ranges {
        let Value::Array(f) = r else { return None };
        let (Some(Value::Int(lo)), Some(Value::Int(hi)), Some(Value::Array(master))) =
            (f.first(), f.get(1), f.get(2))
        else {
            return None;
        };
        let host = match master.first() {
            Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
            _ => return None,
        };
        let Some(Value::Int(port)) = master.get(1) else {
            return None;
        };
        let host = if host.is_empty() || host == "?" {
            split_addr(asked).0.to_string()
        } else {
            host
        };
        out.push((*lo as u16, *hi as u16, format!("{host}:{port}")));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn parses_cluster_slots_and_fills_in_an_empty_host() {
        let v = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(8191),
                Value::Array(vec![bulk("10.0.0.1"), Value::Int(7000), bulk("id1")]),
                Value::Array(vec![bulk("10.0.0.2"), Value::Int(7001), bulk("id2")]),
            ]),
            Value::Array(vec![
                Value::Int(8192),
                Value::Int(16383),
                Value::Array(vec![bulk(""), Value::Int(7002), bulk("id3")]),
            ]),
        ]);
        let slots = parse_slots(&v, "127.0.0.1:7002").unwrap();
        assert_eq!(
            slots,
            vec![
                (0, 8191, "10.0.0.1:7000".to_string()),
                (8192, 16383, "127.0.0.1:7002".to_string())
            ]
        );
        assert_eq!(parse_slots(&Value::Int(1), "x"), None);
    }
}
