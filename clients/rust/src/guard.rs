//! A held lock: its token, fence and lease budget; extend, release, and
//! release on drop. The same guard serves a lock on one server and a
//! Redlock over several: what differs is the [`Lease`] behind it; the
//! budget rules are the lease core's ([`Budget`]).

use crate::error::Result;
use crate::held::{Callback, Held};
use crate::lease::{Budget, Cap, Lease};
use crate::limits::after;
use crate::session::Session;
use crate::watchdog;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What the acquire learned, to build a guard from.
pub(crate) struct Granted {
    pub resources: Vec<String>,
    pub token: String,
    /// Per server for Redlock (None where it was not granted), one for a
    /// single server.
    pub fences: Vec<Option<u64>>,
    pub ttl: Duration,
    pub valid_until: Instant,
    /// A capped hold's floor (`max_hold`).
    pub cap: Option<Cap>,
    pub watchdog: bool,
    pub on_lost: Option<Callback>,
    /// The session the holds are bound to: it keeps them, and its end
    /// marks the guard lost (no watchdog of the guard's own then).
    pub session: Option<Arc<Session>>,
}

/// A held lock. Dropping it releases the lock (a blocking call: the
/// watchdog is stopped first, then `RELEASE` is sent, errors ignored); call
/// [`Guard::release`] to see the outcome.
pub struct Guard {
    resources: Vec<String>,
    token: String,
    fences: Vec<Option<u64>>,
    shared: Arc<Held>,
    /// Renews the lease (when asked for), and in any case marks the guard
    /// lost when its budget passes: started at once for a watchdog or an
    /// `on_lost` callback, else by the first `lost_signal`.
    watchdog: Mutex<Option<JoinHandle<()>>>,
    renews: bool,
    /// The id of the session the holds are bound to.
    session: Option<String>,
}

impl Guard {
    pub(crate) fn new(lease: Box<dyn Lease>, g: Granted) -> Guard {
        let listening = g.on_lost.is_some();
        let shared = Arc::new(Held::new(
            lease,
            Budget::new(g.ttl, g.valid_until).capped(g.cap),
            g.on_lost,
        ));
        if let Some(s) = &g.session {
            s.bind(&shared);
        }
        let renews = g.watchdog && g.session.is_none();
        let guard = Guard {
            resources: g.resources,
            token: g.token,
            fences: g.fences,
            shared,
            watchdog: Mutex::new(None),
            renews,
            session: g.session.map(|s| s.id().to_string()),
        };
        if guard.shared.state().budget.is_over(Instant::now()) {
            guard.shared.mark_lost();
        } else if renews || listening {
            guard.watch();
        }
        guard
    }

    /// The held lease, for the guarded writes (`guard_write.rs`) and an
    /// election's handover (`prefer.rs`).
    pub(crate) fn held(&self) -> &Arc<Held> {
        &self.shared
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

    /// The id of the session (`DLOCK.SESSION`) the lock is bound to: kept
    /// by the session's keep-alive instead of a watchdog of its own, and
    /// lost when the session ends. None: not bound (sessions off, a server
    /// without them, a guard without renewal, or Redlock).
    pub fn session(&self) -> Option<&str> {
        self.session.as_deref()
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
        self.shared.state().budget.valid_until()
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
        self.shared.state().budget.is_over(Instant::now())
    }

    /// Why the lease was lost, for a capped hold (`max_hold`): its budget
    /// ended at the cap (`MAXHOLD the hold reached its cap ...`), or the
    /// server refused an `extend` past it, as the server sent it (`MAXHOLD
    /// the hold may live N ms more: ...`). `None` while held, and for a
    /// lease that simply ended (expired, released or taken over).
    pub fn loss_reason(&self) -> Option<String> {
        let s = self.shared.state();
        let reason = s.loss_reason.clone();
        reason.or_else(|| s.budget.cap_reached(Instant::now()))
    }

    /// A channel that receives `()` when the lease is lost: an `EXTEND` or
    /// `RELEASE` answered 0, or the budget passed (with or without a
    /// watchdog); at once if it already is. The `on_lost` callback runs
    /// first, then the channels are signalled, on the same thread.
    pub fn lost_signal(&self) -> mpsc::Receiver<()> {
        let (tx, rx) = mpsc::channel();
        if let Some(tx) = self.shared.listen(tx) {
            let _ = tx.send(());
            return rx;
        }
        let (expired, released) = {
            let s = self.shared.state();
            (s.budget.has_passed(Instant::now()), s.released)
        };
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
            if s.budget.is_over(now) {
                return true;
            }
            if s.released || now >= deadline {
                return false;
            }
            let left = deadline.min(s.budget.valid_until()) - now;
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
    ///
    /// A guard bound to a session ([`Guard::session`]) is not extended (the
    /// server refuses it): its session is kept alive now instead, for the
    /// session's ttl (`ttl` is checked, not used), which renews every
    /// guard of the session.
    pub fn extend(&self, ttl: Duration) -> Result<bool> {
        crate::limits::check_ttl(ttl)?;
        let _one = self.shared.renewing();
        let over = self.shared.state().budget.is_over(Instant::now());
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
            (s.budget.valid_until(), s.budget.is_over(Instant::now()))
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
    use crate::lease::Renewal;
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
                cap: None,
                resources: vec!["r".into()],
                token: "t".into(),
                fences: vec![Some(1)],
                ttl: Duration::from_secs(1),
                valid_until,
                watchdog: false,
                on_lost: None,
                session: None,
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
