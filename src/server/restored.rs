//! Fences of locks that arrive by RESTORE (and so by MIGRATE). The loader
//! runs before the server has accepted the payload (its end-of-value check
//! comes after), so a refused payload must not raise the fence clock. The
//! loader notes what it decoded; a zero-delay timer raises the clock once
//! the key really holds that lock. A restored lock that leaves the keyspace
//! before that (DEL, expiry, overwrite) raises it on its way out, through the
//! type's unlink callback.

use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use redis_module::raw;

use super::api::{self, rm, Ctx};
use super::ffi::guard;
use super::keys::LockKey;
use super::{handoff, state};
use crate::lock::Error;

struct Pending {
    db: i32,
    key: Vec<u8>,
    fence: u64,
}

static PENDING: Mutex<Vec<Pending>> = Mutex::new(Vec::new());
static ARMED: AtomicBool = AtomicBool::new(false);

/// Called by the loader for a value decoded outside a dataset load.
pub fn note(rdb: *mut raw::RedisModuleIO, fence: u64) {
    let (Some(name_of), Some(db_of)) = (unsafe { raw::RedisModule_GetKeyNameFromIO }, unsafe {
        raw::RedisModule_GetDbIdFromIO
    }) else {
        return;
    };
    let name = unsafe { name_of(rdb) };
    if name.is_null() {
        return;
    }
    let Ok(key) = api::bytes(name) else {
        return;
    };
    let db = unsafe { db_of(rdb) };
    PENDING
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(Pending {
            db,
            key: key.to_vec(),
            fence,
        });
    if !ARMED.swap(true, Ordering::Relaxed) {
        handoff::arm_timer(0, on_timer);
    }
}

extern "C" fn on_timer(ctx: *mut raw::RedisModuleCtx, _data: *mut c_void) {
    guard("restored locks", (), || {
        ARMED.store(false, Ordering::Relaxed);
        let list = std::mem::take(&mut *PENDING.lock().unwrap_or_else(|p| p.into_inner()));
        for p in list {
            if let Err(e) = confirm(Ctx(ctx), &p) {
                Ctx(ctx).log_warning(&format!("restored lock check failed: {e}"));
            }
        }
    })
}

fn confirm(ctx: Ctx, p: &Pending) -> Result<(), Error> {
    unsafe { rm!(RedisModule_SelectDb)(ctx.0, p.db) };
    let name = unsafe {
        rm!(RedisModule_CreateString)(ctx.0, p.key.as_ptr().cast::<c_char>(), p.key.len())
    };
    let holds = LockKey::open_read(ctx, name)
        .and_then(|key| Ok(key.lease()?.is_some_and(|l| l.fence() == p.fence)));
    unsafe { rm!(RedisModule_FreeString)(ctx.0, name) };
    if holds? {
        state::observe_fence(p.fence);
    }
    Ok(())
}
