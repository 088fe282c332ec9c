//! The few pieces of the raw module API every other server file needs: a
//! safe way to reach API functions, the command context, strings and time.
//!
//! Every API function is an `Option` filled in at load time; one that the
//! running server lacks is an error for the caller, never a panic.

use std::ffi::{c_char, c_int, c_long};

use redis_module::raw;

use dlock_core::Error;

/// `rm!(RedisModule_X)` is the API function, or an early `Err` from the
/// enclosing function when the server does not provide it.
macro_rules! rm {
    ($name:ident) => {{
        // Callers are sometimes already inside an unsafe block.
        #[allow(unused_unsafe)]
        let f = unsafe { redis_module::raw::$name };
        match f {
            Some(f) => f,
            None => return Err(dlock_core::Error::Internal(stringify!($name)).into()),
        }
    }};
}
pub(crate) use rm;

/// The context of one command call.
#[derive(Clone, Copy)]
pub struct Ctx(pub *mut raw::RedisModuleCtx);

/// Context flags that change what a command may do.
#[derive(Clone, Copy)]
pub struct Flags(u32);

impl Flags {
    /// The call comes from our master's replication stream.
    pub fn is_replicated(self) -> bool {
        self.0 & raw::REDISMODULE_CTX_FLAGS_REPLICATED != 0
    }
    /// The call is replayed from the AOF (or an RDB is loading).
    pub fn is_loading(self) -> bool {
        self.0 & raw::REDISMODULE_CTX_FLAGS_LOADING != 0
    }
    pub fn is_replica(self) -> bool {
        self.0 & raw::REDISMODULE_CTX_FLAGS_SLAVE != 0
    }
    pub fn is_cluster(self) -> bool {
        self.0 & raw::REDISMODULE_CTX_FLAGS_CLUSTER != 0
    }
    /// A script is running (for a callback: the server is serving events
    /// while a slow script holds the event loop).
    pub fn in_script(self) -> bool {
        self.0 & raw::REDISMODULE_CTX_FLAGS_LUA != 0
    }
    /// Blocking is impossible here: MULTI, Lua, or a client that denies it.
    pub fn in_transaction_or_script(self) -> bool {
        self.0
            & (raw::REDISMODULE_CTX_FLAGS_MULTI
                | raw::REDISMODULE_CTX_FLAGS_LUA
                | raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING)
            != 0
    }
}

impl Ctx {
    pub fn flags(self) -> Result<Flags, Error> {
        let f = rm!(RedisModule_GetContextFlags);
        Ok(Flags(unsafe { f(self.0) } as u32))
    }

    pub fn reply_integer(self, v: i64) -> Result<(), Error> {
        unsafe { rm!(RedisModule_ReplyWithLongLong)(self.0, v) };
        Ok(())
    }

    pub fn reply_null(self) -> Result<(), Error> {
        unsafe { rm!(RedisModule_ReplyWithNull)(self.0) };
        Ok(())
    }

    pub fn reply_ok(self) -> Result<(), Error> {
        unsafe { rm!(RedisModule_ReplyWithSimpleString)(self.0, c"OK".as_ptr()) };
        Ok(())
    }

    pub fn reply_bytes(self, b: &[u8]) -> Result<(), Error> {
        unsafe {
            rm!(RedisModule_ReplyWithStringBuffer)(self.0, b.as_ptr().cast::<c_char>(), b.len())
        };
        Ok(())
    }

    /// A RESP3 map; Redis flattens it into an array for RESP2 clients.
    pub fn reply_map(self, pairs: usize) -> Result<(), Error> {
        unsafe { rm!(RedisModule_ReplyWithMap)(self.0, pairs as c_long) };
        Ok(())
    }

    pub fn reply_array(self, len: usize) -> Result<(), Error> {
        unsafe { rm!(RedisModule_ReplyWithArray)(self.0, len as c_long) };
        Ok(())
    }

    /// Error replies: Redis's own arity error names the command; the rest
    /// carry our `Display` text. The text is already `PREFIX message`.
    pub fn reply_error(self, err: &Error) -> Result<(), Error> {
        if *err == Error::WrongArity {
            unsafe { rm!(RedisModule_WrongArity)(self.0) };
            return Ok(());
        }
        let mut text = err.to_string().into_bytes();
        text.retain(|b| *b != 0 && *b != b'\r' && *b != b'\n');
        text.push(0);
        unsafe { rm!(RedisModule_ReplyWithError)(self.0, text.as_ptr().cast::<c_char>()) };
        Ok(())
    }

    pub fn log_warning(self, msg: &str) {
        log(self.0, c"warning", msg);
    }
}

