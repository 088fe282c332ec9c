//! The sessions of a blocking [`Locker`](crate::Locker): one per server
//! (per master in a cluster) and lease ttl, opened on the first acquire
//! that would be renewed, kept alive by one thread for every guard bound
//! to it, and closed when the locker and its guards are gone (or on
//! [`Locker::close`](crate::Locker::close)). The session's schedule and
//! budget are the lease core's ([`SessionCore`]); this is the I/O.
//!
//! A server without sessions is asked once (its answer is kept per
//! server): guards there are renewed by a watchdog each, as before.

use crate::error::{millis, Error, Failure, Result};
use crate::held::Held;
use crate::lease::SessionCore;
use crate::lease::{is_no_session, lacks_sessions, new_session_id, End, Next, Phase, Renewal};
use crate::node::Node;
use crate::route::Topology;
use redis::Value;
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How a locker uses sessions (see the `with_session*` methods of
/// [`Locker`](crate::Locker)).
#[derive(Clone, Debug)]
pub(crate) struct SessionSettings {
    /// Bind renewed guards to a session where the server has them.
    pub enabled: bool,
    /// `OPEN ... BIND`: the session also ends when its connection closes.
    pub bind: bool,
    /// `OPEN ... LOCKDELAY ms`.
    pub lock_delay: Option<Duration>,
    /// The session's ttl; None: the ttl of the request that binds to it
    /// (one session per ttl).
    pub ttl: Option<Duration>,
}

impl Default for SessionSettings {
    fn default() -> SessionSettings {
        SessionSettings {
            enabled: true,
            bind: false,
            lock_delay: None,
            ttl: None,
        }
    }
}

/// The sessions of one locker and its clones.
#[derive(Default)]
pub(crate) struct Sessions {
    /// Per server address: whether it knows sessions (absent: not asked).
    support: Mutex<HashMap<String, bool>>,
    /// Per server address and ttl (ms): the session guards bind to.
    open: Mutex<HashMap<(String, u64), Arc<Session>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Sessions {
    /// The session a renewed request on `key` binds to: the live one of its
    /// server and ttl, or a new one opened now. None: the per-guard
    /// watchdog (sessions off, a server without them, or the open failed:
    /// the acquire then meets the same trouble and reports it).
    pub(crate) fn for_request(
        &self,
        topology: &Topology,
        key: &str,
        ttl: Duration,
        io_timeout: Duration,
        settings: &SessionSettings,
    ) -> Option<Arc<Session>> {
        if !settings.enabled {
            return None;
        }
        let node = topology.node_for(key, io_timeout).ok()?;
        let addr = node.addr();
        if lock(&self.support).get(&addr) == Some(&false) {
            return None;
        }
        let ttl = crate::limits::lease(settings.ttl.unwrap_or(ttl));
        let mut open = lock(&self.open);
        let slot = (addr.clone(), millis(ttl));
        if let Some(s) = open.get(&slot) {
            if s.bindable(Instant::now()).is_some() {
                return Some(s.clone());
            }
        }
        match Session::open(node, ttl, io_timeout, settings) {
            Ok(s) => {
                lock(&self.support).insert(addr, true);
                // A session that could no longer bind guards is let go
                // here: it ends with its last guard.
                open.insert(slot, s.clone());
                Some(s)
            }
            Err(e) => {
                if lacks_sessions(&e) {
                    lock(&self.support).insert(addr, false);
                }
                None
            }
        }
    }

    /// Closes every session now (see [`Session::close`]); later acquires
    /// open new ones.
    pub(crate) fn close_all(&self) {
        let all: Vec<Arc<Session>> = lock(&self.open).drain().map(|(_, s)| s).collect();
        for s in all {
            s.close();
        }
    }
}

/// One session: what its guards hold on to. Dropped with the last of them
/// (and its locker), it is closed.
pub(crate) struct Session {
    shared: Arc<Shared>,
    keeper: Mutex<Option<JoinHandle<()>>>,
}

/// What the session and its keep-alive thread share.
struct Shared {
    id: String,
    node: Arc<Node>,
    io_timeout: Duration,
    bind: bool,
    core: Mutex<SessionCore>,
    /// Wakes the keep-alive thread on a close.
    changed: Condvar,
    guards: Mutex<Vec<Weak<Held>>>,
    /// `BIND`: the connection `OPEN` was sent on, which every later command
    /// of the session uses (its close ends the session).
    conn: Mutex<Option<redis::Connection>>,
    /// Held from a keep-alive's send until its outcome is applied (the
    /// thread's, or a guard's `extend`).
    renewing: Mutex<()>,
}

impl Session {
    /// Opens a new session (a new id) on `node`, and starts its keep-alive
    /// thread.
    fn open(
        node: Arc<Node>,
        ttl: Duration,
        io_timeout: Duration,
        settings: &SessionSettings,
    ) -> Result<Arc<Session>> {
        let shared = Arc::new(Shared {
            id: new_session_id(),
            node,
            io_timeout,
            bind: settings.bind,
            core: Mutex::new(SessionCore::new(ttl, Instant::now())),
            changed: Condvar::new(),
            guards: Mutex::new(Vec::new()),
            conn: Mutex::new(None),
            renewing: Mutex::new(()),
        });
        if settings.bind {
            let c = shared
                .node
                .dedicated(io_timeout)
                .map_err(Failure::into_error)?;
            *lock(&shared.conn) = Some(c);
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
        match shared.call(&cmd)? {
            Value::Int(0 | 1) => lock(&shared.core).opened(sent),
            other => return Err(Error::Server(format!("unexpected reply {other:?}"))),
        }
        let keeper = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("dlock-session".into())
                .spawn(move || shared.keep())
                .map_err(|e| Error::Unavailable(format!("cannot start a thread: {e}")))?
        };
        Ok(Arc::new(Session {
            shared,
            keeper: Mutex::new(Some(keeper)),
        }))
    }

    pub(crate) fn id(&self) -> &str {
        &self.shared.id
    }

    pub(crate) fn ttl(&self) -> Duration {
        lock(&self.shared.core).ttl()
    }

    /// Until when a guard bound now surely lasts; None when the session
    /// can bind no guard (ended, or its budget passed).
    pub(crate) fn bindable(&self, now: Instant) -> Option<Instant> {
        lock(&self.shared.core).bindable(now)
    }

    /// Binds a guard: every keep-alive moves its budget, the end of the
    /// session marks it lost. Read after the guard is listed, so a
    /// keep-alive or an end that came between the grant and now is not
    /// missed.
    pub(crate) fn bind(&self, held: &Arc<Held>) {
        lock(&self.shared.guards).push(Arc::downgrade(held));
        let (ttl, bindable) = {
            let c = lock(&self.shared.core);
            (c.ttl(), c.bindable(Instant::now()))
        };
        match bindable {
            Some(until) => {
                let _ = held.apply(Renewal::Extended(until), ttl);
            }
            None => held.mark_lost(),
        }
    }

    /// A keep-alive now, for a guard's `extend` (see [`Shared::keep_alive`]).
    pub(crate) fn keep_alive(&self) -> Renewal {
        let under = lock(&self.shared.core).valid_until();
        self.shared.keep_alive(under)
    }

    /// Ends the session: every guard bound to it is lost, and the server
    /// is told (`CLOSE`, best effort), which releases their holds.
    pub(crate) fn close(&self) {
        let from = lock(&self.shared.core).end(End::Closed);
        self.shared.changed.notify_all();
        let keeper = lock(&self.keeper).take();
        if let Some(k) = keeper {
            // Never from the thread itself (a loss callback that let the
            // last guard go).
            if k.thread().id() != std::thread::current().id() {
                let _ = k.join();
            }
        }
        if from.is_none() {
            return;
        }
        self.shared.tell_lost();
        if from == Some(Phase::Live) {
            let mut cmd = redis::cmd("DLOCK.SESSION");
            cmd.arg("CLOSE").arg(&self.shared.id);
            let _ = self.shared.call(&cmd);
        }
        *lock(&self.shared.conn) = None;
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.close();
    }
}

impl Shared {
    /// Runs one session command: on the `BIND` connection (whose loss ends
    /// the session), or on a pooled one.
    fn call(&self, cmd: &redis::Cmd) -> Result<Value> {
        if !self.bind {
            return self
                .node
                .with_conn(self.io_timeout, |c| cmd.query::<Value>(c))
                .map_err(Failure::into_error);
        }
        let mut conn = lock(&self.conn);
        let Some(c) = conn.as_mut() else {
            return Err(Error::Unavailable(
                "the session's connection was closed".into(),
            ));
        };
        match cmd.query::<Value>(c) {
            Ok(v) => Ok(v),
            Err(e) => {
                let broken = crate::error::reached(&e) || !redis::ConnectionLike::is_open(c);
                let e = Failure::from(e).at(&self.node.addr()).into_error();
                if broken {
                    // Told to the guards by the caller (`keep_alive`).
                    *conn = None;
                    drop(conn);
                    let _ = lock(&self.core).end(End::Unbound);
                }
                Err(e)
            }
        }
    }

    /// `KEEPALIVE`, sent under the deadline `under`: every guard's budget
    /// moves to the session's, or (`NOSESSION`, a reply after the budget
    /// passed, the `BIND` connection lost) every guard is lost. The guards
    /// are told after the keep-alive lets go of `renewing`: a loss callback
    /// may `extend` another guard of the session.
    fn keep_alive(&self, under: Instant) -> Renewal {
        let outcome = {
            let _one = lock(&self.renewing);
            self.keep_alive_once(under)
        };
        if let Renewal::Extended(until) = outcome {
            let ttl = lock(&self.core).ttl();
            for g in self.guards() {
                let _ = g.apply(Renewal::Extended(until), ttl);
            }
        }
        if matches!(lock(&self.core).phase(), Phase::Ended(_)) {
            self.tell_lost();
        }
        outcome
    }

    /// One `KEEPALIVE` and its outcome for the core (see
    /// [`Shared::keep_alive`]).
    fn keep_alive_once(&self, under: Instant) -> Renewal {
        if lock(&self.core).phase() != Phase::Live {
            return Renewal::Lost;
        }
        let mut cmd = redis::cmd("DLOCK.SESSION");
        cmd.arg("KEEPALIVE").arg(&self.id);
        let sent = Instant::now();
        let reply = self.call(&cmd);
        let now = Instant::now();
        match reply {
            Ok(Value::Int(left)) if left > 0 => {
                let left = Duration::from_millis(left as u64);
                match lock(&self.core).kept_alive(sent, left, now) {
                    Some(until) => Renewal::Extended(until),
                    None => Renewal::Lost,
                }
            }
            Err(e) if is_no_session(&e) => {
                let _ = lock(&self.core).end(End::Gone);
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

    /// The guards still around (the list pruned of the others).
    fn guards(&self) -> Vec<Arc<Held>> {
        let mut g = lock(&self.guards);
        g.retain(|w| w.strong_count() > 0);
        g.iter().filter_map(Weak::upgrade).collect()
    }

    /// Marks every bound guard lost.
    fn tell_lost(&self) {
        let all: Vec<Arc<Held>> = lock(&self.guards)
            .drain(..)
            .filter_map(|w| w.upgrade())
            .collect();
        for g in all {
            g.mark_lost();
        }
    }

    /// The keep-alive thread: the core's schedule, woken early by a close.
    fn keep(&self) {
        loop {
            let next = {
                let mut c = lock(&self.core);
                loop {
                    let now = Instant::now();
                    match c.next(now) {
                        Next::Sleep(t) => {
                            c = self
                                .changed
                                .wait_timeout(c, t - now)
                                .unwrap_or_else(|p| p.into_inner())
                                .0;
                        }
                        Next::Idle => {
                            c = self.changed.wait(c).unwrap_or_else(|p| p.into_inner());
                        }
                        n => break n,
                    }
                }
            };
            match next {
                Next::KeepAlive { under } => {
                    let _ = self.keep_alive(under);
                }
                Next::Expired => {
                    let _ = lock(&self.core).end(End::Expired);
                    self.tell_lost();
                    return;
                }
                Next::Stop | Next::Sleep(_) | Next::Idle => return,
            }
        }
    }
}
