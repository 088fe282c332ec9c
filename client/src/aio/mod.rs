//! The async API on tokio (feature `tokio`): [`Locker`] and [`Guard`] with
//! the same rules as the blocking API (same-token retries, a lease budget
//! counted from send times, a refresh after a `WAIT` grant, `min_replicas`,
//! an opt-in watchdog), on one server.
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
//! if let Some(guard) = locker.lock("orders:42", Duration::from_secs(30), Duration::from_secs(5)).await? {
//!     println!("fence {}", guard.fence());
//!     guard.release().await?;
//! }
//! # Ok(()) }
//! ```

use crate::error::{millis, Error, Failure, Result};
use crate::request::{new_token, Spec};
use crate::single::backoff;
use redis::aio::MultiplexedConnection;
use redis::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod guard;
pub use guard::Guard;

/// Takes locks on one server. Cheap to clone.
#[derive(Clone)]
pub struct Locker {
    inner: Arc<Inner>,
}

struct Inner {
    client: redis::Client,
    /// Shared by every non-blocking command; a blocking `ACQUIRE ... WAIT`,
    /// and a command followed by `WAIT n timeout` (`min_replicas`), opens a
    /// connection of its own, so nothing queues behind it.
    shared: tokio::sync::Mutex<Option<MultiplexedConnection>>,
    io_timeout: Duration,
    retry_for: Duration,
    min_replicas: Option<(u32, Duration)>,
}

impl Locker {
    pub fn new(url: &str) -> Result<Locker> {
        let client = redis::Client::open(url).map_err(|e| Error::Invalid(format!("{url}: {e}")))?;
        Ok(Locker::from_client(client))
    }

    pub fn from_client(client: redis::Client) -> Locker {
        Locker {
            inner: Arc::new(Inner {
                client,
                shared: tokio::sync::Mutex::new(None),
                io_timeout: Duration::from_secs(2),
                retry_for: Duration::from_secs(2),
                min_replicas: None,
            }),
        }
    }

    /// Every grant and renewal must reach `n` replicas within `timeout`
    /// (a new locker: clones made before keep their setting).
    pub fn with_min_replicas(self, n: u32, timeout: Duration) -> Locker {
        let inner = &self.inner;
        Locker {
            inner: Arc::new(Inner {
                client: inner.client.clone(),
                shared: tokio::sync::Mutex::new(None),
                io_timeout: inner.io_timeout,
                retry_for: inner.retry_for,
                min_replicas: Some((n, timeout)),
            }),
        }
    }

    /// One attempt, no waiting: `Ok(None)` if busy.
    pub async fn try_lock(&self, resource: &str, ttl: Duration) -> Result<Option<Guard>> {
        self.acquire(resource, ttl, None, false).await
    }

    /// Waits up to `wait` in the server's queue.
    pub async fn lock(
        &self,
        resource: &str,
        ttl: Duration,
        wait: Duration,
    ) -> Result<Option<Guard>> {
        self.acquire(resource, ttl, Some(wait), false).await
    }

    /// Like [`Locker::lock`] (`wait` None: no waiting), with a watchdog
    /// task renewing at ttl/3 until release; see [`Guard::lost`].
    pub async fn lock_with_watchdog(
        &self,
        resource: &str,
        ttl: Duration,
        wait: Option<Duration>,
    ) -> Result<Option<Guard>> {
        self.acquire(resource, ttl, wait, true).await
    }

    async fn acquire(
        &self,
        resource: &str,
        ttl: Duration,
        wait: Option<Duration>,
        watchdog: bool,
    ) -> Result<Option<Guard>> {
        let mut spec = Spec::new(vec![resource.to_string()]);
        spec.ttl = ttl;
        spec.wait = wait;
        spec.validate()?;
        let lease = Arc::new(AsyncLease {
            locker: self.clone(),
            spec,
            token: new_token(),
            renewing: tokio::sync::Mutex::new(()),
        });
        let Some((fence, valid_until)) = lease.acquire().await? else {
            return Ok(None);
        };
        Ok(Some(Guard::new(lease, fence, valid_until, watchdog)))
    }

