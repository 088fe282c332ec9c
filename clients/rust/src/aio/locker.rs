//! The async [`Locker`] and [`LockRequest`]: where locks are taken (one
//! server, or the master Redis Sentinel names), the settings, and the
//! request builder.

use super::conn::Server;
use super::guard::Guard;
use super::lease::AsyncLease;
use super::session::Sessions;
use crate::error::{Error, Result};
use crate::lease::is_no_session;
use crate::limits::clamp;
use crate::request::{lock_options, new_token, Spec};
use crate::sentinel::Sentinels;
use crate::wanted::{Wanted, WantedHook};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Takes locks on one server. Cheap to clone. A renewed guard is bound to
/// a session where the server has them, as with the blocking
/// [`crate::Locker`]; the sessions are closed when the locker (all its
/// clones) and their guards are gone (inside a tokio runtime), or by
/// [`Locker::close`].
#[derive(Clone)]
pub struct Locker {
    pub(super) inner: Arc<Server>,
    sessions: Arc<Sessions>,
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
            inner: Arc::new(Server {
                client,
                sentinels,
                found: Arc::default(),
                shared: tokio::sync::Mutex::new(None),
                io_timeout: Duration::from_secs(2),
                retry_for: Duration::from_secs(2),
                min_replicas: None,
                watchdog: false,
                sessions: Default::default(),
            }),
            sessions: Arc::default(),
        }
    }

    /// A new locker with `change` made to the settings (clones made before
    /// keep theirs).
    fn with(self, change: impl FnOnce(&mut Server)) -> Locker {
        let i = &self.inner;
        let mut inner = Server {
            client: i.client.clone(),
            sentinels: i.sentinels.clone(),
            found: i.found.clone(),
            shared: tokio::sync::Mutex::new(None),
            io_timeout: i.io_timeout,
            retry_for: i.retry_for,
            min_replicas: i.min_replicas,
            watchdog: i.watchdog,
            sessions: i.sessions.clone(),
        };
        change(&mut inner);
        Locker {
            inner: Arc::new(inner),
            sessions: self.sessions.clone(),
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

    /// Bind renewed guards to a session where the server has them (default
    /// on; off while `min_replicas` is set): see
    /// [`crate::Locker::with_sessions`].
    pub fn with_sessions(self, on: bool) -> Locker {
        self.with(|i| i.sessions.enabled = on)
    }

    /// The sessions' ttl (default: the request's): see
    /// [`crate::Locker::with_session_ttl`].
    pub fn with_session_ttl(self, ttl: Duration) -> Locker {
        self.with(|i| i.sessions.ttl = Some(clamp(ttl)))
    }

    /// Open sessions with `BIND`: see [`crate::Locker::with_session_bind`].
    pub fn with_session_bind(self, on: bool) -> Locker {
        self.with(|i| i.sessions.bind = on)
    }

    /// Open sessions with `LOCKDELAY`: see
    /// [`crate::Locker::with_session_lock_delay`].
    pub fn with_session_lock_delay(self, delay: Duration) -> Locker {
        self.with(|i| i.sessions.lock_delay = Some(delay))
    }

    /// Closes this locker's sessions now: every guard bound to one is
    /// released on the server and marked lost here.
    pub async fn close(&self) {
        self.sessions.close_all().await;
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
            on_wanted: None,
        }
    }

    /// The sequencer check (`DLOCK.CHECK`): whether the hold with fence
    /// `fence` is live on `resource` now (see the blocking
    /// [`crate::Locker::check`]).
    pub async fn check(&self, resource: &str, fence: u64) -> Result<bool> {
        let cmd = crate::guarded::check_cmd(resource, fence)?;
        let call = crate::guarded::Call::check(self.inner.retry_for);
        let v = super::guarded::run(&self.inner, call, &cmd).await?;
        crate::guarded::check_reply(v)
    }

    /// [`crate::Locker::resize`], asynchronously.
    pub async fn resize(&self, resource: &str, n: u32) -> Result<Option<u32>> {
        let cmd = crate::queue::resize_cmd(resource, n)?;
        let call = crate::guarded::Call::check(self.inner.retry_for);
        crate::queue::resize_reply(super::guarded::run(&self.inner, call, &cmd).await?)
    }

    /// Where `token` waits in `resource`'s queue (see the blocking
    /// [`crate::Locker::position`]).
    pub async fn position(&self, resource: &str, token: &str) -> Result<Option<u64>> {
        let cmd = crate::queue::position_cmd(resource, token)?;
        let call = crate::guarded::Call::check(self.inner.retry_for);
        crate::queue::position_reply(super::guarded::run(&self.inner, call, &cmd).await?)
    }

    /// The requests waiting on `resource`, a page at a time (see the
    /// blocking [`crate::Locker::waiters`]).
    pub async fn waiters(
        &self,
        resource: &str,
        offset: u64,
        count: usize,
    ) -> Result<Vec<crate::Waiter>> {
        let cmd = crate::queue::waiters_cmd(resource, offset, count)?;
        let call = crate::guarded::Call::check(self.inner.retry_for);
        crate::queue::waiters_reply(super::guarded::run(&self.inner, call, &cmd).await?)
    }

    /// One attempt, no waiting: `Ok(None)` if busy.
    pub async fn try_lock(&self, resource: &str, ttl: Duration) -> Result<Option<Guard>> {
        self.request(resource).ttl(ttl).acquire().await
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
    on_wanted: Option<Box<dyn FnMut(Wanted) + Send>>,
}

lock_options!(LockRequest);

impl LockRequest<'_> {
    /// Acquire with this token instead of a fresh random one (as the
    /// blocking API's `LockRequest::token`). Must not be empty.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Called when someone waits for the lock, as the blocking API's
    /// [`crate::LockRequest::on_wanted`]: `f` runs on a thread of its own,
    /// never on the runtime, and the guard is not bound to a session.
    pub fn on_wanted(mut self, f: impl FnMut(Wanted) + Send + 'static) -> Self {
        self.on_wanted = Some(Box::new(f));
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
        let started = Instant::now();
        let server = &self.locker.inner;
        // A bound hold is kept by its session: a capped hold has a deadline
        // to cap, and the renewal that asks who waits is the hold's own
        // `EXTEND`, so neither is bound.
        let session =
            match self.watchdog && self.spec.max_hold.is_none() && self.on_wanted.is_none() {
                true => {
                    let sessions = &self.locker.sessions;
                    sessions.for_request(server, self.spec.ttl).await
                }
                false => None,
            };
        let mut lease = AsyncLease {
            server: server.clone(),
            spec: self.spec,
            token: self.token.unwrap_or_else(new_token),
            renewing: tokio::sync::Mutex::new(()),
            session,
            wanted: self.on_wanted.and_then(WantedHook::start),
        };
        let grant = match lease.acquire().await {
            // Nothing was granted: the session ended (the keep-alive tells
            // its guards); this guard keeps a watchdog of its own, in what
            // is left of the wait.
            // A waiting grant whose session ended before its refresh (the
            // keep-alive) is `Lost` the same way.
            Err(e)
                if lease.session.is_some() && (is_no_session(&e) || matches!(e, Error::Lost)) =>
            {
                if let Some(s) = lease.session.take() {
                    let _ = s.keep_alive().await;
                }
                if let Some(w) = lease.spec.wait {
                    lease.spec.wait = Some(w.saturating_sub(started.elapsed()));
                }
                lease.acquire().await?
            }
            other => other?,
        };
        let lease = Arc::new(lease);
        let Some(grant) = grant else {
            return Ok(None);
        };
        Ok(Some(Guard::new(lease, grant, self.watchdog, self.on_lost)))
    }
}
