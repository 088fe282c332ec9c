//! The lock data type: how a lease is saved to and loaded from RDB (and DUMP
//! payloads), rewritten into the AOF, digested and measured, plus the fence
//! clock's high-water mark as RDB aux data.
//!
//! Loading never trusts its input: a short read or bytes that do not decode
//! fail the load (RESTORE answers an error), and the server keeps running.
//!
//! Longer than 400 lines because every persistence callback of the data
//! type is registered together and shares its checks; split, the loaders
//! and the savers of one format would sit apart.

use std::ffi::{c_char, c_int, c_longlong, c_void};

use redis_module::raw;

use crate::server::edge::api::{self, rm, Ctx};
use crate::server::edge::ffi::guard;
use crate::server::jobs::{self, Job};
use crate::server::keyspace::value::{self, Stored};
use crate::server::persistence::effects::{self, APPLY, META};
use crate::server::{notify::stats, quarantine, state};
use dlock_core::ask::Mode;
use dlock_core::resource::holds::Holds;
use dlock_core::resource::lease::{ENCODING_VERSION, NEWEST_READ_VERSION};
use dlock_core::rules::aux::{self, Aux, QuarantineFacts};
use dlock_core::{resource::layout, Error, Lease};

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

/// # Safety
/// The server only hands us values of our own type, alive for the call.
unsafe fn stored<'a>(value: *const c_void) -> Option<Stored<'a>> {
    value::view(value)
}

/// A decoded value: a plain lease or the holds of any other resource.
enum Loaded {
    Plain(Lease),
    Multi(Holds),
}

extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    guard("rdb_load", std::ptr::null_mut(), || {
        match load_value(rdb, encver) {
            Ok(loaded) => {
                let fence = match &loaded {
                    Loaded::Plain(l) => l.fence(),
                    Loaded::Multi(h) => h.max_fence(),
                };
                // A loaded lock may carry a fence above anything this server
                // issued (a replica's full sync, an RDB from elsewhere). A
                // failed load aborts the whole load, so raising the clock
                // now is safe. RESTORE is different: the server may still
                // refuse the payload after this returns, so its fence is
                // observed once the key exists (`restored`).
                if loading(rdb) {
                    state::observe_fence(fence);
                } else {
                    crate::server::keyspace::restored::note(rdb, fence);
                }
                let block = match loaded {
                    Loaded::Plain(lease) => value::into_raw(lease.as_ref()),
                    Loaded::Multi(holds) => {
                        crate::server::keyspace::hold_guards::watch_loaded(rdb, &holds);
                        value::holds_into_raw(holds)
                    }
                };
                if !block.is_null() {
                    stats::lock_created();
                }
                block
            }
            Err(why) => {
                log_io(rdb, &format!("dlock: refusing lock value: {why}"));
                std::ptr::null_mut()
            }
        }
    })
}

/// Whether the server is loading a dataset (RDB, AOF, full sync), as
/// opposed to running RESTORE.
fn loading(rdb: *mut raw::RedisModuleIO) -> bool {
    let (Some(ctx_of), Some(flags)) = (unsafe { raw::RedisModule_GetContextFromIO }, unsafe {
        raw::RedisModule_GetContextFlags
    }) else {
        return true;
    };
    let ctx = unsafe { ctx_of(rdb) };
    ctx.is_null() || unsafe { flags(ctx) } as u32 & raw::REDISMODULE_CTX_FLAGS_LOADING != 0
}

fn load_value(rdb: *mut raw::RedisModuleIO, encver: c_int) -> Result<Loaded, String> {
    let bytes = load_buffer(rdb).map_err(|e| e.to_string())?;
    if !layout::is_multi(&bytes) {
        return Lease::decode(encver, &bytes)
            .map(Loaded::Plain)
            .map_err(|e| e.to_string());
    }
    if !(1..=NEWEST_READ_VERSION).contains(&encver) {
        return Err(format!("unknown encoding version {encver}"));
    }
    layout::decode(&bytes)
        .map(Loaded::Multi)
        .map_err(|e| e.to_string())
}

/// The longest value the loader copies: a multi-hold value of many permits
/// can be far longer than a plain lock, but not without bound.
const MAX_STORED_VALUE: usize = 1 << 32;

/// One string buffer, copied out and freed; `Err` on a short read.
fn load_buffer(rdb: *mut raw::RedisModuleIO) -> Result<Vec<u8>, Error> {
    let load = rm!(RedisModule_LoadStringBuffer);
    let free = rm!(RedisModule_Free);
    let mut len = 0usize;
    let ptr = unsafe { load(rdb, &mut len) };
    let failed = io_error(rdb)? || ptr.is_null();
    let out = if failed || len > MAX_STORED_VALUE {
        None
    } else {
        Some(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) }.to_vec())
    };
    if !ptr.is_null() {
        unsafe { free(ptr.cast::<c_void>()) };
    }
    out.ok_or(Error::Internal("short or oversized read"))
}

fn io_error(rdb: *mut raw::RedisModuleIO) -> Result<bool, Error> {
    Ok(unsafe { rm!(RedisModule_IsIOError)(rdb) } != 0)
}

extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    guard("rdb_save", (), || {
        let Some(stored) = (unsafe { stored(value) }) else {
            return;
        };
        // DUMP shows the fence to a client: like any read of a lock value,
        // it raises the clock (see `LockKey::stored`).
        state::observe_fence(stored.max_fence());
        let bytes = match stored {
            Stored::Plain(lease) => lease.encode(),
            Stored::Multi(holds) => layout::encode(holds),
        };
        if let Some(save) = unsafe { raw::RedisModule_SaveStringBuffer } {
            unsafe { save(rdb, bytes.as_ptr().cast::<c_char>(), bytes.len()) };
        }
    })
}

