//! The async API on tokio (feature `tokio`): [`Locker`], [`LockRequest`]
//! and [`Guard`] with the same rules as the blocking API (same-token
//! retries, a lease budget counted from send times, a refresh after a
//! `WAIT` grant, `min_replicas`, an opt-in watchdog, a loss signal that
//! follows every change of deadline), on one server.
//!
//! Release with `guard.release().await`. Dropping a guard instead does a
//! best-effort release on a spawned task (when dropped inside a tokio
//! runtime; otherwise the lease simply runs out). Redis Cluster and Redlock
//! are offered by the blocking API.
//!
//! ```no_run
//! # async fn demo() -> dlock_client::Result<()> {
//! use std::time::Duration;
//! let locker = dlock_client::aio::Locker::new("redis://127.0.0.1:6379/")?;
//! let guard = locker
//!     .request("orders:42")
//!     .ttl(Duration::from_secs(30))
//!     .wait(Duration::from_secs(5))
//!     .acquire()
//!     .await?;
//! if let Some(guard) = guard {
//!     println!("fence {}", guard.fence());
//!     guard.release().await?;
//! }
//! # Ok(()) }
//! ```

use crate::error::{millis, Error, Failure, Result};
use crate::limits::{after, clamp, lease};
use crate::request::{lock_options, new_token, Spec};
use crate::retry::Outage;
use crate::sentinel::Sentinels;
use redis::aio::MultiplexedConnection;
use redis::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod election;
mod guard;
pub use election::{Election, Leadership, Observe};
pub use guard::Guard;

/// The time a reply may take beyond the call's own deadline.
const REPLY_MARGIN: Duration = Duration::from_millis(250);

/// Takes locks on one server. Cheap to clone.
#[derive(Clone)]
pub struct Locker {
    inner: Arc<Inner>,
}

struct Inner {
    client: redis::Client,
    /// Set when the server is found through Redis Sentinel: every new
    /// connection asks the sentinels where the master is now.
    sentinels: Option<Arc<Sentinels>>,
    /// The master found last through the sentinels, for messages.
    found: Arc<std::sync::Mutex<Option<String>>>,
    /// Shared by every non-blocking command; a blocking `ACQUIRE ... WAIT`,
    /// and a command followed by `WAIT n timeout` (`min_replicas`), opens a
    /// connection of its own, so nothing queues behind it.
    shared: tokio::sync::Mutex<Option<MultiplexedConnection>>,
    io_timeout: Duration,
    retry_for: Duration,
    min_replicas: Option<(u32, Duration)>,
    watchdog: bool,
}

impl Locker {
    /// A locker on one server, or on the master that Redis Sentinel names
    /// (`redis+sentinel://...`: see [`crate::sentinel`]).
    pub fn new(url: &str) -> Result<Locker> {
        if crate::sentinel::is_sentinel_url(url) {
            let sentinels = Sentinels::parse(url)?;
            let client = redis::Client::open(sentinels.login_info())
                .map_err(|e| Error::Invalid(format!("{}: {e}", crate::url::redact_url(url))))?;
            return Ok(Locker::on(client, Some(Arc::new(sentinels))));
        }
        Locker::with_info(url, crate::url::parse(url)?)
    }

    /// A locker on one TLS server (`rediss://host:port/`), verified and
    /// logged in with `tls` (see [`crate::TlsSettings`]).
    pub fn new_tls(url: &str, tls: &crate::TlsSettings) -> Result<Locker> {
        Locker::with_info(url, tls.connection_info(url)?)
    }

    fn with_info(url: &str, info: redis::ConnectionInfo) -> Result<Locker> {
        let client = redis::Client::open(info)
            .map_err(|e| Error::Invalid(format!("{}: {e}", crate::url::redact_url(url))))?;
        Ok(Locker::from_client(client))
    }

    pub fn from_client(client: redis::Client) -> Locker {
        Locker::on(client, None)
    }

    /// A locker with the default settings on `client`'s server, or on the
    /// master `sentinels` name.
    fn on(client: redis::Client, sentinels: Option<Arc<Sentinels>>) -> Locker {
        Locker {
            inner: Arc::new(Inner {
                client,
                sentinels,
                found: Arc::default(),
                shared: tokio::sync::Mutex::new(None),
                io_timeout: Duration::from_secs(2),
                retry_for: Duration::from_secs(2),
                min_replicas: None,
                watchdog: false,
            }),
        }
    }

