//! Locks on one server (or one Redis Cluster): acquire with same-token
//! retries, the lease budget, `min_replicas`, and the lease behind a guard.

use crate::error::{millis, Error, Failure, Result};
use crate::guard::{Granted, Guard, Lease, Renewal};
use crate::node::Node;
use crate::request::{new_token, Spec};
use crate::route::{ClusterMap, Topology};
use redis::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Settings shared by every request of a [`Locker`] (each can be changed
/// per request on [`Request`]).
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    /// Longest wait for one reply (beyond a blocking acquire's own wait).
    pub io_timeout: Duration,
    /// How long a non-waiting acquire, an extend or a release keeps retrying
    /// (same token) through connection errors.
    pub retry_for: Duration,
    pub min_replicas: Option<(u32, Duration)>,
    pub watchdog: bool,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            io_timeout: Duration::from_secs(2),
            retry_for: Duration::from_secs(2),
            min_replicas: None,
            watchdog: false,
        }
    }
}

/// Takes locks on one Redis server, or on a Redis Cluster (each resource on
/// the master of its slot). Cheap to clone; share one per process.
///
/// ```no_run
/// use std::time::Duration;
/// let locker = dlock_client::Locker::new("redis://127.0.0.1:6379/")?;
/// if let Some(guard) = locker.try_lock("orders:42", Duration::from_secs(30))? {
///     println!("held with fence {}", guard.fence());
///     // ... pass guard.fence() to the storage you write to ...
///     guard.release()?;
/// }
/// # Ok::<(), dlock_client::Error>(())
/// ```
#[derive(Clone)]
pub struct Locker {
    topology: Arc<Topology>,
    settings: Settings,
}

impl Locker {
    /// A locker on one server, e.g. `redis://:password@127.0.0.1:6379/0`.
    /// Nothing is connected until the first request.
    pub fn new(url: &str) -> Result<Locker> {
        let settings = Settings::default();
        let node = Node::from_url(url, settings.io_timeout)
            .map_err(|e| Error::Invalid(format!("{url}: {e}")))?;
        Ok(Locker {
            topology: Arc::new(Topology::Single(Arc::new(node))),
            settings,
        })
    }

    /// A locker on the server a `redis::Client` points to (its address and
    /// login; the locker keeps connections of its own).
    pub fn from_client(client: &redis::Client) -> Locker {
        let settings = Settings::default();
        let node = Node::new(client.get_connection_info().clone(), settings.io_timeout);
        Locker {
            topology: Arc::new(Topology::Single(Arc::new(node))),
            settings,
        }
    }

    /// A locker on a Redis Cluster, from the URLs of some of its nodes. Every
    /// command goes to the master of its resource's slot (`MOVED` and `ASK`
    /// are followed), and a set's resources must share a slot (a hash tag:
    /// `{order:42}:rows`, `{order:42}:stock`).
    pub fn cluster<S: AsRef<str>>(seed_urls: &[S]) -> Result<Locker> {
        let settings = Settings::default();
        let seeds = seed_urls
            .iter()
            .map(|u| Node::from_url(u.as_ref(), settings.io_timeout))
            .collect::<redis::RedisResult<Vec<_>>>()
            .map_err(|e| Error::Invalid(e.to_string()))?;
        if seeds.is_empty() {
            return Err(Error::Invalid("no cluster node given".into()));
        }
        let map = ClusterMap::new(seeds, settings.io_timeout).map_err(Failure::into_error)?;
        Ok(Locker {
            topology: Arc::new(Topology::Cluster(map)),
            settings,
        })
    }

    /// The longest wait for one reply, beyond a blocking acquire's own wait
    /// (default 2 s); also the connect timeout of new connections.
    pub fn with_io_timeout(mut self, d: Duration) -> Locker {
        self.settings.io_timeout = d;
        self
    }

    /// How long a non-waiting acquire, an extend or a release retries (with
    /// the same token) through connection errors (default 2 s).
    pub fn with_retry_for(mut self, d: Duration) -> Locker {
        self.settings.retry_for = d;
        self
    }

    /// Every grant and renewal must reach `n` replicas within `timeout`
    /// (`WAIT n timeout` pipelined on the same connection): see
    /// [`Request::min_replicas`].
    pub fn with_min_replicas(mut self, n: u32, timeout: Duration) -> Locker {
        self.settings.min_replicas = Some((n, timeout));
        self
    }

