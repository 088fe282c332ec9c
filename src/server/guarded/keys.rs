//! The keys an inner command names, as the server's command table finds
//! them, and what a guard needs to know of each before it runs anything.

use std::ffi::c_int;

use redis_module::raw;

use crate::server::edge::api::{rm, Ctx};
use crate::server::edge::call::call_with_bytes;
use crate::server::state;
use dlock_core::guard::inner::Size;
use dlock_core::Error;

/// The positions (within `args`, the command's name at 0) and key-spec
/// flags of the keys the command names; none for a command without keys
/// or one the server does not know.
pub fn positions(ctx: Ctx, args: &[*mut raw::RedisModuleString]) -> Vec<(usize, c_int)> {
    let (Some(get), Some(free), Ok(argc)) = (
        unsafe { raw::RedisModule_GetCommandKeysWithFlags },
        unsafe { raw::RedisModule_Free },
        c_int::try_from(args.len()),
    ) else {
        return Vec::new();
    };
    let mut count: c_int = 0;
    let mut flags: *mut c_int = std::ptr::null_mut();
    let found = unsafe {
        get(
            ctx.0,
            args.as_ptr().cast_mut(),
            argc,
            &mut count,
            &mut flags,
        )
    };
    if found.is_null() {
        return Vec::new();
    }
    let count = usize::try_from(count).unwrap_or(0);
    let at = unsafe { std::slice::from_raw_parts(found, count) };
    let fl: &[c_int] = if flags.is_null() {
        &[]
    } else {
        unsafe { std::slice::from_raw_parts(flags, count) }
    };
    let out = at
        .iter()
        .enumerate()
        .filter_map(|(i, p)| {
            let p = usize::try_from(*p).ok().filter(|p| *p < args.len())?;
            Some((p, fl.get(i).copied().unwrap_or(0)))
        })
        .collect();
    unsafe {
        free(found.cast());
        if !flags.is_null() {
            free(flags.cast());
        }
    }
    out
}

/// A key as the guard sees it before anything runs.
pub struct Seen {
    pub exists: bool,
    /// It holds a dlock lock.
    pub is_lock: bool,
    /// A string, whose `length` is its bytes; else `length` counts the
    /// elements of a collection (0 for another module's value).
    pub string: bool,
    pub length: u64,
    /// Unix ms it expires at; 0 for never.
    pub expire_at_ms: i64,
}

impl Seen {
    /// What saving it would copy: a string's length; a collection's or
    /// another module's value's `MEMORY USAGE` (sampled, so O(1) for a
    /// collection), and its elements.
    pub fn size(&self, ctx: Ctx, key: &[u8]) -> Result<Size, Error> {
        if self.string {
            return Ok(Size {
                bytes: self.length,
                elements: 0,
            });
        }
        Ok(Size {
            bytes: memory_usage(ctx, key)?,
            elements: self.length,
        })
    }
}

/// Looks at key `name` without touching its LRU/LFU data.
pub fn look(ctx: Ctx, name: *mut raw::RedisModuleString) -> Result<Seen, Error> {
    let open = rm!(RedisModule_OpenKey);
    let close = rm!(RedisModule_CloseKey);
    let mode = raw::REDISMODULE_READ | raw::REDISMODULE_OPEN_KEY_NOTOUCH;
    let handle = unsafe { open(ctx.0, name, mode as c_int) };
    let mut seen = Seen {
        exists: false,
        is_lock: false,
        string: false,
        length: 0,
        expire_at_ms: 0,
    };
    if handle.is_null() {
        return Ok(seen);
    }
    let kind = unsafe { rm!(RedisModule_KeyType)(handle) };
    if kind != raw::REDISMODULE_KEYTYPE_EMPTY as c_int {
        seen.exists = true;
        let length = unsafe { rm!(RedisModule_ValueLength)(handle) } as u64;
        let module = kind == raw::REDISMODULE_KEYTYPE_MODULE as c_int;
        seen.is_lock =
            module && unsafe { rm!(RedisModule_ModuleTypeGetType)(handle) } == state::lock_type();
        seen.expire_at_ms = unsafe { rm!(RedisModule_GetAbsExpire)(handle) }.max(0);
        seen.string = kind == raw::REDISMODULE_KEYTYPE_STRING as c_int;
        seen.length = length;
    }
    unsafe { close(handle) };
    Ok(seen)
}

/// A collection's or another module's value's bytes, as `MEMORY USAGE`
/// estimates them (unknown: as large as can be).
fn memory_usage(ctx: Ctx, key: &[u8]) -> Result<u64, Error> {
    let Ok(reply) = call_with_bytes(ctx, c"MEMORY", &[c"USAGE"], key)? else {
        return Ok(u64::MAX);
    };
    Ok(reply
        .part()
        .integer()
        .and_then(|n| u64::try_from(n).ok())
        .unwrap_or(u64::MAX))
}
