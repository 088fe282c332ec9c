//! The floor under every dlock command: a module command that does only
//! what any command on a lock must do, through the same raw module API
//! dlock uses (src/server/keyspace/keys.rs), so that `make bench` can show how close
//! dlock's plain-lock commands come to the least a module command costs on
//! this server (benches/dlock/floor.rs, docs/performance.md#the-floor-floor).
//!
//! `FLOOR.CHECK key token`: reads the token argument, opens the key for
//! reading and writing (dlock's plain-lock commands all open it so), checks
//! the key's type and that it is this module's type, reads the stored value
//! and compares its token, closes the key and replies `1` (the same token),
//! `0` (another token, or no key) or `WRONGTYPE`. Nothing else: no clock,
//! no expiry, no replication, no statistics.
//!
//! `FLOOR.SET key token [ms]` stores a value in dlock's plain-lock layout
//! (token length, fence, token bytes in one allocation) with an optional
//! TTL: only to populate the keys `FLOOR.CHECK` reads. The value type saves
//! to RDB and rewrites into the AOF, so a bench server with persistence
//! keeps working.
//!
//! Built only for the bench: not a default workspace member, never
//! installed.

#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::alloc::{alloc, dealloc, Layout};
use std::ffi::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_module::raw;

/// Module memory is counted by the server, as dlock's is.
#[global_allocator]
static ALLOCATOR: redis_module::alloc::RedisAlloc = redis_module::alloc::RedisAlloc;

const OK: c_int = raw::REDISMODULE_OK as c_int;
const ERR: c_int = raw::REDISMODULE_ERR as c_int;

/// Token length (u64), then fence (u64), then the token: dlock's layout.
const HEADER: usize = 16;

/// The value type, set once at load.
static FLOOR_TYPE: AtomicPtr<raw::RedisModuleType> = AtomicPtr::new(std::ptr::null_mut());

/// `f!(RedisModule_X)`: the API function, or `$fail` from the enclosing
/// function when the server lacks it.
macro_rules! f {
    ($name:ident, $fail:expr) => {{
        // Callers are sometimes already inside an unsafe block.
        #[allow(unused_unsafe)]
        let f = unsafe { raw::$name };
        match f {
            Some(f) => f,
            None => return $fail,
        }
    }};
}

/// Module entry point.
///
/// # Safety
/// Called by redis-server with a valid context.
#[no_mangle]
pub unsafe extern "C" fn RedisModule_OnLoad(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let init = unsafe {
        raw::Export_RedisModule_Init(
            ctx,
            c"floor".as_ptr(),
            1,
            raw::REDISMODULE_APIVER_1 as c_int,
        )
    };
    if init == raw::Status::Err as c_int {
        return ERR;
    }
    catch_unwind(AssertUnwindSafe(|| load(ctx))).unwrap_or(ERR)
}

fn load(ctx: *mut raw::RedisModuleCtx) -> c_int {
    // As dlock: only real changes touch other clients' WATCH, so closing a
    // key opened for writing costs no signal.
    let options = raw::REDISMODULE_OPTIONS_HANDLE_IO_ERRORS
        | raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED;
    unsafe { f!(RedisModule_SetModuleOptions, ERR)(ctx, options as c_int) };
    let mut methods = raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(rdb_load),
        rdb_save: Some(rdb_save),
        aof_rewrite: Some(aof_rewrite),
        mem_usage: Some(mem_usage),
        digest: None,
        free: Some(free),
        aux_load: None,
        aux_save: None,
        aux_save_triggers: 0,
        free_effort: None,
        unlink: None,
        copy: None,
        defrag: None,
        mem_usage2: None,
        free_effort2: None,
        unlink2: None,
        copy2: None,
        aux_save2: None,
    };
    // Exactly nine characters, as the server requires.
    let t =
        unsafe { f!(RedisModule_CreateDataType, ERR)(ctx, c"floorlock".as_ptr(), 1, &mut methods) };
    if t.is_null() {
        return ERR;
    }
    FLOOR_TYPE.store(t, Ordering::Relaxed);
    let create = f!(RedisModule_CreateCommand, ERR);
    let commands: [(&std::ffi::CStr, raw::RedisModuleCmdFunc, &std::ffi::CStr); 2] = [
        (c"floor.check", Some(check_entry), c"write fast"),
        (c"floor.set", Some(set_entry), c"write deny-oom"),
    ];
    for (name, entry, flags) in commands {
        if unsafe { create(ctx, name.as_ptr(), entry, flags.as_ptr(), 1, 1, 1) } != OK {
            return ERR;
        }
    }
    OK
}

