//! Parked clients of `DLOCK.ACQUIRE ... WAIT`: the blocked-client plumbing
//! and the wait queues they sit in.
//!
//! Each waiter is released exactly once, by whichever comes first: a grant
//! or error from us (`unblock`), its timeout or `CLIENT UNBLOCK` (the timeout
//! callback), or its connection closing (the disconnect callback). All three
//! go through the handle index, so a handle that is already gone is never
//! touched again.

use std::collections::HashMap;
use std::ffi::{c_int, c_longlong, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};

use redis_module::raw;

use super::api::{self, rm, Ctx};
use super::ffi::guard;
use crate::lock::queue::{Grantee, WaitQueues, Waiter};
use crate::lock::Error;

/// A lock's identity on this server: database and key name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Resource {
    pub db: i32,
    pub key: Box<[u8]>,
}

/// A blocked client. Only ever used on the server's main thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocked(*mut raw::RedisModuleBlockedClient);

// SAFETY: handles are created, used and released on the main thread only; the
// mutex around them exists for soundness, not for sharing across threads.
unsafe impl Send for Blocked {}

/// How a wait ends, handed to the reply callback.
pub enum Outcome {
    Granted(u64),
    Failed(Error),
}

#[derive(Default)]
struct Waiting {
    queues: WaitQueues<Resource, Blocked>,
    /// blocked-client pointer -> waiter id, for timeouts and disconnects.
    by_handle: HashMap<usize, u64>,
}

static WAITING: LazyLock<Mutex<Waiting>> = LazyLock::new(Default::default);

/// Mirror of the number of waiters, so the common case (nobody waits) costs
/// one atomic load and no hashing.
static TOTAL: AtomicUsize = AtomicUsize::new(0);

/// Never held across a call that could re-enter us (key deletion runs the
/// type's unlink callback, which defers its work instead of locking).
fn waiting() -> MutexGuard<'static, Waiting> {
    WAITING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn sync_total(w: &Waiting) {
    TOTAL.store(w.queues.total(), Ordering::Relaxed);
}

pub fn total_waiters() -> usize {
    TOTAL.load(Ordering::Relaxed)
}

pub fn anyone_waiting() -> bool {
    TOTAL.load(Ordering::Relaxed) > 0
}

pub fn waiters_on(res: &Resource) -> usize {
    if !anyone_waiting() {
        return 0;
    }
    waiting().queues.waiting(res)
}

/// Resources with waiters, optionally only those in one database.
pub fn resources(db: Option<i32>) -> Vec<Resource> {
    if !anyone_waiting() {
        return Vec::new();
    }
    waiting().queues.resources(|r| db.is_none_or(|d| r.db == d))
}

/// Parks the calling client at the tail of `res`'s queue.
pub fn block(
    ctx: Ctx,
    res: Resource,
    token: &[u8],
    ttl_ms: u64,
    timeout_ms: u64,
) -> Result<(), Error> {
    let block = rm!(RedisModule_BlockClient);
    let on_disconnect = rm!(RedisModule_SetDisconnectCallback);
    let timeout = c_longlong::try_from(timeout_ms).map_err(|_| Error::Internal("timeout"))?;
    let bc = unsafe {
        block(
            ctx.0,
            Some(on_reply),
            Some(on_timeout),
            Some(free_outcome),
            timeout,
        )
    };
    if bc.is_null() {
        return Err(Error::Internal("cannot block client"));
    }
    unsafe { on_disconnect(bc, Some(on_disconnected)) };
    let mut w = waiting();
    let id = w.queues.push(res, token, ttl_ms, Blocked(bc));
    w.by_handle.insert(bc as usize, id);
    sync_total(&w);
    Ok(())
}

/// Takes the next grantee of `res` out of the queue (see `WaitQueues`).
pub fn pop_grantee(res: &Resource) -> Option<Grantee<Blocked>> {
    let mut w = waiting();
    let g = w.queues.pop_grantee(res)?;
    for h in &g.handles {
        w.by_handle.remove(&(h.0 as usize));
    }
    sync_total(&w);
    Some(g)
}

/// Takes every waiter of one resource, or of all resources.
pub fn drain(res: Option<&Resource>) -> Vec<Blocked> {
    let mut w = waiting();
    let gone: Vec<Waiter<Blocked>> = match res {
        Some(r) => w.queues.drain(r),
        None => w.queues.drain_all(),
    };
    for g in &gone {
        w.by_handle.remove(&(g.handle.0 as usize));
    }
    sync_total(&w);
    gone.into_iter().map(|g| g.handle).collect()
}

/// Whether a wake-up timer for `res` at `at_ms` still has to be armed.
pub fn needs_timer(res: &Resource, at_ms: u64) -> bool {
    waiting().queues.needs_timer(res, at_ms)
}

pub fn note_deadline(res: &Resource, at_ms: u64) {
    waiting().queues.note_deadline(res, at_ms);
}

pub fn hold_after_eviction(res: &Resource) -> Option<u64> {
    waiting().queues.hold_after_eviction(res)
}

pub fn held_until(res: &Resource) -> Option<u64> {
    if !anyone_waiting() {
        return None;
    }
    waiting().queues.held_until(res)
}

pub fn timer_fired(res: &Resource, at_ms: u64) {
    waiting().queues.timer_fired(res, at_ms);
}

/// Answers a waiter that has already left the queue.
pub fn unblock(handle: Blocked, outcome: Outcome) {
    let Some(unblock) = (unsafe { raw::RedisModule_UnblockClient }) else {
        return;
    };
    let data = Box::into_raw(Box::new(outcome)).cast::<c_void>();
    if unsafe { unblock(handle.0, data) } != api::OK {
        // Not taken: the reply callback will never run, so free it here.
        drop(unsafe { Box::from_raw(data.cast::<Outcome>()) });
    }
}

/// The waiter left on its own (timeout, unblock, disconnect).
fn forget(bc: *mut raw::RedisModuleBlockedClient) {
    let mut w = waiting();
    if let Some(id) = w.by_handle.remove(&(bc as usize)) {
        w.queues.remove(id);
    }
    sync_total(&w);
}

extern "C" fn on_reply(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    guard("blocked reply", api::OK, || {
        let c = Ctx(ctx);
        let result = (|| {
            let get = rm!(RedisModule_GetBlockedClientPrivateData);
            match unsafe { get(ctx).cast::<Outcome>().as_ref() } {
                Some(Outcome::Granted(fence)) => c.reply_integer(*fence as i64),
                Some(Outcome::Failed(e)) => c.reply_error(e),
                None => c.reply_error(&Error::Internal("wait ended without outcome")),
            }
        })();
        if let Err(e) = result {
            c.log_warning(&format!("blocked reply failed: {e}"));
        }
        api::OK
    })
}

/// Timeout, or `CLIENT UNBLOCK` (which the server reports as a timeout).
extern "C" fn on_timeout(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    guard("wait timeout", api::OK, || {
        if let Some(handle) = unsafe { raw::RedisModule_GetBlockedClientHandle } {
            forget(unsafe { handle(ctx) });
        }
        super::stats::WAIT_TIMEOUTS.add();
        let _ = Ctx(ctx).reply_null();
        api::OK
    })
}

extern "C" fn on_disconnected(
    _ctx: *mut raw::RedisModuleCtx,
    bc: *mut raw::RedisModuleBlockedClient,
) {
    guard("waiter disconnect", (), || forget(bc))
}

extern "C" fn free_outcome(_ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    guard("free outcome", (), || {
        if !data.is_null() {
            drop(unsafe { Box::from_raw(data.cast::<Outcome>()) });
        }
    })
}
