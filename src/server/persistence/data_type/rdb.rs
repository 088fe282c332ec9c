//! A lock value saved to and loaded from RDB (and `DUMP` payloads), and
//! the aux data beside it: the fence clock's high-water mark and the
//! restart quarantine's facts.
//!
//! Loading never trusts its input: a short read or bytes that do not decode
//! fail the load (RESTORE answers an error), and the server keeps running.

use std::ffi::{c_char, c_int, c_void};

use redis_module::raw;

use crate::server::edge::api::{self, rm};
use crate::server::edge::ffi::guard;
use crate::server::keyspace::value::{self, Stored};
use crate::server::sessions::Binding;
use crate::server::{notify::stats, quarantine, sessions, state};
use dlock_core::resource::holds::{Holds, NEVER};
use dlock_core::resource::lease::NEWEST_READ_VERSION;
use dlock_core::rules::aux::{self, Aux, QuarantineFacts};
use dlock_core::sessions::{encoding, Fate};
use dlock_core::{resource::layout, Error, Lease};

/// # Safety
/// The server only hands us values of our own type, alive for the call.
pub(super) unsafe fn stored<'a>(value: *const c_void) -> Option<Stored<'a>> {
    value::view(value)
}

/// A decoded value: a plain lease or the holds of any other resource.
enum Loaded {
    Plain(Lease),
    Multi(Box<Holds>),
}

pub(super) extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
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
                        bind_loaded(rdb, &holds);
                        if let Some(h) = holds.as_plain().filter(|h| h.deadline_ms < NEVER) {
                            // Only a hold whose session is not here turns
                            // a stored multi-hold value into a plain lease.
                            crate::server::keyspace::restored::note_end(
                                rdb,
                                h.token,
                                h.deadline_ms,
                            );
                        }
                        value::holds_into_raw(*holds)
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
    // A hold stays bound to its session where the session exists here (a
    // dataset load: the aux data came first); elsewhere (`RESTORE`,
    // `MIGRATE`) it ends when its session would have when it was saved.
    layout::decode_with(&bytes, |id| {
        sessions::any() && sessions::with(|s| s.get(id).is_some() || s.fate(id, 0) != Fate::Gone)
    })
    .map(|h| Loaded::Multi(Box::new(h)))
    .map_err(|e| e.to_string())
}

/// The bound holds of a loaded value join their sessions' holds.
fn bind_loaded(rdb: *mut raw::RedisModuleIO, holds: &Holds) {
    if holds.bound().next().is_none() {
        return;
    }
    let Some((db, key)) = api::key_of_io(rdb) else {
        return;
    };
    let bound: Vec<Binding> = holds
        .bound()
        .map(|(t, s)| (Box::from(t), Box::from(s)))
        .collect();
    sessions::note_holds(db, &key, &bound, &[]);
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

pub(super) extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    guard("rdb_save", (), || {
        let Some(stored) = (unsafe { stored(value) }) else {
            return;
        };
        // DUMP shows the fence to a client: like any read of a lock value,
        // it raises the clock (see `LockKey::stored`).
        state::observe_fence(stored.max_fence());
        let bytes = match stored {
            Stored::Plain(lease) => lease.encode(),
            Stored::Multi(holds) => layout::encode_with(holds, session_deadline),
        };
        if let Some(save) = unsafe { raw::RedisModule_SaveStringBuffer } {
            unsafe { save(rdb, bytes.as_ptr().cast::<c_char>(), bytes.len()) };
        }
    })
}

/// What a bound hold's deadline is written as: when its session ends (a
/// live one's deadline, an ended one's delay), so that where the session
/// does not exist the hold ends then.
fn session_deadline(id: &[u8]) -> Option<u64> {
    sessions::with(|s| match s.get(id) {
        Some(session) => Some(session.deadline_ms),
        None => match s.fate(id, 0) {
            Fate::DelayedUntil(until) => Some(until),
            _ => Some(0),
        },
    })
}

/// The fence clock's high-water mark, the restart quarantine's facts
/// (`dlock_core::rules::aux` has the layout of every version) and the
/// sessions, if any.
pub(super) extern "C" fn aux_save(rdb: *mut raw::RedisModuleIO, _when: c_int) {
    guard("aux_save", (), || {
        let sessions = sessions::any().then(|| sessions::with(|s| encoding::encode(s)));
        let aux = Aux {
            last_fence: state::last_fence(),
            quarantine: Some(QuarantineFacts {
                longest_ttl: quarantine::longest_ttl(),
                lossy: quarantine::this_run_lossy(),
                until: quarantine::persisted_until(),
            }),
            sessions: sessions.is_some(),
        };
        if let Some(save) = unsafe { raw::RedisModule_SaveUnsigned } {
            for word in aux::encode(&aux) {
                unsafe { save(rdb, word) };
            }
        }
        if let (Some(bytes), Some(save)) = (sessions, unsafe { raw::RedisModule_SaveStringBuffer })
        {
            unsafe { save(rdb, bytes.as_ptr().cast::<c_char>(), bytes.len()) };
        }
    })
}

pub(super) extern "C" fn aux_load(
    rdb: *mut raw::RedisModuleIO,
    encver: c_int,
    _when: c_int,
) -> c_int {
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
    if aux.sessions {
        let bytes = load_buffer(rdb).map_err(|e| e.to_string())?;
        let loaded = encoding::decode(&bytes).map_err(|e| format!("sessions: {e}"))?;
        sessions::with(|s| *s = loaded);
    }
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
