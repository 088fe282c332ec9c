//! Fences of locks that arrive by RESTORE (and so by MIGRATE). The loader
//! runs before the server has accepted the payload (its end-of-value check
//! comes after), so a refused payload must not raise the fence clock. The
//! loader notes what it decoded; a deferred job raises the clock once the
//! key really holds that lock.
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

use std::ffi::c_char;

use redis_module::raw;

use crate::server::edge::api::{self, rm, Ctx};
use crate::server::jobs::{self, Job};
use crate::server::keyspace::keys::LockKey;
use crate::server::state;
use dlock_core::Error;

/// Called by the loader for a value decoded outside a dataset load.
pub fn note(rdb: *mut raw::RedisModuleIO, fence: u64) {
    if let Some((db, key)) = api::key_of_io(rdb) {
        jobs::push(Job::ConfirmRestored { db, key, fence });
    }
}

/// FLUSHDB/FLUSHALL is about to empty `db` (`None`: every database). A
/// restored lock there that is still unconfirmed is confirmed now, while its
/// key can be read; after the flush nothing would find it.
pub fn before_flush(ctx: Ctx, db: Option<i32>) {
    let flushed = jobs::take(|job| match job {
        Job::ConfirmRestored { db: at, .. } => db.is_none_or(|d| d == *at),
        _ => false,
    });
    for job in flushed {
        if let Job::ConfirmRestored { db, key, fence } = job {
            confirm_logged(ctx, db, &key, fence);
        }
    }
}

/// SWAPDB exchanged the contents of databases `a` and `b` (the server event
/// fires after the swap): unconfirmed restored locks follow their keys.
pub fn after_swap(a: i32, b: i32) {
    jobs::for_each_mut(|job| {
        if let Job::ConfirmRestored { db, .. } = job {
            if *db == a {
                *db = b;
            } else if *db == b {
                *db = a;
            }
        }
    });
}

/// Confirms one restored lock (taken out of the job queue first: reading a
/// key can expire it, and nothing here may wait on the queue's mutex).
pub fn confirm_logged(ctx: Ctx, db: i32, key: &[u8], fence: u64) {
    if let Err(e) = confirm(ctx, db, key, fence) {
        ctx.log_warning(&format!("restored lock check failed: {e}"));
    }
}

fn confirm(ctx: Ctx, db: i32, key: &[u8], fence: u64) -> Result<(), Error> {
    unsafe { rm!(RedisModule_SelectDb)(ctx.0, db) };
    let name =
        unsafe { rm!(RedisModule_CreateString)(ctx.0, key.as_ptr().cast::<c_char>(), key.len()) };
    // Reading the lease raises the clock to whatever lock is there now.
    let holds = match LockKey::open_read(ctx, name)
        .and_then(|key| Ok(key.lease()?.is_some_and(|l| l.fence() == fence)))
    {
        // Overwritten with another type since: that lock is gone (and its
        // unlink callback raised the clock).
        Err(Error::WrongType) => Ok(false),
        other => other,
    };
    unsafe { rm!(RedisModule_FreeString)(ctx.0, name) };
    if holds? {
        state::observe_fence(fence);
    }
    Ok(())
}

/// A loaded value whose only hold was bound to a session this server does
/// not have: it became a plain lease, which keeps no deadline of its own,
/// so the key is given the one its session had (`EndRestoredAt`).
pub fn note_end(rdb: *mut raw::RedisModuleIO, token: &[u8], at_ms: u64) {
    if let Some((db, key)) = crate::server::edge::api::key_of_io(rdb) {
        jobs::push(Job::EndRestoredAt {
            db,
            key,
            token: token.into(),
            at_ms,
        });
    }
}
