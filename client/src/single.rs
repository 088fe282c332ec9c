//! A lease on one server (or one cluster slot's master): acquire with
//! same-token retries and the lease budget, `min_replicas`, and the renewal
//! and release behind a [`Guard`](crate::Guard) from a
//! [`Locker`](crate::Locker).

use crate::error::{millis, Error, Failure, Result};
use crate::guard::{Lease, Renewal};
use crate::limits::{after, lease, LONGEST};
use crate::locker::Settings;
use crate::request::Spec;
use crate::retry::Outage;
use crate::route::Topology;
use redis::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// The time a reply may take beyond the call's own deadline: the answer
/// to the last attempt, sent at the deadline, is on its way back.
const REPLY_MARGIN: Duration = Duration::from_millis(250);

/// The longest one acquire may take, from `start`: its `wait`, or for a
/// request that does not wait, `retry_for`.
pub(crate) fn call_deadline(
    start: Instant,
    wait: Option<Duration>,
    retry_for: Duration,
) -> Instant {
    match wait.filter(|w| millis(*w) > 0) {
        Some(w) => after(start, w),
        None => after(start, retry_for),
    }
}

/// Called before each same-token retry of an acquire, with what failed.
pub(crate) type OnRetry = Box<dyn FnMut(&Error) + Send>;

/// A lease on one server: what a [`Guard`] from a [`Locker`] renews and
/// releases.
pub(crate) struct SingleLease {
    pub topology: Arc<Topology>,
    pub spec: Spec,
    pub token: String,
    pub settings: Settings,
}

impl SingleLease {
    /// The longest one call may take, from `start`: the wait, or for a
    /// request that does not wait, `retry_for`.
    fn call_deadline(&self, start: Instant) -> Instant {
        call_deadline(start, self.spec.wait, self.settings.retry_for)
    }

