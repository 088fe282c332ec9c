//! `DLOCK.MACQUIRE`'s common case, decided by `dlock_core::plan::plain::macquire`
//! without the component machinery and carried out here:
//! nobody waits anywhere, the set is exclusive, and every member is free or
//! a plain lock. Then the rules are those of `DLOCK.ACQUIRE` on each member
//! at once: all free -> one fence for all; all held by the token under one
//! fence -> a retry; any held by another -> busy. The keys, effects and
//! counters are exactly the plain path's, so a set costs what its single
//! locks cost. Everything else (waiters, `SHARED`, multi-hold members,
//! mixed or partial holdings, a quarantine, `WAIT` on a busy set) goes to
//! `step`, which gives the same answers the long way.

use redis_module::raw;

use crate::server::edge::api::Ctx;
use crate::server::execute::inputs::Inputs;
use crate::server::keyspace::keys::LockKey;
use crate::server::keyspace::value::Stored;
use crate::server::notify::{figures, stats};
use crate::server::persistence::effects;
use crate::server::resource::Resource;
use crate::server::waiting::blocking;
use crate::server::{quarantine, state};
use dlock_core::ask::Mode;
use dlock_core::plan::plain::{self, Reads, Route, SetPlan};
use dlock_core::request::args::Acquire;
use dlock_core::resource::lease::LeaseRef;
use dlock_core::stats::Kind;
use dlock_core::Error;

/// `req` if it is the common case (`dlock_core::plan::plain::set_route`):
/// opened, decided (`plain::macquire`) and carried out: `Some(reply)` (the
/// fence or nil), or `None` for `step`. On `Err` nothing changed.
pub fn try_acquire(
    ctx: Ctx,
    names: &[*mut raw::RedisModuleString],
    req: &Acquire<'_>,
) -> Result<Option<Option<u64>>, Error> {
    // A session's holds, and capped ones, are stored as holds, never as
    // plain leases.
    let exclusive =
        req.mode == Mode::Exclusive && req.session.is_none() && req.max_hold_ms.is_none();
    if plain::set_route(blocking::anyone_waiting(), exclusive) == Route::Step {
        return Ok(None);
    }
    let mut keys = Vec::with_capacity(names.len());
    for name in names {
        keys.push(LockKey::open_write(ctx, *name)?);
    }
    let inputs = Inputs::of(ctx, None, req);
    let plan = {
        let members = members(&keys)?;
        state::with_clock(|clock| plain::macquire(&members, req.token, &inputs, clock))?
    };
    let now = inputs.now_us();
    match plan {
        SetPlan::Step => Ok(None),
        SetPlan::Busy => {
            stats::CONTENDED.add();
            figures::contended_names(ctx, names, Kind::Lock);
            Ok(Some(None))
        }
        SetPlan::Grant { fence } => {
            grant(ctx, &mut keys, names, req, fence, now)?;
            stats::GRANTS.add();
            for _ in names {
                figures::granted(Kind::Lock);
            }
            notify_acquired(ctx, names);
            Ok(Some(Some(fence)))
        }
        SetPlan::Retry { fence } => {
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

/// `fence` and one deadline for every member (all free).
fn grant(
    ctx: Ctx,
    keys: &mut [LockKey],
    names: &[*mut raw::RedisModuleString],
    req: &Acquire<'_>,
    fence: u64,
    now: u64,
) -> Result<(), Error> {
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
    Ok(())
}

/// The members as `plain::macquire` reads them; `WRONGTYPE` for a member of
/// another type, whatever the others hold.
fn members(keys: &[LockKey]) -> Result<Vec<plain::Member<'_>>, Error> {
    let mut members = Vec::with_capacity(keys.len());
    for key in keys {
        members.push(match key.stored()? {
            Some(Stored::Multi(_)) => plain::Member::Multi,
            Some(Stored::Plain(l)) => plain::Member::Plain(Some(l)),
            None => plain::Member::Plain(None),
        });
    }
    Ok(members)
}

fn notify_acquired(ctx: Ctx, names: &[*mut raw::RedisModuleString]) {
    for name in names {
        stats::notify(ctx, c"dlock.acquired", *name);
    }
}