    /// Runs `cmd` (+ `WAIT n`) on the shared connection, or on a new one
    /// when `dedicated` (a blocking acquire).
    async fn call(
        &self,
        cmd: &redis::Cmd,
        durable: bool,
        dedicated: bool,
        extra: Duration,
    ) -> std::result::Result<(Value, Option<i64>), Failure> {
        let inner = &self.inner;
        let durability = inner.min_replicas.filter(|_| durable);
        let mut p = redis::pipe();
        p.add_command(cmd.clone());
        if let Some((n, t)) = durability {
            // `WAIT n 0` blocks forever: a timeout under 1 ms waits 1 ms.
            p.cmd("WAIT").arg(n).arg(millis(t).max(1));
        }
        let limit = inner.io_timeout + extra + durability.map_or(Duration::ZERO, |d| d.1);
        // `WAIT n timeout` blocks its connection like a waiting acquire:
        // never on the shared one, where every other command would queue
        // behind it.
        let dedicated = dedicated || durability.is_some();
        let run = async {
            let mut conn = if dedicated {
                inner.client.get_multiplexed_async_connection().await?
            } else {
                let mut slot = inner.shared.lock().await;
                match slot.as_ref() {
                    Some(c) => c.clone(),
                    None => {
                        let c = inner.client.get_multiplexed_async_connection().await?;
                        *slot = Some(c.clone());
                        c
                    }
                }
            };
            p.query_async::<Vec<Value>>(&mut conn).await
        };
        let replies = match tokio::time::timeout(limit, run).await {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => {
                let f = Failure::from(e);
                if matches!(f, Failure::Retry(_)) && !dedicated {
                    *inner.shared.lock().await = None;
                }
                return Err(f);
            }
            Err(_) => {
                if !dedicated {
                    *inner.shared.lock().await = None;
                }
                return Err(Failure::Retry(Error::Unavailable("timed out".into())));
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

    async fn acquire(&self) -> Result<Option<(u64, Instant)>> {
        let start = Instant::now();
        let wait_deadline = self.spec.wait.map(|w| start + w);
        let retry_deadline = wait_deadline
            .unwrap_or(start)
            .max(start + self.locker.inner.retry_for);
        let mut maybe_granted = false;
        let mut attempt = 0;
        let (fence, sent, waited) = loop {
            let sent = Instant::now();
            // WAIT 0 would wait forever: a wait used up is a plain try.
            let wait_ms = wait_deadline
                .map(|d| millis(d.saturating_duration_since(sent)))
                .filter(|&w| w > 0);
            let cmd = self.spec.acquire_cmd(&self.token, wait_ms);
            let extra = Duration::from_millis(wait_ms.unwrap_or(0));
            match self
                .locker
                .call(&cmd, wait_ms.is_none(), wait_ms.is_some(), extra)
                .await
            {
                Ok((Value::Int(fence), acked)) => {
                    if let Some(e) = self.too_few(acked) {
                        let _ = self.release_cmd().await;
                        return Err(e);
                    }
                    break (fence as u64, sent, wait_ms.is_some());
                }
                Ok((Value::Nil, _)) => return Ok(None),
                Ok((other, _)) => return Err(Error::Server(format!("unexpected reply {other:?}"))),
                Err(Failure::Retry(e)) => {
                    maybe_granted = true;
                    let pause = backoff(attempt);
                    attempt += 1;
                    if Instant::now() + pause >= retry_deadline {
                        let _ = self.release_cmd().await;
                        return Err(e);
                    }
                    tokio::time::sleep(pause).await;
                }
                Err(f) => {
                    if maybe_granted {
                        let _ = self.release_cmd().await;
                    }
                    return Err(f.into_error());
                }
            }
        };
        if !waited {
            return Ok(Some((fence, sent + self.spec.ttl)));
        }
        // A grant handed over while waiting: refresh, count from its send.
        match self.extend(self.spec.ttl).await {
            Ok(Some(until)) => Ok(Some((fence, until))),
            Ok(None) => Err(Error::Lost),
            Err(e) => {
                let _ = self.release_cmd().await;
                Err(e)
            }
        }
    }

    /// `Some(valid_until)` when extended, `None` when answered 0.
    async fn extend(&self, ttl: Duration) -> Result<Option<Instant>> {
        let cmd = self.spec.extend_cmd(&self.token, ttl);
        let deadline = Instant::now() + self.locker.inner.retry_for;
        let mut attempt = 0;
        loop {
            let sent = Instant::now();
            match self.locker.call(&cmd, true, false, Duration::ZERO).await {
                Ok((Value::Int(1), acked)) => {
                    return match self.too_few(acked) {
                        Some(e) => Err(e),
                        None => Ok(Some(sent + ttl)),
                    }
                }
                Ok((Value::Int(0), _)) => return Ok(None),
                Ok((other, _)) => return Err(Error::Server(format!("unexpected reply {other:?}"))),
                Err(Failure::Retry(e)) => {
                    let pause = backoff(attempt);
                    attempt += 1;
                    if Instant::now() + pause >= deadline {
                        return Err(e);
                    }
                    tokio::time::sleep(pause).await;
                }
                Err(f) => return Err(f.into_error()),
            }
        }
    }

    /// `RELEASE` with retries; `(answer, whether an attempt was retried)`.
    async fn release_cmd(&self) -> Result<(bool, bool)> {
        let cmd = self.spec.release_cmd(&self.token);
        let deadline = Instant::now() + self.locker.inner.retry_for;
        let mut attempt = 0;
        loop {
            match self.locker.call(&cmd, false, false, Duration::ZERO).await {
                Ok((Value::Int(n), _)) => return Ok((n == 1, attempt > 0)),
                Ok((other, _)) => return Err(Error::Server(format!("unexpected reply {other:?}"))),
                Err(Failure::Retry(e)) => {
                    let pause = backoff(attempt);
                    attempt += 1;
                    if Instant::now() + pause >= deadline {
                        return Err(e);
                    }
                    tokio::time::sleep(pause).await;
                }
                Err(f) => return Err(f.into_error()),
            }
        }
    }
}