/// The server's entry points: no panic crosses into the server.
extern "C" fn check_entry(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    catch_unwind(AssertUnwindSafe(|| check(ctx, argv, argc))).unwrap_or_else(|_| failed(ctx))
}

extern "C" fn set_entry(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    catch_unwind(AssertUnwindSafe(|| set(ctx, argv, argc))).unwrap_or_else(|_| failed(ctx))
}

fn failed(ctx: *mut raw::RedisModuleCtx) -> c_int {
    reply_error(ctx, c"ERR floor: command failed")
}

fn reply_error(ctx: *mut raw::RedisModuleCtx, text: &std::ffi::CStr) -> c_int {
    unsafe { f!(RedisModule_ReplyWithError, OK)(ctx, text.as_ptr()) };
    OK
}

fn wrong_arity(ctx: *mut raw::RedisModuleCtx) -> c_int {
    unsafe { f!(RedisModule_WrongArity, OK)(ctx) };
    OK
}

/// The arguments, when there are `min..=max` of them.
fn args<'a>(
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    min: usize,
    max: usize,
) -> Option<&'a [*mut raw::RedisModuleString]> {
    let n = usize::try_from(argc).ok()?;
    if argv.is_null() || n < min || n > max {
        return None;
    }
    Some(unsafe { std::slice::from_raw_parts(argv, n) })
}

/// The bytes of a module string, valid for the command call.
fn bytes<'a>(s: *const raw::RedisModuleString) -> &'a [u8] {
    let mut len = 0usize;
    let ptr = unsafe { f!(RedisModule_StringPtrLen, &[])(s, &mut len) };
    if ptr.is_null() {
        return &[];
    }
    unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) }
}

/// A key opened for reading and writing, closed on drop.
struct Key(*mut raw::RedisModuleKey);

impl Key {
    fn open(ctx: *mut raw::RedisModuleCtx, name: *mut raw::RedisModuleString) -> Option<Key> {
        let mode = (raw::REDISMODULE_READ | raw::REDISMODULE_WRITE) as c_int;
        let key = unsafe { f!(RedisModule_OpenKey, None)(ctx, name, mode) };
        (!key.is_null()).then_some(Key(key))
    }

    /// The stored block: `Ok(None)` for no key, `Err` for another type.
    fn block(&self) -> Result<Option<*mut c_void>, ()> {
        let kind = unsafe { f!(RedisModule_KeyType, Err(()))(self.0) };
        if kind == raw::REDISMODULE_KEYTYPE_EMPTY as c_int {
            return Ok(None);
        }
        let ours = kind == raw::REDISMODULE_KEYTYPE_MODULE as c_int
            && unsafe { f!(RedisModule_ModuleTypeGetType, Err(()))(self.0) }
                == FLOOR_TYPE.load(Ordering::Relaxed);
        if !ours {
            return Err(());
        }
        Ok(Some(unsafe {
            f!(RedisModule_ModuleTypeGetValue, Err(()))(self.0)
        }))
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        if let Some(close) = unsafe { raw::RedisModule_CloseKey } {
            unsafe { close(self.0) };
        }
    }
}

fn reply_integer(ctx: *mut raw::RedisModuleCtx, v: i64) -> c_int {
    unsafe { f!(RedisModule_ReplyWithLongLong, OK)(ctx, v) };
    OK
}

fn check(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    let Some(&[_, name, token]) = args(argv, argc, 3, 3) else {
        return wrong_arity(ctx);
    };
    let token = bytes(token);
    let Some(key) = Key::open(ctx, name) else {
        return reply_integer(ctx, 0);
    };
    match key.block() {
        Ok(Some(block)) => {
            let same = unsafe { stored_token(block) } == token;
            reply_integer(ctx, i64::from(same))
        }
        Ok(None) => reply_integer(ctx, 0),
        Err(()) => reply_error(ctx, WRONGTYPE),
    }
}

const WRONGTYPE: &std::ffi::CStr =
    c"WRONGTYPE Operation against a key holding the wrong kind of value";

