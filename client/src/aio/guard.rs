//! The async [`Guard`] and the task behind it: the watchdog (renewal a
//! third of the ttl after each grant or renewal was sent) and the loss at
//! the budget's end, both following every change of deadline.

use super::AsyncLease;
use crate::error::Result;
use crate::limits::check_ttl;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

type Callback = Box<dyn FnOnce() + Send>;

/// The lease as the guard knows it; every change is published to the
/// task and to `lost()` futures.
#[derive(Clone, Copy)]
struct Status {
    /// The ttl of the grant or of the last renewal.
    ttl: Duration,
    valid_until: Instant,
    lost: bool,
    released: bool,
}

impl Status {
    fn is_over(&self, now: Instant) -> bool {
        self.lost || now >= self.valid_until
    }

    /// A third of the ttl after the last grant or renewal was sent.
    fn renewal_due(&self) -> Instant {
        let two_thirds = self.ttl - self.ttl / 3;
        self.valid_until
            .checked_sub(two_thirds)
            .unwrap_or(self.valid_until)
    }
}

/// What the guard, its task and its `lost()` futures share.
struct Shared {
    status: watch::Sender<Status>,
    on_lost: Mutex<Option<Callback>>,
}

impl Shared {
    fn status(&self) -> Status {
        *self.status.borrow()
    }

    /// Marks the lease lost for good: the callback runs once, before the
    /// loss is published (whoever sees it may count on the callback having
    /// run).
    fn mark_lost(&self) {
        if self.status.borrow().lost {
            return;
        }
        let cb = self
            .on_lost
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(cb) = cb {
            cb();
        }
        self.status
            .send_if_modified(|s| !std::mem::replace(&mut s.lost, true));
    }

    /// A renewal's new budget; false if the budget had already passed (the
    /// guard is then lost: a passed budget is never revived).
    fn extended(&self, until: Instant, ttl: Duration) -> bool {
        let mut expired = false;
        self.status.send_if_modified(|s| {
            if s.is_over(Instant::now()) {
                expired = true;
                return false;
            }
            s.valid_until = until;
            s.ttl = ttl;
            true
        });
        if expired {
            self.mark_lost();
        }
        !expired
    }
}

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
        fence: u64,
        valid_until: Instant,
        watchdog: bool,
        on_lost: Option<Callback>,
    ) -> Guard {
        let listening = on_lost.is_some();
        let (status, _) = watch::channel(Status {
            ttl: lease.spec.ttl,
            valid_until,
            lost: false,
            released: false,
        });
        let shared = Arc::new(Shared {
            status,
            on_lost: Mutex::new(on_lost),
        });
        let task = (watchdog || listening)
            .then(|| tokio::spawn(watch_lease(lease.clone(), shared.clone(), watchdog)));
        Guard {
            lease,
            fence,
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
    /// Until when the lease surely lasts (counted from send times).
    pub fn valid_until(&self) -> Instant {
        self.shared.status().valid_until
    }
    /// Time left on the lease budget (zero once it has passed).
    pub fn remaining(&self) -> Duration {
        self.valid_until().saturating_duration_since(Instant::now())
    }
    /// True once an `EXTEND` or `RELEASE` was answered 0, or the budget
    /// ran out (with a watchdog: it could not renew in time).
    pub fn is_lost(&self) -> bool {
        self.shared.status().is_over(Instant::now())
    }

    /// Resolves when the lease is lost: answered 0, or its budget passed
    /// (with or without a watchdog, following every change of deadline);
    /// never, if the guard is released first.
    pub async fn lost(&self) {
        let mut rx = self.shared.status.subscribe();
        loop {
            let s = *rx.borrow_and_update();
            if s.is_over(Instant::now()) {
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
                _ = tokio::time::sleep_until(s.valid_until.into()) => {}
            }
        }
    }

    /// Extends to `ttl` from the send time; `Ok(false)`: already ended
    /// (or its budget had passed). The watchdog, if any, renews with this
    /// ttl from now on.
    pub async fn extend(&self, ttl: Duration) -> Result<bool> {
        check_ttl(ttl)?;
        let _one = self.lease.renewing.lock().await;
        if self.is_lost() {
            self.shared.mark_lost();
            return Ok(false);
        }
        match self.lease.extend(ttl).await? {
            Some(until) => Ok(self.shared.extended(until, ttl)),
            None => {
                self.shared.mark_lost();
                Ok(false)
            }
        }
    }

    /// Stops the watchdog, then releases. `Ok(true)`: the lock was still
    /// held and is now free; `Ok(false)`: it had already ended, or its
    /// budget had passed.
    pub async fn release(mut self) -> Result<bool> {
        let mut valid_until = Instant::now();
        let mut over = false;
        self.shared.status.send_modify(|s| {
            s.released = true;
            valid_until = s.valid_until;
            over = s.is_over(Instant::now());
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

/// Pause between attempts after a failed renewal.
fn retry_pause(ttl: Duration) -> Duration {
    (ttl / 20).clamp(Duration::from_millis(10), Duration::from_millis(250))
}

/// The guard's task: renews when `renew` (a third of the ttl after each
/// grant or renewal was sent; failures retried while the budget lasts),
/// and marks the guard lost when the budget passes or an `EXTEND` is
/// answered 0. Wakes on every change of the guard's status.
async fn watch_lease(lease: Arc<AsyncLease>, shared: Arc<Shared>, renew: bool) {
    let mut rx = shared.status.subscribe();
    // A failed renewal is retried at `.1` unless the deadline it was made
    // under (`.0`) has changed meanwhile.
    let mut retry: Option<(Instant, Instant)> = None;
    let due = |s: &Status, retry: &Option<(Instant, Instant)>| match retry {
        Some((under, at)) if *under == s.valid_until => *at,
        _ => s.renewal_due(),
    };
    loop {
        let s = *rx.borrow_and_update();
        if s.released || s.lost {
            return;
        }
        let now = Instant::now();
        if now >= s.valid_until {
            shared.mark_lost();
            return;
        }
        let wake = if renew {
            due(&s, &retry).min(s.valid_until)
        } else {
            s.valid_until
        };
        if now < wake {
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
        // One renewal at a time per guard (a manual extend may run too);
        // once it is ours, look again: the deadline may have moved.
        let _one = lease.renewing.lock().await;
        let s = shared.status();
        if s.released || s.lost || Instant::now() < due(&s, &retry) {
            continue;
        }
        match lease.extend(s.ttl).await {
            Ok(Some(until)) => {
                if !shared.extended(until, s.ttl) {
                    return;
                }
                retry = None;
            }
            Ok(None) => {
                shared.mark_lost();
                return;
            }
            Err(_) => retry = Some((s.valid_until, Instant::now() + retry_pause(s.ttl))),
        }
    }
}
