//! Module configuration through the Redis 7.0 module config API: settable as
//! `loadmodule` arguments (`restart-quarantine auto max-ttl 60000 ...`), in
//! redis.conf or on the command line (`dlock.max-ttl 60000`), and with
//! `CONFIG SET`/`CONFIG GET dlock.*`.

use std::ffi::{c_char, c_int, c_longlong, c_void, CStr};
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_module::raw;

use crate::server::edge::api::{self, rm, Ctx};
use crate::server::edge::ffi::guard;
use crate::server::notify::{figures, watchers};
use crate::server::{quarantine, state};
use dlock_core::rules::config::{
    NumericConfig, LONGEST_TTL, MAX_TOKEN_LENGTH, MAX_TTL, OBSERVE_RATE, PRIORITY_AGING_MS,
};
use dlock_core::rules::quarantine::Setting;
use dlock_core::Error;

/// `dlock.restart-quarantine` as the server last accepted it, in the
/// setting's canonical form.
static QUARANTINE_TEXT: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(std::ptr::null_mut());

/// Registers every config, with loadmodule arguments as the defaults, then
/// lets the server apply config-file values on top.
pub fn register(ctx: Ctx, argv: &[&[u8]]) -> Result<(), Error> {
    let mut quarantine_default = b"auto".as_slice();
    let mut max_ttl = MAX_TTL.default;
    let mut max_token = MAX_TOKEN_LENGTH.default;
    let mut observe_rate = OBSERVE_RATE.default;
    let mut aging = PRIORITY_AGING_MS.default;
    let mut stats_on = true;
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
            // The server does not range-check a registered default.
            b"max-ttl" => max_ttl = MAX_TTL.parse(value)?,
            b"max-token-length" => max_token = MAX_TOKEN_LENGTH.parse(value)?,
            b"observe-rate" => observe_rate = OBSERVE_RATE.parse(value)?,
            b"priority-aging-ms" => aging = PRIORITY_AGING_MS.parse(value)?,
            b"stats" => stats_on = parse_yes_no(value)?,
            // Nothing to lower before the data loads; checked all the same.
            b"longest-ttl" => {
                LONGEST_TTL.parse(value)?;
            }
            _ => return Err(Error::BadConfig("unknown module argument")),
        }
    }
    Setting::parse(quarantine_default)?;
    let mut default = quarantine_default.to_vec();
    default.push(0);

    let string = rm!(RedisModule_RegisterStringConfig);
    let quarantine_ok = unsafe {
        string(
            ctx.0,
            c"restart-quarantine".as_ptr(),
            default.as_ptr().cast::<c_char>(),
            raw::REDISMODULE_CONFIG_DEFAULT,
            Some(get_quarantine),
            Some(set_quarantine),
            None,
            std::ptr::null_mut(),
        )
    } == api::OK;
    if !(quarantine_ok
        && register_numeric(ctx, MAX_TTL, max_ttl)?
        && register_numeric(ctx, MAX_TOKEN_LENGTH, max_token)?
        && register_numeric(ctx, OBSERVE_RATE, observe_rate)?
        && register_numeric(ctx, PRIORITY_AGING_MS, aging)?
        && register_numeric(ctx, LONGEST_TTL, LONGEST_TTL.default)?
        && register_stats(ctx, stats_on))
    {
        return Err(Error::BadConfig("invalid dlock configuration"));
    }
    if unsafe { rm!(RedisModule_LoadConfigs)(ctx.0) } != api::OK {
        return Err(Error::BadConfig("invalid dlock configuration"));
    }
    Ok(())
}

fn parse_yes_no(value: &[u8]) -> Result<bool, Error> {
    match value.to_ascii_lowercase().as_slice() {
        b"yes" => Ok(true),
        b"no" => Ok(false),
        _ => Err(Error::BadConfig("stats must be yes or no")),
    }
}

