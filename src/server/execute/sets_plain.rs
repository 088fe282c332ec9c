//! `DLOCK.MACQUIRE`'s common case, decided without the component machinery:
//! nobody waits anywhere, the set is exclusive, and every member is free or
//! a plain lock. Then the rules are those of `DLOCK.ACQUIRE` on each member
//! at once: all free -> one fence for all; all held by the token under one
//! fence -> a retry; any held by another -> busy. The keys, effects and
//! counters are exactly the plain path's, so a set costs what its single
//! locks cost. Everything else (waiters, `SHARED`, multi-hold members,
//! mixed or partial holdings, a quarantine, `WAIT` on a busy set) goes to
//! `step`, which gives the same answers the long way.

use redis_module::raw;

use crate::server::edge::api::{now_us, Ctx};
use crate::server::keyspace::keys::LockKey;
use crate::server::keyspace::value::Stored;
use crate::server::persistence::effects;
use crate::server::resource::Resource;
use crate::server::waiting::blocking;
use crate::server::{notify::stats, quarantine, state};
use dlock_core::ask::Mode;
use dlock_core::plan::plain::{self, Set};
use dlock_core::request::args::Acquire;
use dlock_core::resource::lease::LeaseRef;
use dlock_core::Error;

/// Decides `req` if it is the common case: `Some(reply)` (the fence or
/// nil), or `None` for `step`. On `Err` nothing changed.
pub fn try_acquire(
    ctx: Ctx,
    names: &[*mut raw::RedisModuleString],
    req: &Acquire<'_>,
    blocks: bool,
) -> Result<Option<Option<u64>>, Error> {
    // The planted bug (test-only) takes this path whoever waits.
    let waiting = blocking::anyone_waiting() && !cfg!(feature = "planted-set-partial");
    if waiting || req.mode != Mode::Exclusive {
        return Ok(None);
    }
    let mut keys = Vec::with_capacity(names.len());
    for name in names {
        keys.push(LockKey::open_write(ctx, *name)?);
    }
    let seen = seen(&keys, req.token)?;
    let now = now_us();
    match seen {
        Set::Other => Ok(None),
        // A queued set is the general path's.
        Set::Busy if blocks => Ok(None),
        #[cfg(feature = "planted-set-partial")]
        Set::Busy if quarantine::ms_left() == 0 => {
            Ok(Some(Some(grant(ctx, &mut keys, names, req, now)?)))
        }
        Set::Busy => {
            stats::CONTENDED.add();
            Ok(Some(None))
        }
        Set::Free if quarantine::ms_left() > 0 => Ok(None),
        Set::Free => {
            req.check_new_token()?;
            let fence = grant(ctx, &mut keys, names, req, now)?;
            stats::GRANTS.add();
            notify_acquired(ctx, names);
            Ok(Some(Some(fence)))
        }
        Set::Retry(fence) => {
            let deadline = now / 1000 + req.ttl_ms;
            quarantine::note_ttl(req.ttl_ms);
            for (key, name) in keys.iter_mut().zip(names) {
                // The owner knows its fence: a grant of it in flight stands.
                blocking::confirm(|| Resource::of(ctx, *name), req.token)?;
                key.set_deadline(deadline)?;
                effects::deadline_moved(ctx, *name, deadline)?;
                key.signal_modified()?;
            }
            stats::REFRESHES.add();
            notify_acquired(ctx, names);
            Ok(Some(Some(fence)))
        }
    }
}

/// One fresh fence and one deadline for every member (all free).
fn grant(
    ctx: Ctx,
    keys: &mut [LockKey],
    names: &[*mut raw::RedisModuleString],
    req: &Acquire<'_>,
    now: u64,
) -> Result<u64, Error> {
    let fence = state::with_clock(|c| c.next(now))?;
    let deadline = now / 1000 + req.ttl_ms;
    quarantine::note_ttl(req.ttl_ms);
    for (key, name) in keys.iter_mut().zip(names) {
        // The planted bug (test-only) grants a busy set's free members.
        if cfg!(feature = "planted-set-partial") && key.stored()?.is_some() {
            continue;
        }
        key.store(LeaseRef::new(req.token, fence))?;
        key.set_deadline(deadline)?;
        effects::granted(ctx, *name, req.token, fence, deadline)?;
        key.signal_modified()?;
    }
    Ok(fence)
}

/// The members as `plain::set` reads them; `WRONGTYPE` for a member of
/// another type, whatever the others hold.
fn seen(keys: &[LockKey], token: &[u8]) -> Result<Set, Error> {
    let mut members = Vec::with_capacity(keys.len());
    for key in keys {
        members.push(match key.stored()? {
            Some(Stored::Multi(_)) => plain::Member::Multi,
            Some(Stored::Plain(l)) => plain::Member::Plain(Some(l)),
            None => plain::Member::Plain(None),
        });
    }
    plain::set(&members, token)
}

fn notify_acquired(ctx: Ctx, names: &[*mut raw::RedisModuleString]) {
    for name in names {
        stats::notify(ctx, c"dlock.acquired", *name);
    }
}
