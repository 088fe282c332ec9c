//! `Locker` and `LockRequest`: where locks are taken (one server or a Redis
//! Cluster) and the request builder. The acquire itself and the settings
//! are in `single.rs`.

use crate::error::{Error, Failure, Result};
use crate::guard::{Granted, Guard};
use crate::lease::is_no_session;
use crate::limits::clamp;
use crate::node::Node;
use crate::request::{lock_options, new_token, Spec};
use crate::route::{ClusterMap, Topology};
use crate::session::Sessions;
use crate::single::{with_asking, OnRetry, Settings, SingleLease};
use crate::tls::TlsSettings;
use crate::wanted::{Wanted, WantedHook};
use redis::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
///
/// A guard that is renewed ([`LockRequest::watchdog`], [`LockRequest::run`])
/// is bound to a session where the server has them (`DLOCK.SESSION`): one
/// per server and ttl, opened by the first such acquire, kept alive by one
/// thread for all its guards, closed when the locker (all its clones) and
/// its guards are gone, or by [`Locker::close`]. Where the server has no
/// sessions (asked once per server), each guard keeps its own watchdog.
#[derive(Clone)]
pub struct Locker {
    topology: Arc<Topology>,
    settings: Settings,
    sessions: Arc<Sessions>,
}

impl Locker {
    /// A locker on one server, e.g. `redis://:password@127.0.0.1:6379/0`,
    /// or on the master that Redis Sentinel names, e.g.
    /// `redis+sentinel://:password@10.0.0.1,10.0.0.2,10.0.0.3/mymaster`
    /// (every new connection asks the sentinels where the master is now;
    /// see [`sentinel`](crate::sentinel)). Nothing is connected until the
    /// first request. A `rediss://` URL is verified against the public
    /// roots; see [`Locker::new_tls`] for a CA of your own or a client
    /// certificate.
    pub fn new(url: &str) -> Result<Locker> {
        let settings = Settings::default();
        Ok(Locker::single(Node::from_url(url, settings.io_timeout)?))
    }

    /// A locker on one TLS server (`rediss://host:port/`), verified and
    /// logged in with `tls` (its CA, its client certificate).
    pub fn new_tls(url: &str, tls: &TlsSettings) -> Result<Locker> {
        let settings = Settings::default();
        Ok(Locker::single(Node::new(
            tls.connection_info(url)?,
            settings.io_timeout,
        )))
    }

    fn single(node: Node) -> Locker {
        Locker {
            topology: Arc::new(Topology::Single(Arc::new(node))),
            settings: Settings::default(),
            sessions: Arc::default(),
        }
    }

    /// A locker on the server a `redis::Client` points to (its address,
    /// login and TLS settings, e.g. from `redis::Client::build_with_tls`;
    /// the locker keeps connections of its own).
    pub fn from_client(client: &redis::Client) -> Locker {
        let settings = Settings::default();
        let node = Node::new(client.get_connection_info().clone(), settings.io_timeout);
        Locker {
            topology: Arc::new(Topology::Single(Arc::new(node))),
            settings,
            sessions: Arc::default(),
        }
    }

    /// A locker on a Redis Cluster, from the URLs of some of its nodes. Every
    /// command goes to the master of its resource's slot (`MOVED` and `ASK`
    /// are followed), and a set's resources must share a slot (a hash tag:
    /// `{order:42}:rows`, `{order:42}:stock`).
    pub fn cluster<S: AsRef<str>>(seed_urls: &[S]) -> Result<Locker> {
        Locker::cluster_with(seed_urls, None)
    }

    /// [`Locker::cluster`] over TLS: `rediss://` seeds, and every node
    /// found from them, verified and logged in with `tls`.
    pub fn cluster_tls<S: AsRef<str>>(seed_urls: &[S], tls: &TlsSettings) -> Result<Locker> {
        Locker::cluster_with(seed_urls, Some(tls))
    }

