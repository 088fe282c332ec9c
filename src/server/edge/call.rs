//! Calling the server's own commands (`RedisModule_Call`): a reply that is
//! freed when dropped, and its parts borrowed from it.

use std::ffi::{c_char, c_int, CStr};

use redis_module::raw;

use crate::server::edge::api::{rm, Ctx};
use dlock_core::Error;

/// A reply the server gave to a call; freed on drop.
pub struct Reply(*mut raw::RedisModuleCallReply);

/// Part of a reply (an array's element), alive as long as the reply.
#[derive(Clone, Copy)]
pub struct Part<'a> {
    ptr: *mut raw::RedisModuleCallReply,
    _reply: std::marker::PhantomData<&'a Reply>,
}

/// Why the server ran no command: `errno` as `RedisModule_Call` set it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotRun(pub i32);

/// Calls `name` with `args` (a vector of the server's strings, `fmt` ends
/// in `v`): the reply, or why the server refused to run it.
pub fn call_argv(
    ctx: Ctx,
    name: &CStr,
    fmt: &CStr,
    args: &[*mut raw::RedisModuleString],
) -> Result<Result<Reply, NotRun>, Error> {
    let call = rm!(RedisModule_Call);
    let reply = unsafe {
        call(
            ctx.0,
            name.as_ptr(),
            fmt.as_ptr(),
            args.as_ptr(),
            args.len(),
        )
    };
    Ok(wrap(reply))
}

/// Calls `name` with C strings and one binary argument after them
/// (`fmt` is `c…cb`, at most three `c`).
pub fn call_with_bytes(
    ctx: Ctx,
    name: &CStr,
    words: &[&CStr],
    bytes: &[u8],
) -> Result<Result<Reply, NotRun>, Error> {
    let call = rm!(RedisModule_Call);
    let (b, n) = (bytes.as_ptr().cast::<c_char>(), bytes.len());
    let reply = unsafe {
        match words {
            [] => call(ctx.0, name.as_ptr(), c"b".as_ptr(), b, n),
            [a] => call(ctx.0, name.as_ptr(), c"cb".as_ptr(), a.as_ptr(), b, n),
            [a, c] => call(
                ctx.0,
                name.as_ptr(),
                c"ccb".as_ptr(),
                a.as_ptr(),
                c.as_ptr(),
                b,
                n,
            ),
            _ => return Err(Error::Internal("call with too many words")),
        }
    };
    Ok(wrap(reply))
}

/// `RESTORE key ttl payload REPLACE ABSTTL`, replicated.
pub fn restore(
    ctx: Ctx,
    key: *mut raw::RedisModuleString,
    expire_at_ms: i64,
    payload: &[u8],
) -> Result<Result<Reply, NotRun>, Error> {
    let call = rm!(RedisModule_Call);
    let reply = unsafe {
        call(
            ctx.0,
            c"RESTORE".as_ptr(),
            c"!slbcc".as_ptr(),
            key,
            expire_at_ms as std::ffi::c_longlong,
            payload.as_ptr().cast::<c_char>(),
            payload.len(),
            c"REPLACE".as_ptr(),
            c"ABSTTL".as_ptr(),
        )
    };
    Ok(wrap(reply))
}

/// `DEL key`, replicated.
pub fn delete(ctx: Ctx, key: *mut raw::RedisModuleString) -> Result<Result<Reply, NotRun>, Error> {
    let call = rm!(RedisModule_Call);
    let reply = unsafe { call(ctx.0, c"DEL".as_ptr(), c"!s".as_ptr(), key) };
    Ok(wrap(reply))
}

fn wrap(reply: *mut raw::RedisModuleCallReply) -> Result<Reply, NotRun> {
    if reply.is_null() {
        return Err(NotRun(
            std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
        ));
    }
    Ok(Reply(reply))
}

impl Reply {
    pub fn part(&self) -> Part<'_> {
        Part {
            ptr: self.0,
            _reply: std::marker::PhantomData,
        }
    }

    /// Sends this reply to the calling client as it is.
    pub fn forward(&self, ctx: Ctx) -> Result<(), Error> {
        unsafe { rm!(RedisModule_ReplyWithCallReply)(ctx.0, self.0) };
        Ok(())
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        if let Some(free) = unsafe { raw::RedisModule_FreeCallReply } {
            unsafe { free(self.0) };
        }
    }
}

impl<'a> Part<'a> {
    fn kind(self) -> c_int {
        match unsafe { raw::RedisModule_CallReplyType } {
            Some(f) => unsafe { f(self.ptr) },
            None => raw::REDISMODULE_REPLY_UNKNOWN as c_int,
        }
    }

    pub fn is_error(self) -> bool {
        self.kind() == raw::REDISMODULE_REPLY_ERROR as c_int
    }

    pub fn is_null(self) -> bool {
        self.kind() == raw::REDISMODULE_REPLY_NULL as c_int
    }

    /// A string's (or an error's) bytes; empty for other kinds.
    pub fn bytes(self) -> &'a [u8] {
        let Some(f) = (unsafe { raw::RedisModule_CallReplyStringPtr }) else {
            return &[];
        };
        let mut len = 0usize;
        let ptr = unsafe { f(self.ptr, &mut len) };
        if ptr.is_null() {
            return &[];
        }
        unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) }
    }

    pub fn integer(self) -> Option<i64> {
        (self.kind() == raw::REDISMODULE_REPLY_INTEGER as c_int)
            .then(|| unsafe { raw::RedisModule_CallReplyInteger.map(|f| f(self.ptr)) })
            .flatten()
    }

    /// An array's (or a set's, a map's) elements; 0 for other kinds.
    pub fn len(self) -> usize {
        match unsafe { raw::RedisModule_CallReplyLength } {
            Some(f) => unsafe { f(self.ptr) },
            None => 0,
        }
    }

    pub fn get(self, i: usize) -> Option<Part<'a>> {
        if self.kind() != raw::REDISMODULE_REPLY_ARRAY as c_int || i >= self.len() {
            return None;
        }
        let f = unsafe { raw::RedisModule_CallReplyArrayElement }?;
        let ptr = unsafe { f(self.ptr, i) };
        (!ptr.is_null()).then_some(Part {
            ptr,
            _reply: std::marker::PhantomData,
        })
    }
}