    /// Renew every guard in the background (see [`Request::watchdog`]).
    pub fn with_watchdog(mut self, on: bool) -> Locker {
        self.settings.watchdog = on;
        self
    }

    /// A request for one resource, to set options on and then
    /// [`acquire`](Request::acquire).
    pub fn request(&self, resource: impl Into<String>) -> Request<'_> {
        self.request_set([resource.into()])
    }

    /// A request for a set of resources, granted all or nothing
    /// (`DLOCK.MACQUIRE`).
    pub fn request_set<I, S>(&self, resources: I) -> Request<'_>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Request {
            locker: self,
            spec: Spec::new(resources.into_iter().map(Into::into).collect()),
            settings: self.settings.clone(),
            on_lost: None,
            token: None,
        }
    }

    /// One attempt, no waiting: `Ok(None)` if the resource is busy.
    pub fn try_lock(&self, resource: &str, ttl: Duration) -> Result<Option<Guard>> {
        self.request(resource).ttl(ttl).acquire()
    }

    /// Waits up to `wait` in the server's FIFO queue (`WAIT`: no polling).
    /// `Ok(None)` if the wait ran out.
    pub fn lock(&self, resource: &str, ttl: Duration, wait: Duration) -> Result<Option<Guard>> {
        self.request(resource).ttl(ttl).wait(wait).acquire()
    }

    /// `DLOCK.INFO resource` as the server answers it (nil when free).
    pub fn info(&self, resource: &str) -> Result<Value> {
        let cmd = redis::cmd("DLOCK.INFO").arg(resource).clone();
        self.topology
            .run(resource, self.settings.io_timeout, |c, asking| {
                with_asking(asking, &cmd, None).query::<Vec<Value>>(c)
            })
            .map(|mut v| v.pop().unwrap_or(Value::Nil))
            .map_err(Failure::into_error)
    }
}

/// A lock request: options, then [`Request::acquire`].
///
/// ```no_run
/// use std::time::Duration;
/// let locker = dlock_client::Locker::new("redis://127.0.0.1:6379/")?;
/// let guard = locker
///     .request("report:daily")
///     .ttl(Duration::from_secs(10))
///     .wait(Duration::from_secs(60))
///     .watchdog()
///     .acquire()?;
/// if let Some(guard) = guard {
///     // ... the watchdog renews while this runs ...
///     assert!(!guard.is_lost());
/// }
/// # Ok::<(), dlock_client::Error>(())
/// ```
pub struct Request<'a> {
    locker: &'a Locker,
    spec: Spec,
    settings: Settings,
    on_lost: Option<Box<dyn FnOnce() + Send>>,
    token: Option<String>,
}

impl Request<'_> {
    /// The lease (default 30 s).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.spec.ttl = ttl;
        self
    }
    /// Wait up to `wait` in the server's queue (`WAIT`).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.spec.wait = Some(wait);
        self
    }
    /// A shared hold (readers of a read-write lock).
    pub fn shared(mut self) -> Self {
        self.spec.shared = true;
        self
    }
    /// One of `n` permits (a semaphore).
    pub fn limit(mut self, n: u32) -> Self {
        self.spec.limit = Some(n);
        self
    }
    /// A reentrant hold of `owner`.
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.spec.owner = Some(owner.into());
        self
    }
    /// Renew in the background at ttl/3 until release; see
    /// [`Guard::is_lost`], [`Guard::lost_signal`] and [`Request::on_lost`].
    pub fn watchdog(mut self) -> Self {
        self.settings.watchdog = true;
        self
    }
    /// Called once, from the watchdog's thread, when the lease is lost.
    pub fn on_lost(mut self, f: impl FnOnce() + Send + 'static) -> Self {
        self.on_lost = Some(Box::new(f));
        self
    }
    /// Acquire with this token instead of a fresh random one: to retry an
    /// acquisition whose reply was lost (a same-token `ACQUIRE` is
    /// idempotent), or to use a token that another process will extend or
    /// release (`dlock acquire --token`). Must not be empty.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }
    /// Pipeline `WAIT n timeout` after the acquire and every renewal, on the
    /// same connection. Too few acknowledgements on acquire: the grant is
    /// released and [`Error::TooFewReplicas`] returned. On a renewal: the
    /// budget stays at the last acknowledged deadline and the renewal is
    /// retried.
    pub fn min_replicas(mut self, n: u32, timeout: Duration) -> Self {
        self.settings.min_replicas = Some((n, timeout));
        self
    }

    /// Acquires: `Ok(Some(guard))` when granted, `Ok(None)` when busy (or
    /// the wait ran out). Connection errors are retried with the same token
    /// until the wait (or the retry budget) is used up, so a lost reply
    /// never leaves an orphaned lock.
    pub fn acquire(self) -> Result<Option<Guard>> {
        self.spec.validate()?;
        if self.token.as_deref() == Some("") {
            return Err(Error::Invalid("token must not be empty".into()));
        }
        let lease = SingleLease {
            topology: self.locker.topology.clone(),
            spec: self.spec,
            token: self.token.unwrap_or_else(new_token),
            settings: self.settings,
        };
        let Some((fence, valid_until)) = lease.acquire()? else {
            return Ok(None);
        };
        let granted = Granted {
            resources: lease.spec.resources.clone(),
            token: lease.token.clone(),
            fences: vec![Some(fence)],
            ttl: lease.spec.ttl,
            valid_until,
            watchdog: lease.settings.watchdog,
            on_lost: self.on_lost,
        };
        Ok(Some(Guard::new(Box::new(lease), granted)))
    }
}