    fn cluster_with<S: AsRef<str>>(seed_urls: &[S], tls: Option<&TlsSettings>) -> Result<Locker> {
        let settings = Settings::default();
        let seeds = seed_urls
            .iter()
            .map(|u| {
                let info = crate::tls::connection_info(u.as_ref(), tls)?;
                Ok(Node::new(info, settings.io_timeout))
            })
            .collect::<Result<Vec<_>>>()?;
        if seeds.is_empty() {
            return Err(Error::Invalid("no cluster node given".into()));
        }
        let map = ClusterMap::new(seeds, settings.io_timeout).map_err(Failure::into_error)?;
        Ok(Locker {
            topology: Arc::new(Topology::Cluster(map)),
            settings,
            sessions: Arc::default(),
        })
    }

    /// The longest wait for one reply, beyond a blocking acquire's own wait
    /// (default 2 s). New connections give up connecting after 2 s.
    pub fn with_io_timeout(mut self, d: Duration) -> Locker {
        self.settings.io_timeout = clamp(d);
        self
    }

    /// How long a non-waiting acquire, an extend or a release retries (with
    /// the same token) through connection errors (default 2 s).
    pub fn with_retry_for(mut self, d: Duration) -> Locker {
        self.settings.retry_for = clamp(d);
        self
    }

    /// Every grant and renewal must reach `n` replicas within `timeout`
    /// (`WAIT n timeout` pipelined on the same connection): see
    /// [`LockRequest::min_replicas`].
    pub fn with_min_replicas(mut self, n: u32, timeout: Duration) -> Locker {
        self.settings.min_replicas = Some((n, clamp(timeout)));
        self
    }

    /// Renew every guard in the background (see [`LockRequest::watchdog`]).
    pub fn with_watchdog(mut self, on: bool) -> Locker {
        self.settings.watchdog = on;
        self
    }

    /// Bind renewed guards to a session where the server has them
    /// (default on; see [`Locker`]). Off: a watchdog per guard, always.
    /// Also off while `min_replicas` is set (each renewal of a watchdog
    /// confirms its replicas; a keep-alive does not).
    pub fn with_sessions(mut self, on: bool) -> Locker {
        self.settings.sessions.enabled = on;
        self
    }

    /// The ttl of the sessions guards bind to (default: the request's ttl,
    /// one session per ttl). Every guard bound to a session lasts as long
    /// as the session: after a crash, until this ttl has passed.
    pub fn with_session_ttl(mut self, ttl: Duration) -> Locker {
        self.settings.sessions.ttl = Some(clamp(ttl));
        self
    }

    /// Open sessions with `BIND` (default off): a session also ends when
    /// the connection that opened it closes, which the locker keeps for
    /// the session's commands; its loss marks every guard of the session
    /// lost at once.
    pub fn with_session_bind(mut self, on: bool) -> Locker {
        self.settings.sessions.bind = on;
        self
    }

    /// Open sessions with `LOCKDELAY`: when a session ends involuntarily
    /// (its ttl passed, `KILL`, its `BIND` connection closed), what it held
    /// stays locked for `delay` more (at most 60 s). Not after a close.
    pub fn with_session_lock_delay(mut self, delay: Duration) -> Locker {
        self.settings.sessions.lock_delay = Some(delay);
        self
    }

    /// Closes this locker's sessions now (`DLOCK.SESSION CLOSE`): every
    /// guard bound to one is released on the server and marked lost here.
    /// Later acquires open new sessions. Dropping the locker and its
    /// guards closes them too.
    pub fn close(&self) {
        self.sessions.close_all();
    }

