//! The async back end of a lease on one server: the lease core's acquire
//! loop driven with async I/O, and the renewal and release behind an async
//! [`Guard`](super::Guard).

use super::conn::Server;
use super::session::Session;
use crate::error::{Error, Failure, Result};
use crate::lease::{io_within, AcquireLoop, Grant, Renewal, Reply, Step, Terms};
use crate::limits::after;
use crate::request::Spec;
use crate::retry::Outage;
use crate::wanted::{renewal_of, WantedHook};
use redis::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) struct AsyncLease {
    pub server: Arc<Server>,
    pub spec: Spec,
    pub token: String,
    /// Held from an `EXTEND`'s send until its outcome is applied.
    pub renewing: tokio::sync::Mutex<()>,
    /// The session the hold is bound to: a keep-alive of it instead of an
    /// `EXTEND` (which the server refuses for a bound hold).
    pub session: Option<Arc<Session>>,
    /// `on_wanted`: renewals ask who waits (`EXTEND ... WANTED`); the hook
    /// runs on a thread of its own, off the runtime.
    pub wanted: Option<WantedHook>,
}

impl AsyncLease {
    fn io_until(&self, deadline: Instant, waiting: Duration) -> Duration {
        io_within(self.server.io_timeout, deadline, waiting, Instant::now())
    }

    fn min_replicas(&self) -> Option<u32> {
        self.server.min_replicas.map(|(n, _)| n)
    }

    /// Acquire with same-token retries (see the lease core's acquire loop).
    pub(super) async fn acquire(&self) -> Result<Option<Grant>> {
        let terms = Terms {
            ttl: self.spec.ttl,
            wait: self.spec.wait,
            io_timeout: self.server.io_timeout,
            retry_for: self.server.retry_for,
            min_replicas: self.min_replicas(),
            max_hold: self.spec.max_hold,
        };
        let (mut machine, mut step) = AcquireLoop::start(terms, Instant::now());
        loop {
            step = match step {
                Step::Send(a) => {
                    let session = self.session.as_ref().map(|s| s.id());
                    let cmd = self
                        .spec
                        .acquire_cmd_for(&self.token, a.ttl, a.wait_ms, session);
                    let connected = AtomicBool::new(false);
                    // A waiting attempt blocks its connection: one of its own.
                    let dedicated = a.wait_ms.is_some();
                    let got = self
                        .server
                        .call(&cmd, a.durable, dedicated, a.io, a.waiting, &connected)
                        .await;
                    let reply = Reply::of(got, connected.load(Ordering::Relaxed));
                    machine.replied(reply, Instant::now())
                }
                Step::Pause { pause, .. } => {
                    tokio::time::sleep(pause).await;
                    machine.resumed(Instant::now())
                }
                Step::Refresh { ttl, by } => {
                    let r = match &self.session {
                        Some(s) => s.keep_alive().await,
                        None => self.extend_by(ttl, by).await,
                    };
                    machine.refreshed(r, Instant::now())
                }
                Step::Abandon { by } => {
                    self.abandon(by).await;
                    machine.abandoned()
                }
                Step::Done(Ok(Some(grant))) => return Ok(Some(self.bound(grant))),
                Step::Done(outcome) => return outcome,
            }
        }
    }

    /// A grant bound to the session lasts as long as the session surely
    /// does (one that can bind nothing more: lost at once); others as
    /// granted.
    fn bound(&self, grant: Grant) -> Grant {
        let Some(s) = &self.session else {
            return grant;
        };
        let now = Instant::now();
        Grant {
            fence: grant.fence,
            valid_until: s.bindable(now).unwrap_or(now),
            cap: grant.cap,
        }
    }

    /// Best-effort release of a grant the caller will not get, by
    /// `deadline`.
    async fn abandon(&self, deadline: Instant) {
        let cmd = self.spec.release_cmd(&self.token);
        let mut outage = Outage::new();
        loop {
            let io = self.io_until(deadline, Duration::ZERO);
            let unheard = AtomicBool::new(false);
            match self
                .server
                .call(&cmd, false, false, io, Duration::ZERO, &unheard)
                .await
            {
                Err(Failure::Retry(_)) => {
                    match outage.next_pause(Duration::MAX, deadline, Instant::now()) {
                        Some(pause) => tokio::time::sleep(pause).await,
                        None => return,
                    }
                }
                _ => return,
            }
        }
    }

    /// `EXTEND`, retried for `retry_for` (a keep-alive of the session, for
    /// a bound hold).
    pub(super) async fn extend(&self, ttl: Duration) -> Renewal {
        if let Some(s) = &self.session {
            return s.keep_alive().await;
        }
        let deadline = after(Instant::now(), self.server.retry_for);
        self.extend_by(ttl, deadline).await
    }

    /// `EXTEND`, retried until `deadline`, each reply due by then plus a
    /// reply's margin. With an `on_wanted` hook it asks who waits
    /// (`WANTED`); a server that refuses the option is asked again at once
    /// without it.
    async fn extend_by(&self, ttl: Duration, deadline: Instant) -> Renewal {
        let mut hook = self.wanted.as_ref().filter(|h| h.asks());
        let mut cmd = self
            .spec
            .extend_cmd_wanted(&self.token, ttl, hook.is_some());
        let mut outage = Outage::new();
        loop {
            let sent = Instant::now();
            let io = self.io_until(deadline, Duration::ZERO);
            let unheard = AtomicBool::new(false);
            let (reply, acked) = match self
                .server
                .call(&cmd, true, false, io, Duration::ZERO, &unheard)
                .await
            {
                Ok(got) => got,
                Err(Failure::Retry(e)) => {
                    match outage.next_pause(Duration::MAX, deadline, Instant::now()) {
                        Some(pause) => tokio::time::sleep(pause).await,
                        None => return Renewal::Failed(e),
                    }
                    continue;
                }
                Err(f) => {
                    let e = f.into_error();
                    if hook.is_some_and(|h| h.refused(&e)) {
                        hook = None;
                        cmd = self.spec.extend_cmd(&self.token, ttl);
                        continue;
                    }
                    return Renewal::Failed(e);
                }
            };
            return renewal_of(&reply, acked, hook, self.min_replicas(), sent, ttl);
        }
    }

    /// `RELEASE` with retries for `retry_for`: true if released. A retry
    /// answered 0 means an earlier attempt released it only if that
    /// attempt may have run (sent after its connection answered a `PING`)
    /// while the lease surely lasted (`valid_until`).
    pub(super) async fn release(&self, valid_until: Instant) -> Result<bool> {
        let cmd = self.spec.release_cmd(&self.token);
        let deadline = after(Instant::now(), self.server.retry_for);
        let mut outage = Outage::new();
        let mut first_run: Option<Instant> = None;
        loop {
            let mut sent = None;
            match self.server.call_live(&cmd, &mut sent).await {
                Ok(Value::Int(1)) => return Ok(true),
                Ok(Value::Int(_)) => return Ok(first_run.is_some_and(|t| t < valid_until)),
                Ok(other) => return Err(Error::Server(format!("unexpected reply {other:?}"))),
                Err(Failure::Retry(e)) => {
                    first_run = first_run.or(sent);
                    match outage.next_pause(Duration::MAX, deadline, Instant::now()) {
                        Some(pause) => tokio::time::sleep(pause).await,
                        None => return Err(e),
                    }
                }
                Err(f) => return Err(f.into_error()),
            }
        }
    }
}
