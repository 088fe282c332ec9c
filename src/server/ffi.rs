//! The `extern "C"` edge: every call from the server into Rust passes here,
//! and no panic crosses it (a panic that reaches the server aborts it).

use std::any::Any;
use std::ffi::{c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::raw;

use super::api::{self, bytes, rm, Ctx};
use crate::lock::Error;

/// Arguments past this many are not looked at. A fixed array keeps argument
/// handling free of allocation, and every command's full syntax fits well
/// inside it, so a longer call still fails its parser the way it should
/// (fixed-arity commands: wrong arity; ACQUIRE: an unknown option).
const MAX_ARGS: usize = 16;

/// A command's arguments as raw strings (for keys and replication) and bytes
/// (for parsing).
pub struct Argv<'a> {
    raw: &'a [*mut raw::RedisModuleString],
    bytes: [&'a [u8]; MAX_ARGS],
}

impl<'a> Argv<'a> {
    fn new(argv: *mut *mut raw::RedisModuleString, argc: c_int) -> Result<Self, Error> {
        let argc = usize::try_from(argc).unwrap_or(0);
        if argv.is_null() {
            return Err(Error::WrongArity);
        }
        let all = unsafe { std::slice::from_raw_parts(argv, argc) };
        let raw = all.get(..MAX_ARGS).unwrap_or(all);
        let mut out = Argv {
            raw,
            bytes: [&[]; MAX_ARGS],
        };
        for (slot, s) in out.bytes.iter_mut().zip(raw) {
            *slot = bytes(*s)?;
        }
        Ok(out)
    }

    pub fn bytes(&self) -> &[&'a [u8]] {
        self.bytes.get(..self.raw.len()).unwrap_or(&[])
    }

    /// The resource key (argument 1).
    pub fn key(&self) -> Result<*mut raw::RedisModuleString, Error> {
        self.raw.get(1).copied().ok_or(Error::WrongArity)
    }
}

pub type Handler = fn(Ctx, &Argv) -> Result<(), Error>;

/// Runs a command handler: its error becomes the error reply, a panic is
/// logged and becomes an error reply too.
pub fn run_command(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    handler: Handler,
) -> c_int {
    let c = Ctx(ctx);
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        Argv::new(argv, argc).and_then(|args| handler(c, &args))
    }));
    let err = match outcome {
        Ok(Ok(())) => return api::OK,
        Ok(Err(e)) => e,
        Err(payload) => {
            c.log_warning(&format!(
                "dlock: command panicked: {}",
                panic_text(&*payload)
            ));
            Error::Internal("command failed")
        }
    };
    let _ = catch_unwind(AssertUnwindSafe(|| c.reply_error(&err)));
    api::OK
}

/// Defines the `extern "C"` entry point the server calls for a command.
macro_rules! command_entry {
    ($entry:ident => $handler:path) => {
        extern "C" fn $entry(
            ctx: *mut redis_module::raw::RedisModuleCtx,
            argv: *mut *mut redis_module::raw::RedisModuleString,
            argc: std::ffi::c_int,
        ) -> std::ffi::c_int {
            $crate::server::ffi::run_command(ctx, argv, argc, $handler)
        }
    };
}
pub(crate) use command_entry;

/// Runs a callback that has no reply to give: a panic is logged and
/// `fallback` returned instead.
pub fn guard<R>(what: &str, fallback: R, f: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => {
            api::log(
                std::ptr::null_mut(),
                c"warning",
                &format!("dlock: {what} panicked: {}", panic_text(&*payload)),
            );
            fallback
        }
    }
}

fn panic_text(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "unknown panic"
    }
}

/// Registers a command whose only key is argument 1 (`keyed`), so cluster
/// routing, `COMMAND GETKEYS` and ACL key patterns all see it, or one with
/// no key at all.
pub fn register(
    ctx: Ctx,
    name: &CStr,
    entry: raw::RedisModuleCmdFunc,
    flags: &CStr,
    keyed: bool,
) -> Result<(), Error> {
    let create = rm!(RedisModule_CreateCommand);
    let k = c_int::from(keyed);
    if unsafe { create(ctx.0, name.as_ptr(), entry, flags.as_ptr(), k, k, k) } != api::OK {
        return Err(Error::Internal("command registration failed"));
    }
    Ok(())
}
