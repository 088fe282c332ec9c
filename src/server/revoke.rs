//! Revocation: a grant whose reply never reached its waiter (the waiter
//! left in the grant's event-loop turn, or the server dropped the reply) is
//! released again as if its owner had released it. See `lock::parking` for
//! when a grant counts as undelivered.

use std::ffi::c_char;

use redis_module::raw;

use super::api::{rm, Ctx};
use super::blocking::{self, Resource};
use super::effects;
use super::handoff::grant_next;
use super::jobs::{self, Job, PAUSED_RETRY_MS};
use super::keys::LockKey;
use super::{state, stats};
use crate::lock::parking::Revoke;
use crate::lock::Error;

/// A grant that never reached its waiter is released as if its owner had
/// released it: the release effect goes out, the next waiter is granted,
/// and it is counted (once, however many members a set grant has) and
/// logged. `grant` holds one revocation per resource of that one grant.
/// Runs from the deferred jobs (the callbacks that learn of it run inside
/// another command, such as `CLIENT KILL`, whose propagation must not carry
/// our effects), or from a command on one of its resources, which completes
/// it first; unless this node must not write now.
pub fn revoke(ctx: Ctx, grant: Vec<Revoke<Resource>>) {
    if grant.is_empty() {
        return;
    }
    if state::is_replica() {
        // A replica holds what its master sends; the master revokes.
        stats::REVOKED.add();
        return;
    }
    if jobs::writes_paused() {
        jobs::push_after(Job::Revoke(grant), PAUSED_RETRY_MS);
        return;
    }
    stats::REVOKED.add();
    // A command's context keeps the database its client selected.
    let selected = unsafe { raw::RedisModule_GetSelectedDb }.map(|f| unsafe { f(ctx.0) });
    for rv in &grant {
        if let Err(e) = revoke_now(ctx, rv) {
            ctx.log_warning(&format!("revoking an undelivered grant failed: {e}"));
        }
    }
    // The revoked holds may be what queued sets wait for: their components
    // are settled once, after every member (a set's members share a db).
    let members: Vec<Resource> = grant.iter().map(|rv| rv.resource.clone()).collect();
    if let Some(db) = members.first().map(|r| r.db) {
        select(ctx, db);
        if let Err(e) = super::sets::settle_all(ctx, &members) {
            ctx.log_warning(&format!("handoff to a set after a revocation failed: {e}"));
        }
    }
    if let Some(db) = selected {
        select(ctx, db);
    }
}

fn select(ctx: Ctx, db: i32) {
    if let Some(select) = unsafe { raw::RedisModule_SelectDb } {
        unsafe { select(ctx.0, db) };
    }
}

/// `SWAPDB a b` moved every lock of one database to the other: grants in
/// flight and waiting revocations follow their locks.
pub fn after_swap(a: i32, b: i32) {
    let moved = |r: &Resource| {
        let db = if r.db == a {
            b
        } else if r.db == b {
            a
        } else {
            return None;
        };
        Some(Resource {
            db,
            key: r.key.clone(),
        })
    };
    blocking::move_grants(moved);
    jobs::for_each_mut(|job| {
        if let Job::Revoke(grant) = job {
            for rv in grant {
                if let Some(to) = moved(&rv.resource) {
                    rv.resource = to;
                }
            }
        }
    });
}

/// Revokes one resource of a grant (counted by `revoke`).
fn revoke_now(ctx: Ctx, rv: &Revoke<Resource>) -> Result<(), Error> {
    let res = &rv.resource;
    unsafe { rm!(RedisModule_SelectDb)(ctx.0, res.db) };
    let name = unsafe {
        rm!(RedisModule_CreateString)(ctx.0, res.key.as_ptr().cast::<c_char>(), res.key.len())
    };
    let result = revoke_key(ctx, name, rv);
    unsafe { rm!(RedisModule_FreeString)(ctx.0, name) };

    let who = String::from_utf8_lossy(&res.key);
    match result {
        Ok(true) => ctx.log_warning(&format!(
            "grant of '{who}' (fence {}) revoked: its waiter left before the reply \
             (timeout, CLIENT UNBLOCK or disconnect)",
            rv.fence
        )),
        Ok(false) => ctx.log_warning(&format!(
            "grant of '{who}' (fence {}) never reached its waiter, which left first; \
             the key no longer holds that grant (released, expired, deleted or replaced)",
            rv.fence
        )),
        Err(_) => {}
    }
    result.map(|_| ())
}

/// Releases `rv`'s lease if the key still holds exactly it.
fn revoke_key(
    ctx: Ctx,
    name: *mut raw::RedisModuleString,
    rv: &Revoke<Resource>,
) -> Result<bool, Error> {
    let mut key = LockKey::open_write(ctx, name)?;
    let multi = match key.is_multi() {
        Ok(multi) => multi,
        Err(Error::WrongType) => return Ok(false),
        Err(e) => return Err(e),
    };
    if multi || !blocking::queue_is_plain(&rv.resource) {
        let res = &rv.resource;
        return super::holds::revoke(ctx, &mut key, name, res, &rv.token, rv.fence);
    }
    let held = match key.lease() {
        Ok(Some(l)) => l.is_owned_by(&rv.token) && l.fence() == rv.fence,
        Ok(None) | Err(Error::WrongType) => false,
        Err(e) => return Err(e),
    };
    if !held {
        return Ok(false);
    }
    stats::notify(ctx, c"dlock.revoked", name);
    let handed_over =
        blocking::waiters_on(&rv.resource) > 0 && grant_next(ctx, &mut key, name, &rv.resource)?;
    if !handed_over {
        key.delete()?;
        effects::released(ctx, name)?;
        key.signal_modified()?;
    }
    Ok(true)
}