/// `ASKING` (when redirected) + the command + `WAIT n timeout` (when
/// durability is asked for), as one pipeline on one connection.
fn with_asking(asking: bool, cmd: &redis::Cmd, wait: Option<(u32, Duration)>) -> redis::Pipeline {
    let mut p = redis::pipe();
    if asking {
        p.cmd("ASKING").ignore();
    }
    p.add_command(cmd.clone());
    if let Some((n, t)) = wait {
        p.cmd("WAIT").arg(n).arg(millis(t));
    }
    p
}

/// Backoff between same-token retries: 20..=200 ms, jittered.
fn backoff(attempt: u32) -> Duration {
    let base = 20u64 << attempt.min(3);
    let jitter = uuid::Uuid::new_v4().as_u128() as u64 % base;
    Duration::from_millis((base + jitter).min(200))
}

/// A lease on one server: what a [`Guard`] from a [`Locker`] renews and
/// releases.
pub(crate) struct SingleLease {
    topology: Arc<Topology>,
    spec: Spec,
    token: String,
    settings: Settings,
}

impl SingleLease {
    /// Runs `cmd` (+ `WAIT n` if asked) on the resource's server; returns
    /// the command's reply and the replicas' acknowledgements.
    fn call(
        &self,
        cmd: &redis::Cmd,
        extra_wait: Duration,
    ) -> std::result::Result<(Value, Option<i64>), Failure> {
        let durability = self.settings.min_replicas;
        let io = self.settings.io_timeout + extra_wait + durability.map_or(Duration::ZERO, |d| d.1);
        self.topology.run(self.spec.route_key(), io, |c, asking| {
            let mut replies: Vec<Value> = with_asking(asking, cmd, durability).query(c)?;
            let acked = match durability {
                Some(_) => match replies.pop() {
                    Some(Value::Int(n)) => Some(n),
                    _ => Some(0),
                },
                None => None,
            };
            Ok((replies.pop().unwrap_or(Value::Nil), acked))
        })
    }

