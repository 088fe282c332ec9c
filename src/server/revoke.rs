//! Revocation: a grant whose reply never reached its waiter (the waiter
//! left in the grant's event-loop turn, or the server dropped the reply) is
//! released again as if its owner had released it. See `lock::parking` for
//! when a grant counts as undelivered.

use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use redis_module::raw;

use super::api::{rm, Ctx};
use super::blocking::{self, Resource};
use super::effects;
use super::ffi::guard;
use super::handoff::{arm_timer, grant_next, timer_ctx, writes_paused, PAUSED_RETRY_MS};
use super::keys::LockKey;
use super::{state, stats};
use crate::lock::parking::Revoke;
use crate::lock::Error;

/// Revocations that must wait until writes are allowed again, one entry
/// per grant (a set grant revokes every member).
static REVOCATIONS: Mutex<Vec<Vec<Revoke<Resource>>>> = Mutex::new(Vec::new());
static REVOCATIONS_ARMED: AtomicBool = AtomicBool::new(false);

/// A grant that never reached its waiter is released as if its owner had
/// released it: the release effect goes out, the next waiter is granted,
/// and it is counted (once, however many members a set grant has) and
/// logged. `grant` holds one revocation per resource of that one grant.
/// Runs at once (inside the callback that learned of it, so no command can
/// see the grant after its waiter left), unless this node must not write
/// now.
pub fn revoke(grant: Vec<Revoke<Resource>>) {
    if grant.is_empty() {
        return;
    }
    let ctx = Ctx(timer_ctx());
    if ctx.0.is_null() || state::is_replica() {
        // A replica holds what its master sends; the master revokes.
        stats::REVOKED.add();
        return;
    }
    // Not while writes are held back, nor in the middle of a busy script
    // (the server reads disconnects while a slow script runs): the script's
    // keyspace must not change under it.
    if writes_paused() || ctx.flags().is_ok_and(|f| f.in_script()) {
        REVOCATIONS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(grant);
        arm_revocations();
        return;
    }
    stats::REVOKED.add();
    for rv in &grant {
        if let Err(e) = revoke_now(ctx, rv) {
            ctx.log_warning(&format!("revoking an undelivered grant failed: {e}"));
        }
    }
    // The revoked holds may be what queued sets wait for: their components
    // are settled once, after every member (a set's members share a db).
    let members: Vec<Resource> = grant.iter().map(|rv| rv.resource.clone()).collect();
    if let Some(db) = members.first().map(|r| r.db) {
        if let Some(select) = unsafe { raw::RedisModule_SelectDb } {
            unsafe { select(ctx.0, db) };
        }
        if let Err(e) = super::sets::settle_all(ctx, &members) {
            ctx.log_warning(&format!("handoff to a set after a revocation failed: {e}"));
        }
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
    for rv in REVOCATIONS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter_mut()
        .flatten()
    {
        if let Some(to) = moved(&rv.resource) {
            rv.resource = to;
        }
    }
}

pub fn revocations_pending() -> bool {
    REVOCATIONS_ARMED.load(Ordering::Relaxed)
}

/// A same-token refresh confirmed a grant whose revocation is waiting.
pub fn confirm_revocations(res: &Resource, token: &[u8]) {
    // The owner knows the fence: the whole grant stands (every member of a
    // set, not just the one refreshed).
    REVOCATIONS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .retain(|grant| {
            !grant
                .iter()
                .any(|rv| rv.resource == *res && *rv.token == *token)
        });
}

fn arm_revocations() {
    if !REVOCATIONS_ARMED.swap(true, Ordering::Relaxed)
        && !arm_timer(PAUSED_RETRY_MS, on_revocations_timer)
    {
        REVOCATIONS_ARMED.store(false, Ordering::Relaxed);
    }
}

extern "C" fn on_revocations_timer(_ctx: *mut raw::RedisModuleCtx, _data: *mut c_void) {
    guard("revocations", (), || {
        REVOCATIONS_ARMED.store(false, Ordering::Relaxed);
        let list = std::mem::take(&mut *REVOCATIONS.lock().unwrap_or_else(|p| p.into_inner()));
        list.into_iter().for_each(revoke);
        blocking::hand_over();
    })
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
