//! Fences of locks that arrive by RESTORE (and so by MIGRATE). The loader
//! runs before the server has accepted the payload (its end-of-value check
//! comes after), so a refused payload must not raise the fence clock. The
//! loader notes what it decoded; a zero-delay timer raises the clock once
//! the key really holds that lock.
//!
//! Until then, every way the lock can be seen or leave raises the clock
//! itself, so that no grant can come after it with a lower fence, even inside
//! the same `MULTI`/`EXEC` or script as the RESTORE:
//! - a command that reads it (`LockKey::lease`);
//! - DEL, expiry, eviction, overwrite, RENAME/MOVE away: the type's unlink
//!   callback;
//! - FLUSHDB/FLUSHALL, which empty the keyspace without that callback:
//!   `before_flush`, while the keys are still there;
//! - SWAPDB moves keys between databases without any callback: `after_swap`
//!   moves the notes with them, so the checks above look in the right place.

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

/// FLUSHDB/FLUSHALL is about to empty `db` (`None`: every database). A
/// restored lock there that is still unconfirmed is confirmed now, while its
/// key can be read; after the flush nothing would find it.
pub fn before_flush(ctx: Ctx, db: Option<i32>) {
    let flushed: Vec<Pending> = {
        let mut pending = PENDING.lock().unwrap_or_else(|p| p.into_inner());
        let (flushed, kept) = std::mem::take(&mut *pending)
            .into_iter()
            .partition(|p| db.is_none_or(|d| d == p.db));
        *pending = kept;
        flushed
    };
    confirm_all(ctx, flushed);
}

/// SWAPDB exchanged the contents of databases `a` and `b` (the server event
/// fires after the swap): unconfirmed restored locks follow their keys.
pub fn after_swap(a: i32, b: i32) {
    let mut pending = PENDING.lock().unwrap_or_else(|p| p.into_inner());
    for p in pending.iter_mut() {
        if p.db == a {
            p.db = b;
        } else if p.db == b {
            p.db = a;
        }
    }
}

extern "C" fn on_timer(ctx: *mut raw::RedisModuleCtx, _data: *mut c_void) {
    guard("restored locks", (), || {
        ARMED.store(false, Ordering::Relaxed);
        let list = std::mem::take(&mut *PENDING.lock().unwrap_or_else(|p| p.into_inner()));
        confirm_all(Ctx(ctx), list);
    })
}

/// The list is out of `PENDING` first: reading a key can expire it, and
/// nothing here may wait on the mutex it would need.
fn confirm_all(ctx: Ctx, list: Vec<Pending>) {
    for p in list {
        if let Err(e) = confirm(ctx, &p) {
            ctx.log_warning(&format!("restored lock check failed: {e}"));
        }
    }
}

fn confirm(ctx: Ctx, p: &Pending) -> Result<(), Error> {
    unsafe { rm!(RedisModule_SelectDb)(ctx.0, p.db) };
    let name = unsafe {
        rm!(RedisModule_CreateString)(ctx.0, p.key.as_ptr().cast::<c_char>(), p.key.len())
    };
    // Reading the lease raises the clock to whatever lock is there now.
    let holds = match LockKey::open_read(ctx, name)
        .and_then(|key| Ok(key.lease()?.is_some_and(|l| l.fence() == p.fence)))
    {
        // Overwritten with another type since: that lock is gone (and its
        // unlink callback raised the clock).
        Err(Error::WrongType) => Ok(false),
        other => other,
    };
    unsafe { rm!(RedisModule_FreeString)(ctx.0, name) };
    if holds? {
        state::observe_fence(p.fence);
    }
    Ok(())
}
