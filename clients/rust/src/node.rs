//! One server: where it is, how to log in, and a pool of connections.
//!
//! Every operation takes a connection of its own from the pool and gives it
//! back only if the operation ended cleanly, so a blocking `ACQUIRE ... WAIT`
//! never delays a renewal or a release that runs meanwhile, and a connection
//! left in an unknown state (a timeout mid-reply) is never reused.

use crate::error::Failure;
use crate::sentinel::Sentinels;
use redis::{ConnectionAddr, ConnectionInfo, ConnectionLike, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// A new connection, and the master's address when the sentinels named it.
type Opened = (redis::Connection, Option<String>);

/// Idle connections kept per server.
const POOL_SIZE: usize = 8;
/// Handshakes per server left running after their timeout, beyond which
/// new connections are refused at once (the server is not answering).
const MAX_STUCK: usize = 16;

pub(crate) struct Node {
    info: ConnectionInfo,
    /// Set when the server is found through Redis Sentinel: every new
    /// connection asks the sentinels where the master is now.
    sentinels: Option<Arc<Sentinels>>,
    /// The master found last through the sentinels, for messages.
    found: Mutex<Option<String>>,
    idle: Mutex<Vec<redis::Connection>>,
    connect_timeout: Duration,
    /// Handshakes in progress (see `connect`).
    connecting: Arc<AtomicUsize>,
}

impl Node {
    pub(crate) fn new(info: ConnectionInfo, connect_timeout: Duration) -> Node {
        Node {
            info,
            sentinels: None,
            found: Mutex::new(None),
            idle: Mutex::new(Vec::new()),
            connect_timeout,
            connecting: Arc::new(AtomicUsize::new(0)),
        }
    }

    pub(crate) fn from_url(url: &str, connect_timeout: Duration) -> crate::Result<Node> {
        if crate::sentinel::is_sentinel_url(url) {
            let sentinels = Sentinels::parse(url)?;
            let mut node = Node::new(sentinels.login_info(), connect_timeout);
            node.sentinels = Some(Arc::new(sentinels));
            return Ok(node);
        }
        Ok(Node::new(crate::url::parse(url)?, connect_timeout))
    }

    /// The same login at another address (a cluster node named by a
    /// redirect or the slot map).
    pub(crate) fn sibling(&self, host: &str, port: u16) -> Node {
        Node::new(
            crate::url::same_login_at(&self.info, host, port),
            self.connect_timeout,
        )
    }

    /// `host:port`, as the server names itself in redirects.
    pub(crate) fn addr(&self) -> String {
        if let Some(sentinels) = &self.sentinels {
            let found = self.found.lock().unwrap_or_else(|p| p.into_inner());
            return found.clone().unwrap_or_else(|| sentinels.describe());
        }
        match &self.info.addr {
            ConnectionAddr::Tcp(h, p)
            | ConnectionAddr::TcpTls {
                host: h, port: p, ..
            } => {
                format!("{h}:{p}")
            }
            ConnectionAddr::Unix(path) => path.display().to_string(),
        }
    }

    /// A new connection, handshake included, within `connect_timeout`.
    /// `redis` 0.27 bounds only the TCP connect, not the setup round trip
    /// that follows, so a paused server (SIGSTOP, a stalled VM) would hold
    /// the caller until it runs again: the handshake runs on a thread of its
    /// own, abandoned (and its connection dropped when it completes) after
    /// the timeout: `within` (the operation's), at most `connect_timeout`. At most `MAX_STUCK` such threads per server.
    fn connect(&self, within: Duration) -> Result<redis::Connection, Failure> {
        let timeout = within.min(self.connect_timeout);
        // A TLS handshake with a plaintext port stalls rather than fails.
        let hint = match self.info.addr {
            ConnectionAddr::TcpTls { .. } => " (rediss://: is this the server's tls-port?)",
            _ => "",
        };
        let timed_out = || {
            Failure::from(redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("{}: no connection within {timeout:?}{hint}", self.addr()),
            )))
        };
        if self.connecting.fetch_add(1, Ordering::SeqCst) >= MAX_STUCK {
            self.connecting.fetch_sub(1, Ordering::SeqCst);
            return Err(timed_out());
        }
        let open: Box<dyn FnOnce() -> Result<Opened, Failure> + Send> = match &self.sentinels {
            Some(sentinels) => {
                let sentinels = sentinels.clone();
                Box::new(move || {
                    let (conn, info) = sentinels.connect_master(timeout)?;
                    Ok((conn, Some(info.addr.to_string())))
                })
            }
            None => {
                let info = self.info.clone();
                Box::new(move || {
                    let conn = redis::Client::open(info)
                        .and_then(|c| c.get_connection_with_timeout(timeout))?;
                    Ok((conn, None))
                })
            }
        };
        let (tx, rx) = mpsc::channel();
        let connecting = self.connecting.clone();
        let spawned = std::thread::Builder::new()
            .name("dlock-connect".into())
            .spawn(move || {
                let _ = tx.send(open());
                connecting.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            self.connecting.fetch_sub(1, Ordering::SeqCst);
            return Err(timed_out());
        }
        let (conn, found) = rx
            .recv_timeout(timeout)
            .unwrap_or_else(|_| Err(timed_out()))?;
        if let Some(addr) = found {
            *self.found.lock().unwrap_or_else(|p| p.into_inner()) = Some(addr);
        }
        Ok(conn)
    }

    /// A new connection kept by its caller (never pooled), its reads and
    /// writes giving up after `io_timeout`: a session opened with `BIND`
    /// lives as long as the connection that opened it.
    pub(crate) fn dedicated(&self, io_timeout: Duration) -> Result<redis::Connection, Failure> {
        let timeout = Some(io_timeout.max(Duration::from_millis(1)));
        let c = self.connect(io_timeout).map_err(|f| f.at(&self.addr()))?;
        c.set_read_timeout(timeout).map_err(|e| self.failure(e))?;
        c.set_write_timeout(timeout).map_err(|e| self.failure(e))?;
        Ok(c)
    }

    /// Runs `f` on a connection of its own, whose reads and writes give up
    /// after `io_timeout`. The connection goes back to the pool only if `f`
    /// succeeded or the server answered with an error reply (the
    /// connection is then in a known state).
    pub(crate) fn with_conn<T>(
        &self,
        io_timeout: Duration,
        f: impl FnOnce(&mut redis::Connection) -> redis::RedisResult<T>,
    ) -> Result<T, Failure> {
        self.with_conn_probed(io_timeout, false, f)
    }

    /// [`Node::with_conn`], but a pooled connection is first asked for a
    /// `PING` (and dropped if it does not answer): `f` runs only on a
    /// connection that was open when `f` began, so a failure inside `f`
    /// means `f`'s command may have reached the server, and a failure
    /// before `f` means it surely did not. What a `RELEASE` retry's 0
    /// means depends on that; a server that closed an idle connection (its
    /// `timeout`) or restarted leaves such connections in the pool.
    pub(crate) fn with_live_conn<T>(
        &self,
        io_timeout: Duration,
        f: impl FnOnce(&mut redis::Connection) -> redis::RedisResult<T>,
    ) -> Result<T, Failure> {
        self.with_conn_probed(io_timeout, true, f)
    }

    fn with_conn_probed<T>(
        &self,
        io_timeout: Duration,
        probe: bool,
        f: impl FnOnce(&mut redis::Connection) -> redis::RedisResult<T>,
    ) -> Result<T, Failure> {
        let timeout = Some(io_timeout.max(Duration::from_millis(1)));
        let mut conn = loop {
            let pooled = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
            let Some(mut c) = pooled else {
                let c = self.connect(io_timeout).map_err(|f| f.at(&self.addr()))?;
                c.set_read_timeout(timeout).map_err(|e| self.failure(e))?;
                c.set_write_timeout(timeout).map_err(|e| self.failure(e))?;
                break c;
            };
            c.set_read_timeout(timeout).map_err(|e| self.failure(e))?;
            c.set_write_timeout(timeout).map_err(|e| self.failure(e))?;
            if !probe {
                break c;
            }
            match redis::cmd("PING").query::<Value>(&mut c) {
                Ok(_) => break c,
                // No answer in time: the server is not answering.
                Err(e) if e.is_timeout() => return Err(self.failure(e)),
                // Closed (the server's idle timeout, a restart): try the
                // next one, or a new one.
                Err(e) if e.is_io_error() || e.is_connection_dropped() || !c.is_open() => continue,
                // An error reply (-LOADING, ...): the connection is alive.
                Err(_) => break c,
            }
        };
        match f(&mut conn) {
            Ok(v) => {
                self.give_back(conn);
                Ok(v)
            }
            Err(e) => {
                // A server that became a replica (`READONLY`), or a master
                // that lost its replicas (`NOREPLICAS`: its replica was
                // promoted), is not asked again on this connection: a new
                // one finds the new master.
                let reusable = !(e.is_io_error() || e.is_timeout() || e.is_connection_dropped())
                    && e.kind() != redis::ErrorKind::ReadOnly
                    && e.code() != Some("NOREPLICAS")
                    && conn.is_open();
                if reusable {
                    self.give_back(conn);
                }
                Err(self.failure(e))
            }
        }
    }

    /// A failure of this server, naming it.
    fn failure(&self, e: redis::RedisError) -> Failure {
        Failure::from(e).at(&self.addr())
    }

    fn give_back(&self, conn: redis::Connection) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < POOL_SIZE {
            idle.push(conn);
        }
    }
}
