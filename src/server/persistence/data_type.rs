//! The lock data type: how a lease is saved to and loaded from RDB (and DUMP
//! payloads), rewritten into the AOF, digested and measured, plus the fence
//! clock's high-water mark as RDB aux data.

mod aof;
mod rdb;

use std::ffi::{c_char, c_int, c_longlong, c_void};

use redis_module::raw;

use crate::server::edge::api::{rm, Ctx};
use crate::server::edge::ffi::guard;
use crate::server::keyspace::value::{self, Stored};
use crate::server::{notify::stats, state};
use aof::aof_rewrite;
use dlock_core::ask::Mode;
use dlock_core::resource::lease::ENCODING_VERSION;
use dlock_core::Error;
use rdb::{aux_load, aux_save, rdb_load, rdb_save, stored};

pub use aof::{on_fork_child_born, write_meta};

/// Exactly nine characters, as the server requires; shown by `TYPE`.
const TYPE_NAME: &std::ffi::CStr = c"dlocklock";

pub fn register_type(ctx: Ctx) -> Result<(), Error> {
    let mut methods = raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(rdb_load),
        rdb_save: Some(rdb_save),
        aof_rewrite: Some(aof_rewrite),
        mem_usage: Some(mem_usage),
        digest: Some(digest),
        free: Some(free),
        aux_load: Some(aux_load),
        aux_save: Some(aux_save),
        aux_save_triggers: raw::REDISMODULE_AUX_BEFORE_RDB as c_int,
        free_effort: None,
        unlink: None,
        copy: None,
        defrag: None,
        mem_usage2: None,
        free_effort2: None,
        unlink2: Some(crate::server::keyspace::eviction::on_unlink),
        copy2: Some(copy),
        aux_save2: None,
    };
    let create = rm!(RedisModule_CreateDataType);
    let t = unsafe { create(ctx.0, TYPE_NAME.as_ptr(), ENCODING_VERSION, &mut methods) };
    if t.is_null() {
        return Err(Error::Internal("data type registration failed"));
    }
    state::set_lock_type(t);
    Ok(())
}

extern "C" fn mem_usage(value: *const c_void) -> usize {
    guard("mem_usage", 0, || unsafe { value::size(value) })
}

extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    guard("digest", (), || {
        let Some(stored) = (unsafe { stored(value) }) else {
            return;
        };
        let (Some(add_buf), Some(add_ll), Some(end)) = (unsafe {
            (
                raw::RedisModule_DigestAddStringBuffer,
                raw::RedisModule_DigestAddLongLong,
                raw::RedisModule_DigestEndSequence,
            )
        }) else {
            return;
        };
        let buf = |b: &[u8]| unsafe { add_buf(md, b.as_ptr().cast::<c_char>(), b.len()) };
        let ll = |n: u64| unsafe { add_ll(md, n as c_longlong) };
        match stored {
            Stored::Plain(lease) => {
                buf(lease.token());
                ll(lease.fence());
            }
            // Every hold with its own deadline (a plain lock's is the key's
            // TTL, which the key's digest covers).
            Stored::Multi(holds) => {
                ll(u64::from(holds.limit));
                for h in holds.iter() {
                    buf(h.token);
                    buf(h.owner);
                    ll(h.fence);
                    ll(u64::from(h.mode == Mode::Shared));
                    ll(h.deadline_ms);
                    // A cap counts where there is one, so values without
                    // caps digest as before.
                    if let Some(cap) = h.cap {
                        ll(cap.at_ms);
                        ll(cap.ms);
                    }
                }
            }
        }
        unsafe { end(md) };
    })
}

/// Runs off the main thread too: with `lazyfree-lazy-user-flush yes`
/// (Valkey 8's default) or `FLUSHALL ASYNC`, the server frees a flushed
/// database's values in a background thread while commands go on (other
/// lazy frees could as well). That is safe because this touches only the
/// block being freed (`value::free`: its own header, then the global
/// allocator, which is the server's thread-safe zmalloc) and an atomic
/// counter (`stats::lock_freed`); no module state, no API call that needs
/// the main thread (`guard` logs a panic without a context, as the server's
/// own background threads log). `dlock_locks` therefore settles after the
/// FLUSHALL reply, not with it.
extern "C" fn free(value: *mut c_void) {
    guard("free", (), || {
        if !value.is_null() {
            unsafe { value::free(value) };
            stats::lock_freed();
        }
    })
}

/// `COPY` duplicates the lease (an admin override, like `RENAME`).
/// `COPY`: the value duplicated under another name (or database). A copy
/// of a multi-hold value gets its hold guard from a job, once the copy is
/// in the keyspace (`hold_guards`): a copy of a persisted key has no
/// expiry to end it either.
extern "C" fn copy(ctx: *mut raw::RedisModuleKeyOptCtx, value: *const c_void) -> *mut c_void {
    guard("copy", std::ptr::null_mut(), || {
        let Some(stored) = (unsafe { stored(value) }) else {
            return std::ptr::null_mut();
        };
        // A second key now holds this fence: a read like any other.
        state::observe_fence(stored.max_fence());
        let block = match stored {
            Stored::Plain(lease) => value::into_raw(lease),
            Stored::Multi(holds) => {
                crate::server::keyspace::hold_guards::watch_copy(ctx);
                value::holds_into_raw(holds.clone())
            }
        };
        if !block.is_null() {
            stats::lock_created();
        }
        block
    })
}
