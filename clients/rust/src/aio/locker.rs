//! The async [`Locker`] and [`LockRequest`]: where locks are taken (one
//! server, or the master Redis Sentinel names), the settings, and the
//! request builder.

use super::conn::Server;
use super::guard::Guard;
use super::lease::AsyncLease;
use crate::error::{Error, Result};
use crate::limits::clamp;
use crate::request::{lock_options, new_token, Spec};
use crate::sentinel::Sentinels;
use std::sync::Arc;
use std::time::Duration;

/// Takes locks on one server. Cheap to clone.
#[derive(Clone)]
pub struct Locker {
    pub(super) inner: Arc<Server>,
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
            }),
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
            server: self.locker.inner.clone(),
            spec: self.spec,
            token: self.token.unwrap_or_else(new_token),
            renewing: tokio::sync::Mutex::new(()),
        });
        let Some(grant) = lease.acquire().await? else {
            return Ok(None);
        };
        Ok(Some(Guard::new(lease, grant, self.watchdog, self.on_lost)))
    }
}
