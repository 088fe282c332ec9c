//! A lease on one server (or one cluster slot's master): acquire with
//! same-token retries and the lease budget, `min_replicas`, and the renewal
//! and release behind a [`Guard`](crate::Guard) from a
//! [`Locker`](crate::Locker).

use crate::error::{millis, Error, Failure, Result};
use crate::guard::{Lease, Renewal};
use crate::locker::Settings;
use crate::request::Spec;
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

/// Backoff between same-token retries: 20..=200 ms, jittered.
pub(crate) fn backoff(attempt: u32) -> Duration {
    let base = 20u64 << attempt.min(3);
    let jitter = uuid::Uuid::new_v4().as_u128() as u64 % base;
    Duration::from_millis((base + jitter).min(200))
}

/// A lease on one server: what a [`Guard`] from a [`Locker`] renews and
/// releases.
pub(crate) struct SingleLease {
    pub topology: Arc<Topology>,
    pub spec: Spec,
    pub token: String,
    pub settings: Settings,
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
        let extra = extra_wait + durability.map_or(Duration::ZERO, |d| d.1);
        let io = self.settings.io_timeout;
        self.topology
            .run(self.spec.route_key(), io, extra, |c, asking| {
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
    pub(crate) fn acquire(&self) -> Result<Option<(u64, Instant)>> {
        let start = Instant::now();
        let wait_deadline = self.spec.wait.map(|w| start + w);
        let retry_deadline = wait_deadline
            .unwrap_or(start)
            .max(start + self.settings.retry_for);
        // Once an attempt may have been granted without our hearing, a
        // failure must release with the token before giving up.
        let mut maybe_granted = false;
        let mut attempt = 0;
        let (fence, sent, waited) = loop {
            let sent = Instant::now();
            // A wait used up (or under 1 ms) is a plain try: WAIT 0 would
            // wait forever.
            let wait_ms = wait_deadline
                .map(|d| millis(d.saturating_duration_since(sent)))
                .filter(|&w| w > 0);
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
                        self.abandon();
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
                    let pause = backoff(attempt);
                    attempt += 1;
                    if Instant::now() + pause >= retry_deadline {
                        self.abandon();
                        return Err(e);
                    }
                    std::thread::sleep(pause);
                }
                Err(f) => {
                    if maybe_granted {
                        self.abandon();
                    }
                    return Err(f.into_error());
                }
            }
        };
        if !waited {
            return Ok(Some((fence, sent + self.spec.ttl)));
        }
        // A grant handed over while waiting started its lease at the
        // handoff, before the reply arrived: refresh with the same token
        // and count from when the refresh was sent.
        match self.extend(self.spec.ttl) {
            Renewal::Extended(until) => Ok(Some((fence, until))),
            Renewal::Lost => Err(Error::Lost),
            Renewal::Failed(e) => {
                self.abandon();
                Err(e)
            }
        }
    }

    /// Best-effort release of a grant the caller will not get (too few
    /// replicas, or given up after a possibly granted attempt).
    fn abandon(&self) {
        let _ = Lease::release(self, Instant::now());
    }

    fn call_plain(
        &self,
        cmd: &redis::Cmd,
        extra: Duration,
    ) -> std::result::Result<(Value, Option<i64>), Failure> {
        let io = self.settings.io_timeout;
        self.topology
            .run(self.spec.route_key(), io, extra, |c, asking| {
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

    fn release(&self, valid_until: Instant) -> Result<bool> {
        let cmd = self.spec.release_cmd(&self.token);
        let first_sent = Instant::now();
        let mut retried = false;
        let reply = self.retrying(|| {
            let r = self.call_plain(&cmd, Duration::ZERO);
            retried |= matches!(r, Err(Failure::Retry(_)));
            r
        })?;
        match reply {
            // RELEASE answers 1/0, MRELEASE the members it released.
            (Value::Int(n), _) if n == self.spec.resources.len() as i64 => Ok(true),
            // An earlier attempt may have released it, its reply lost: it
            // did if it was sent while the lease surely lasted.
            (Value::Int(_), _) if retried => Ok(first_sent < valid_until),
            (Value::Int(_), _) => Ok(false),
            (other, _) => Err(Error::Server(format!("unexpected reply {other:?}"))),
        }
    }
}