    /// A new locker with `change` made to the settings (clones made before
    /// keep theirs).
    fn with(self, change: impl FnOnce(&mut Inner)) -> Locker {
        let i = &self.inner;
        let mut inner = Inner {
            client: i.client.clone(),
            sentinels: i.sentinels.clone(),
            found: i.found.clone(),
            shared: tokio::sync::Mutex::new(None),
            io_timeout: i.io_timeout,
            retry_for: i.retry_for,
            min_replicas: i.min_replicas,
            watchdog: i.watchdog,
        };
        change(&mut inner);
        Locker {
            inner: Arc::new(inner),
        }
    }

    /// Every grant and renewal must reach `n` replicas within `timeout`.
    pub fn with_min_replicas(self, n: u32, timeout: Duration) -> Locker {
        self.with(|i| i.min_replicas = Some((n, clamp(timeout))))
    }

    /// The longest wait for one reply, beyond a blocking acquire's own
    /// wait (default 2 s).
    pub fn with_io_timeout(self, d: Duration) -> Locker {
        self.with(|i| i.io_timeout = clamp(d))
    }

    /// The longest run of connection errors a request retries through with
    /// the same token (default 2 s).
    pub fn with_retry_for(self, d: Duration) -> Locker {
        self.with(|i| i.retry_for = clamp(d))
    }

    /// Renew every guard in the background (see [`LockRequest::watchdog`]).
    pub fn with_watchdog(self, on: bool) -> Locker {
        self.with(|i| i.watchdog = on)
    }

