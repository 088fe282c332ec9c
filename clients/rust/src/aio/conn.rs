//! The server an async [`Locker`](super::Locker) talks to: its address
//! (or the sentinels that name it), its connections (one shared, one of
//! their own for commands that block theirs), the settings, and one
//! command on it bounded by a timeout.

use crate::error::{millis, Error, Failure};
use crate::sentinel::Sentinels;
use redis::aio::MultiplexedConnection;
use redis::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(super) struct Server {
    pub client: redis::Client,
    /// Set when the server is found through Redis Sentinel: every new
    /// connection asks the sentinels where the master is now.
    pub sentinels: Option<Arc<Sentinels>>,
    /// The master found last through the sentinels, for messages.
    pub found: Arc<std::sync::Mutex<Option<String>>>,
    /// Shared by every non-blocking command; a blocking `ACQUIRE ... WAIT`,
    /// and a command followed by `WAIT n timeout` (`min_replicas`), opens a
    /// connection of its own, so nothing queues behind it.
    pub shared: tokio::sync::Mutex<Option<MultiplexedConnection>>,
    pub io_timeout: Duration,
    pub retry_for: Duration,
    pub min_replicas: Option<(u32, Duration)>,
    pub watchdog: bool,
    pub sessions: crate::session::SessionSettings,
}

impl Server {
    /// A connection for one command: the shared one, or a new one when
    /// `dedicated` (a command that blocks its connection).
    pub(super) async fn conn(
        &self,
        dedicated: bool,
    ) -> std::result::Result<MultiplexedConnection, Failure> {
        let inner = self;
        if dedicated {
            return self.open().await;
        }
        let mut slot = inner.shared.lock().await;
        match slot.as_ref() {
            Some(c) => Ok(c.clone()),
            None => {
                let c = self.open().await?;
                *slot = Some(c.clone());
                Ok(c)
            }
        }
    }

    /// A new connection: to the server, or to the master the sentinels
    /// name now (asked on a blocking thread: see `Sentinels`).
    pub(super) async fn open(&self) -> std::result::Result<MultiplexedConnection, Failure> {
        let Some(sentinels) = self.sentinels.clone() else {
            return Ok(self.client.get_multiplexed_async_connection().await?);
        };
        let timeout = self.io_timeout;
        let found = tokio::task::spawn_blocking(move || sentinels.connect_master(timeout))
            .await
            .map_err(|e| Failure::Retry(Error::Unavailable(e.to_string())))?;
        let (_, info) = found?;
        *self.found.lock().unwrap_or_else(|p| p.into_inner()) = Some(info.addr.to_string());
        Ok(redis::Client::open(info)?
            .get_multiplexed_async_connection()
            .await?)
    }

    /// The server's address for messages (the master found last, through
    /// Sentinel).
    pub(super) fn addr(&self) -> String {
        match &self.sentinels {
            Some(sentinels) => {
                let found = self.found.lock().unwrap_or_else(|p| p.into_inner());
                found.clone().unwrap_or_else(|| sentinels.describe())
            }
            None => self.client.get_connection_info().addr.to_string(),
        }
    }

    /// A failure, naming the server; on the shared connection, a broken
    /// one is not used again.
    pub(super) async fn failed(&self, f: Failure, dedicated: bool) -> Failure {
        if matches!(f, Failure::Retry(_)) && !dedicated {
            *self.shared.lock().await = None;
        }
        f.at(&self.addr())
    }

    /// Runs `cmd` (+ `WAIT n` when `durable` and asked for) on the shared
    /// connection, or on a new one when `dedicated` (a blocking acquire),
    /// its reply due within `io + extra`.
    pub(super) async fn call(
        &self,
        cmd: &redis::Cmd,
        durable: bool,
        dedicated: bool,
        io: Duration,
        extra: Duration,
        connected: &AtomicBool,
    ) -> std::result::Result<(Value, Option<i64>), Failure> {
        let durability = self.min_replicas.filter(|_| durable);
        let mut p = redis::pipe();
        p.add_command(cmd.clone());
        if let Some((n, t)) = durability {
            // `WAIT n 0` blocks forever: a timeout under 1 ms waits 1 ms.
            p.cmd("WAIT").arg(n).arg(millis(t).max(1));
        }
        let limit = io
            .saturating_add(extra)
            .saturating_add(durability.map_or(Duration::ZERO, |d| d.1));
        // `WAIT n timeout` blocks its connection like a waiting acquire:
        // never on the shared one, where every other command would queue
        // behind it.
        let dedicated = dedicated || durability.is_some();
        // `connected`: the attempt reached a working server (answered, or
        // its connection broke or timed out after sending); an error reply
        // (`READONLY`, `LOADING`, ...) is not one (see the blocking API).
        let sent = AtomicBool::new(false);
        let run = async {
            let mut conn = self.conn(dedicated).await?;
            sent.store(true, Ordering::Relaxed);
            let r = p.query_async::<Vec<Value>>(&mut conn).await;
            if r.as_ref().map_or_else(crate::error::reached, |_| true) {
                connected.store(true, Ordering::Relaxed);
            }
            r.map_err(Failure::from)
        };
        let replies = match tokio::time::timeout(limit, run).await {
            Ok(Ok(v)) => v,
            Ok(Err(f)) => return Err(self.failed(f, dedicated).await),
            Err(_) => {
                if sent.load(Ordering::Relaxed) {
                    connected.store(true, Ordering::Relaxed);
                }
                let f = Failure::Retry(Error::Unavailable("timed out".into()));
                return Err(self.failed(f, dedicated).await);
            }
        };
        let mut replies = replies.into_iter();
        let first = replies.next().unwrap_or(Value::Nil);
        let acked = durability.map(|_| match replies.next() {
            Some(Value::Int(n)) => n,
            _ => 0,
        });
        Ok((first, acked))
    }

    /// `cmd` on the shared connection after a `PING` on it answered: when
    /// `cmd` fails, `*sent` tells whether it may have reached the server
    /// (see the blocking API's `Node::with_live_conn`).
    pub(super) async fn call_live(
        &self,
        cmd: &redis::Cmd,
        sent: &mut Option<Instant>,
    ) -> std::result::Result<Value, Failure> {
        let io = self.io_timeout;
        let run = async {
            let mut conn = self.conn(false).await?;
            redis::cmd("PING").query_async::<Value>(&mut conn).await?;
            *sent = Some(Instant::now());
            let r = cmd.query_async::<Value>(&mut conn).await;
            if r.as_ref()
                .is_err_and(|e| !(e.is_io_error() || e.is_timeout() || e.is_connection_dropped()))
            {
                // An error reply (`READONLY`, `LOADING`, ...): not run.
                *sent = None;
            }
            r.map_err(Failure::from)
        };
        match tokio::time::timeout(io.saturating_mul(2), run).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(f)) => Err(self.failed(f, false).await),
            Err(_) => {
                let f = Failure::Retry(Error::Unavailable("timed out".into()));
                Err(self.failed(f, false).await)
            }
        }
    }
}
