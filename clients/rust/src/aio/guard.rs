//! The async [`Guard`] and the task behind it: the watchdog (renewal a
//! third of the ttl after each grant or renewal was sent) and the loss at
//! the budget's end, both following every change of deadline: the lease
//! core's [`Budget`] and [`Schedule`], driven on tokio.

use super::guard_state::{Callback, Shared, Status};
use super::lease::AsyncLease;
use crate::error::{Error, Failure, Result};
use crate::guarded;
use crate::handover::{handover_cmd, handover_reply, is_refusal_error, HandedOver, HANDED_OVER};
use crate::lease::{Budget, Grant, Renewal, Schedule, Wake};
use crate::limits::{check_ttl, LONGEST};
use crate::retry::Outage;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// A lock held through the async API.
pub struct Guard {
    lease: Arc<AsyncLease>,
    fence: u64,
    shared: Arc<Shared>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Guard {
    pub(super) fn new(
        lease: Arc<AsyncLease>,
        grant: Grant,
        watchdog: bool,
        on_lost: Option<Callback>,
    ) -> Guard {
        let listening = on_lost.is_some();
        let ttl = lease.session.as_ref().map_or(lease.spec.ttl, |s| s.ttl());
        let (status, _) = watch::channel(Status {
            budget: Budget::new(ttl, grant.valid_until).capped(grant.cap),
            released: false,
        });
        let shared = Arc::new(Shared {
            status,
            on_lost: Mutex::new(on_lost),
            loss_reason: Mutex::new(None),
        });
        // A bound guard is kept by its session: no renewal of its own.
        let watchdog = watchdog && lease.session.is_none();
        if let Some(s) = &lease.session {
            s.bind(&shared);
        }
        let task = (watchdog || listening)
            .then(|| tokio::spawn(watch_lease(lease.clone(), shared.clone(), watchdog)));
        Guard {
            lease,
            fence: grant.fence,
            shared,
            task,
        }
    }

    pub fn fence(&self) -> u64 {
        self.fence
    }
    pub fn token(&self) -> &str {
        &self.lease.token
    }
    pub fn resource(&self) -> &str {
        &self.lease.spec.resources[0]
    }
    /// The id of the session the lock is bound to (see the blocking
    /// [`crate::Guard::session`]).
    pub fn session(&self) -> Option<&str> {
        self.lease.session.as_ref().map(|s| s.id())
    }
    /// Until when the lease surely lasts (counted from send times).
    pub fn valid_until(&self) -> Instant {
        self.shared.status().budget.valid_until()
    }
    /// Time left on the lease budget (zero once it has passed).
    pub fn remaining(&self) -> Duration {
        self.valid_until().saturating_duration_since(Instant::now())
    }
    /// True once an `EXTEND` or `RELEASE` was answered 0, or the budget
    /// ran out (with a watchdog: it could not renew in time).
    pub fn is_lost(&self) -> bool {
        self.shared.status().budget.is_over(Instant::now())
    }

    /// Why the lease was lost, for a capped hold (`max_hold`): its budget
    /// ended at the cap (`MAXHOLD the hold reached its cap ...`), or the
    /// server refused an `extend` past it, as the server sent it (`MAXHOLD
    /// the hold may live N ms more: ...`). `None` while held, and for a
    /// lease that simply ended (expired, released or taken over).
    pub fn loss_reason(&self) -> Option<String> {
        self.shared.loss_reason()
    }

    /// Resolves when the lease is lost: answered 0, or its budget passed
    /// (with or without a watchdog, following every change of deadline);
    /// never, if the guard is released first.
    pub async fn lost(&self) {
        let mut rx = self.shared.status.subscribe();
        loop {
            let s = *rx.borrow_and_update();
            if s.budget.is_over(Instant::now()) {
                self.shared.mark_lost();
                return;
            }
            if s.released {
                std::future::pending::<()>().await;
            }
            tokio::select! {
                changed = rx.changed() => {
                    if changed.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
                _ = tokio::time::sleep_until(s.budget.valid_until().into()) => {}
            }
        }
    }

    /// A guarded write: runs `cmd` on the lock's server only if this
    /// guard's hold is live there at that instant (`DLOCK.GUARD ... FENCE`),
    /// and returns its reply. The errors are the blocking
    /// [`crate::Guard::write`]'s: [`Error::NotHeld`] (nothing written, the
    /// guard marked lost), [`Error::Refused`] (the command's error, its
    /// code kept; nothing written), [`Error::Unavailable`] (a write whose
    /// reply was lost is not sent again), [`Error::Invalid`].
    pub async fn write<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        let c = guarded::write_cmd(self.resource(), self.fence, cmd)?;
        guarded::convert(self.guarded(&c).await?)
    }

    /// Runs every command of `cmds` if this guard's hold is live, all or
    /// none (`DLOCK.GUARD ... BATCH`), as the blocking
    /// [`crate::Guard::write_batch`].
    pub async fn write_batch<T: redis::FromRedisValue>(&self, cmds: &[redis::Cmd]) -> Result<T> {
        let c = guarded::batch_cmd(self.resource(), self.fence, cmds)?;
        guarded::convert(self.guarded(&c).await?)
    }

    /// The sequencer check on this guard's hold (`DLOCK.CHECK`); false
    /// marks the guard lost (see the blocking [`crate::Guard::check`]).
    pub async fn check(&self) -> Result<bool> {
        let c = guarded::check_cmd(self.resource(), self.fence)?;
        if self.is_lost() {
            self.shared.mark_lost();
            return Ok(false);
        }
        let call = guarded::Call::check(self.lease.server.retry_for);
        let v = super::guarded::run(&self.lease.server, call, &c).await?;
        let live = guarded::check_reply(v)?;
        if !live {
            self.shared.mark_lost();
        }
        Ok(live)
    }

    async fn guarded(&self, c: &redis::Cmd) -> Result<redis::Value> {
        if self.is_lost() {
            self.shared.mark_lost();
            return Err(Error::NotHeld);
        }
        let call = guarded::Call::write(self.lease.server.retry_for);
        let r = super::guarded::run(&self.lease.server, call, c).await;
        if matches!(r, Err(Error::NotHeld)) {
            self.shared.mark_lost();
        }
        r
    }

    /// Extends to `ttl` from the send time; `Ok(false)`: already ended
    /// (or its budget had passed). The watchdog, if any, renews with this
    /// ttl from now on. A guard bound to a session keeps its session alive
    /// instead (for the session's ttl; `ttl` is checked, not used).
    pub async fn extend(&self, ttl: Duration) -> Result<bool> {
        check_ttl(ttl)?;
        let _one = self.lease.renewing.lock().await;
        if self.is_lost() {
            self.shared.mark_lost();
            return Ok(false);
        }
        let r = self.lease.extend(ttl).await;
        self.shared.apply(r, ttl)
    }

    /// Hands the lease over to the queued `to` (`DLOCK.RELEASE ... TO`,
    /// an election's handover), with no renewal in flight meanwhile. On
    /// `Yes` the guard is released and marked lost (`HANDED_OVER`); on
    /// `NotHeld`, lost.
    pub(super) async fn hand_over(&self, to: &str) -> Result<HandedOver> {
        let one = self.lease.renewing.lock().await;
        let s = self.shared.status();
        if s.released || s.budget.is_lost() {
            return Ok(HandedOver::Refused);
        }
        let cmd = handover_cmd(self.resource(), self.token(), to);
        // A reply lost on the way leaves the outcome unknown: the command is
        // sent again, and a hold handed over already answers 0 (not held).
        let deadline = Instant::now() + self.lease.server.retry_for;
        let mut outage = Outage::new();
        let reply = loop {
            match self.lease.server.call_live(&cmd, &mut None).await {
                Ok(v) => break Ok(v),
                Err(Failure::Retry(e)) => {
                    match outage.next_pause(LONGEST, deadline, Instant::now()) {
                        Some(pause) => tokio::time::sleep(pause).await,
                        None => return Err(e),
                    }
                }
                Err(f) => match f.into_error() {
                    e if is_refusal_error(&e) => break Ok(redis::Value::Nil),
                    e => return Err(e),
                },
            }
        };
        let outcome = handover_reply(reply)?;
        drop(one);
        match outcome {
            HandedOver::Yes => {
                // Lost before released: a watcher woken by `released` must
                // find the loss already there.
                self.shared.mark_lost_because(Some(HANDED_OVER));
                self.shared.status.send_modify(|s| s.released = true);
            }
            HandedOver::NotHeld => self.shared.mark_lost(),
            HandedOver::Refused => {}
        }
        Ok(outcome)
    }

    /// Stops the watchdog, then releases. `Ok(true)`: the lock was still
    /// held and is now free; `Ok(false)`: it had already ended, or its
    /// budget had passed.
    pub async fn release(mut self) -> Result<bool> {
        let mut valid_until = Instant::now();
        let mut over = false;
        self.shared.status.send_modify(|s| {
            s.released = true;
            valid_until = s.budget.valid_until();
            over = s.budget.is_over(Instant::now());
        });
        if let Some(t) = self.task.take() {
            t.abort();
            let _ = t.await;
        }
        // A passed budget was already a loss: the `RELEASE` still frees
        // what the server may hold, but the answer stays "lost".
        let released = self.lease.release(valid_until).await? && !over;
        if !released {
            self.shared.mark_lost();
        }
        Ok(released)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let mut already = false;
        self.shared
            .status
            .send_modify(|s| already = std::mem::replace(&mut s.released, true));
        if let Some(t) = self.task.take() {
            t.abort();
        }
        if already {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let lease = self.lease.clone();
            let valid_until = self.valid_until();
            rt.spawn(async move {
                let _ = lease.release(valid_until).await;
            });
        }
    }
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("resource", &self.resource())
            .field("token", &self.token())
            .field("fence", &self.fence)
            .finish()
    }
}

