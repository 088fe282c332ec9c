//! Sessions carried out: what `dlock_core::sessions` decides (a session
//! opened, kept alive or ended; the holds of an ended session to settle),
//! done through the module API: the effects, the counters and events, the
//! bound waiters answered, and the jobs that settle an ended session's
//! holds a bounded batch per event-loop turn.
//!
//! An ended session's holds stay held until their batch settles them: the
//! settling is a hold guard's check of each key (`hold_checks`), which
//! finds the hold's fate (`Work::load`), drops it (or keeps it until the
//! lock-delay passes) with its effects, and serves the queue. So nobody is
//! granted a resource of an ended session before its release is decided,
//! in the same order a release would.

use crate::server::edge::api::{now_us, Ctx};
use crate::server::execute::hold_checks;
use crate::server::jobs::{self, Job, PAUSED_RETRY_MS};
use crate::server::notify::stats;
use crate::server::persistence::session_effects;
use crate::server::waiting::blocking;
use crate::server::{quarantine, sessions};
use dlock_core::sessions::{EndReason, Opened, Settings};
use dlock_core::Error;

/// Holds of ended sessions settled per turn: a check costs some 10 to
/// 40 µs on a loaded machine (a grant to a waiter the most), so a batch
/// stays a few milliseconds.
pub const SETTLED_PER_TURN: usize = 128;

/// Sessions ended by their ttl per turn (each answers its waiters).
const EXPIRED_PER_TURN: usize = 256;

/// `OPEN id ttl [BIND] [LOCKDELAY ms]` from `client` (`BIND`).
pub fn open(ctx: Ctx, id: &[u8], settings: Settings, client: Option<u64>) -> Result<Opened, Error> {
    let now_ms = now_us() / 1000;
    let exists = sessions::with(|s| s.get(id).is_some());
    let ms_left = quarantine::ms_left();
    if !exists && ms_left > 0 {
        return Err(Error::Quarantine { ms_left });
    }
    let opened = sessions::with(|s| s.open(id, settings, client, now_ms))?;
    let deadline = match opened {
        Opened::New { deadline_ms } | Opened::Renewed { deadline_ms } => deadline_ms,
    };
    session_effects::set(ctx, id, deadline, settings)?;
    quarantine::note_ttl(settings.ttl_ms);
    if matches!(opened, Opened::New { .. }) {
        stats::SESSIONS_OPENED.add();
        stats::notify_session(ctx, c"dlock.session.opened", id);
    }
    sessions::arm_expiry(now_ms);
    Ok(opened)
}

/// `KEEPALIVE id [ttl]`: the ms the session has left.
pub fn keep_alive(ctx: Ctx, id: &[u8], ttl_ms: Option<u64>) -> Result<u64, Error> {
    let now_ms = now_us() / 1000;
    let deadline = sessions::with(|s| s.keep_alive(id, ttl_ms, now_ms))?;
    let settings =
        sessions::with(|s| s.get(id).map(|s| s.settings)).ok_or(Error::Internal("session"))?;
    session_effects::set(ctx, id, deadline, settings)?;
    quarantine::note_ttl(settings.ttl_ms);
    sessions::arm_expiry(now_ms);
    Ok(deadline.saturating_sub(now_ms))
}

/// Ends a live session; whether there was one. Its holds are settled by
/// the jobs that follow; its waiters are answered `NOSESSION` now.
pub fn end(ctx: Ctx, id: &[u8], reason: EndReason) -> Result<bool, Error> {
    let now_ms = now_us() / 1000;
    let Some(ended) = sessions::with(|s| s.end(id, reason, now_ms)) else {
        return Ok(false);
    };
    session_effects::ended(ctx, id, Some(ended.until_ms))?;
    let (counter, event) = match reason {
        EndReason::Expired => (&stats::SESSIONS_EXPIRED, c"dlock.session.expired"),
        EndReason::Closed => (&stats::SESSIONS_CLOSED, c"dlock.session.closed"),
        EndReason::Killed => (&stats::SESSIONS_KILLED, c"dlock.session.killed"),
        EndReason::Disconnected => (&stats::SESSIONS_DISCONNECTED, c"dlock.session.disconnected"),
    };
    counter.add();
    stats::notify_session(ctx, event, id);
    let refused: Vec<(u64, Error)> = sessions::take_waits(id)
        .into_iter()
        .map(|w| (w, Error::NoSession))
        .collect();
    if !refused.is_empty() {
        blocking::grant_entries(&[], &[], refused);
    }
    sessions::arm_ending();
    Ok(true)
}

/// Whether jobs may write now; if not, `job` runs again later.
fn may_write(ctx: Ctx, job: Job) -> bool {
    if ctx.flags().map_or(true, |f| f.is_replica()) {
        // The master ends sessions and settles their holds; a promotion
        // queues these jobs again.
        return false;
    }
    if jobs::writes_paused() {
        jobs::push_after(job, PAUSED_RETRY_MS);
        return false;
    }
    true
}

/// `Job::SessionsDue`: sessions whose ttl passed end.
pub fn expire_due(ctx: Ctx) {
    if !may_write(ctx, Job::SessionsDue) {
        return;
    }
    let now_ms = now_us() / 1000;
    let due = sessions::with(|s| s.expired(now_ms, EXPIRED_PER_TURN));
    for id in &due {
        if let Err(e) = end(ctx, id, EndReason::Expired) {
            ctx.log_warning(&format!("session expiry: {e}"));
        }
    }
    if due.len() == EXPIRED_PER_TURN {
        jobs::push_after(Job::SessionsDue, 1);
    } else {
        sessions::arm_expiry(now_ms);
    }
}

/// `Job::SessionsEnd`: a batch of the holds of ended sessions settled.
pub fn settle_ending(ctx: Ctx) {
    if !may_write(ctx, Job::SessionsEnd) {
        return;
    }
    let batch = sessions::with(|s| s.next_batch(SETTLED_PER_TURN));
    for (place, _) in &batch.places {
        hold_checks::check_logged(ctx, place.db, &place.key);
    }
    for id in &batch.done {
        if let Err(e) = session_effects::ended(ctx, id, None) {
            ctx.log_warning(&format!("session end: {e}"));
        }
    }
    if sessions::with(|s| s.has_ending()) {
        // The next batch in a later event-loop turn.
        jobs::push_after(Job::SessionsEnd, 1);
    }
}

/// `Job::ClientGone`: the sessions bound to a closed connection end.
pub fn client_gone(ctx: Ctx, client: u64) {
    if !may_write(ctx, Job::ClientGone(client)) {
        return;
    }
    for id in sessions::with(|s| s.bound_to(client)) {
        if let Err(e) = end(ctx, &id, EndReason::Disconnected) {
            ctx.log_warning(&format!("session end: {e}"));
        }
    }
}