    /// A request for one resource, to set options on and then
    /// [`acquire`](LockRequest::acquire).
    pub fn request(&self, resource: impl Into<String>) -> LockRequest<'_> {
        self.request_set([resource.into()])
    }

    /// A request for a set of resources, granted all or nothing
    /// (`DLOCK.MACQUIRE`).
    pub fn request_set<I, S>(&self, resources: I) -> LockRequest<'_>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        LockRequest {
            locker: self,
            spec: Spec::new(resources.into_iter().map(Into::into).collect()),
            settings: self.settings.clone(),
            watchdog: self.settings.watchdog,
            on_lost: None,
            on_retry: None,
            token: None,
            on_wanted: None,
        }
    }

    /// One attempt, no waiting: `Ok(None)` if the resource is busy. To
    /// wait (in the server's FIFO queue, no polling), renew, or hold a
    /// shared or reentrant lock, use [`Locker::request`].
    pub fn try_lock(&self, resource: &str, ttl: Duration) -> Result<Option<Guard>> {
        self.request(resource).ttl(ttl).acquire()
    }

    /// Extends the lease `token` holds on `resource` to `ttl` from now,
    /// without a [`Guard`] (e.g. a lease another process took): `Ok(true)`
    /// extended, `Ok(false)` the token holds nothing there. Connection
    /// errors are retried for the retry budget, each attempt bounded by the
    /// io timeout, connecting included.
    pub fn extend_token(&self, resource: &str, token: &str, ttl: Duration) -> Result<bool> {
        crate::by_token::extend(&self.lease_of(resource, token, ttl)?, ttl)
    }

    /// Releases the lease `token` holds on `resource`, without a [`Guard`]:
    /// `Ok(true)` released, `Ok(false)` the token holds nothing there (also
    /// when a retry after a lost reply finds it gone). Bounded as
    /// [`Locker::extend_token`] is.
    pub fn release_token(&self, resource: &str, token: &str) -> Result<bool> {
        let ttl = Duration::from_secs(1);
        crate::by_token::release(&self.lease_of(resource, token, ttl)?)
    }

    fn lease_of(&self, resource: &str, token: &str, ttl: Duration) -> Result<SingleLease> {
        Ok(SingleLease {
            topology: self.topology.clone(),
            spec: crate::by_token::spec(resource, token, ttl)?,
            token: token.to_string(),
            settings: self.settings.clone(),
            session: None,
            wanted: None,
        })
    }

    /// The sequencer check (`DLOCK.CHECK`): whether the hold with fence
    /// `fence` is live on `resource` now, for a service outside Redis that
    /// is handed a fence. Racy by nature (the hold can end right after the
    /// answer): a storage that keeps the fence and refuses lower ones is
    /// the real protection (docs/fencing.md); a write to this Redis is
    /// [`Guard::write`]. Read-only: retried through connection errors for
    /// the retry budget.
    pub fn check(&self, resource: &str, fence: u64) -> Result<bool> {
        let cmd = crate::guarded::check_cmd(resource, fence)?;
        let call = crate::guarded::Call::check(self.settings.retry_for);
        let io = self.settings.io_timeout;
        let v = crate::guarded::blocking::run(&self.topology, resource, io, call, &cmd)?;
        crate::guarded::check_reply(v)
    }

    /// Where `token` waits in `resource`'s queue (`DLOCK.POSITION`):
    /// `Ok(Some(1))` served next, `Ok(None)` when it does not wait there
    /// (never queued, granted, or gone). A waiter is blocked on its own
    /// connection, so ask from another [`Locker`]; a set request has a
    /// place in each member's queue. Read-only: retried through connection
    /// errors for the retry budget.
    pub fn position(&self, resource: &str, token: &str) -> Result<Option<u64>> {
        let cmd = crate::queue::position_cmd(resource, token)?;
        crate::queue::position_reply(self.read(resource, &cmd)?)
    }

    /// The requests waiting on `resource` in the order they are served
    /// (`DLOCK.WAITERS`), from position `offset + 1` on, at most `count`
    /// (1 to [`crate::MAX_WAITERS_PAGE`]). Read-only, retried as
    /// [`Locker::position`].
    pub fn waiters(&self, resource: &str, offset: u64, count: usize) -> Result<Vec<crate::Waiter>> {
        let cmd = crate::queue::waiters_cmd(resource, offset, count)?;
        crate::queue::waiters_reply(self.read(resource, &cmd)?)
    }

    /// Sets the limit of the semaphore `resource` to `n` while its permits
    /// are held (`DLOCK.RESIZE`; docs/commands/dlock.resize.md): growing
    /// it grants the waiters that fit at once, shrinking it keeps every
    /// hold and grants nobody until they fit. `Ok(Some(previous))`, or
    /// `Ok(None)` when nothing holds it (nothing changes: the next
    /// request's limit sets it). The new limit is forgotten with the last
    /// permit. `n` from 2 to [`crate::MAX_LIMIT`], else
    /// [`crate::Error::Invalid`] before any server is asked. Setting a
    /// limit twice leaves what once does, so it is retried through
    /// connection errors as [`Locker::position`].
    pub fn resize(&self, resource: &str, n: u32) -> Result<Option<u32>> {
        let cmd = crate::queue::resize_cmd(resource, n)?;
        crate::queue::resize_reply(self.read(resource, &cmd)?)
    }

    /// Runs the read-only `cmd` on `resource`'s server.
    fn read(&self, resource: &str, cmd: &redis::Cmd) -> Result<Value> {
        let call = crate::guarded::Call::check(self.settings.retry_for);
        let io = self.settings.io_timeout;
        crate::guarded::blocking::run(&self.topology, resource, io, call, cmd)
    }

    pub(crate) fn io_timeout(&self) -> Duration {
        self.settings.io_timeout
    }

    /// How long a command whose outcome matters is retried through
    /// connection errors.
    pub(crate) fn retry_window(&self) -> Duration {
        self.settings.retry_for
    }

    pub(crate) fn topology(&self) -> &Topology {
        &self.topology
    }

    /// `DLOCK.INFO resource` as the server answers it (nil when free).
    pub fn info(&self, resource: &str) -> Result<Value> {
        let cmd = redis::cmd("DLOCK.INFO").arg(resource).clone();
        self.topology
            .run(
                resource,
                self.settings.io_timeout,
                Duration::ZERO,
                |c, asking| with_asking(asking, &cmd, None).query::<Vec<Value>>(c),
            )
            .map(|mut v| v.pop().unwrap_or(Value::Nil))
            .map_err(Failure::into_error)
    }
}

