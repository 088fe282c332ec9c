//! Grants to the waiters: the plain handoff to a queue's head, grants
//! decided with a component, failures, and confirming a grant in flight.

use std::sync::atomic::Ordering;

use super::answers::answers_ready;
use super::parked::{parking, waiters_on, with_parking, GRANTS_IN_FLIGHT};
use super::wait_timer::time_out_given_up;
use crate::server::jobs;
use crate::server::resource::Resource;
use dlock_core::Error;

/// The token of the head of the plain queue of `res`, once the waiters whose `WAIT` ran out have left
/// (their timeout is due whatever the caller does): the head a handoff now
/// grants. `None`: nobody waits.
pub fn plain_head(res: &Resource) -> Option<Box<[u8]>> {
    if waiters_on(res) == 0 {
        return None;
    }
    time_out_given_up(res);
    let parking = parking();
    let token = parking.queues().head(res)?;
    Some(token.into())
}

/// Grants `res` to its head waiter (and every queued entry with the same
/// token) under `fence`; returns the token and TTL granted.
pub fn grant_head(res: &Resource, fence: u64) -> Option<(Box<[u8]>, u64)> {
    let (token, ttl) = with_parking(|p| p.grant_head(res, fence))?;
    answers_ready();
    Some((token, ttl))
}

/// Grants the queued requests `granted` (id, fence) together and answers
/// `refused` with their errors (see `Parking::grant_entries`).
pub fn grant_entries(granted: &[(u64, u64)], retried: &[&[u8]], refused: Vec<(u64, Error)>) {
    with_parking(|p| p.grant_entries(granted, retried, refused));
    answers_ready();
}

/// Every waiter of `res` (or of all resources) is answered `err`.
pub fn fail(res: Option<&Resource>, err: Error) {
    with_parking(|p| p.fail(res, err));
    answers_ready();
}

/// The owner of `token` on `res` refreshed or extended its hold: it knows
/// the fence, so a grant of it still in flight stands whatever happens to
/// the waiter's connection.
pub fn confirm(res: impl FnOnce() -> Result<Resource, Error>, token: &[u8]) -> Result<(), Error> {
    if GRANTS_IN_FLIGHT.load(Ordering::Relaxed) || jobs::revocations_pending() {
        let res = res()?;
        with_parking(|p| p.confirm(&res, token));
        jobs::confirm_revocations(&res, token);
    }
    Ok(())
}

/// Grants in flight whose locks `SWAPDB` moved are revoked where they went.
pub fn move_grants(moved: impl Fn(&Resource) -> Option<Resource>) {
    if GRANTS_IN_FLIGHT.load(Ordering::Relaxed) {
        with_parking(|p| p.move_grants(moved));
    }
}