    /// The io timeout, beyond the server-side `waiting`, of a command sent
    /// now for a call that ends at `deadline`: its reply is due by then,
    /// plus [`REPLY_MARGIN`].
    fn io_until(&self, deadline: Instant, waiting: Duration) -> Duration {
        let left = deadline.saturating_duration_since(Instant::now()) + REPLY_MARGIN;
        self.settings
            .io_timeout
            .min(left.saturating_sub(waiting))
            .max(Duration::from_millis(1))
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

    /// Acquire with same-token retries. `Some((fence, valid_until))`. The
    /// whole call, retries and the undo of a possibly granted attempt
    /// included, ends by its deadline (see [`SingleLease::call_deadline`])
    /// plus a reply's margin.
    pub(crate) fn acquire(&self, mut on_retry: Option<OnRetry>) -> Result<Option<(u64, Instant)>> {
        let start = Instant::now();
        let wait_deadline = self.spec.wait.map(|w| after(start, w));
        let deadline = self.call_deadline(start);
        // Once an attempt may have been granted without our hearing, a
        // failure must release with the token before giving up.
        let mut maybe_granted = false;
        let mut outage = Outage::new();
        let (fence, sent, waited) = loop {
            let sent = Instant::now();
            // A wait used up (or under 1 ms) is a plain try: WAIT 0 would
            // wait forever.
            let wait_ms = wait_deadline
                .map(|d| millis(d.saturating_duration_since(sent)))
                .filter(|&w| w > 0);
            let cmd = self.spec.acquire_cmd(&self.token, wait_ms);
            let waiting = Duration::from_millis(wait_ms.unwrap_or(0));
            // The reply of a waiting attempt is due when its wait ends.
            let io = self.io_until(deadline, waiting);
            // Whether the attempt got a connection: a failure after that
            // (a server that died while we waited in its queue) starts a
            // new outage.
            let connected = std::cell::Cell::new(false);
            // A waiting grant's durability is confirmed by the refresh below.
            let durable = wait_ms.is_none();
            let outcome = self.call(&cmd, durable, io, waiting, Some(&connected));
            match outcome {
                Ok((Value::Int(fence), acked)) => {
                    if let Err(e) = self.check_replicas(acked) {
                        self.abandon(deadline);
                        return Err(e);
                    }
                    break (fence as u64, sent, wait_ms.is_some());
                }
                Ok((Value::Nil, _)) => return Ok(None),
                Ok((other, _)) => {
                    return Err(Error::Server(format!("unexpected reply {other:?}")));
                }
                Err(Failure::Retry(e)) => {
                    maybe_granted = true;
                    if connected.get() {
                        outage = Outage::new();
                    }
                    let Some(pause) = outage.next_pause(self.settings.retry_for, deadline) else {
                        self.abandon(deadline);
                        return Err(e);
                    };
                    if let Some(f) = on_retry.as_mut() {
                        f(&e);
                    }
                    std::thread::sleep(pause);
                }
                Err(f) => {
                    if maybe_granted {
                        self.abandon(deadline);
                    }
                    return Err(f.into_error());
                }
            }
        };
        if !waited {
            return Ok(Some((fence, sent + lease(self.spec.ttl))));
        }
        // A grant handed over while waiting started its lease at the
        // handoff, before the reply arrived: refresh with the same token
        // and count from when the refresh was sent. The refresh gets what
        // is left of the call, and at least a reply's margin.
        let refresh_by = deadline.max(Instant::now() + REPLY_MARGIN);
        match self.extend_by(self.spec.ttl, refresh_by) {
            Renewal::Extended(until) => Ok(Some((fence, until))),
            Renewal::Lost => Err(Error::Lost),
            Renewal::Failed(e) => {
                self.abandon(deadline);
                Err(e)
            }
        }
    }

    /// Best-effort release of a grant the caller will not get (too few
    /// replicas, or given up after a possibly granted attempt), within the
    /// call's deadline and a reply's margin from now: a grant left behind
    /// ends with its ttl.
    fn abandon(&self, deadline: Instant) {
        let deadline = deadline.min(Instant::now() + REPLY_MARGIN);
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

    fn check_replicas(&self, acked: Option<i64>) -> Result<()> {
        match (self.settings.min_replicas, acked) {
            (Some((wanted, _)), Some(acked)) if acked < wanted as i64 => {
                Err(Error::TooFewReplicas { acked, wanted })
            }
            _ => Ok(()),
        }
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
                Err(Failure::Retry(e)) => match outage.next_pause(LONGEST, deadline) {
                    Some(pause) => std::thread::sleep(pause),
                    None => return Err(e),
                },
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

/// Whether a command that failed with `e` may have been run by the server:
/// its reply was lost (the connection broke or timed out), rather than an
/// error reply, which the server sends instead of running it.
pub(crate) fn reached(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_timeout() || e.is_connection_dropped()
}

impl SingleLease {
    /// `EXTEND`, retried through connection errors until `deadline`, each
    /// reply due by then plus [`REPLY_MARGIN`].
    fn extend_by(&self, ttl: Duration, deadline: Instant) -> Renewal {
        let cmd = self.spec.extend_cmd(&self.token, ttl);
        let mut sent = Instant::now();
        let reply = self.retrying(deadline, || {
            sent = Instant::now();
            let io = self.io_until(deadline, Duration::ZERO);
            self.call(&cmd, true, io, Duration::ZERO, None)
        });
        match reply {
            Ok((Value::Int(1), acked)) => match self.check_replicas(acked) {
                Ok(()) => Renewal::Extended(sent + lease(ttl)),
                Err(e) => Renewal::Failed(e),
            },
            Ok((Value::Int(0), _)) => Renewal::Lost,
            Ok((other, _)) => Renewal::Failed(Error::Server(format!("unexpected reply {other:?}"))),
            Err(e) => Renewal::Failed(e),
        }
    }
}

impl Lease for SingleLease {
    fn extend(&self, ttl: Duration) -> Renewal {
        self.extend_by(ttl, after(Instant::now(), self.settings.retry_for))
    }

    fn release(&self, valid_until: Instant) -> Result<bool> {
        self.release_by(valid_until)
    }
}