    /// A request for one resource, to set options on and then
    /// [`acquire`](LockRequest::acquire).
    pub fn request(&self, resource: impl Into<String>) -> LockRequest<'_> {
        LockRequest {
            locker: self,
            spec: Spec::new(vec![resource.into()]),
            watchdog: self.inner.watchdog,
            on_lost: None,
            token: None,
        }
    }

    /// One attempt, no waiting: `Ok(None)` if busy.
    pub async fn try_lock(&self, resource: &str, ttl: Duration) -> Result<Option<Guard>> {
        self.request(resource).ttl(ttl).acquire().await
    }

    /// A connection for one command: the shared one, or a new one when
    /// `dedicated` (a command that blocks its connection).
    async fn conn(&self, dedicated: bool) -> std::result::Result<MultiplexedConnection, Failure> {
        let inner = &self.inner;
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
    async fn open(&self) -> std::result::Result<MultiplexedConnection, Failure> {
        let Some(sentinels) = self.inner.sentinels.clone() else {
            return Ok(self.inner.client.get_multiplexed_async_connection().await?);
        };
        let timeout = self.inner.io_timeout;
        let found = tokio::task::spawn_blocking(move || sentinels.connect_master(timeout))
            .await
            .map_err(|e| Failure::Retry(Error::Unavailable(e.to_string())))?;
        let (_, info) = found?;
        *self.inner.found.lock().unwrap_or_else(|p| p.into_inner()) = Some(info.addr.to_string());
        Ok(redis::Client::open(info)?
            .get_multiplexed_async_connection()
            .await?)
    }

    /// The server's address for messages (the master found last, through
    /// Sentinel).
    fn addr(&self) -> String {
        match &self.inner.sentinels {
            Some(sentinels) => {
                let found = self.inner.found.lock().unwrap_or_else(|p| p.into_inner());
                found.clone().unwrap_or_else(|| sentinels.describe())
            }
            None => self.inner.client.get_connection_info().addr.to_string(),
        }
    }

    /// A failure, naming the server; on the shared connection, a broken
    /// one is not used again.
    async fn failed(&self, f: Failure, dedicated: bool) -> Failure {
        if matches!(f, Failure::Retry(_)) && !dedicated {
            *self.inner.shared.lock().await = None;
        }
        f.at(&self.addr())
    }

    /// Runs `cmd` (+ `WAIT n` when `durable` and asked for) on the shared
    /// connection, or on a new one when `dedicated` (a blocking acquire),
    /// its reply due within `io + extra`.
    async fn call(
        &self,
        cmd: &redis::Cmd,
        durable: bool,
        dedicated: bool,
        io: Duration,
        extra: Duration,
        connected: &AtomicBool,
    ) -> std::result::Result<(Value, Option<i64>), Failure> {
        let durability = self.inner.min_replicas.filter(|_| durable);
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
            if r.as_ref().map_or_else(crate::single::reached, |_| true) {
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
    async fn call_live(
        &self,
        cmd: &redis::Cmd,
        sent: &mut Option<Instant>,
    ) -> std::result::Result<Value, Failure> {
        let io = self.inner.io_timeout;
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

/// An async lock request: options, then [`LockRequest::acquire`]. The
/// same options as the blocking [`crate::LockRequest`].
pub struct LockRequest<'a> {
    locker: &'a Locker,
    spec: Spec,
    watchdog: bool,
    on_lost: Option<Box<dyn FnOnce() + Send>>,
    token: Option<String>,
}

lock_options!(LockRequest);

impl LockRequest<'_> {
    /// Acquire with this token instead of a fresh random one (as the
    /// blocking API's `LockRequest::token`). Must not be empty.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Acquires: `Ok(Some(guard))` when granted, `Ok(None)` when busy (or
    /// the wait ran out). Connection errors are retried with the same token
    /// for at most `retry_for` in a row, and the whole call ends by the
    /// wait (for a request that does not wait, after `retry_for`) plus a
    /// reply's margin.
    pub async fn acquire(self) -> Result<Option<Guard>> {
        self.spec.validate()?;
        if self.token.as_deref() == Some("") {
            return Err(Error::Invalid("token must not be empty".into()));
        }
        let lease = Arc::new(AsyncLease {
            locker: self.locker.clone(),
            spec: self.spec,
            token: self.token.unwrap_or_else(new_token),
            renewing: tokio::sync::Mutex::new(()),
        });
        let Some((fence, valid_until)) = lease.acquire().await? else {
            return Ok(None);
        };
        Ok(Some(Guard::new(
            lease,
            fence,
            valid_until,
            self.watchdog,
            self.on_lost,
        )))
    }
}

pub(crate) struct AsyncLease {
    locker: Locker,
    spec: Spec,
    token: String,
    /// Held from an `EXTEND`'s send until its outcome is applied.
    renewing: tokio::sync::Mutex<()>,
}

impl AsyncLease {
    fn too_few(&self, acked: Option<i64>) -> Option<Error> {
        match (self.locker.inner.min_replicas, acked) {
            (Some((wanted, _)), Some(acked)) if acked < wanted as i64 => {
                Some(Error::TooFewReplicas { acked, wanted })
            }
            _ => None,
        }
    }

    fn io_until(&self, deadline: Instant, waiting: Duration) -> Duration {
        let left = deadline.saturating_duration_since(Instant::now()) + REPLY_MARGIN;
        self.locker
            .inner
            .io_timeout
            .min(left.saturating_sub(waiting))
            .max(Duration::from_millis(1))
    }

    async fn acquire(&self) -> Result<Option<(u64, Instant)>> {
        let start = Instant::now();
        let wait_deadline = self.spec.wait.map(|w| after(start, w));
        let retry_for = self.locker.inner.retry_for;
        let deadline = crate::single::call_deadline(start, self.spec.wait, retry_for);
        let mut maybe_granted = false;
        let mut outage = Outage::new();
        let (fence, sent, waited) = loop {
            let sent = Instant::now();
            // WAIT 0 would wait forever: a wait used up is a plain try.
            let wait_ms = wait_deadline
                .map(|d| millis(d.saturating_duration_since(sent)))
                .filter(|&w| w > 0);
            let cmd = self.spec.acquire_cmd(&self.token, wait_ms);
            let extra = Duration::from_millis(wait_ms.unwrap_or(0));
            let io = self.io_until(deadline, extra);
            let waiting = wait_ms.is_some();
            // A failure after the attempt got a connection (a server that
            // died while we waited in its queue) starts a new outage.
            let connected = AtomicBool::new(false);
            match self
                .locker
                .call(&cmd, !waiting, waiting, io, extra, &connected)
                .await
            {
                Ok((Value::Int(fence), acked)) => {
                    if let Some(e) = self.too_few(acked) {
                        self.abandon(deadline).await;
                        return Err(e);
                    }
                    break (fence as u64, sent, waiting);
                }
                Ok((Value::Nil, _)) => return Ok(None),
                Ok((other, _)) => return Err(Error::Server(format!("unexpected reply {other:?}"))),
                Err(Failure::Retry(e)) => {
                    maybe_granted = true;
                    if connected.load(Ordering::Relaxed) {
                        outage = Outage::new();
                    }
                    let Some(pause) = outage.next_pause(retry_for, deadline) else {
                        self.abandon(deadline).await;
                        return Err(e);
                    };
                    tokio::time::sleep(pause).await;
                }
                Err(f) => {
                    if maybe_granted {
                        self.abandon(deadline).await;
                    }
                    return Err(f.into_error());
                }
            }
        };
        if !waited {
            return Ok(Some((fence, sent + lease(self.spec.ttl))));
        }
        // A grant handed over while waiting: refresh, count from its send,
        // within what is left of the call (at least a reply's margin).
        let refresh_by = deadline.max(Instant::now() + REPLY_MARGIN);
        match self.extend_by(self.spec.ttl, refresh_by).await {
            Ok(Some(until)) => Ok(Some((fence, until))),
            Ok(None) => Err(Error::Lost),
            Err(e) => {
                self.abandon(deadline).await;
                Err(e)
            }
        }
    }

    /// Best-effort release of a grant the caller will not get, within the
    /// call's deadline.
    async fn abandon(&self, deadline: Instant) {
        let deadline = deadline.min(Instant::now() + REPLY_MARGIN);
        let cmd = self.spec.release_cmd(&self.token);
        let mut outage = Outage::new();
        loop {
            let io = self.io_until(deadline, Duration::ZERO);
            match self
                .locker
                .call(
                    &cmd,
                    false,
                    false,
                    io,
                    Duration::ZERO,
                    &AtomicBool::new(false),
                )
                .await
            {
                Err(Failure::Retry(_)) => match outage.next_pause(Duration::MAX, deadline) {
                    Some(pause) => tokio::time::sleep(pause).await,
                    None => return,
                },
                _ => return,
            }
        }
    }

    /// `Some(valid_until)` when extended, `None` when answered 0.
    async fn extend(&self, ttl: Duration) -> Result<Option<Instant>> {
        let deadline = after(Instant::now(), self.locker.inner.retry_for);
        self.extend_by(ttl, deadline).await
    }

    /// `EXTEND`, retried until `deadline`, each reply due by then plus a
    /// reply's margin.
    async fn extend_by(&self, ttl: Duration, deadline: Instant) -> Result<Option<Instant>> {
        let cmd = self.spec.extend_cmd(&self.token, ttl);
        let mut outage = Outage::new();
        loop {
            let sent = Instant::now();
            let io = self.io_until(deadline, Duration::ZERO);
            match self
                .locker
                .call(
                    &cmd,
                    true,
                    false,
                    io,
                    Duration::ZERO,
                    &AtomicBool::new(false),
                )
                .await
            {
                Ok((Value::Int(1), acked)) => {
                    return match self.too_few(acked) {
                        Some(e) => Err(e),
                        None => Ok(Some(sent + lease(ttl))),
                    }
                }
                Ok((Value::Int(0), _)) => return Ok(None),
                Ok((other, _)) => return Err(Error::Server(format!("unexpected reply {other:?}"))),
                Err(Failure::Retry(e)) => match outage.next_pause(Duration::MAX, deadline) {
                    Some(pause) => tokio::time::sleep(pause).await,
                    None => return Err(e),
                },
                Err(f) => return Err(f.into_error()),
            }
        }
    }

    /// `RELEASE` with retries for `retry_for`: true if released. A retry
    /// answered 0 means an earlier attempt released it only if that
    /// attempt may have run (sent after its connection answered a `PING`)
    /// while the lease surely lasted (`valid_until`).
    async fn release(&self, valid_until: Instant) -> Result<bool> {
        let cmd = self.spec.release_cmd(&self.token);
        let deadline = after(Instant::now(), self.locker.inner.retry_for);
        let mut outage = Outage::new();
        let mut first_run: Option<Instant> = None;
        loop {
            let mut sent = None;
            match self.locker.call_live(&cmd, &mut sent).await {
                Ok(Value::Int(1)) => return Ok(true),
                Ok(Value::Int(_)) => return Ok(first_run.is_some_and(|t| t < valid_until)),
                Ok(other) => return Err(Error::Server(format!("unexpected reply {other:?}"))),
                Err(Failure::Retry(e)) => {
                    first_run = first_run.or(sent);
                    match outage.next_pause(Duration::MAX, deadline) {
                        Some(pause) => tokio::time::sleep(pause).await,
                        None => return Err(e),
                    }
                }
                Err(f) => return Err(f.into_error()),
            }
        }
    }
}
