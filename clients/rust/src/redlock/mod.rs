//! Redlock: one lock over N independent servers (masters, each with the
//! dlock module), granted when a majority grants it. See [`Redlock`].

mod attempts;
mod math;
mod node;
mod round;

use crate::error::{Error, Result};
use crate::guard::{Granted, Guard};
use crate::lease::Cap;
use crate::node::Node;
use crate::request::{lock_options, new_token, Spec};
use attempts::Attempts;
use node::{fan_out, RNode, RedlockLease, SLACK};
use redis::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One lock over N independent servers: Redlock, with dlock's commands on
/// each server (its server-side `WAIT`, fences, sets, shared holds).
///
/// - **Quorum.** `ACQUIRE` goes to every server at once (one thread each,
///   connections from a pool per server), each reply due within the *node
///   timeout* ([`Redlock::with_node_timeout`], default 100 ms), far below
///   any sensible ttl. The lock is granted when `N/2 + 1` servers granted
///   it, and it is *valid* until `first_send + ttl − drift`, counted from
///   before the first command was sent, with `drift = ttl/100 + 2 ms` for
///   the servers' clocks; a quorum whose validity is already over counts
///   as a failure. [`Guard::valid_until`] is that instant.
/// - **Failure.** Every grant that does not count is released on the very
///   connection that acquired it (a `RELEASE` on another connection could
///   overtake an `ACQUIRE` still buffered on its way); a server that did
///   not answer in time gets the `RELEASE` written behind its `ACQUIRE`,
///   and its connection is closed, which also drops a queued waiter. Then
///   a pause with random jitter, and a new attempt with a fresh token.
/// - **Waiting.** With [`RedlockRequest::wait`], each attempt waits in the
///   servers' queues (`WAIT`) for a tenth of the ttl (at least the node
///   timeout, at most a third of the ttl), never longer: holding some
///   servers while waiting for others would block everyone. Then
///   everything is released and the next attempt starts, until the wait is
///   used up. `Ok(None)`: still busy at the end; [`Error::NoQuorum`]: too
///   many servers were unreachable (without a wait, after one attempt,
///   within about the node timeout).
/// - **Renewal** ([`Guard::extend`], the watchdog) sends `EXTEND` to every
///   server, never a same-token acquire: it succeeds with a quorum of 1s,
///   valid from the renewal's send time less the drift. The lease is
///   *lost* when more than `N − quorum` servers answered 0 (the token can no
///   longer hold a quorum, and nothing grants it again); with fewer 0s but
///   no quorum of 1s (servers unreachable) the renewal only failed, and the
///   watchdog retries while the budget lasts.
/// - **Release** sends `RELEASE` to every server: `Ok(true)` when a quorum
///   released it.
/// - `SHARED` holds work as usual. `LIMIT n` above 1 is refused with
///   [`Error::Invalid`] for more than one server: majorities of
///   independent servers cannot count permits. Sets
///   ([`Redlock::request_set`]) use `MACQUIRE` on every server.
///
/// # Fences
///
/// Every server keeps its own fence counter, so a grant has one fence per
/// server: [`Guard::fences`], in the order the URLs were given (`None`
/// where the grant does not count). Fences only grow on a server, holds of
/// one resource on a server never overlap, and any two quorums share a
/// server; so for two grants that each held a quorum, the later one has
/// the higher fence on *every* server both hold, and there is at least one.
/// A storage that remembers, per server, the highest fence it accepted, and
/// rejects a write whose fence is below that mark on any server the write
/// names (otherwise accepting it and raising the marks to its fences)
/// therefore refuses a stale holder once a later holder has written, and
/// accepts every write of the current holder: no clock is involved.
///
/// [`Guard::fence`], the largest of the fences, is one number, but each
/// server draws fences from its own wall clock (microseconds): the largest
/// fence of a later grant is above that of an earlier one only while the
/// servers' clocks disagree by less than the time between the two grants.
///
/// # Example
///
/// ```no_run
/// use std::time::Duration;
/// use dlock_client::Redlock;
///
/// let redlock = Redlock::new(&[
///     "redis://10.0.0.1:6379/",
///     "redis://10.0.0.2:6379/",
///     "redis://10.0.0.3:6379/",
/// ])?
/// .with_node_timeout(Duration::from_millis(50));
/// let guard = redlock
///     .request("orders:42")
///     .ttl(Duration::from_secs(10))
///     .wait(Duration::from_secs(30))
///     .watchdog()
///     .acquire()?;
/// if let Some(guard) = guard {
///     // Send every fence to the storage: guard.fences() is in server order.
///     println!("fences {:?}, valid for {:?}", guard.fences(), guard.remaining());
///     guard.release()?;
/// }
/// # Ok::<(), dlock_client::Error>(())
/// ```
#[derive(Clone)]
pub struct Redlock {
    infos: Arc<[redis::ConnectionInfo]>,
    nodes: Arc<[RNode]>,
    node_timeout: Duration,
    watchdog: bool,
}