/// `dlock.stats yes|no`: whether `DLOCK.STATS` counts.
fn register_stats(ctx: Ctx, on: bool) -> bool {
    figures::set_enabled(on);
    let Some(register) = (unsafe { raw::RedisModule_RegisterBoolConfig }) else {
        return false;
    };
    unsafe {
        register(
            ctx.0,
            c"stats".as_ptr(),
            c_int::from(on),
            raw::REDISMODULE_CONFIG_DEFAULT,
            Some(get_stats),
            Some(set_stats),
            None,
            std::ptr::null_mut(),
        ) == api::OK
    }
}

extern "C" fn get_stats(_name: *const c_char, _privdata: *mut c_void) -> c_int {
    c_int::from(figures::enabled())
}

extern "C" fn set_stats(
    _name: *const c_char,
    val: c_int,
    _privdata: *mut c_void,
    _err: *mut *mut raw::RedisModuleString,
) -> c_int {
    figures::set_enabled(val != 0);
    api::OK
}

/// Registers one numeric config with its range; `value` is its default
/// (already checked against the same range).
fn register_numeric(ctx: Ctx, config: NumericConfig, value: u64) -> Result<bool, Error> {
    let numeric = rm!(RedisModule_RegisterNumericConfig);
    let as_ll = |v: u64| c_longlong::try_from(v).unwrap_or(c_longlong::MAX);
    let status = unsafe {
        numeric(
            ctx.0,
            config.name.as_ptr(),
            as_ll(value),
            raw::REDISMODULE_CONFIG_DEFAULT,
            as_ll(config.min),
            as_ll(config.max),
            Some(get_number),
            Some(set_number),
            None,
            config.name.as_ptr().cast_mut().cast::<c_void>(),
        )
    };
    Ok(status == api::OK)
}

fn which(privdata: *mut c_void) -> &'static [u8] {
    if privdata.is_null() {
        return b"";
    }
    unsafe { CStr::from_ptr(privdata.cast::<c_char>()) }.to_bytes()
}

extern "C" fn get_number(_name: *const c_char, privdata: *mut c_void) -> c_longlong {
    guard("config get", 0, || {
        let name = which(privdata);
        if name == MAX_TTL.name.to_bytes() {
            state::limits().max_ttl as c_longlong
        } else if name == MAX_TOKEN_LENGTH.name.to_bytes() {
            state::limits().max_token as c_longlong
        } else if name == OBSERVE_RATE.name.to_bytes() {
            state::observe_rate() as c_longlong
        } else if name == PRIORITY_AGING_MS.name.to_bytes() {
            state::priority_aging_ms() as c_longlong
        } else if name == LONGEST_TTL.name.to_bytes() {
            quarantine::longest_ttl() as c_longlong
        } else {
            0
        }
    })
}

extern "C" fn set_number(
    _name: *const c_char,
    val: c_longlong,
    privdata: *mut c_void,
    err: *mut *mut raw::RedisModuleString,
) -> c_int {
    guard("config set", api::ERR, || {
        let v = u64::try_from(val).unwrap_or(0);
        let name = which(privdata);
        if name == MAX_TTL.name.to_bytes() {
            state::set_max_ttl(v);
        } else if name == MAX_TOKEN_LENGTH.name.to_bytes() {
            state::set_max_token(usize::try_from(v).unwrap_or(512));
        } else if name == OBSERVE_RATE.name.to_bytes() {
            state::set_observe_rate(v);
            watchers::rate_changed();
        } else if name == PRIORITY_AGING_MS.name.to_bytes() {
            state::set_priority_aging_ms(v);
        } else if name == LONGEST_TTL.name.to_bytes() {
            if let Err(e) = quarantine::lower_longest_ttl(v) {
                report(err, &e);
                return api::ERR;
            }
        } else {
            return api::ERR;
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
            let setting = Setting::parse(api::bytes(val)?)?;
            // `CONFIG GET` shows the value in its one written form (`OFF`
            // reads back `off`, `0250` reads back `250`), as the server
            // shows its own enum and numeric configs.
            let text = setting.to_string();
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
