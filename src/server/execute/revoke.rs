//! Revocation: a grant whose reply never reached its waiter (the waiter
//! left in the grant's event-loop turn, or the server dropped the reply) is
//! released again as if its owner had released it. See `dlock_core::parking` for
//! when a grant counts as undelivered.

use std::ffi::c_char;

use redis_module::raw;

use crate::server::edge::api::{now_us, rm, Ctx};
use crate::server::execute::handoff::serve_queue;
use crate::server::execute::inputs;
use crate::server::execute::step;
use crate::server::jobs::{self, Job, PAUSED_RETRY_MS};
use crate::server::keyspace::keys::LockKey;
use crate::server::notify::{figures, stats};
use crate::server::persistence::effects;
use crate::server::state;
use crate::server::waiting::blocking::{self, Resource};
use dlock_core::parking::Revoke;
use dlock_core::plan::plain::{self, Route};
use dlock_core::plan::{Command, Outcome};
use dlock_core::stats::{End, Kind};
use dlock_core::Error;

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
    match grant.as_slice() {
        [rv] => {
            if let Err(e) = revoke_now(ctx, rv) {
                ctx.log_warning(&format!("revoking an undelivered grant failed: {e}"));
            }
        }
        set => revoke_set(ctx, set),
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

/// Revokes a set grant on every member at once (one database, one token,
/// one fence): one step, so the members are released and whatever waits
/// on them is served together, in one transaction for replicas and the AOF.
fn revoke_set(ctx: Ctx, set: &[Revoke<Resource>]) {
    let Some(first) = set.first() else {
        return;
    };
    select(ctx, first.resource.db);
    let members: Vec<Resource> = set.iter().map(|rv| rv.resource.clone()).collect();
    let revoke = Command::Revoke {
        token: &first.token,
        fence: first.fence,
        members: members.len(),
    };
    let names: Vec<String> = members
        .iter()
        .map(|r| String::from_utf8_lossy(&r.key).into_owned())
        .collect();
    match step::run(ctx, &members, &revoke, None, now_us()) {
        Ok(Outcome::Count(n)) if n > 0 => ctx.log_warning(&format!(
            "grant of {names:?} (fence {}) revoked on {n} of them: its waiter left \
             before the reply (timeout, CLIENT UNBLOCK or disconnect)",
            first.fence
        )),
        Ok(_) => ctx.log_warning(&format!(
            "grant of {names:?} (fence {}) never reached its waiter, which left first; \
             no member holds that grant any more",
            first.fence
        )),
        Err(e) => ctx.log_warning(&format!("revoking an undelivered grant failed: {e}")),
    }
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
    let route = match key.stored() {
        Ok(stored) => inputs::route(stored, Some(&rv.resource), true),
        Err(Error::WrongType) => return Ok(false),
        Err(e) => return Err(e),
    };
    if route == Route::Step {
        // One step revokes and serves the queue (its component, with the
        // sets waiting there).
        drop(key);
        let revoke = Command::Revoke {
            token: &rv.token,
            fence: rv.fence,
            members: 1,
        };
        let outcome = step::run(
            ctx,
            std::slice::from_ref(&rv.resource),
            &revoke,
            None,
            now_us(),
        )?;
        return Ok(outcome != Outcome::Count(0));
    }
    let revokes = match key.lease() {
        Ok(lease) => plain::revokes(lease, &rv.token, rv.fence),
        Err(Error::WrongType) => false,
        Err(e) => return Err(e),
    };
    if !revokes {
        return Ok(false);
    }
    stats::notify(ctx, c"dlock.revoked", name);
    let now = now_us();
    figures::hold_of_name_ended(ctx, name, Kind::Lock, rv.fence, now, End::Revoked);
    let handed_over =
        blocking::waiters_on(&rv.resource) > 0 && serve_queue(ctx, &mut key, name, &rv.resource)?;
    if !handed_over {
        key.delete()?;
        effects::released(ctx, name)?;
        key.signal_modified()?;
    }
    Ok(true)
}

/// Before a dlock command on `names` (keys of the caller's database):
/// completes the revocations queued on them, so that no dlock command
/// sees a grant whose waiter left.
pub fn before_command(
    ctx: Ctx,
    names: impl IntoIterator<Item = *mut raw::RedisModuleString>,
) -> Result<(), Error> {
    if !jobs::revocations_pending() {
        return Ok(());
    }
    let db = unsafe { rm!(RedisModule_GetSelectedDb)(ctx.0) };
    let resources = names
        .into_iter()
        .map(|name| {
            Ok(Resource {
                db,
                key: crate::server::edge::api::bytes(name)?.into(),
            })
        })
        .collect::<Result<Vec<_>, Error>>()?;
    for job in jobs::take_revocations(&resources) {
        if let Job::Revoke(grant) = job {
            revoke(ctx, grant);
        }
    }
    Ok(())
}