fn pool(infos: &[redis::ConnectionInfo], timeout: Duration) -> Arc<[RNode]> {
    infos
        .iter()
        .map(|i| RNode::new(Node::new(i.clone(), timeout), timeout))
        .collect()
}

impl Redlock {
    /// The default node timeout.
    pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(100);

    /// A Redlock over independent servers (not replicas of each other, not
    /// one cluster), e.g. `redis://:password@10.0.0.1:6379/0`. Nothing is
    /// connected until the first request. The same server given twice is
    /// refused (it would count twice towards the quorum), also under two
    /// names: host names are resolved here, and two URLs that share a
    /// socket address and a database name the same server (a name that
    /// does not resolve is compared as written). So is an empty list.
    pub fn new<S: AsRef<str>>(urls: &[S]) -> Result<Redlock> {
        Redlock::new_with(urls, None)
    }

    /// [`Redlock::new`] over TLS: `rediss://` URLs, each server verified
    /// and logged in with `tls` (one CA for all of them).
    pub fn new_tls<S: AsRef<str>>(urls: &[S], tls: &crate::TlsSettings) -> Result<Redlock> {
        Redlock::new_with(urls, Some(tls))
    }

    fn new_with<S: AsRef<str>>(urls: &[S], tls: Option<&crate::TlsSettings>) -> Result<Redlock> {
        if urls.is_empty() {
            return Err(Error::Invalid("no server given".into()));
        }
        let mut infos = Vec::with_capacity(urls.len());
        let mut seen: Vec<(Place, i64)> = Vec::with_capacity(urls.len());
        for url in urls {
            let url = url.as_ref();
            let info = crate::tls::connection_info(url, tls)?;
            let place = Place::of(&info.addr);
            let db = info.redis.db;
            if let Some((first, _)) = seen.iter().find(|(p, d)| *d == db && p.same(&place)) {
                return Err(Error::Invalid(format!(
                    "{} and {} name the same server (database {db}): it would count \
                     twice towards the quorum",
                    first.text, place.text
                )));
            }
            seen.push((place, db));
            infos.push(info);
        }
        let node_timeout = Redlock::DEFAULT_NODE_TIMEOUT;
        Ok(Redlock {
            nodes: pool(&infos, node_timeout),
            infos: infos.into(),
            node_timeout,
            watchdog: false,
        })
    }

    /// The longest one server may take to answer one command, connecting
    /// included (default [`Redlock::DEFAULT_NODE_TIMEOUT`], 100 ms). Keep it
    /// far below the ttl: a grant's validity loses what its slowest counted
    /// server took. A server slower than this counts as failed for that
    /// round. Starts new connection pools.
    pub fn with_node_timeout(mut self, d: Duration) -> Redlock {
        self.node_timeout = crate::limits::clamp(d).max(Duration::from_millis(1));
        self.nodes = pool(&self.infos, self.node_timeout);
        self
    }