fn set(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    let (name, token, ttl) = match args(argv, argc, 3, 4) {
        Some(&[_, name, token]) => (name, token, None),
        Some(&[_, name, token, ttl]) => (name, token, Some(ttl)),
        _ => return wrong_arity(ctx),
    };
    let token = bytes(token);
    let ttl = match ttl.map(|s| std::str::from_utf8(bytes(s)).ok()?.parse::<i64>().ok()) {
        None => None,
        Some(Some(ms)) if ms > 0 => Some(ms),
        Some(_) => return reply_error(ctx, c"ERR floor: the TTL must be a positive integer"),
    };
    let Some(key) = Key::open(ctx, name) else {
        return reply_error(ctx, c"ERR floor: key not writable");
    };
    let block = new_block(token);
    if block.is_null() {
        return reply_error(ctx, c"ERR floor: out of memory");
    }
    let floor_type = FLOOR_TYPE.load(Ordering::Relaxed);
    let stored = match key.block() {
        Ok(None) => unsafe { f!(RedisModule_ModuleTypeSetValue, ERR)(key.0, floor_type, block) },
        Ok(Some(_)) => {
            let mut old: *mut c_void = std::ptr::null_mut();
            let swap = f!(RedisModule_ModuleTypeReplaceValue, ERR);
            let r = unsafe { swap(key.0, floor_type, block, &mut old) };
            if r == OK {
                unsafe { free_block(old) };
            }
            r
        }
        Err(()) => ERR,
    };
    if stored != OK {
        unsafe { free_block(block) };
        return reply_error(ctx, WRONGTYPE);
    }
    if let Some(ms) = ttl {
        unsafe { f!(RedisModule_SetExpire, ERR)(key.0, ms) };
    }
    unsafe { f!(RedisModule_ReplicateVerbatim, ERR)(ctx) };
    unsafe { f!(RedisModule_ReplyWithSimpleString, OK)(ctx, c"OK".as_ptr()) };
    OK
}

fn layout(token_len: usize) -> Option<Layout> {
    Layout::from_size_align(HEADER.checked_add(token_len)?, 8).ok()
}

/// A new block holding `token` (fence 0); null if it cannot be allocated.
fn new_block(token: &[u8]) -> *mut c_void {
    let Some(layout) = layout(token.len()) else {
        return std::ptr::null_mut();
    };
    let block = unsafe { alloc(layout) };
    if block.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: HEADER + len bytes, 8-aligned, freshly allocated.
    unsafe {
        block.cast::<u64>().write(token.len() as u64);
        block.cast::<u64>().add(1).write(0);
        std::ptr::copy_nonoverlapping(token.as_ptr(), block.add(HEADER), token.len());
    }
    block.cast()
}

/// # Safety
/// `block` is null or from `new_block`, alive for `'a`.
unsafe fn stored_token<'a>(block: *const c_void) -> &'a [u8] {
    if block.is_null() {
        return &[];
    }
    let len = unsafe { block.cast::<u64>().read() } as usize;
    unsafe { std::slice::from_raw_parts(block.cast::<u8>().add(HEADER), len) }
}

/// # Safety
/// `block` is null or from `new_block`, not used again.
unsafe fn free_block(block: *mut c_void) {
    if block.is_null() {
        return;
    }
    let len = unsafe { block.cast::<u64>().read() } as usize;
    if let Some(layout) = layout(len) {
        unsafe { dealloc(block.cast(), layout) };
    }
}

extern "C" fn free(value: *mut c_void) {
    let _ = catch_unwind(|| unsafe { free_block(value) });
}

extern "C" fn mem_usage(value: *const c_void) -> usize {
    HEADER + unsafe { stored_token(value) }.len()
}

extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    let token = unsafe { stored_token(value) };
    if let Some(save) = unsafe { raw::RedisModule_SaveStringBuffer } {
        unsafe { save(rdb, token.as_ptr().cast::<c_char>(), token.len()) };
    }
}

extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, _encver: c_int) -> *mut c_void {
    let (Some(load), Some(free), Some(is_error)) = (
        unsafe { raw::RedisModule_LoadStringBuffer },
        unsafe { raw::RedisModule_Free },
        unsafe { raw::RedisModule_IsIOError },
    ) else {
        return std::ptr::null_mut();
    };
    let mut len = 0usize;
    let ptr = unsafe { load(rdb, &mut len) };
    let block = if ptr.is_null() || unsafe { is_error(rdb) } != 0 {
        std::ptr::null_mut()
    } else {
        new_block(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) })
    };
    if !ptr.is_null() {
        unsafe { free(ptr.cast()) };
    }
    block
}

/// The server appends the key's `PEXPIREAT` after the emitted command.
extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    let token = unsafe { stored_token(value) };
    if let Some(emit) = unsafe { raw::RedisModule_EmitAOF } {
        unsafe {
            emit(
                aof,
                c"FLOOR.SET".as_ptr(),
                c"sb".as_ptr(),
                key,
                token.as_ptr().cast::<c_char>(),
                token.len(),
            )
        };
    }
}
