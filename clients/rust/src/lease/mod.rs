//! The lease core: what every way of holding a lock shares, written once,
//! without I/O and with the time passed in. The blocking guard and its
//! watchdog thread, the async guard and its task, the single-server and
//! Redlock back ends are shells around it that do the I/O.
//!
//! - [`Budget`]: until when a held lease surely lasts; a passed budget is
//!   never revived.
//! - [`Cap`]: a capped hold's floor (`max_hold`), which every command for
//!   the hold after its first attempt stays short of.
//! - [`Renewal`] and [`Schedule`]: what a renewal came back with, and when
//!   the thread or task behind a guard renews or reports the loss.
//! - [`AcquireLoop`]: the acquire on one server (same-token retries, the
//!   call's deadline, the refresh of a waiting grant, the undo of a grant
//!   the caller will not get) as a state machine.
//! - [`SessionCore`]: a session (`DLOCK.SESSION`), one liveness lease for
//!   every guard bound to it: its budget and keep-alive schedule.
//! - [`Lease`]: what a blocking back end does for a guard.

mod acquire;
mod budget;
mod cap;
mod renewal;
mod session;

pub(crate) use acquire::{io_within, too_few, AcquireLoop, Grant, Reply, Step, Terms};
pub(crate) use budget::Budget;
pub(crate) use cap::{Cap, REACHED as CAP_REACHED};
pub(crate) use renewal::{Renewal, Schedule, Wake};
pub(crate) use session::{
    is_no_session, lacks_sessions, new_session_id, End, Next, Phase, SessionCore,
};

use crate::error::Result;
use std::time::{Duration, Instant};

/// Why a Redlock guard makes no guarded write and no check.
pub(crate) const NOT_ONE_SERVER: &str = "a Redlock guard makes no guarded write and no check: \
     DLOCK.GUARD proves a hold on the one server it runs on, and a write on one server of a \
     Redlock is not protected by a majority (store the fences in the storage instead, \
     docs/fencing.md)";

/// How a blocking guard's lease is renewed and released on its server(s).
pub(crate) trait Lease: Send + Sync + 'static {
    fn extend(&self, ttl: Duration) -> Renewal;
    /// True if the lease was still held and is now released. `valid_until`
    /// is the guard's budget: when a lost reply makes a retried `RELEASE`
    /// find nothing, the first one was sent before the budget ended (the
    /// lease was still held, so it released it) or after.
    fn release(&self, valid_until: Instant) -> Result<bool>;
    /// Whether the lease lives on one server, where a guarded write or
    /// check can prove it ([`Lease::guarded`]); Redlock's does not.
    fn on_one_server(&self) -> bool {
        false
    }
    /// Runs a `DLOCK.GUARD` (or, `read_only`, a `DLOCK.CHECK`) on the
    /// lease's server.
    fn guarded(&self, cmd: &redis::Cmd, read_only: bool) -> Result<redis::Value> {
        let _ = (cmd, read_only);
        Err(crate::Error::Invalid(NOT_ONE_SERVER.into()))
    }
}