    /// Renew every guard in the background (see [`RedlockRequest::watchdog`]).
    pub fn with_watchdog(mut self, on: bool) -> Redlock {
        self.watchdog = on;
        self
    }

    /// How many servers.
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    /// How many servers must grant: `N/2 + 1`.
    pub fn quorum(&self) -> usize {
        math::quorum(self.nodes.len())
    }

    /// A request for one resource, to set options on and then
    /// [`acquire`](RedlockRequest::acquire).
    pub fn request(&self, resource: impl Into<String>) -> RedlockRequest<'_> {
        self.request_set([resource.into()])
    }

    /// A request for a set of resources, granted all or nothing on each
    /// server (`DLOCK.MACQUIRE`), and by a quorum of servers.
    pub fn request_set<I, S>(&self, resources: I) -> RedlockRequest<'_>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        RedlockRequest {
            redlock: self,
            spec: Spec::new(resources.into_iter().map(Into::into).collect()),
            watchdog: self.watchdog,
            on_lost: None,
            retry_for: Duration::from_secs(2),
        }
    }

    /// One attempt, no waiting: `Ok(None)` if busy. To wait, renew, or
    /// hold a shared lock, use [`Redlock::request`].
    pub fn try_lock(&self, resource: &str, ttl: Duration) -> Result<Option<Guard>> {
        self.request(resource).ttl(ttl).acquire()
    }

    /// Extends the lease `token` holds on `resource` to `ttl`, without a
    /// [`Guard`] (e.g. a lease another process took): `EXTEND` on every
    /// server at once, each reply due within the node timeout. `Ok(true)`
    /// when a quorum extended it, `Ok(false)` when so many servers answered
    /// 0 that no quorum holds the token, otherwise [`Error::NoQuorum`] (or
    /// the servers' own error when a majority answered with one, e.g.
    /// [`Error::ModuleMissing`], [`Error::Denied`]).
    pub fn extend_token(&self, resource: &str, token: &str, ttl: Duration) -> Result<bool> {
        crate::by_token::extend(&self.lease_of(resource, token, ttl)?, ttl)
    }

    /// Releases the lease `token` holds on `resource`, without a [`Guard`]:
    /// `RELEASE` on every server at once. `Ok(true)` when a quorum released
    /// it, `Ok(false)` when so many answered 0 that no quorum held it,
    /// otherwise [`Error::NoQuorum`] (or the servers' own error, as for
    /// [`Redlock::extend_token`]).
    pub fn release_token(&self, resource: &str, token: &str) -> Result<bool> {
        let ttl = Duration::from_secs(1);
        crate::by_token::release(&self.lease_of(resource, token, ttl)?)
    }

    fn lease_of(&self, resource: &str, token: &str, ttl: Duration) -> Result<RedlockLease> {
        Ok(RedlockLease {
            nodes: self.nodes.clone(),
            spec: crate::by_token::spec(resource, token, ttl)?,
            token: token.to_string(),
            timeout: self.node_timeout,
        })
    }

    /// `DLOCK.INFO resource` on every server, in server order (nil when
    /// free there).
    pub fn info(&self, resource: &str) -> Vec<Result<Value>> {
        let cmd = redis::cmd("DLOCK.INFO").arg(resource).clone();
        let reply_by = crate::limits::after(Instant::now(), self.node_timeout);
        fan_out(&self.nodes, reply_by + SLACK, move |n| {
            n.call(&cmd, reply_by).map_err(|f| f.into_error())
        })
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(Error::Unavailable("no answer in time".into()))))
        .collect()
    }
}

/// Where a server listens, to tell one server given twice: its address as
/// written, and the socket addresses it resolves to.
struct Place {
    text: String,
    resolved: Vec<std::net::SocketAddr>,
}

