//! The slow-lock log (`DLOCK.SLOWLOG`, `dlock_core::stats::slowlog`): holds
//! and waits past their thresholds, with the client that ended the hold or
//! waited. A waiter's client is known only when its reply is sent, so a
//! slow wait is logged when it leaves the queue and named at its reply.

use std::ffi::CStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};

use redis_module::raw;

use crate::server::edge::api::{self, Ctx};
use crate::server::state;
use dlock_core::rules::config::{SLOWLOG_HOLD_MS, SLOWLOG_MAX_LEN, SLOWLOG_WAIT_MS};
use dlock_core::stats::slowlog::{Seen, Slow, SlowLog, Thresholds};

static LOG: LazyLock<Mutex<SlowLog>> =
    LazyLock::new(|| Mutex::new(SlowLog::new(MAX_LEN.load(Ordering::Relaxed))));
static HOLD_MS: AtomicU64 = AtomicU64::new(SLOWLOG_HOLD_MS.default);
static WAIT_MS: AtomicU64 = AtomicU64::new(SLOWLOG_WAIT_MS.default);
static MAX_LEN: AtomicU64 = AtomicU64::new(SLOWLOG_MAX_LEN.default);

/// Slow waits logged whose reply has not been sent yet: (waiter's handle,
/// entry id). Bounded: a waiter that never gets its reply is forgotten by
/// its free, and past this many the oldest go unnamed.
static UNNAMED: Mutex<Vec<(usize, u64)>> = Mutex::new(Vec::new());
const UNNAMED_MAX: usize = 1024;

fn log() -> MutexGuard<'static, SlowLog> {
    LOG.lock().unwrap_or_else(|p| p.into_inner())
}

fn unnamed() -> MutexGuard<'static, Vec<(usize, u64)>> {
    UNNAMED.lock().unwrap_or_else(|p| p.into_inner())
}

pub fn hold_ms() -> u64 {
    HOLD_MS.load(Ordering::Relaxed)
}
pub fn wait_ms() -> u64 {
    WAIT_MS.load(Ordering::Relaxed)
}
pub fn max_len() -> u64 {
    MAX_LEN.load(Ordering::Relaxed)
}
pub fn set_hold_ms(ms: u64) {
    HOLD_MS.store(ms, Ordering::Relaxed);
}
pub fn set_wait_ms(ms: u64) {
    WAIT_MS.store(ms, Ordering::Relaxed);
}
pub fn set_max_len(n: u64) {
    MAX_LEN.store(n, Ordering::Relaxed);
    log().set_max_len(n);
}

/// The log, to read or reset.
pub fn with<R>(f: impl FnOnce(&mut SlowLog) -> R) -> R {
    f(&mut log())
}

/// Whether a hold or wait of `micros` goes to the log: past its threshold,
/// on a master (a replica applies its master's effects).
pub fn logs(slow: Slow, micros: u64) -> bool {
    let t = Thresholds {
        hold_us: hold_ms().saturating_mul(1000),
        wait_us: wait_ms().saturating_mul(1000),
    };
    t.logs(slow, micros) && max_len() > 0 && !state::is_replica()
}

/// Logs `seen` (already judged slow), naming the client `ctx` runs for,
/// if any (a timer's context has none).
pub fn record(ctx: Option<Ctx>, seen: &Seen<'_>) {
    let id = log().push(seen, api::now_us() / 1000);
    if let (Some(id), Some(ctx)) = (id, ctx) {
        name(ctx, id);
    }
}

/// Logs a slow wait of the waiter `handle`, named once its reply is sent.
pub fn record_wait(handle: usize, seen: &Seen<'_>) {
    let Some(id) = log().push(seen, api::now_us() / 1000) else {
        return;
    };
    let mut unnamed = unnamed();
    if unnamed.len() >= UNNAMED_MAX {
        unnamed.remove(0);
    }
    unnamed.push((handle, id));
}

/// The waiter `handle` gets its reply in `ctx`, its client's context.
pub fn answered(ctx: Ctx, handle: usize) {
    let Some(id) = take_unnamed(handle) else {
        return;
    };
    name(ctx, id);
}

/// The waiter `handle` is gone without a reply.
pub fn forget(handle: usize) {
    take_unnamed(handle);
}

/// The entry waiting for `handle`'s client, every other one of that
/// handle dropped (a handle's address may be reused by a later waiter).
fn take_unnamed(handle: usize) -> Option<u64> {
    let mut unnamed = unnamed();
    if unnamed.is_empty() {
        return None;
    }
    let mut id = None;
    unnamed.retain(|(h, i)| {
        if *h == handle {
            id = Some(*i);
            false
        } else {
            true
        }
    });
    id
}

/// Names entry `id` after the client `ctx` runs for.
fn name(ctx: Ctx, id: u64) {
    let Some((addr, name)) = client_of(ctx) else {
        return;
    };
    log().name_client(id, &addr, &name);
}

/// The address (`ip:port`) and name of the client `ctx` runs for.
fn client_of(ctx: Ctx) -> Option<(String, String)> {
    let (Some(id_of), Some(info_of)) = (unsafe { raw::RedisModule_GetClientId }, unsafe {
        raw::RedisModule_GetClientInfoById
    }) else {
        return None;
    };
    let id = unsafe { id_of(ctx.0) };
    if id == 0 {
        return None;
    }
    let mut ci: raw::RedisModuleClientInfo = unsafe { std::mem::zeroed() };
    ci.version = 1;
    if unsafe { info_of((&mut ci as *mut raw::RedisModuleClientInfo).cast(), id) } != api::OK {
        return None;
    }
    let ip = unsafe { CStr::from_ptr(ci.addr.as_ptr()) }.to_string_lossy();
    let addr = if ci.port == 0 {
        ip.into_owned()
    } else {
        format!("{ip}:{}", ci.port)
    };
    let name = match (unsafe { raw::RedisModule_GetClientNameById }, unsafe {
        raw::RedisModule_FreeString
    }) {
        (Some(name_of), Some(free)) => {
            let s = unsafe { name_of(ctx.0, id) };
            if s.is_null() {
                String::new()
            } else {
                let text = api::bytes(s)
                    .map(|b| String::from_utf8_lossy(b).into_owned())
                    .unwrap_or_default();
                unsafe { free(ctx.0, s) };
                text
            }
        }
        _ => String::new(),
    };
    Some((addr, name))
}
