//! The sessions of an async [`Locker`](super::Locker): as the blocking
//! API's (`session.rs`), one per ttl on its server, kept alive by one task
//! for every guard bound to it; the same core ([`SessionCore`]), driven on
//! tokio.

use super::conn::Server;
use super::guard_state::Shared as GuardShared;
use crate::error::{millis, Error, Failure, Result};
use crate::lease::SessionCore;
use crate::lease::{is_no_session, lacks_sessions, new_session_id, End, Next, Phase, Renewal};
use crate::session::SessionSettings;
use redis::aio::MultiplexedConnection;
use redis::Value;
use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The sessions of one async locker and its clones.
#[derive(Default)]
pub(super) struct Sessions {
    /// Whether the server knows sessions (None: not asked yet).
    support: Mutex<Option<bool>>,
    /// Per ttl (ms): the session guards bind to.
    open: tokio::sync::Mutex<HashMap<u64, Arc<Session>>>,
}

impl Sessions {
    /// The session a renewed request with `ttl` binds to (see the blocking
    /// API's `Sessions::for_request`).
    pub(super) async fn for_request(
        &self,
        server: &Arc<Server>,
        ttl: Duration,
    ) -> Option<Arc<Session>> {
        let settings = &server.sessions;
        if !settings.enabled || server.min_replicas.is_some() {
            return None;
        }
        if *lock(&self.support) == Some(false) {
            return None;
        }
        let ttl = crate::limits::lease(settings.ttl.unwrap_or(ttl));
        let mut open = self.open.lock().await;
        if let Some(s) = open.get(&millis(ttl)) {
            if s.bindable(Instant::now()).is_some() {
                return Some(s.clone());
            }
        }
        match Session::open(server.clone(), ttl, settings).await {
            Ok(s) => {
                *lock(&self.support) = Some(true);
                open.insert(millis(ttl), s.clone());
                Some(s)
            }
            Err(e) => {
                if lacks_sessions(&e) {
                    *lock(&self.support) = Some(false);
                }
                None
            }
        }
    }

    /// Closes every session now; later acquires open new ones.
    pub(super) async fn close_all(&self) {
        let all: Vec<Arc<Session>> = self.open.lock().await.drain().map(|(_, s)| s).collect();
        for s in all {
            s.close().await;
        }
    }
}

/// One session, held by its guards and its locker; dropped with the last
/// of them, it is closed (on a spawned task, inside a tokio runtime).
pub(crate) struct Session {
    shared: Arc<Shared>,
    keeper: tokio::task::JoinHandle<()>,
}

struct Shared {
    id: String,
    server: Arc<Server>,
    bind: bool,
    core: Mutex<SessionCore>,
    guards: Mutex<Vec<Weak<GuardShared>>>,
    /// `BIND`: the connection `OPEN` was sent on, used by every later
    /// command of the session (its close ends the session).
    conn: tokio::sync::Mutex<Option<MultiplexedConnection>>,
    /// Held from a keep-alive's send until its outcome is applied.
    renewing: tokio::sync::Mutex<()>,
}

impl Session {
    async fn open(
        server: Arc<Server>,
        ttl: Duration,
        settings: &SessionSettings,
    ) -> Result<Arc<Session>> {
        let shared = Arc::new(Shared {
            id: new_session_id(),
            server,
            bind: settings.bind,
            core: Mutex::new(SessionCore::new(ttl, Instant::now())),
            guards: Mutex::new(Vec::new()),
            conn: tokio::sync::Mutex::new(None),
            renewing: tokio::sync::Mutex::new(()),
        });
        if settings.bind {
            let io = shared.server.io_timeout;
            let c = match tokio::time::timeout(io, shared.server.open()).await {
                Ok(c) => c.map_err(Failure::into_error)?,
                Err(_) => return Err(Error::Unavailable("timed out".into())),
            };
            *shared.conn.lock().await = Some(c);
        }
        let mut cmd = redis::cmd("DLOCK.SESSION");
        cmd.arg("OPEN").arg(&shared.id).arg(millis(ttl));
        if settings.bind {
            cmd.arg("BIND");
        }
        if let Some(d) = settings.lock_delay {
            cmd.arg("LOCKDELAY").arg(millis(d));
        }
        let sent = Instant::now();
        match shared.call(&cmd).await? {
            Value::Int(0 | 1) => lock(&shared.core).opened(sent),
            other => return Err(Error::Server(format!("unexpected reply {other:?}"))),
        }
        let keeper = tokio::spawn(keep(shared.clone()));
        Ok(Arc::new(Session { shared, keeper }))
    }

    pub(crate) fn id(&self) -> &str {
        &self.shared.id
    }

    pub(crate) fn ttl(&self) -> Duration {
        lock(&self.shared.core).ttl()
    }

    pub(crate) fn bindable(&self, now: Instant) -> Option<Instant> {
        lock(&self.shared.core).bindable(now)
    }

