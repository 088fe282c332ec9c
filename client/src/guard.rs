//! A held lock: its token, fence and lease budget; extend, release, and
//! release on drop. The same guard serves a lock on one server and a
//! Redlock over several: what differs is the [`Lease`] behind it.

use crate::error::{Error, Result};
use crate::limits::after;
use crate::watchdog;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The outcome of one renewal attempt.
pub(crate) enum Renewal {
    /// Extended; the lease lasts at least until this instant (the send time
    /// of the extend plus its ttl, less the clock drift for Redlock).
    Extended(Instant),
    /// The server answered 0 (or Redlock lost its quorum): the lease is gone.
    Lost,
    /// No answer, or too few replicas acknowledged: the budget stays as it
    /// was, and the attempt may be retried while it lasts.
    Failed(Error),
}

/// How a guard's lease is renewed and released on its server(s).
pub(crate) trait Lease: Send + Sync + 'static {
    fn extend(&self, ttl: Duration) -> Renewal;
    /// True if the lease was still held and is now released. `valid_until`
    /// is the guard's budget: when a lost reply makes a retried `RELEASE`
    /// find nothing, the first one was sent before the budget ended (the
    /// lease was still held, so it released it) or after.
    fn release(&self, valid_until: Instant) -> Result<bool>;
}

pub(crate) struct State {
    /// The ttl of the grant or of the last renewal: the watchdog renews
    /// with it, a third of it after that renewal was sent.
    pub ttl: Duration,
    pub valid_until: Instant,
    pub lost: bool,
    pub released: bool,
}

impl State {
    /// True once the lease is lost or its budget has passed.
    pub(crate) fn is_over(&self, now: Instant) -> bool {
        self.lost || now >= self.valid_until
    }

    /// When the watchdog renews next: a third of the ttl after the last
    /// grant or renewal was sent (its budget less two thirds of the ttl).
    pub(crate) fn renewal_due(&self) -> Instant {
        let two_thirds = self.ttl - self.ttl / 3;
        self.valid_until
            .checked_sub(two_thirds)
            .unwrap_or(self.valid_until)
    }
}

type Callback = Box<dyn FnOnce() + Send>;

/// What the guard and its watchdog share.
pub(crate) struct Shared {
    pub lease: Box<dyn Lease>,
    pub state: Mutex<State>,
    /// Wakes the watchdog on release, and loss waiters on loss.
    pub changed: Condvar,
    listeners: Mutex<(Vec<mpsc::Sender<()>>, Vec<Callback>)>,
    /// Held by a renewal (a manual extend or the watchdog's) from sending
    /// its `EXTEND` until its outcome is applied. Two renewals in flight at
    /// once on two connections could be run by the server in one order and
    /// applied by the client in the other: the budget of a long ttl over a
    /// server deadline set by a short one.
    renewing: Mutex<()>,
}

impl Shared {
    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One renewal at a time (see `renewing`).
    pub(crate) fn renewing(&self) -> MutexGuard<'_, ()> {
        self.renewing.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks the lease lost for good and tells everyone listening, once.
    pub(crate) fn mark_lost(&self) {
        {
            let mut s = self.state();
            if s.lost {
                return;
            }
            s.lost = true;
        }
        self.changed.notify_all();
        let (senders, callbacks) = {
            let mut l = self.listeners.lock().unwrap_or_else(|p| p.into_inner());
            (std::mem::take(&mut l.0), std::mem::take(&mut l.1))
        };
        // Callbacks first: whoever hears the channel may count on them
        // having run.
        for cb in callbacks {
            cb();
        }
        for s in senders {
            let _ = s.send(());
        }
    }

    /// Applies a renewal's outcome to the budget; true if extended. Every
    /// change of deadline wakes the watchdog (which reschedules renewal
    /// and the loss) and `wait_lost` callers. A renewal that comes back
    /// after the budget passed (the guard was already reported lost) is a
    /// loss: a passed budget is never revived.
    pub(crate) fn apply(&self, r: Renewal, ttl: Duration) -> Result<bool> {
        match r {
            Renewal::Extended(until) => {
                {
                    let mut s = self.state();
                    if s.is_over(Instant::now()) {
                        drop(s);
                        self.mark_lost();
                        return Ok(false);
                    }
                    s.valid_until = until;
                    s.ttl = ttl;
                }
                self.changed.notify_all();
                Ok(true)
            }
            Renewal::Lost => {
                self.mark_lost();
                Ok(false)
            }
            Renewal::Failed(e) => Err(e),
        }
    }
}

