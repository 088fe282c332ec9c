//! Handing decided answers to the server and every blocked-client callback
//! it calls back: the reply, `CLIENT UNBLOCK`, the disconnect, and the free
//! that tells whether a grant was delivered or must be revoked.

use std::ffi::{c_int, c_void};

use redis_module::raw;

use super::parked::{parking, with_parking, Blocked};
use crate::server::edge::api::{self, rm, Ctx};
use crate::server::edge::ffi::guard;
use crate::server::jobs::{self, Job};
use crate::server::notify::stats;
use crate::server::resource::Resource;
use dlock_core::parking::{Answer, Left, Revoke};
use dlock_core::Error;

/// What the server holds for a handed-over answer until it frees it.
struct Handed {
    handle: Blocked,
    answer: Answer,
    /// Set by the reply callback: the client got the answer.
    delivered: bool,
}

/// Answers were decided: hand them over from a timer (see `blocking.rs`).
pub fn answers_ready() {
    if parking().has_answers() {
        jobs::push(Job::HandOver);
    }
}

/// Gives every decided answer to the server, which replies before it next
/// sleeps. Called only from timers (last, after every job they run): the
/// last phase of the event loop before the server serves unblocked clients.
pub fn hand_over() {
    let answers = with_parking(|p| p.take_answers());
    let Some(unblock) = (unsafe { raw::RedisModule_UnblockClient }) else {
        return;
    };
    for (handle, answer) in answers {
        let data = Box::into_raw(Box::new(Handed {
            handle,
            answer,
            delivered: false,
        }));
        if unsafe { unblock(handle.0, data.cast::<c_void>()) } != api::OK {
            // Not taken: the server will never free it, so we do.
            let handed = unsafe { Box::from_raw(data) };
            freed(&handed);
        }
    }
}

fn freed(handed: &Handed) {
    let revoke = with_parking(|p| p.freed(handed.handle, &handed.answer, handed.delivered));
    revoke_later(revoke);
}

/// The client left on its own; `unblock` it if we still owe that, and
/// revoke a grant it never heard of.
fn left(left: Left<Resource>, handle: Blocked) {
    if left.unblock {
        if let Some(unblock) = unsafe { raw::RedisModule_UnblockClient } {
            unsafe { unblock(handle.0, std::ptr::null_mut()) };
        }
    }
    revoke_later(left.revoke);
}

/// A grant nobody received is revoked by the deferred jobs: the callbacks
/// that learn of it may run inside another command (`CLIENT KILL`,
/// `CLIENT UNBLOCK`), which must not propagate as if it had changed data.
fn revoke_later(grant: Vec<Revoke<Resource>>) {
    if !grant.is_empty() {
        jobs::push(Job::Revoke(grant));
    }
}

pub(super) extern "C" fn on_reply(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    guard("blocked reply", api::OK, || {
        let c = Ctx(ctx);
        let result = (|| {
            let get = rm!(RedisModule_GetBlockedClientPrivateData);
            let Some(handed) = (unsafe { get(ctx).cast::<Handed>().as_mut() }) else {
                return c.reply_error(&Error::Internal("wait ended without an answer"));
            };
            crate::server::notify::slowlog::answered(c, handed.handle.into());
            match &handed.answer {
                // The server drops replies to a client it has decided to
                // close: that grant is not delivered (freed, then revoked).
                Answer::Granted { .. } if crate::server::edge::clients::marked_for_closing(ctx) => {
                    return Ok(())
                }
                Answer::Granted { fence, .. } => c.reply_integer(*fence as i64)?,
                Answer::TimedOut => c.reply_null()?,
                Answer::Failed(e) => c.reply_error(e)?,
            }
            handed.delivered = true;
            Ok(())
        })();
        if let Err(e) = result {
            c.log_warning(&format!("blocked reply failed: {e}"));
        }
        api::OK
    })
}

/// `CLIENT UNBLOCK` (without ERROR), which the server reports as a timeout.
/// (The server's own timeouts are not used.)
pub(super) extern "C" fn on_timeout(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    guard("wait unblocked", api::OK, || {
        let Some(handle_of) = (unsafe { raw::RedisModule_GetBlockedClientHandle }) else {
            return api::OK;
        };
        let handle = Blocked(unsafe { handle_of(ctx) });
        stats::WAIT_TIMEOUTS.add();
        let l = with_parking(|p| p.leave(handle));
        crate::server::notify::slowlog::answered(Ctx(ctx), handle.into());
        let _ = Ctx(ctx).reply_null();
        left(l, handle);
        api::OK
    })
}

/// The connection closed or was killed, or `CLIENT UNBLOCK ... ERROR` (or a
/// demotion) ended the wait with the server's own error reply.
pub(super) extern "C" fn on_disconnected(
    ctx: *mut raw::RedisModuleCtx,
    bc: *mut raw::RedisModuleBlockedClient,
) {
    guard("waiter disconnect", (), || {
        let handle = Blocked(bc);
        let l = with_parking(|p| p.leave(handle));
        crate::server::notify::slowlog::forget(handle.into());
        if l.unblock && !crate::server::edge::clients::disconnecting(ctx) {
            // Unblocked with an error, still connected: the wait ended
            // without a grant, as a timeout does.
            stats::WAIT_TIMEOUTS.add();
        }
        left(l, handle);
    })
}

/// The server is done with a handed-over answer: replied (`delivered`) or
/// not (the client left first).
pub(super) extern "C" fn free_answer(_ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    guard("free answer", (), || {
        if data.is_null() {
            return;
        }
        let handed = unsafe { Box::from_raw(data.cast::<Handed>()) };
        crate::server::notify::slowlog::forget(handed.handle.into());
        freed(&handed);
    })
}
