//! A lease on one server (or one cluster slot's master): acquire with
//! same-token retries and the lease budget, `min_replicas`, and the renewal
//! and release behind a [`Guard`](crate::Guard) from a
//! [`Locker`](crate::Locker).

use crate::error::{millis, reached, Error, Failure, Result};
use crate::lease::{io_within, AcquireLoop, Grant, Lease, Renewal, Reply, Step, Terms};
use crate::limits::{after, LONGEST};
use crate::request::Spec;
use crate::retry::Outage;
use crate::route::Topology;
use crate::session::{Session, SessionSettings};
use crate::wanted::{renewal_of, WantedHook};
use redis::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Settings shared by every request of a [`Locker`](crate::Locker) (each
/// can be changed per request on [`LockRequest`](crate::LockRequest)).
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    /// Longest wait for one reply (beyond a blocking acquire's own wait).
    pub io_timeout: Duration,
    /// How long a non-waiting acquire, an extend or a release keeps retrying
    /// (same token) through connection errors.
    pub retry_for: Duration,
    pub min_replicas: Option<(u32, Duration)>,
    pub watchdog: bool,
    pub sessions: SessionSettings,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            io_timeout: Duration::from_secs(2),
            retry_for: Duration::from_secs(2),
            min_replicas: None,
            watchdog: false,
            sessions: SessionSettings::default(),
        }
    }
}

/// `ASKING` (when redirected) + the command + `WAIT n timeout` (when
/// durability is asked for), as one pipeline on one connection.
pub(crate) fn with_asking(
    asking: bool,
    cmd: &redis::Cmd,
    wait: Option<(u32, Duration)>,
) -> redis::Pipeline {
    let mut p = redis::pipe();
    if asking {
        p.cmd("ASKING").ignore();
    }
    p.add_command(cmd.clone());
    if let Some((n, t)) = wait {
        // `WAIT n 0` blocks forever: a timeout under 1 ms waits 1 ms.
        p.cmd("WAIT").arg(n).arg(millis(t).max(1));
    }
    p
}

/// Called before each same-token retry of an acquire, with what failed.
pub(crate) type OnRetry = Box<dyn FnMut(&Error) + Send>;

/// A lease on one server: what a [`crate::Guard`] from a [`crate::Locker`] renews and
/// releases.
pub(crate) struct SingleLease {
    pub topology: Arc<Topology>,
    pub spec: Spec,
    pub token: String,
    pub settings: Settings,
    /// The session the hold is bound to: no `EXTEND` then (the server
    /// refuses it), a keep-alive of the session instead.
    pub session: Option<Arc<Session>>,
    /// `on_wanted`: renewals ask who waits (`EXTEND ... WANTED`).
    pub wanted: Option<WantedHook>,
}

impl SingleLease {
    /// The io timeout of a command sent now for a call that ends at
    /// `deadline`, beyond the server-side `waiting`.
    fn io_until(&self, deadline: Instant, waiting: Duration) -> Duration {
        io_within(self.settings.io_timeout, deadline, waiting, Instant::now())
    }