/// What the acquire learned, to build a guard from.
pub(crate) struct Granted {
    pub resources: Vec<String>,
    pub token: String,
    /// Per server for Redlock (None where it was not granted), one for a
    /// single server.
    pub fences: Vec<Option<u64>>,
    pub ttl: Duration,
    pub valid_until: Instant,
    pub watchdog: bool,
    pub on_lost: Option<Callback>,
}

/// A held lock. Dropping it releases the lock (a blocking call: the
/// watchdog is stopped first, then `RELEASE` is sent, errors ignored); call
/// [`Guard::release`] to see the outcome.
pub struct Guard {
    resources: Vec<String>,
    token: String,
    fences: Vec<Option<u64>>,
    shared: Arc<Shared>,
    /// Renews the lease (when asked for), and in any case marks the guard
    /// lost when its budget passes: started at once for a watchdog or an
    /// `on_lost` callback, else by the first `lost_signal`.
    watchdog: Mutex<Option<JoinHandle<()>>>,
    renews: bool,
}

impl Guard {
    pub(crate) fn new(lease: Box<dyn Lease>, g: Granted) -> Guard {
        let listening = g.on_lost.is_some();
        let shared = Arc::new(Shared {
            lease,
            state: Mutex::new(State {
                ttl: g.ttl,
                valid_until: g.valid_until,
                lost: false,
                released: false,
            }),
            changed: Condvar::new(),
            listeners: Mutex::new((Vec::new(), g.on_lost.into_iter().collect())),
            renewing: Mutex::new(()),
        });
        let guard = Guard {
            resources: g.resources,
            token: g.token,
            fences: g.fences,
            shared,
            watchdog: Mutex::new(None),
            renews: g.watchdog,
        };
        if Instant::now() >= g.valid_until {
            guard.shared.mark_lost();
        } else if g.watchdog || listening {
            guard.watch();
        }
        guard
    }

    /// Starts the watchdog thread unless it runs (or ran) already.
    fn watch(&self) {
        let mut w = self.watchdog.lock().unwrap_or_else(|p| p.into_inner());
        if w.is_none() {
            *w = Some(watchdog::start(self.shared.clone(), self.renews));
        }
    }

    /// The fencing token of this grant: pass it to the storage you write
    /// to. For Redlock, the largest of the per-server fences (see
    /// [`Guard::fences`]).
    pub fn fence(&self) -> u64 {
        self.fences.iter().flatten().copied().max().unwrap_or(0)
    }

    /// Redlock: the fence each server granted, in the order the servers
    /// were given (`None` where it was not granted). One entry otherwise.
    pub fn fences(&self) -> &[Option<u64>] {
        &self.fences
    }

    /// The 128-bit random token of this acquisition (32 hex digits).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The resource (the first one, for a set).
    pub fn resource(&self) -> &str {
        &self.resources[0]
    }

    /// Every resource of a set (one for a single lock).
    pub fn resources(&self) -> &[String] {
        &self.resources
    }

    /// The instant until which the lease surely lasts: never later than
    /// the servers' deadline, since it is counted from when the grant or the
    /// last renewal was *sent*.
    pub fn valid_until(&self) -> Instant {
        self.shared.state().valid_until
    }

    /// Time left on the lease budget (zero once it has passed).
    pub fn remaining(&self) -> Duration {
        self.valid_until().saturating_duration_since(Instant::now())
    }

    /// True once the lease is known lost: an `EXTEND` or `RELEASE` answered
    /// 0, or the budget passed (without a watchdog, or with one whose
    /// renewal did not come back in time: a renewal still under way does
    /// not stretch the budget).
    pub fn is_lost(&self) -> bool {
        self.shared.state().is_over(Instant::now())
    }

    /// A channel that receives `()` when the lease is lost: an `EXTEND` or
    /// `RELEASE` answered 0, or the budget passed (with or without a
    /// watchdog); at once if it already is. The `on_lost` callback runs
    /// first, then the channels are signalled, on the same thread.
    pub fn lost_signal(&self) -> mpsc::Receiver<()> {
        let (tx, rx) = mpsc::channel();
        let mut l = self
            .shared
            .listeners
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let (lost, expired, released) = {
            let s = self.shared.state();
            (s.lost, Instant::now() >= s.valid_until, s.released)
        };
        if lost {
            let _ = tx.send(());
            return rx;
        }
        l.0.push(tx);
        drop(l);
        if expired {
            self.shared.mark_lost();
        } else if !released {
            self.watch();
        }
        rx
    }

