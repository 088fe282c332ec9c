//! What an async guard, its task, its `lost()` futures and its session
//! share: the lease's status (its budget, whether released) and the loss
//! callback. Below both the guard and the session, so either can mark the
//! lease lost.

use crate::error::{Error, Result};
use crate::lease::{Budget, Renewal, CAP_REACHED};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::watch;

pub(super) type Callback = Box<dyn FnOnce() + Send>;

/// The lease as the guard knows it; every change is published to the
/// task and to `lost()` futures.
#[derive(Clone, Copy)]
pub(super) struct Status {
    pub(super) budget: Budget,
    pub(super) released: bool,
}

/// What the guard, its task, its `lost()` futures and its session share.
pub(super) struct Shared {
    pub(super) status: watch::Sender<Status>,
    pub(super) on_lost: Mutex<Option<Callback>>,
    /// Why the server ended the lease, when it said (a renewal past the
    /// hold's `MAXHOLD` cap).
    pub(super) loss_reason: Mutex<Option<String>>,
}

impl Shared {
    /// Why the server ended the lease, if it said.
    pub(super) fn loss_reason(&self) -> Option<String> {
        let said = self
            .loss_reason
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        said.or_else(|| self.status().budget.cap_reached(Instant::now()))
    }

    pub(super) fn status(&self) -> Status {
        *self.status.borrow()
    }

    /// Marks the lease lost for good: the callback runs once, before the
    /// loss is published (whoever sees it may count on the callback having
    /// run).
    /// [`Shared::mark_lost`], with the reason a refused renewal gave.
    pub(super) fn mark_lost_because(&self, why: Option<&str>) {
        if let Some(why) = why {
            if !self.status.borrow().budget.is_lost() {
                self.loss_reason
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_or_insert_with(|| why.to_string());
            }
        }
        self.mark_lost()
    }

    pub(super) fn mark_lost(&self) {
        let budget = self.status.borrow().budget;
        if budget.is_lost() {
            return;
        }
        // A capped hold whose budget ended at its cap's floor: lost at the
        // cap, and said so.
        if budget.at_cap() && budget.has_passed(Instant::now()) {
            self.loss_reason
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert_with(|| CAP_REACHED.into());
        }
        let cb = self
            .on_lost
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(cb) = cb {
            cb();
        }
        self.status.send_if_modified(|s| s.budget.lose());
    }

    /// Applies a renewal's outcome; true if extended. A renewal that comes
    /// back after the budget passed is a loss (see [`Budget::renewed`]).
    pub(super) fn apply(&self, r: Renewal, ttl: Duration) -> Result<bool> {
        match r {
            Renewal::Extended(until) => {
                let mut renewed = false;
                self.status.send_if_modified(|s| {
                    renewed = s.budget.renewed(until, ttl, Instant::now());
                    renewed
                });
                if !renewed {
                    self.mark_lost();
                }
                Ok(renewed)
            }
            Renewal::Lost => {
                self.mark_lost();
                Ok(false)
            }
            // The server ended the lease at its cap: lost, with the
            // reason, and the caller hears the refusal.
            Renewal::Failed(Error::MaxHold(why)) => {
                self.loss_reason
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_or_insert_with(|| why.clone());
                self.mark_lost();
                Err(Error::MaxHold(why))
            }
            Renewal::Failed(e) => Err(e),
        }
    }
}
