//! Module configuration through the Redis 7.0 module config API: settable as
//! `loadmodule` arguments (`restart-quarantine auto max-ttl 60000 ...`), in
//! redis.conf or on the command line (`dlock.max-ttl 60000`), and with
//! `CONFIG SET`/`CONFIG GET dlock.*`.

use std::ffi::{c_char, c_int, c_longlong, c_void, CStr};
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_module::raw;

use super::api::{self, rm, Ctx};
use super::ffi::guard;
use super::{quarantine, state};
use crate::lock::args::MAX_TTL_MS;
use crate::lock::lease::MAX_STORED_TOKEN;
use crate::lock::quarantine::Setting;
use crate::lock::Error;

/// `dlock.restart-quarantine` as the server last accepted it.
static QUARANTINE_TEXT: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(std::ptr::null_mut());

/// Registers every config, with loadmodule arguments as the defaults, then
/// lets the server apply config-file values on top.
pub fn register(ctx: Ctx, argv: &[&[u8]]) -> Result<(), Error> {
    let mut quarantine_default = b"auto".as_slice();
    let mut max_ttl: i64 = 0;
    let mut max_token: i64 = 512;
    let mut pairs = argv.chunks(2);
    for pair in pairs.by_ref() {
        let [name, value] = pair else {
            return Err(Error::BadConfig(
                "module arguments come in name value pairs",
            ));
        };
        let name = name.strip_prefix(b"dlock.").unwrap_or(name);
        match name.to_ascii_lowercase().as_slice() {
            b"restart-quarantine" => quarantine_default = value,
            b"max-ttl" => max_ttl = number(value)?,
            b"max-token-length" => max_token = number(value)?,
            _ => return Err(Error::BadConfig("unknown module argument")),
        }
    }
    Setting::parse(quarantine_default)?;
    let mut default = quarantine_default.to_vec();
    default.push(0);

    let string = rm!(RedisModule_RegisterStringConfig);
    let numeric = rm!(RedisModule_RegisterNumericConfig);
    let flags = raw::REDISMODULE_CONFIG_DEFAULT;
    let ok = unsafe {
        string(
            ctx.0,
            c"restart-quarantine".as_ptr(),
            default.as_ptr().cast::<c_char>(),
            flags,
            Some(get_quarantine),
            Some(set_quarantine),
            None,
            std::ptr::null_mut(),
        ) == api::OK
            && numeric(
                ctx.0,
                c"max-ttl".as_ptr(),
                max_ttl,
                flags,
                0,
                MAX_TTL_MS as c_longlong,
                Some(get_number),
                Some(set_number),
                None,
                c"max-ttl".as_ptr().cast_mut().cast::<c_void>(),
            ) == api::OK
            && numeric(
                ctx.0,
                c"max-token-length".as_ptr(),
                max_token,
                flags,
                1,
                MAX_STORED_TOKEN as c_longlong,
                Some(get_number),
                Some(set_number),
                None,
                c"max-token-length".as_ptr().cast_mut().cast::<c_void>(),
            ) == api::OK
    };
    if !ok {
        return Err(Error::BadConfig("invalid dlock configuration"));
    }
    if unsafe { rm!(RedisModule_LoadConfigs)(ctx.0) } != api::OK {
        return Err(Error::BadConfig("invalid dlock configuration"));
    }
    Ok(())
}

fn number(raw: &[u8]) -> Result<i64, Error> {
    crate::lock::args::parse_u64(raw)
        .and_then(|n| i64::try_from(n).ok())
        .ok_or(Error::BadConfig(
            "dlock numeric arguments are non-negative integers",
        ))
}

fn which(privdata: *mut c_void) -> &'static [u8] {
    if privdata.is_null() {
        return b"";
    }
    unsafe { CStr::from_ptr(privdata.cast::<c_char>()) }.to_bytes()
}

extern "C" fn get_number(_name: *const c_char, privdata: *mut c_void) -> c_longlong {
    guard("config get", 0, || match which(privdata) {
        b"max-ttl" => state::limits().max_ttl as c_longlong,
        b"max-token-length" => state::limits().max_token as c_longlong,
        _ => 0,
    })
}

extern "C" fn set_number(
    _name: *const c_char,
    val: c_longlong,
    privdata: *mut c_void,
    _err: *mut *mut raw::RedisModuleString,
) -> c_int {
    guard("config set", api::ERR, || {
        let v = u64::try_from(val).unwrap_or(0);
        match which(privdata) {
            b"max-ttl" => state::set_max_ttl(v),
            b"max-token-length" => state::set_max_token(usize::try_from(v).unwrap_or(512)),
            _ => return api::ERR,
        }
        api::OK
    })
}

extern "C" fn get_quarantine(
    _name: *const c_char,
    _privdata: *mut c_void,
) -> *mut raw::RedisModuleString {
    QUARANTINE_TEXT.load(Ordering::Relaxed)
}

extern "C" fn set_quarantine(
    _name: *const c_char,
    val: *mut raw::RedisModuleString,
    _privdata: *mut c_void,
    err: *mut *mut raw::RedisModuleString,
) -> c_int {
    guard("config set", api::ERR, || {
        let result = (|| {
            let text = api::bytes(val)?;
            let setting = Setting::parse(text)?;
            let create = rm!(RedisModule_CreateString);
            let kept = unsafe {
                create(
                    std::ptr::null_mut(),
                    text.as_ptr().cast::<c_char>(),
                    text.len(),
                )
            };
            let old = QUARANTINE_TEXT.swap(kept, Ordering::Relaxed);
            if !old.is_null() {
                unsafe { rm!(RedisModule_FreeString)(std::ptr::null_mut(), old) };
            }
            quarantine::set_setting(setting);
            Ok::<(), Error>(())
        })();
        match result {
            Ok(()) => api::OK,
            Err(e) => {
                report(err, &e);
                api::ERR
            }
        }
    })
}

/// Hands the server an error text for `CONFIG SET` (it takes ownership).
fn report(err: *mut *mut raw::RedisModuleString, e: &Error) {
    let Some(create) = (unsafe { raw::RedisModule_CreateString }) else {
        return;
    };
    if err.is_null() {
        return;
    }
    let text = e.to_string();
    let text = text.strip_prefix("ERR ").unwrap_or(&text);
    unsafe {
        *err = create(
            std::ptr::null_mut(),
            text.as_ptr().cast::<c_char>(),
            text.len(),
        )
    };
}