    /// Blocks until the lease is lost (or its budget passes) or `timeout`
    /// passes; true if lost. A change of deadline meanwhile (an `extend`
    /// on another thread) is followed.
    pub fn wait_lost(&self, timeout: Duration) -> bool {
        let deadline = after(Instant::now(), timeout);
        let mut s = self.shared.state();
        loop {
            let now = Instant::now();
            if s.is_over(now) {
                return true;
            }
            if s.released || now >= deadline {
                return false;
            }
            let left = deadline.min(s.valid_until) - now;
            s = self
                .shared
                .changed
                .wait_timeout(s, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Extends the lease to `ttl` from now (the budget counts from when the
    /// `EXTEND` was sent). `Ok(false)`: the lease had already ended (or its
    /// budget had passed), and the guard is now lost. The watchdog, if any,
    /// renews with this ttl from now on, a third of it after this renewal.
    pub fn extend(&self, ttl: Duration) -> Result<bool> {
        crate::limits::check_ttl(ttl)?;
        let _one = self.shared.renewing();
        let over = self.shared.state().is_over(Instant::now());
        if over {
            self.shared.mark_lost();
            return Ok(false);
        }
        let r = self.shared.lease.extend(ttl);
        self.shared.apply(r, ttl)
    }

    /// Stops the watchdog, then releases. `Ok(true)`: the lock was still
    /// held and is now free; `Ok(false)`: it had already ended, or its
    /// budget had passed (the guard was lost, whether or not anyone noticed
    /// before; the `RELEASE` is sent all the same).
    pub fn release(mut self) -> Result<bool> {
        self.release_now()
    }

    fn release_now(&mut self) -> Result<bool> {
        {
            let mut s = self.shared.state();
            if s.released {
                return Ok(false);
            }
            s.released = true;
        }
        self.shared.changed.notify_all();
        let watchdog = self
            .watchdog
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(w) = watchdog {
            // Never renew after release: the watchdog has ended before the
            // RELEASE is sent.
            let _ = w.join();
        }
        let (valid_until, over) = {
            let s = self.shared.state();
            (s.valid_until, s.is_over(Instant::now()))
        };
        // A guard whose budget had passed was already reported lost: the
        // `RELEASE` still frees what the server may hold, but the answer
        // stays "lost", as `is_lost` said.
        let released = self.shared.lease.release(valid_until)? && !over;
        if !released {
            self.shared.mark_lost();
        }
        Ok(released)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.release_now();
    }
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("resources", &self.resources)
            .field("token", &self.token)
            .field("fences", &self.fences)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A lease whose server still holds it (answers 1 to everything).
    struct StillHeld(Arc<AtomicBool>);

    impl Lease for StillHeld {
        fn extend(&self, _ttl: Duration) -> Renewal {
            Renewal::Extended(Instant::now() + Duration::from_secs(30))
        }
        fn release(&self, _valid_until: Instant) -> Result<bool> {
            self.0.store(true, Ordering::SeqCst);
            Ok(true)
        }
    }

    fn guard(valid_until: Instant, sent: &Arc<AtomicBool>) -> Guard {
        Guard::new(
            Box::new(StillHeld(sent.clone())),
            Granted {
                resources: vec!["r".into()],
                token: "t".into(),
                fences: vec![Some(1)],
                ttl: Duration::from_secs(1),
                valid_until,
                watchdog: false,
                on_lost: None,
            },
        )
    }

    #[test]
    fn a_release_after_the_budget_passed_answers_lost_but_is_sent() {
        let sent = Arc::new(AtomicBool::new(false));
        let g = guard(Instant::now() + Duration::from_millis(20), &sent);
        std::thread::sleep(Duration::from_millis(40));
        assert!(g.is_lost());
        assert!(!g.release().unwrap(), "the budget had passed: lost");
        assert!(sent.load(Ordering::SeqCst), "the RELEASE was sent anyway");
    }

    #[test]
    fn a_release_within_the_budget_answers_released() {
        let sent = Arc::new(AtomicBool::new(false));
        let g = guard(Instant::now() + Duration::from_secs(30), &sent);
        assert!(g.release().unwrap());
        assert!(sent.load(Ordering::SeqCst));
    }

    #[test]
    fn an_extend_after_the_budget_passed_is_refused_without_asking() {
        let sent = Arc::new(AtomicBool::new(false));
        let g = guard(Instant::now() + Duration::from_millis(20), &sent);
        std::thread::sleep(Duration::from_millis(40));
        assert!(!g.extend(Duration::from_secs(5)).unwrap());
        assert!(g.is_lost());
    }
}
