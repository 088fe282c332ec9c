//! An election's leader handing its lead to a chosen candidate, on the
//! blocking API: [`Leadership::hand_over`](crate::Leadership::hand_over)
//! once, and [`Election::prefer`](crate::Election::prefer)'s thread, which
//! tries at the start of each lead and again at every renewal while the
//! preferred candidate is not yet in the queue.

use crate::error::{Failure, Result};
use crate::handover::{
    candidate_in, check_id, handover_cmd, handover_reply, is_refusal, HandedOver, HANDED_OVER,
};
use crate::held::Held;
use crate::limits::LONGEST;
use crate::locker::Locker;
use crate::queue::MAX_WAITERS_PAGE;
use crate::retry::Outage;
use crate::single::with_asking;
use redis::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The token candidate `id` waits with on `name`, the first in line; one
/// `DLOCK.WAITERS` page per thousand waiters ahead of it.
fn find(locker: &Locker, name: &str, id: &str) -> Result<Option<String>> {
    let mut offset = 0;
    loop {
        let page = locker.waiters(name, offset, MAX_WAITERS_PAGE)?;
        if let Some(t) = candidate_in(&page, id) {
            return Ok(Some(t));
        }
        if page.len() < MAX_WAITERS_PAGE {
            return Ok(None);
        }
        offset += page.len() as u64;
    }
}

/// Hands the lead held under `token` (its lease `held`) on `name` to
/// candidate `id`: true when that candidate leads now (this lead ended, as
/// by a resign: its guard is marked lost, with `HANDED_OVER`); false when
/// it does not wait, cannot be granted now, or this lead was lost already.
pub(crate) fn hand_over(
    locker: &Locker,
    name: &str,
    held: &Held,
    token: &str,
    id: &str,
) -> Result<bool> {
    check_id(id)?;
    let Some(to) = find(locker, name, id)? else {
        return Ok(false);
    };
    // No renewal in flight meanwhile: the lease ends with this command.
    let one = held.renewing();
    {
        let s = held.state();
        if s.released || s.budget.is_lost() {
            return Ok(false);
        }
    }
    let cmd = handover_cmd(name, token, &to);
    // A reply lost on the way leaves the outcome unknown: the command is
    // sent again, and a hold handed over already answers 0 (not held).
    let deadline = Instant::now() + locker.retry_window();
    let mut outage = Outage::new();
    let reply = loop {
        let r = locker
            .topology()
            .run(name, locker.io_timeout(), Duration::ZERO, |c, asking| {
                match with_asking(asking, &cmd, None).query::<Vec<Value>>(c) {
                    Err(e) if is_refusal(&e) => Ok(Value::Nil),
                    // The command's reply is the last (after an `ASKING`).
                    r => r.map(|mut v| v.pop().unwrap_or(Value::Nil)),
                }
            });
        match r {
            Ok(v) => break v,
            Err(Failure::Retry(e)) => match outage.next_pause(LONGEST, deadline, Instant::now()) {
                Some(pause) => std::thread::sleep(pause),
                None => return Err(e),
            },
            Err(f) => return Err(f.into_error()),
        }
    };
    match handover_reply(Ok(reply))? {
        HandedOver::Yes => {
            // Lost before released: whoever wakes on `released` (as
            // `Guard::wait_lost` does) must find the loss already there.
            held.mark_lost_because(Some(HANDED_OVER));
            held.state().released = true;
            held.changed.notify_all();
            drop(one);
            Ok(true)
        }
        HandedOver::NotHeld => {
            drop(one);
            held.mark_lost();
            Ok(false)
        }
        HandedOver::Refused => Ok(false),
    }
}

/// Starts the thread that hands the lead to candidate `id` as soon as it
/// waits: tried now, then at every renewal (each wakes `held.changed`) and
/// at least every `every`, until the lead ends (handed over, resigned or
/// lost). A failed attempt (the server unreachable) is tried again then.
pub(crate) fn start(
    locker: Locker,
    name: String,
    held: Arc<Held>,
    token: String,
    id: String,
    every: Duration,
) {
    let ended = |held: &Held| {
        let s = held.state();
        s.released || s.budget.is_lost()
    };
    let _ = std::thread::Builder::new()
        .name("dlock-prefer".into())
        .spawn(move || loop {
            if ended(&held) {
                return;
            }
            if let Ok(true) = hand_over(&locker, &name, &held, &token, &id) {
                return;
            }
            let s = held.state();
            if s.released || s.budget.is_lost() {
                return;
            }
            let _ = held.changed.wait_timeout(s, every);
        });
}
