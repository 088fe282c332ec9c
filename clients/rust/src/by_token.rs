//! Extend and release by token alone: a lease that no [`Guard`] of this
//! process holds (another process took it, or a script holds it between
//! `dlock acquire` and `dlock release`). The same lease code a `Guard`
//! uses does the work, so the io and node timeouts, the same-token retries
//! and the Redlock quorum rules are the same.
//!
//! [`Guard`]: crate::Guard

use crate::error::{Error, Result};
use crate::lease::{Lease, Renewal};
use crate::request::Spec;
use std::time::{Duration, Instant};

/// The lease's shape: one resource, `ttl` for a renewal. Refuses what the
/// server would refuse, before any server is asked.
pub(crate) fn spec(resource: &str, token: &str, ttl: Duration) -> Result<Spec> {
    if token.is_empty() {
        return Err(Error::Invalid("token must not be empty".into()));
    }
    if resource.is_empty() {
        return Err(Error::Invalid("resource must not be empty".into()));
    }
    let mut spec = Spec::new(vec![resource.to_string()]);
    spec.set_ttl(ttl);
    spec.validate()?;
    Ok(spec)
}

/// `Ok(true)` extended, `Ok(false)` the token holds nothing there.
pub(crate) fn extend(lease: &dyn Lease, ttl: Duration) -> Result<bool> {
    match lease.extend(ttl) {
        Renewal::Extended(_) => Ok(true),
        Renewal::Lost => Ok(false),
        Renewal::Failed(e) => Err(e),
    }
}

/// `Ok(true)` released, `Ok(false)` the token held nothing there. Nothing
/// is known of the lease's validity: a retried release answered 0 counts
/// as held nothing (an earlier attempt may have released it, or the lease
/// may have ended before; the caller cannot tell, and must not assume it
/// held the lock to the end).
pub(crate) fn release(lease: &dyn Lease) -> Result<bool> {
    lease.release(Instant::now())
}
