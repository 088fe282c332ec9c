//! `RELEASE resource token TO waiter_token`: the released hold goes to one
//! queued request out of turn, decided in the same step as the release and
//! before the rest of the queue is served. The target is decided on the
//! holds as the release leaves them, past every reservation (it is
//! chosen); every way it cannot be granted now is an error of the step, so
//! the release changes nothing then. The other waiters keep their order
//! and are served as usual after it.

use super::component::{admit_request, stand_in, Granted, Queued};
use super::input::{Command, Step};
use super::output::{Outcome, Plan};
use crate::resource::admission::{Admission, Summary};
use crate::Error;

/// The request `RELEASE ... TO` names, granted: its index in
/// `step.waiting` and how. `after`: the holds as the release left them; the
/// target's hold is added there (under a stand-in fence, see `stand_in`).
/// `None` when the command is no handover, or released nothing (then it
/// changes nothing and the waiter keeps waiting).
pub(super) fn decide<'x>(
    step: &Step<'x, '_>,
    queued: &[Queued<'x>],
    plan: &Plan,
    after: &mut [Summary<'x>],
) -> Result<Option<(usize, Granted)>, Error> {
    let Command::Release { to: Some(to), .. } = step.command else {
        return Ok(None);
    };
    if matches!(plan.outcome, Outcome::Count(0)) {
        return Ok(None);
    }
    // Its first request on the released resource (0, the command's), in
    // the order the queue is served; a token queued again is answered by
    // the same grant.
    let mut entries = step
        .waiting
        .iter()
        .enumerate()
        .filter(|(_, w)| w.ask.token == to && w.members.contains(&0));
    let (i, target) = entries.next().ok_or(Error::NotWaiting)?;
    if target.members.len() > 1 {
        return Err(Error::HandoverToSet);
    }
    if step.quarantined_ms > 0 {
        return Err(Error::Quarantine {
            ms_left: step.quarantined_ms,
        });
    }
    let q = queued.get(i).ok_or(Error::Internal("handover target"))?;
    if step.members.first().is_some_and(|m| m.held_elsewhere) {
        return Err(Error::NotReady);
    }
    let grant = match admit_request(after, &vec![false; after.len()], q) {
        None => return Err(Error::NotReady),
        Some(Err(e)) => return Err(e),
        Some(Ok(Admission::New { owner_fence: None })) => Granted::Fresh,
        Some(Ok(Admission::New {
            owner_fence: Some(fence),
        })) => Granted::Owner { fence },
        // Its token holds the resource already (a `COPY` or `RESTORE` onto
        // the key in the same turn, before the timer that answers the wait
        // with that hold): granted already, as `NOTWAITING` says.
        Some(Ok(Admission::Retry { .. })) => return Err(Error::NotWaiting),
        // `admit_request` answers a request that does not fit with `None`.
        Some(Ok(Admission::Busy)) => return Err(Error::NotReady),
    };
    let fence = match grant {
        Granted::Owner { fence } => fence,
        _ => stand_in(i),
    };
    for m in &q.members {
        if let Some(s) = after.get_mut(*m) {
            let a = &q.ask;
            s.add_granted(a, fence);
        }
    }
    Ok(Some((i, grant)))
}