    /// Acquire with same-token retries. `Some((fence, valid_until))`.
    fn acquire(&self) -> Result<Option<(u64, Instant)>> {
        let start = Instant::now();
        let wait_deadline = self.spec.wait.map(|w| start + w);
        let retry_deadline = wait_deadline
            .unwrap_or(start)
            .max(start + self.settings.retry_for);
        // Once an attempt may have been granted without our hearing, a
        // failure must release with the token before giving up.
        let mut maybe_granted = false;
        let mut attempt = 0;
        let (fence, sent) = loop {
            let sent = Instant::now();
            let wait_ms = wait_deadline.map(|d| millis(d.saturating_duration_since(sent)));
            let cmd = self.spec.acquire_cmd(&self.token, wait_ms);
            let waiting = Duration::from_millis(wait_ms.unwrap_or(0));
            let outcome = if wait_ms.is_some() {
                // Durability is confirmed by the refresh below.
                self.call_plain(&cmd, waiting)
            } else {
                self.call(&cmd, waiting)
            };
            match outcome {
                Ok((Value::Int(fence), acked)) => {
                    if let Err(e) = self.check_replicas(acked) {
                        let _ = self.release();
                        return Err(e);
                    }
                    break (fence as u64, sent);
                }
                Ok((Value::Nil, _)) => return Ok(None),
                Ok((other, _)) => {
                    return Err(Error::Server(format!("unexpected reply {other:?}")));
                }
                Err(Failure::Retry(e)) => {
                    maybe_granted = true;
                    let pause = backoff(attempt);
                    attempt += 1;
                    if Instant::now() + pause >= retry_deadline {
                        let _ = self.release();
                        return Err(e);
                    }
                    std::thread::sleep(pause);
                }
                Err(f) => {
                    if maybe_granted {
                        let _ = self.release();
                    }
                    return Err(f.into_error());
                }
            }
        };
        if self.spec.wait.is_none() {
            return Ok(Some((fence, sent + self.spec.ttl)));
        }
        // A grant handed over while waiting started its lease at the
        // handoff, before the reply arrived: refresh with the same token
        // and count from when the refresh was sent.
        match self.extend(self.spec.ttl) {
            Renewal::Extended(until) => Ok(Some((fence, until))),
            Renewal::Lost => Err(Error::Lost),
            Renewal::Failed(e) => {
                let _ = self.release();
                Err(e)
            }
        }
    }

    fn call_plain(
        &self,
        cmd: &redis::Cmd,
        extra: Duration,
    ) -> std::result::Result<(Value, Option<i64>), Failure> {
        let io = self.settings.io_timeout + extra;
        self.topology.run(self.spec.route_key(), io, |c, asking| {
            let mut replies: Vec<Value> = with_asking(asking, cmd, None).query(c)?;
            Ok((replies.pop().unwrap_or(Value::Nil), None))
        })
    }

    fn check_replicas(&self, acked: Option<i64>) -> Result<()> {
        match (self.settings.min_replicas, acked) {
            (Some((wanted, _)), Some(acked)) if acked < wanted as i64 => {
                Err(Error::TooFewReplicas { acked, wanted })
            }
            _ => Ok(()),
        }
    }

    /// Retries `f` through connection errors for `retry_for`.
    fn retrying<T>(&self, mut f: impl FnMut() -> std::result::Result<T, Failure>) -> Result<T> {
        let deadline = Instant::now() + self.settings.retry_for;
        let mut attempt = 0;
        loop {
            match f() {
                Ok(v) => return Ok(v),
                Err(Failure::Retry(e)) => {
                    let pause = backoff(attempt);
                    attempt += 1;
                    if Instant::now() + pause >= deadline {
                        return Err(e);
                    }
                    std::thread::sleep(pause);
                }
                Err(f) => return Err(f.into_error()),
            }
        }
    }
}

impl Lease for SingleLease {
    fn extend(&self, ttl: Duration) -> Renewal {
        let cmd = self.spec.extend_cmd(&self.token, ttl);
        let mut sent = Instant::now();
        let reply = self.retrying(|| {
            sent = Instant::now();
            self.call(&cmd, Duration::ZERO)
        });
        match reply {
            Ok((Value::Int(1), acked)) => match self.check_replicas(acked) {
                Ok(()) => Renewal::Extended(sent + ttl),
                Err(e) => Renewal::Failed(e),
            },
            Ok((Value::Int(0), _)) => Renewal::Lost,
            Ok((other, _)) => Renewal::Failed(Error::Server(format!("unexpected reply {other:?}"))),
            Err(e) => Renewal::Failed(e),
        }
    }

    fn release(&self) -> Result<bool> {
        let cmd = self.spec.release_cmd(&self.token);
        match self.retrying(|| self.call_plain(&cmd, Duration::ZERO))? {
            // RELEASE answers 1/0, MRELEASE the members it released.
            (Value::Int(n), _) => Ok(n == self.spec.resources.len() as i64),
            (other, _) => Err(Error::Server(format!("unexpected reply {other:?}"))),
        }
    }
}