    /// Runs `cmd` (+ `WAIT n` when `durable` and asked for) on the
    /// resource's server; returns the command's reply and the replicas'
    /// acknowledgements.
    fn call(
        &self,
        cmd: &redis::Cmd,
        durable: bool,
        io: Duration,
        extra_wait: Duration,
        connected: Option<&std::cell::Cell<bool>>,
    ) -> std::result::Result<(Value, Option<i64>), Failure> {
        let durability = self.settings.min_replicas.filter(|_| durable);
        let extra = extra_wait.saturating_add(durability.map_or(Duration::ZERO, |d| d.1));
        self.topology
            .run(self.spec.route_key(), io, extra, |c, asking| {
                let replies = with_asking(asking, cmd, durability).query(c);
                mark_connected(connected, &replies);
                let mut replies: Vec<Value> = replies?;
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

    /// Acquire with same-token retries: the lease core's acquire loop,
    /// driven with blocking I/O. The whole call, retries and the undo of a
    /// possibly granted attempt included, ends by its deadline plus a
    /// reply's margin.
    pub(crate) fn acquire(&self, mut on_retry: Option<&mut OnRetry>) -> Result<Option<Grant>> {
        let terms = Terms {
            ttl: self.spec.ttl,
            wait: self.spec.wait,
            io_timeout: self.settings.io_timeout,
            retry_for: self.settings.retry_for,
            min_replicas: self.settings.min_replicas.map(|(n, _)| n),
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
                    let connected = std::cell::Cell::new(false);
                    let got = self.call(&cmd, a.durable, a.io, a.waiting, Some(&connected));
                    machine.replied(Reply::of(got, connected.get()), Instant::now())
                }
                Step::Pause { pause, retrying } => {
                    if let Some(f) = on_retry.as_mut() {
                        f(&retrying);
                    }
                    std::thread::sleep(pause);
                    machine.resumed(Instant::now())
                }
                Step::Refresh { ttl, by } => {
                    let r = match &self.session {
                        // A bound grant lasts as long as the session: a
                        // keep-alive sent now budgets it from its send.
                        Some(s) => s.keep_alive(),
                        None => self.extend_by(ttl, by),
                    };
                    machine.refreshed(r, Instant::now())
                }
                Step::Abandon { by } => {
                    self.abandon(by);
                    machine.abandoned()
                }
                Step::Done(Ok(Some(grant))) if self.session.is_some() => {
                    return Ok(Some(self.bound(grant)));
                }
                Step::Done(outcome) => return outcome,
            }
        }
    }

    /// A grant bound to the session lasts as long as the session surely
    /// does (a session that can bind nothing more: it is lost at once).
    pub(crate) fn bound(&self, grant: Grant) -> Grant {
        let now = Instant::now();
        let session = self.session.as_ref().and_then(|s| s.bindable(now));
        Grant {
            fence: grant.fence,
            valid_until: session.unwrap_or(now),
            cap: grant.cap,
        }
    }

    /// Best-effort release of a grant the caller will not get (too few
    /// replicas, or given up after a possibly granted attempt), by
    /// `deadline`: a grant left behind ends with its ttl.
    fn abandon(&self, deadline: Instant) {
        let cmd = self.spec.release_cmd(&self.token);
        let _ = self.retrying(deadline, || {
            self.call(
                &cmd,
                false,
                self.io_until(deadline, Duration::ZERO),
                Duration::ZERO,
                None,
            )
        });
    }

    /// Retries `f` through connection errors until `deadline`.
    fn retrying<T>(
        &self,
        deadline: Instant,
        mut f: impl FnMut() -> std::result::Result<T, Failure>,
    ) -> Result<T> {
        let mut outage = Outage::new();
        loop {
            match f() {
                Ok(v) => return Ok(v),
                Err(Failure::Retry(e)) => {
                    match outage.next_pause(LONGEST, deadline, Instant::now()) {
                        Some(pause) => std::thread::sleep(pause),
                        None => return Err(e),
                    }
                }
                Err(f) => return Err(f.into_error()),
            }
        }
    }

    /// `RELEASE`, retried through connection errors for `retry_for`: true
    /// if an attempt released the lease. A retry answered "not held" means
    /// an earlier attempt released it only if that attempt may have been
    /// run by the server (sent on a connection open when it was sent, and
    /// not answered with an error reply such as a redirect) and was sent
    /// while the lease surely lasted (`valid_until`).
    pub(crate) fn release_by(&self, valid_until: Instant) -> Result<bool> {
        let cmd = self.spec.release_cmd(&self.token);
        let deadline = after(Instant::now(), self.settings.retry_for);
        let io = self.settings.io_timeout;
        let mut first_run: Option<Instant> = None;
        let reply = self.retrying(deadline, || {
            let mut sent = None;
            let r = self
                .topology
                .run_live(self.spec.route_key(), io, |c, asking| {
                    sent = Some(Instant::now());
                    let r = with_asking(asking, &cmd, None).query::<Vec<Value>>(c);
                    if r.as_ref().is_err_and(|e| !reached(e)) {
                        // The server answered with an error (`MOVED`,
                        // `ASK`, `READONLY`, `LOADING`, ...): it did not
                        // run the command. Also forgets a redirected
                        // attempt before this one.
                        sent = None;
                    }
                    r
                });
            if r.is_err() && first_run.is_none() {
                first_run = sent;
            }
            r
        })?;
        match reply.last() {
            // RELEASE answers 1/0, MRELEASE the members it released.
            Some(Value::Int(n)) if *n == self.spec.resources.len() as i64 => Ok(true),
            Some(Value::Int(_)) => Ok(first_run.is_some_and(|t| t < valid_until)),
            other => Err(Error::Server(format!("unexpected reply {other:?}"))),
        }
    }
}

/// Records in `connected` that an attempt reached a working server: it was
/// answered, or its connection broke or timed out after it was sent (a
/// server that died while we waited in its queue). An error reply
/// (`READONLY`, `LOADING`, ...) is not one: a server that answers every
/// attempt with it is an outage, bounded by `retry_for`.
fn mark_connected<T>(connected: Option<&std::cell::Cell<bool>>, r: &redis::RedisResult<T>) {
    if let Some(flag) = connected {
        if r.as_ref().map_or_else(reached, |_| true) {
            flag.set(true);
        }
    }
}

impl SingleLease {
    /// `EXTEND`, retried through connection errors until `deadline`, each
    /// reply due by then plus a reply's margin. With an `on_wanted` hook it
    /// asks who waits (`WANTED`) and tells the hook; a server that refuses
    /// the option is asked again at once without it.
    fn extend_by(&self, ttl: Duration, deadline: Instant) -> Renewal {
        let hook = self.wanted.as_ref().filter(|h| h.asks());
        let cmd = self
            .spec
            .extend_cmd_wanted(&self.token, ttl, hook.is_some());
        let mut sent = Instant::now();
        let reply = self.retrying(deadline, || {
            sent = Instant::now();
            let io = self.io_until(deadline, Duration::ZERO);
            self.call(&cmd, true, io, Duration::ZERO, None)
        });
        let (reply, acked) = match reply {
            Ok((v, acked)) => (v, acked),
            Err(e) if hook.is_some_and(|h| h.refused(&e)) => return self.extend_by(ttl, deadline),
            Err(e) => return Renewal::Failed(e),
        };
        let min_replicas = self.settings.min_replicas.map(|(n, _)| n);
        renewal_of(&reply, acked, hook, min_replicas, sent, ttl)
    }
}

impl Lease for SingleLease {
    fn extend(&self, ttl: Duration) -> Renewal {
        match &self.session {
            Some(s) => s.keep_alive(),
            None => self.extend_by(ttl, after(Instant::now(), self.settings.retry_for)),
        }
    }

    fn release(&self, valid_until: Instant) -> Result<bool> {
        self.release_by(valid_until)
    }

    fn on_one_server(&self) -> bool {
        true
    }

    fn guarded(&self, cmd: &redis::Cmd, read_only: bool) -> Result<Value> {
        let retry_for = self.settings.retry_for;
        let call = match read_only {
            true => crate::guarded::Call::check(retry_for),
            false => crate::guarded::Call::write(retry_for),
        };
        let io = self.settings.io_timeout;
        crate::guarded::blocking::run(&self.topology, self.spec.route_key(), io, call, cmd)
    }
}
