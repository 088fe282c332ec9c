//! The async [`Guard`] and its watchdog task.

use super::AsyncLease;
use crate::error::{millis, Error, Result};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

struct State {
    valid_until: Instant,
    released: bool,
}

/// A lock held through the async API.
pub struct Guard {
    lease: Arc<AsyncLease>,
    fence: u64,
    state: Arc<Mutex<State>>,
    lost_tx: Arc<watch::Sender<bool>>,
    lost_rx: watch::Receiver<bool>,
    watchdog: Option<tokio::task::JoinHandle<()>>,
}

impl Guard {
    pub(super) fn new(
        lease: Arc<AsyncLease>,
        fence: u64,
        valid_until: Instant,
        watchdog: bool,
    ) -> Guard {
        let (tx, rx) = watch::channel(false);
        let state = Arc::new(Mutex::new(State {
            valid_until,
            released: false,
        }));
        let lost_tx = Arc::new(tx);
        let watchdog =
            watchdog.then(|| tokio::spawn(renew(lease.clone(), state.clone(), lost_tx.clone())));
        Guard {
            lease,
            fence,
            state,
            lost_tx,
            lost_rx: rx,
            watchdog,
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
        lock(&self.state).valid_until
    }
    /// True once an `EXTEND` or `RELEASE` was answered 0, or the budget
    /// ran out (with a watchdog: it could not renew in time).
    pub fn is_lost(&self) -> bool {
        // The budget passing is a loss even while a renewal is on its way.
        *self.lost_rx.borrow() || Instant::now() >= self.valid_until()
    }
    /// Resolves when the lease is lost (never, if it is released first).
    pub async fn lost(&self) {
        let mut rx = self.lost_rx.clone();
        let _ = rx.wait_for(|lost| *lost).await;
    }

    /// Extends to `ttl` from the send time; `Ok(false)`: already ended.
    pub async fn extend(&self, ttl: Duration) -> Result<bool> {
        if millis(ttl) == 0 {
            return Err(Error::Invalid("ttl must be at least 1 ms".into()));
        }
        let _one = self.lease.renewing.lock().await;
        if self.is_lost() {
            return Ok(false);
        }
        match self.lease.extend(ttl).await? {
            Some(until) => {
                lock(&self.state).valid_until = until;
                Ok(true)
            }
            None => {
                self.lost_tx.send_replace(true);
                Ok(false)
            }
        }
    }

    /// Stops the watchdog, then releases. `Ok(false)`: it had already ended.
    pub async fn release(mut self) -> Result<bool> {
        let valid_until = {
            let mut s = lock(&self.state);
            s.released = true;
            s.valid_until
        };
        if let Some(w) = self.watchdog.take() {
            w.abort();
            let _ = w.await;
        }
        let first_sent = Instant::now();
        let (released, retried) = self.lease.release_cmd().await?;
        let released = released || (retried && first_sent < valid_until);
        if !released {
            self.lost_tx.send_replace(true);
        }
        Ok(released)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let already = std::mem::replace(&mut lock(&self.state).released, true);
        if let Some(w) = self.watchdog.take() {
            w.abort();
        }
        if already {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let lease = self.lease.clone();
            rt.spawn(async move {
                let _ = lease.release_cmd().await;
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

fn lock(m: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The watchdog task: `EXTEND` at ttl/3 from each renewal's send time;
/// failures retried until the budget ends; a 0 or the budget's end is a loss.
async fn renew(lease: Arc<AsyncLease>, state: Arc<Mutex<State>>, lost: Arc<watch::Sender<bool>>) {
    let ttl = lease.spec.ttl;
    let mut next = Instant::now() + ttl / 3;
    loop {
        let until = lock(&state).valid_until;
        let wake = next.min(until);
        tokio::time::sleep_until(wake.into()).await;
        let (until, released) = {
            let s = lock(&state);
            (s.valid_until, s.released)
        };
        if released {
            return;
        }
        if Instant::now() >= until {
            lost.send_replace(true);
            return;
        }
        if Instant::now() < next {
            continue;
        }
        // One renewal at a time per guard (a manual extend may run too):
        // a reply applied out of order could push the budget past the
        // server's deadline.
        let _one = lease.renewing.lock().await;
        if lock(&state).released {
            return;
        }
        let sent = Instant::now();
        match lease.extend(ttl).await {
            Ok(Some(v)) => {
                let mut s = lock(&state);
                if s.released {
                    return;
                }
                if Instant::now() >= s.valid_until {
                    // The budget ran out while the renewal was on its way:
                    // the guard was lost meanwhile; it is not revived.
                    drop(s);
                    lost.send_replace(true);
                    return;
                }
                s.valid_until = v;
                next = sent + ttl / 3;
            }
            Ok(None) => {
                lost.send_replace(true);
                return;
            }
            Err(_) => next = Instant::now() + Duration::from_millis(100).min(ttl / 10),
        }
    }
}