/// Logs through the server's log; `ctx` may be null (callbacks without one).
pub fn log(ctx: *mut raw::RedisModuleCtx, level: &std::ffi::CStr, msg: &str) {
    let Some(f) = (unsafe { raw::RedisModule_Log }) else {
        return;
    };
    let mut text: Vec<u8> = msg.bytes().filter(|b| *b != 0).collect();
    text.push(0);
    unsafe {
        f(
            ctx,
            level.as_ptr(),
            c"%s".as_ptr(),
            text.as_ptr().cast::<c_char>(),
        )
    };
}

/// Numeric fields of one `INFO` section, read through the module API; a
/// field the server lacks (or a server without the API) is `None`.
pub fn server_info_numbers<const N: usize>(
    section: &std::ffi::CStr,
    fields: [&std::ffi::CStr; N],
) -> [Option<i64>; N] {
    let mut out = [None; N];
    let (Some(get), Some(field), Some(free)) = (
        unsafe { raw::RedisModule_GetServerInfo },
        unsafe { raw::RedisModule_ServerInfoGetFieldSigned },
        unsafe { raw::RedisModule_FreeServerInfo },
    ) else {
        return out;
    };
    let info = unsafe { get(std::ptr::null_mut(), section.as_ptr()) };
    if info.is_null() {
        return out;
    }
    for (slot, name) in out.iter_mut().zip(fields) {
        let mut err: std::ffi::c_int = 0;
        let v = unsafe { field(info, name.as_ptr(), &mut err) };
        *slot = (err == 0).then_some(v);
    }
    unsafe { free(std::ptr::null_mut(), info) };
    out
}

/// The bytes of a module string. Valid while the string lives (for argv:
/// the whole command call).
pub fn bytes<'a>(s: *const raw::RedisModuleString) -> Result<&'a [u8], Error> {
    let mut len = 0usize;
    let ptr = unsafe { rm!(RedisModule_StringPtrLen)(s, &mut len) };
    if ptr.is_null() {
        return Ok(&[]);
    }
    Ok(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) })
}

/// The database and name of the key a loader is decoding (`RESTORE`, a
/// dataset load); `None` when the server does not say.
pub fn key_of_io(rdb: *mut raw::RedisModuleIO) -> Option<(i32, Box<[u8]>)> {
    let name_of = unsafe { raw::RedisModule_GetKeyNameFromIO }?;
    let db_of = unsafe { raw::RedisModule_GetDbIdFromIO }?;
    let name = unsafe { name_of(rdb) };
    if name.is_null() {
        return None;
    }
    let key = bytes(name).ok()?;
    Some((unsafe { db_of(rdb) }, key.into()))
}

/// Wall-clock microseconds: leases are wall-clock based, like Redis TTLs.
pub fn now_us() -> u64 {
    // CLOCK_REALTIME cannot fail with a valid pointer; a zero reading would
    // only make the fence clock fall back to last + 1.
    clock_us(libc::CLOCK_REALTIME)
}

/// Microseconds on `clock` (`clock_gettime`).
fn clock_us(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec.max(0) as u64)
        .saturating_mul(1_000_000)
        .saturating_add((ts.tv_nsec.max(0) as u64) / 1_000)
}

/// Microseconds on the server's monotonic clock, the one its timers run on
/// (`RedisModule_MonotonicMicroseconds`; `CLOCK_MONOTONIC` where the API is
/// missing). For what is promised as a duration from now (a `WAIT` of 5000
/// ms, a job due in 10 ms), which a step of the wall clock must neither
/// shorten nor stretch; the zero is arbitrary, so a reading never leaves
/// the process (nothing persisted or replicated is reckoned on it).
pub fn monotonic_us() -> u64 {
    if let Some(server) = unsafe { raw::RedisModule_MonotonicMicroseconds } {
        return unsafe { server() };
    }
    clock_us(libc::CLOCK_MONOTONIC)
}

/// The time a read inside `MULTI`/`EXEC` or a script judges by: the
/// server's cached time, which it freezes for the whole transaction or
/// script as it does for key expiry (Redis 7.2+, Valkey), so a transaction
/// of `DLOCK.INFO`s reads one instant. Elsewhere, and on servers without
/// the API (7.0), the live clock.
pub fn read_now_us(in_unit: bool) -> u64 {
    match unsafe { raw::RedisModule_CachedMicroseconds } {
        Some(cached) if in_unit => u64::try_from(unsafe { cached() }).unwrap_or(0),
        _ => now_us(),
    }
}

pub const OK: c_int = raw::REDISMODULE_OK as c_int;
pub const ERR: c_int = raw::REDISMODULE_ERR as c_int;
