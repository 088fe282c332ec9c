//! A lease held by a blocking [`Guard`](crate::Guard): its budget behind a
//! lock, the back end that renews and releases it, and whoever listens for
//! its loss. What the guard and its watchdog thread share.

use crate::error::{Error, Result};
use crate::lease::{Budget, Lease, Renewal, CAP_REACHED};
use std::sync::mpsc;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub(crate) type Callback = Box<dyn FnOnce() + Send>;

/// The budget, and whether the guard was released.
pub(crate) struct State {
    pub budget: Budget,
    pub released: bool,
    /// Why the server ended the lease, when it said (a renewal past the
    /// hold's `MAXHOLD` cap).
    pub loss_reason: Option<String>,
}

/// The held lease.
pub(crate) struct Held {
    pub lease: Box<dyn Lease>,
    state: Mutex<State>,
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

impl Held {
    pub(crate) fn new(lease: Box<dyn Lease>, budget: Budget, on_lost: Option<Callback>) -> Held {
        Held {
            lease,
            state: Mutex::new(State {
                budget,
                released: false,
                loss_reason: None,
            }),
            changed: Condvar::new(),
            listeners: Mutex::new((Vec::new(), on_lost.into_iter().collect())),
            renewing: Mutex::new(()),
        }
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One renewal at a time (see `renewing`).
    pub(crate) fn renewing(&self) -> MutexGuard<'_, ()> {
        self.renewing.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a loss listener, unless the lease is lost already (then the
    /// sender is handed back). The state is read under the listeners'
    /// lock, so a loss is either seen here or tells this listener.
    pub(crate) fn listen(&self, tx: mpsc::Sender<()>) -> Option<mpsc::Sender<()>> {
        let mut l = self.listeners.lock().unwrap_or_else(|p| p.into_inner());
        if self.state().budget.is_lost() {
            return Some(tx);
        }
        l.0.push(tx);
        None
    }

    /// [`Held::mark_lost`], with the reason a refused renewal gave.
    pub(crate) fn mark_lost_because(&self, why: Option<&str>) {
        if let Some(why) = why {
            let mut s = self.state();
            if !s.budget.is_lost() {
                s.loss_reason.get_or_insert_with(|| why.to_string());
            }
        }
        self.mark_lost()
    }

    /// Marks the lease lost for good and tells everyone listening, once.
    pub(crate) fn mark_lost(&self) {
        {
            let mut s = self.state();
            // A capped hold whose budget ended at its cap's floor: lost at
            // the cap, and said so.
            if !s.budget.is_lost() && s.budget.at_cap() && s.budget.has_passed(Instant::now()) {
                s.loss_reason.get_or_insert_with(|| CAP_REACHED.into());
            }
            if !s.budget.lose() {
                return;
            }
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
    /// after the budget passed is a loss (see [`Budget::renewed`]).
    pub(crate) fn apply(&self, r: Renewal, ttl: Duration) -> Result<bool> {
        match r {
            Renewal::Extended(until) => {
                let renewed = self.state().budget.renewed(until, ttl, Instant::now());
                if !renewed {
                    self.mark_lost();
                    return Ok(false);
                }
                self.changed.notify_all();
                Ok(true)
            }
            Renewal::Lost => {
                self.mark_lost();
                Ok(false)
            }
            // The server ended the lease at its cap: lost, with the
            // reason, and the caller hears the refusal.
            Renewal::Failed(Error::MaxHold(why)) => {
                self.state().loss_reason.get_or_insert_with(|| why.clone());
                self.mark_lost();
                Err(Error::MaxHold(why))
            }
            Renewal::Failed(e) => Err(e),
        }
    }
}
