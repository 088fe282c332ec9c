//! What the server knows of a waiting client's connection that no callback
//! tells a module directly: whether it is being disconnected right now (the
//! `CLIENT_CHANGE` event comes just before the disconnect callback), and
//! whether the server has marked it to be closed later in the turn.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use redis_module::raw;

use crate::server::edge::api::{self, rm, Ctx};
use crate::server::edge::ffi::guard;
use dlock_core::Error;

/// The client the server is disconnecting right now (its `CLIENT_CHANGE`
/// event comes just before the disconnect callback).
static CLOSING_CLIENT: AtomicU64 = AtomicU64::new(0);

/// What else a closing connection concerns (the sessions bound to it), set
/// once at load by a layer above this one.
static ON_DISCONNECT: OnceLock<fn(u64)> = OnceLock::new();

/// `f` is told the id of every connection that closes.
pub fn on_disconnect(f: fn(u64)) {
    let _ = ON_DISCONNECT.set(f);
}

/// Subscribes to client changes, to tell a disconnect from an unblock.
pub fn init(ctx: Ctx) -> Result<(), Error> {
    let subscribe = rm!(RedisModule_SubscribeToServerEvent);
    let event = raw::RedisModuleEvent {
        id: raw::REDISMODULE_EVENT_CLIENT_CHANGE,
        dataver: 1,
    };
    if unsafe { subscribe(ctx.0, event, Some(on_client_change)) } != api::OK {
        return Err(Error::Internal("client event subscription failed"));
    }
    Ok(())
}

extern "C" fn on_client_change(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    guard("client event", (), || {
        if subevent != raw::REDISMODULE_SUBEVENT_CLIENT_CHANGE_DISCONNECTED {
            return;
        }
        if let Some(info) = unsafe { data.cast::<raw::RedisModuleClientInfoV1>().as_ref() } {
            CLOSING_CLIENT.store(info.id, Ordering::Relaxed);
            if let Some(f) = ON_DISCONNECT.get() {
                f(info.id);
            }
        }
    })
}

/// Whether the server has already decided to close the reply callback's
/// client (`ACL DELUSER` of its user, an output buffer limit, the end of its
/// connection read after the grant): it marks such a client and frees it
/// later, no callback tells a module, and every reply to it is dropped. Only
/// `CLIENT LIST` shows the mark (flag `A`), so a grant asks it once.
pub fn marked_for_closing(ctx: *mut raw::RedisModuleCtx) -> bool {
    let (Some(id_of), Some(call), Some(text), Some(free)) = (
        unsafe { raw::RedisModule_GetClientId },
        unsafe { raw::RedisModule_Call },
        unsafe { raw::RedisModule_CallReplyStringPtr },
        unsafe { raw::RedisModule_FreeCallReply },
    ) else {
        return false;
    };
    let id = unsafe { id_of(ctx) };
    if id == 0 {
        return false;
    }
    let id = format!("{id}\0");
    let reply = unsafe {
        call(
            ctx,
            c"CLIENT".as_ptr(),
            c"ccc".as_ptr(),
            c"LIST".as_ptr(),
            c"ID".as_ptr(),
            id.as_ptr().cast::<std::ffi::c_char>(),
        )
    };
    if reply.is_null() {
        return false;
    }
    let mut len = 0usize;
    let ptr = unsafe { text(reply, &mut len) };
    let closing = !ptr.is_null() && {
        let line = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) };
        dlock_core::rules::policy::client_list_flags(line).is_some_and(|f| f.contains(&b'A'))
    };
    unsafe { free(reply) };
    closing
}

/// Whether the disconnect callback's client is really disconnecting (its
/// connection closed or was killed), rather than unblocked with an error.
pub fn disconnecting(ctx: *mut raw::RedisModuleCtx) -> bool {
    let Some(id_of) = (unsafe { raw::RedisModule_GetClientId }) else {
        return true;
    };
    let id = unsafe { id_of(ctx) };
    id != 0 && id == CLOSING_CLIENT.load(Ordering::Relaxed)
}

/// Whether the user `ctx` runs for may run `argv` (a command of the
/// server's own), as ACL decides: `true` where the server has no ACL API
/// for modules (before 7.0) or `ctx` has no user (a timer's).
pub fn may_run(ctx: Ctx, argv: &[&[u8]]) -> bool {
    let (Some(user_name), Some(user_of), Some(check), Some(free_user), Some(create), Some(free)) = (
        unsafe { raw::RedisModule_GetCurrentUserName },
        unsafe { raw::RedisModule_GetModuleUserFromUserName },
        unsafe { raw::RedisModule_ACLCheckCommandPermissions },
        unsafe { raw::RedisModule_FreeModuleUser },
        unsafe { raw::RedisModule_CreateString },
        unsafe { raw::RedisModule_FreeString },
    ) else {
        return true;
    };
    let name = unsafe { user_name(ctx.0) };
    if name.is_null() {
        return true;
    }
    let user = unsafe { user_of(name) };
    unsafe { free(ctx.0, name) };
    if user.is_null() {
        return false;
    }
    let mut args: Vec<*mut raw::RedisModuleString> = argv
        .iter()
        .map(|a| unsafe { create(ctx.0, a.as_ptr().cast(), a.len()) })
        .collect();
    let ok = unsafe { check(user, args.as_mut_ptr(), args.len() as std::ffi::c_int) }
        == crate::server::edge::api::OK;
    for a in args {
        unsafe { free(ctx.0, a) };
    }
    unsafe { free_user(user) };
    ok
}