/// Emits the effect without a deadline: the server appends the key's own
/// `PEXPIREAT` after it (the callback cannot see the TTL). Each emitted lock
/// also carries the fence high-water mark: an AOF without the RDB preamble
/// has no aux data, so this is the only way the mark reaches the new file.
extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    guard("aof_rewrite", (), || {
        let (Some(stored), Some(emit)) = (unsafe { stored(value) }, unsafe {
            raw::RedisModule_EmitAOF
        }) else {
            return;
        };
        // In the forms `effects::meta_args` describes.
        let (longest, lossy, until) = effects::meta_args();
        unsafe { emit(aof, META.as_ptr(), c"ll".as_ptr(), longest, lossy) };
        if until != 0 {
            unsafe { emit(aof, META.as_ptr(), c"lll".as_ptr(), longest, lossy, until) };
        }
        let lease = match stored {
            Stored::Plain(lease) => lease,
            Stored::Multi(holds) => {
                return crate::server::persistence::hold_effects::rewrite(aof, key, holds)
            }
        };
        let token = lease.token();
        unsafe {
            emit(
                aof,
                APPLY.as_ptr(),
                c"sblll".as_ptr(),
                key,
                token.as_ptr().cast::<c_char>(),
                token.len(),
                lease.fence() as c_longlong,
                0 as c_longlong,
                state::last_fence() as c_longlong,
            )
        };
    })
}

/// A child was just forked (we are the parent). When it rewrites the AOF,
/// the files holding the `DLOCK.META` facts are dropped once it is done,
/// and the new base carries them only next to a lock key (no aux data
/// without the RDB preamble): with no lock alive, not at all. The server
/// opened the incremental file that follows the new base before forking,
/// so the facts go there, from a timer: inside a command (`BGREWRITEAOF`,
/// `CONFIG SET appendonly yes`) a propagation would count as a write and
/// make the server propagate that command too.
pub fn on_fork_child_born() {
    if !aof_rewrite_in_progress() {
        return;
    }
    // A grant before the timer fires carries the facts itself.
    quarantine::mark_meta_dirty();
    jobs::push(Job::WriteMeta);
}

/// While writes are paused (`CLIENT PAUSE WRITE`, a failover) nothing may be
/// propagated; retry until the pause ends.
const PAUSED_RETRY_MS: u64 = 100;

/// Writes the `DLOCK.META` facts, if they changed, from the deferred jobs
/// (`Job::WriteMeta`): into the AOF (the file an AOF rewrite started, or
/// the current one when a quarantine starts or is lifted) and to replicas.
/// A replica's own propagation reaches only its AOF (it proxies its
/// master's stream to its replicas). Without a timer (before the module
/// finished loading) the facts stay dirty and go out with the next effect.
pub fn write_meta(ctx: Ctx) {
    if jobs::writes_paused() {
        jobs::push_after(Job::WriteMeta, PAUSED_RETRY_MS);
        return;
    }
    if let Err(e) = effects::meta_if_changed(ctx) {
        quarantine::mark_meta_dirty();
        ctx.log_warning(&format!("dlock: metadata for the AOF and replicas: {e}"));
    }
}

/// Whether the child just forked is an AOF rewrite (the server records the
/// child's type before it tells modules of the fork).
fn aof_rewrite_in_progress() -> bool {
    let [in_progress] = api::server_info_numbers(c"persistence", [c"aof_rewrite_in_progress"]);
    in_progress == Some(1)
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

/// The fence clock's high-water mark and the restart quarantine's facts
/// (`dlock_core::rules::aux` has the layout of every version).
extern "C" fn aux_save(rdb: *mut raw::RedisModuleIO, _when: c_int) {
    guard("aux_save", (), || {
        let aux = Aux {
            last_fence: state::last_fence(),
            quarantine: Some(QuarantineFacts {
                longest_ttl: quarantine::longest_ttl(),
                lossy: quarantine::this_run_lossy(),
                until: quarantine::persisted_until(),
            }),
        };
        if let Some(save) = unsafe { raw::RedisModule_SaveUnsigned } {
            for word in aux::encode(&aux) {
                unsafe { save(rdb, word) };
            }
        }
    })
}

extern "C" fn aux_load(rdb: *mut raw::RedisModuleIO, encver: c_int, _when: c_int) -> c_int {
    guard("aux_load", api::ERR, || match load_aux(rdb, encver) {
        Ok(()) => api::OK,
        Err(why) => {
            log_io(rdb, &format!("dlock: refusing aux data: {why}"));
            api::ERR
        }
    })
}

fn load_aux(rdb: *mut raw::RedisModuleIO, encver: c_int) -> Result<(), String> {
    let load = unsafe { raw::RedisModule_LoadUnsigned }.ok_or("no LoadUnsigned")?;
    let next = || {
        let v = unsafe { load(rdb) };
        matches!(io_error(rdb), Ok(false)).then_some(v)
    };
    let aux = aux::decode(encver, next).map_err(|e| e.to_string())?;
    state::observe_fence(aux.last_fence);
    if let Some(q) = aux.quarantine {
        quarantine::observe(q.longest_ttl, Some(q.lossy), q.until);
    }
    Ok(())
}

fn log_io(rdb: *mut raw::RedisModuleIO, msg: &str) {
    let Some(log) = (unsafe { raw::RedisModule_LogIOError }) else {
        return;
    };
    let mut text: Vec<u8> = msg.bytes().filter(|b| *b != 0).collect();
    text.push(0);
    unsafe {
        log(
            rdb,
            c"warning".as_ptr(),
            c"%s".as_ptr(),
            text.as_ptr().cast::<c_char>(),
        )
    };
}