impl Place {
    fn of(addr: &redis::ConnectionAddr) -> Place {
        use redis::ConnectionAddr as A;
        use std::net::ToSocketAddrs;
        match addr {
            A::Tcp(host, port) | A::TcpTls { host, port, .. } => Place {
                text: format!("{host}:{port}"),
                resolved: (host.as_str(), *port)
                    .to_socket_addrs()
                    .map(Iterator::collect)
                    .unwrap_or_default(),
            },
            A::Unix(path) => Place {
                text: std::fs::canonicalize(path)
                    .unwrap_or_else(|_| path.clone())
                    .display()
                    .to_string(),
                resolved: Vec::new(),
            },
        }
    }

    fn same(&self, other: &Place) -> bool {
        self.text == other.text || self.resolved.iter().any(|a| other.resolved.contains(a))
    }
}

/// A Redlock request: options, then [`RedlockRequest::acquire`]. The same
/// shape as [`crate::LockRequest`].
pub struct RedlockRequest<'a> {
    redlock: &'a Redlock,
    spec: Spec,
    watchdog: bool,
    on_lost: Option<Box<dyn FnOnce() + Send>>,
    retry_for: Duration,
}

lock_options!(RedlockRequest);

impl RedlockRequest<'_> {
    /// The longest a waiting request goes on while every attempt misses its
    /// quorum because servers are unreachable (default 2 s): then it ends
    /// with [`Error::NoQuorum`] instead of waiting on.
    pub fn retry_for(mut self, d: Duration) -> Self {
        self.retry_for = crate::limits::clamp(d);
        self
    }

    /// Acquires: `Ok(Some(guard))` when a quorum granted in time,
    /// `Ok(None)` when busy (after the wait, if any). Errors:
    /// [`Error::Invalid`] (nothing sent), [`Error::NoQuorum`] when too
    /// many servers were unreachable, the servers' own error when a
    /// majority answered with one (e.g. `QUARANTINE`, `WRONGTYPE`), and
    /// [`Error::Unavailable`] when a quorum granted only after the validity
    /// ran out (servers too slow for this ttl).
    pub fn acquire(self) -> Result<Option<Guard>> {
        self.spec.validate()?;
        let nodes = self.redlock.nodes.clone();
        let n = nodes.len();
        if n > 1 && self.spec.limit.is_some_and(|l| l > 1) {
            return Err(Error::Invalid(
                "LIMIT above 1 needs a single server: majorities of independent servers cannot count permits"
                    .into(),
            ));
        }
        let timeout = self.redlock.node_timeout;
        let spec = Arc::new(self.spec);
        let mut attempts =
            Attempts::new(spec.ttl, spec.wait, timeout, self.retry_for, Instant::now());
        let missed = loop {
            let token: Arc<str> = new_token().into();
            let wait = attempts.wait(Instant::now());
            // A capped hold's floor: from before the round's first send.
            let cap = spec.max_hold.map(|m| Cap::new(Instant::now(), m));
            let missed = match round::attempt(&nodes, &spec, token.clone(), wait, timeout) {
                Ok(won) => {
                    let granted = Granted {
                        cap,
                        resources: spec.resources.clone(),
                        token: token.to_string(),
                        fences: won.fences,
                        ttl: spec.ttl,
                        valid_until: won.valid_until,
                        watchdog: self.watchdog,
                        on_lost: self.on_lost,
                        // Redlock keeps a watchdog per guard.
                        session: None,
                    };
                    let lease = RedlockLease {
                        nodes,
                        spec: (*spec).clone(),
                        token: token.to_string(),
                        timeout,
                    };
                    return Ok(Some(Guard::new(Box::new(lease), granted)));
                }
                Err(missed) => missed,
            };
            let random = uuid::Uuid::new_v4().as_u128() as u64;
            match attempts.missed(&missed, Instant::now(), random) {
                Some(pause) => std::thread::sleep(pause),
                None => break missed,
            }
        };
        match attempts.why(missed) {
            None => Ok(None),
            Some(e) => Err(e),
        }
    }
}