    /// Binds a guard (see the blocking API's `Session::bind`).
    pub(super) fn bind(&self, guard: &Arc<GuardShared>) {
        lock(&self.shared.guards).push(Arc::downgrade(guard));
        let (ttl, bindable) = {
            let c = lock(&self.shared.core);
            (c.ttl(), c.bindable(Instant::now()))
        };
        match bindable {
            Some(until) => {
                let _ = guard.apply(Renewal::Extended(until), ttl);
            }
            None => guard.mark_lost(),
        }
    }

    /// A keep-alive now, for a guard's `extend` or a waiting grant.
    pub(crate) async fn keep_alive(&self) -> Renewal {
        let under = lock(&self.shared.core).valid_until();
        self.shared.keep_alive(under).await
    }

    /// Ends the session: every guard bound to it is lost, and the server
    /// is told (`CLOSE`), which releases their holds.
    pub(super) async fn close(&self) {
        self.keeper.abort();
        if let Some(from) = self.shared.end(End::Closed) {
            if from == Phase::Live {
                let _ = self.shared.call(&close_cmd(&self.shared.id)).await;
            }
        }
        *self.shared.conn.lock().await = None;
    }
}

fn close_cmd(id: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("DLOCK.SESSION");
    cmd.arg("CLOSE").arg(id);
    cmd
}

impl Drop for Session {
    fn drop(&mut self) {
        self.keeper.abort();
        if self.shared.end(End::Closed) != Some(Phase::Live) {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let shared = self.shared.clone();
            rt.spawn(async move {
                let _ = shared.call(&close_cmd(&shared.id)).await;
            });
        }
    }
}

impl Shared {
    /// Ends the session and tells the guards, the first time: the phase it
    /// ended from.
    fn end(&self, how: End) -> Option<Phase> {
        let from = lock(&self.core).end(how);
        if from.is_some() {
            let all: Vec<_> = lock(&self.guards)
                .drain(..)
                .filter_map(|w| w.upgrade())
                .collect();
            for g in all {
                g.mark_lost();
            }
        }
        from
    }

    /// One session command, its reply due within the io timeout: on the
    /// `BIND` connection (whose loss ends the session), or the shared one.
    async fn call(&self, cmd: &redis::Cmd) -> Result<Value> {
        let io = self.server.io_timeout;
        if !self.bind {
            let connected = AtomicBool::new(false);
            return self
                .server
                .call(cmd, false, false, io, Duration::ZERO, &connected)
                .await
                .map(|(v, _)| v)
                .map_err(Failure::into_error);
        }
        let mut conn = self.conn.lock().await;
        let Some(c) = conn.as_mut() else {
            return Err(Error::Unavailable(
                "the session's connection was closed".into(),
            ));
        };
        let broken = match tokio::time::timeout(io, cmd.query_async::<Value>(c)).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) if !crate::error::reached(&e) => {
                return Err(Failure::from(e).at(&self.server.addr()).into_error())
            }
            Ok(Err(e)) => Failure::from(e).at(&self.server.addr()).into_error(),
            Err(_) => Error::Unavailable(format!("{}: timed out", self.server.addr())),
        };
        *conn = None;
        drop(conn);
        self.end(End::Unbound);
        Err(broken)
    }

    /// `KEEPALIVE`, sent under the deadline `under` (see the blocking
    /// API's `Shared::keep_alive`).
    async fn keep_alive(&self, under: Instant) -> Renewal {
        let _one = self.renewing.lock().await;
        if lock(&self.core).phase() != Phase::Live {
            return Renewal::Lost;
        }
        let mut cmd = redis::cmd("DLOCK.SESSION");
        cmd.arg("KEEPALIVE").arg(&self.id);
        let sent = Instant::now();
        let reply = self.call(&cmd).await;
        let now = Instant::now();
        match reply {
            Ok(Value::Int(left)) if left > 0 => {
                let left = Duration::from_millis(left as u64);
                let (until, ttl) = {
                    let mut c = lock(&self.core);
                    (c.kept_alive(sent, left, now), c.ttl())
                };
                let Some(until) = until else {
                    self.end(End::Expired);
                    return Renewal::Lost;
                };
                let guards: Vec<_> = {
                    let mut g = lock(&self.guards);
                    g.retain(|w| w.strong_count() > 0);
                    g.iter().filter_map(Weak::upgrade).collect()
                };
                for g in guards {
                    let _ = g.apply(Renewal::Extended(until), ttl);
                }
                Renewal::Extended(until)
            }
            Err(e) if is_no_session(&e) => {
                self.end(End::Gone);
                Renewal::Lost
            }
            Ok(other) => {
                lock(&self.core).failed(under, now);
                Renewal::Failed(Error::Server(format!("unexpected reply {other:?}")))
            }
            Err(e) => {
                lock(&self.core).failed(under, now);
                Renewal::Failed(e)
            }
        }
    }
}

/// The keep-alive task: the core's schedule (aborted by a close).
async fn keep(shared: Arc<Shared>) {
    loop {
        let next = lock(&shared.core).next(Instant::now());
        match next {
            Next::Sleep(t) => tokio::time::sleep_until(t.into()).await,
            Next::KeepAlive { under } => {
                let _ = shared.keep_alive(under).await;
            }
            Next::Expired => {
                shared.end(End::Expired);
                return;
            }
            Next::Idle | Next::Stop => return,
        }
    }
}
