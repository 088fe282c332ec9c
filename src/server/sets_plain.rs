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

use super::api::{now_us, Ctx};
use super::blocking;
use super::effects;
use super::keys::LockKey;
use super::resource::Resource;
use super::value::Stored;
use super::{quarantine, state, stats};
use crate::lock::admission::{Admission, Summary};
use crate::lock::ask::{Ask, Mode};
use crate::lock::lease::LeaseRef;
use crate::lock::set_args::SetAcquire;
use crate::lock::Error;

/// What the members hold, as far as the fast path can tell.
enum Seen {
    Free,
    /// Every member held by the token under this fence.
    Retry(u64),
    /// A member held by another: nil (without `WAIT`).
    Busy,
    /// Anything else: the general path decides.
    Other,
}

/// Decides `req` if it is the common case: `Some(reply)` (the fence or
/// nil), or `None` for `step`. On `Err` nothing changed.
pub fn try_acquire(
    ctx: Ctx,
    names: &[*mut raw::RedisModuleString],
    req: &SetAcquire<'_>,
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
        Seen::Other => Ok(None),
        // A queued set is the general path's.
        Seen::Busy if blocks => Ok(None),
        #[cfg(feature = "planted-set-partial")]
        Seen::Busy if quarantine::ms_left() == 0 => {
            Ok(Some(Some(grant(ctx, &mut keys, names, req, now)?)))
        }
        Seen::Busy => {
            stats::CONTENDED.add();
            Ok(Some(None))
        }
        Seen::Free if quarantine::ms_left() > 0 => Ok(None),
        Seen::Free => {
            req.check_new_token()?;
            let fence = grant(ctx, &mut keys, names, req, now)?;
            stats::GRANTS.add();
            notify_acquired(ctx, names);
            Ok(Some(Some(fence)))
        }
        Seen::Retry(fence) => {
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
    req: &SetAcquire<'_>,
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

/// The members' state, decided the way `lock::component` decides a set:
/// member by member, a busy member ends the decision (nil), a member unlike
/// the first (free beside held, two fences) is the general path's (an
/// error). Every member is read first: one of another type refuses the
/// command whatever the others hold.
fn seen(keys: &[LockKey], token: &[u8]) -> Result<Seen, Error> {
    // An exclusive hold of the token, as `ACQUIRE` asks it of each member.
    let ask = Ask {
        token,
        owner: None,
        mode: Mode::Exclusive,
        limit: None,
        ttl_ms: 0,
    };
    let mut states = Vec::with_capacity(keys.len());
    for key in keys {
        let lease = match key.stored()? {
            Some(Stored::Multi(_)) if cfg!(feature = "planted-set-partial") => {
                states.push(Seen::Busy);
                continue;
            }
            Some(Stored::Multi(_)) => return Ok(Seen::Other),
            Some(Stored::Plain(l)) => Some(l),
            None => None,
        };
        // The one admission rule, on the plain value read in place.
        states.push(match Summary::of_plain(lease).admit(&ask, false)? {
            Admission::New { owner_fence: None } => Seen::Free,
            Admission::Retry { fence } => Seen::Retry(fence),
            Admission::Busy => Seen::Busy,
            Admission::New {
                owner_fence: Some(_),
            } => return Ok(Seen::Other),
        });
    }
    let mut first: Option<Seen> = None;
    for state in states {
        first = match (first, state) {
            (_, Seen::Busy) => return Ok(Seen::Busy),
            (None, s) => Some(s),
            (Some(Seen::Free), Seen::Free) => Some(Seen::Free),
            (Some(Seen::Retry(a)), Seen::Retry(b)) if a == b => Some(Seen::Retry(a)),
            _ => return Ok(Seen::Other),
        };
    }
    Ok(first.unwrap_or(Seen::Other))
}

fn notify_acquired(ctx: Ctx, names: &[*mut raw::RedisModuleString]) {
    for name in names {
        stats::notify(ctx, c"dlock.acquired", *name);
    }
}