/// A lock request: options, then [`LockRequest::acquire`].
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
pub struct LockRequest<'a> {
    locker: &'a Locker,
    spec: Spec,
    settings: Settings,
    watchdog: bool,
    on_lost: Option<Box<dyn FnOnce() + Send>>,
    on_retry: Option<OnRetry>,
    token: Option<String>,
    on_wanted: Option<Box<dyn FnMut(Wanted) + Send>>,
}

lock_options!(LockRequest);

impl LockRequest<'_> {
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
        self.settings.min_replicas = Some((n, clamp(timeout)));
        self
    }

    /// The longest run of connection errors this request retries through
    /// with the same token, waiting or not (default: the locker's, 2 s). A
    /// longer outage ends the request with [`Error::Unavailable`].
    pub fn retry_for(mut self, d: Duration) -> Self {
        self.settings.retry_for = clamp(d);
        self
    }

    /// Bind this request's guard to a session (when it is renewed and the
    /// server has sessions; the default is the locker's,
    /// [`Locker::with_sessions`]). Off: a watchdog of its own.
    pub fn session(mut self, on: bool) -> Self {
        self.settings.sessions.enabled = on;
        self
    }

    /// Called when someone waits for the lock: each renewal (the
    /// watchdog's, or [`Guard::extend`]) sends `EXTEND ... WANTED`, and
    /// `f` gets [`Wanted::Waiters`] when the count of requests queued on
    /// the resource goes from 0 to more (once per such change, again after
    /// it went back to 0), so a holder can yield at a safe point; it learns
    /// of a waiter at the next renewal, a third of the ttl later at most.
    /// `f` runs on a thread of its own, never delaying a renewal. A server
    /// that refuses the option (a dlock release before it) gives
    /// [`Wanted::Unsupported`] once, and renewals go on without it. A guard
    /// with `on_wanted` is not bound to a session: it renews its own lease
    /// (`EXTEND`), which is what carries the count.
    pub fn on_wanted(mut self, f: impl FnMut(Wanted) + Send + 'static) -> Self {
        self.on_wanted = Some(Box::new(f));
        self
    }

    /// Called before each same-token retry of the acquire, with the
    /// connection error that is retried: to tell someone what is going on
    /// while the server is unreachable.
    pub fn on_retry(mut self, f: impl FnMut(&Error) + Send + 'static) -> Self {
        self.on_retry = Some(Box::new(f));
        self
    }

    /// Acquires: `Ok(Some(guard))` when granted, `Ok(None)` when busy (or
    /// the wait ran out). Connection errors are retried with the same token
    /// (so a lost reply never leaves an orphaned lock) for at most
    /// [`LockRequest::retry_for`] in a row; the whole call, retries and the
    /// undo of a possibly granted attempt included, ends by the wait (for
    /// a request that does not wait, after `retry_for`) plus a reply's
    /// margin (250 ms), and the `min_replicas` timeout when one is set.
    pub fn acquire(self) -> Result<Option<Guard>> {
        self.spec.validate()?;
        if self.token.as_deref() == Some("") {
            return Err(Error::Invalid("token must not be empty".into()));
        }
        let started = Instant::now();
        let renewed = self.watchdog;
        // A bound hold is kept by its session: a capped hold has a deadline
        // to cap, and the renewal that asks who waits is the hold's own
        // `EXTEND`, so neither is bound.
        let asks = self.on_wanted.is_some();
        let session = (renewed
            && self.settings.min_replicas.is_none()
            && self.spec.max_hold.is_none()
            && !asks)
            .then(|| {
                self.locker.sessions.for_request(
                    &self.locker.topology,
                    self.spec.route_key(),
                    self.spec.ttl,
                    self.settings.io_timeout,
                    &self.settings.sessions,
                )
            })
            .flatten();
        let mut lease = SingleLease {
            topology: self.locker.topology.clone(),
            spec: self.spec,
            token: self.token.unwrap_or_else(new_token),
            settings: self.settings,
            session,
            wanted: self.on_wanted.and_then(WantedHook::start),
        };
        let mut on_retry = self.on_retry;
        let grant = match lease.acquire(on_retry.as_mut()) {
            // The session ended before the acquire reached it, or the slot
            // moved to a server where it was never opened (nothing was
            // granted): this guard keeps a watchdog of its own, in what is
            // left of the wait. The keep-alive tells the session's guards
            // if it did end.
            // A waiting grant whose session ended before its refresh (the
            // keep-alive) is `Lost` the same way.
            Err(e)
                if lease.session.is_some() && (is_no_session(&e) || matches!(e, Error::Lost)) =>
            {
                if let Some(s) = lease.session.take() {
                    let _ = s.keep_alive();
                }
                if let Some(w) = lease.spec.wait {
                    lease.spec.wait = Some(w.saturating_sub(started.elapsed()));
                }
                lease.acquire(on_retry.as_mut())?
            }
            other => other?,
        };
        let Some(grant) = grant else {
            return Ok(None);
        };
        let ttl = lease.session.as_ref().map_or(lease.spec.ttl, |s| s.ttl());
        let granted = Granted {
            resources: lease.spec.resources.clone(),
            token: lease.token.clone(),
            fences: vec![Some(grant.fence)],
            ttl,
            valid_until: grant.valid_until,
            cap: grant.cap,
            watchdog: self.watchdog,
            on_lost: self.on_lost,
            session: lease.session.clone(),
        };
        Ok(Some(Guard::new(Box::new(lease), granted)))
    }
}

impl LockRequest<'_> {
    /// Acquires with a watchdog, runs `work` with the guard, then releases:
    /// a lock for the span of a closure (like node-redlock's `using`).
    /// `Ok(None)`: busy, `work` did not run. `Err(Error::Lost)`: the lease
    /// was lost while `work` ran (check [`Guard::is_lost`] or
    /// [`Guard::lost_signal`] inside it to stop early), and its result is
    /// dropped: it ran without the lock.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// let locker = dlock_client::Locker::new("redis://127.0.0.1:6379/")?;
    /// let rows = locker
    ///     .request("report:daily")
    ///     .ttl(Duration::from_secs(10))
    ///     .wait(Duration::from_secs(60))
    ///     .run(|guard| {
    ///         // write with guard.fence()
    ///         42
    ///     })?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn run<T>(self, work: impl FnOnce(&Guard) -> T) -> Result<Option<T>> {
        let Some(guard) = self.watchdog().acquire()? else {
            return Ok(None);
        };
        let out = work(&guard);
        if guard.is_lost() {
            drop(guard);
            return Err(Error::Lost);
        }
        match guard.release()? {
            true => Ok(Some(out)),
            false => Err(Error::Lost),
        }
    }
}