/// The guard's task: carries out the lease core's [`Schedule`] (renewal
/// when `renew`, and the loss when the budget passes or an `EXTEND` is
/// answered 0). Wakes on every change of the guard's status.
async fn watch_lease(lease: Arc<AsyncLease>, shared: Arc<Shared>, renew: bool) {
    let mut rx = shared.status.subscribe();
    let mut schedule = Schedule::new(renew);
    loop {
        let s = *rx.borrow_and_update();
        match schedule.next(&s.budget, s.released, Instant::now()) {
            Wake::Stop => return,
            Wake::Lost => return shared.mark_lost_because(schedule.refusal()),
            Wake::Sleep(wake) => {
                tokio::select! {
                    changed = rx.changed() => {
                        if changed.is_err() {
                            return;
                        }
                    }
                    _ = tokio::time::sleep_until(wake.into()) => {}
                }
                continue;
            }
            Wake::Renew { .. } => {}
        }
        // One renewal at a time per guard (a manual extend may run too);
        // once it is ours, look again: the deadline may have moved.
        let _one = lease.renewing.lock().await;
        let s = shared.status();
        let Wake::Renew { ttl, under } = schedule.next(&s.budget, s.released, Instant::now())
        else {
            continue;
        };
        let renewal = match lease.extend(ttl).await {
            Renewal::Failed(Error::MaxHold(why)) => {
                schedule.refused_at_cap(why);
                continue;
            }
            r => r,
        };
        match shared.apply(renewal, ttl) {
            Ok(true) => schedule.renewed(),
            Ok(false) => return,
            Err(_) => schedule.failed(under, ttl, Instant::now()),
        }
    }
}
