//! The `extern "C"` edge: every call from the server into Rust passes here,
//! and no panic crosses it (a panic that reaches the server aborts it).

use std::any::Any;
use std::ffi::{c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::raw;

use crate::server::edge::api::{self, bytes, rm, Ctx};
use dlock_core::Error;

/// Arguments up to this many are read into a fixed array, free of
/// allocation; every single-resource command's full syntax fits well inside
/// it. A longer call (a set's resources) is read into a vector.
const INLINE_ARGS: usize = 16;

/// Arguments past this many are not looked at: the longest set command
/// (`MACQUIRE` of 64 resources with every option) fits inside it, so a
/// longer call still fails its parser the way it should (wrong arity, an
/// unknown option, `numkeys` out of range).
const MAX_ARGS: usize = 2 + dlock_core::request::set_args::MAX_SET + 8;

/// A command's arguments as raw strings (for keys and replication) and bytes
/// (for parsing).
pub struct Argv<'a> {
    raw: &'a [*mut raw::RedisModuleString],
    inline: [&'a [u8]; INLINE_ARGS],
    /// Every argument, when there are more than `INLINE_ARGS`.
    long: Vec<&'a [u8]>,
}

impl<'a> Argv<'a> {
    pub fn new(argv: *mut *mut raw::RedisModuleString, argc: c_int) -> Result<Self, Error> {
        Self::up_to(argv, argc, MAX_ARGS)
    }

    /// Every argument, however many: a guard's inner commands are its
    /// caller's (the server bounds a call's size).
    pub fn whole(argv: *mut *mut raw::RedisModuleString, argc: c_int) -> Result<Self, Error> {
        Self::up_to(argv, argc, usize::MAX)
    }

    fn up_to(
        argv: *mut *mut raw::RedisModuleString,
        argc: c_int,
        most: usize,
    ) -> Result<Self, Error> {
        let argc = usize::try_from(argc).unwrap_or(0);
        if argv.is_null() {
            return Err(Error::WrongArity);
        }
        let all = unsafe { std::slice::from_raw_parts(argv, argc) };
        let raw = all.get(..most).unwrap_or(all);
        let mut out = Argv {
            raw,
            inline: [&[]; INLINE_ARGS],
            long: Vec::new(),
        };
        if raw.len() > INLINE_ARGS {
            out.long = raw.iter().map(|s| bytes(*s)).collect::<Result<_, _>>()?;
            return Ok(out);
        }
        for (slot, s) in out.inline.iter_mut().zip(raw) {
            *slot = bytes(*s)?;
        }
        Ok(out)
    }

    pub fn bytes(&self) -> &[&'a [u8]] {
        if !self.long.is_empty() {
            return &self.long;
        }
        self.inline.get(..self.raw.len()).unwrap_or(&[])
    }

    /// Argument `i` as the server's string (a set's resource).
    pub fn raw(&self, i: usize) -> Result<*mut raw::RedisModuleString, Error> {
        self.raw.get(i).copied().ok_or(Error::WrongArity)
    }

    /// Arguments `range` as the server's strings.
    pub fn raw_range(
        &self,
        range: std::ops::Range<usize>,
    ) -> Result<&'a [*mut raw::RedisModuleString], Error> {
        self.raw.get(range).ok_or(Error::WrongArity)
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
    run_with(ctx, || Argv::new(argv, argc), handler)
}

/// `run_command` for a handler that reads every argument.
pub fn run_command_whole(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    handler: Handler,
) -> c_int {
    run_with(ctx, || Argv::whole(argv, argc), handler)
}

fn run_with<'a>(
    ctx: *mut raw::RedisModuleCtx,
    read: impl FnOnce() -> Result<Argv<'a>, Error>,
    handler: Handler,
) -> c_int {
    let c = Ctx(ctx);
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        read().and_then(|args| handler(c, &args))
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

/// Defines the `extern "C"` entry point the server calls for a command;
/// `whole` for a handler that reads every argument (`run_command_whole`).
macro_rules! command_entry {
    ($entry:ident => $handler:path) => {
        $crate::server::edge::ffi::command_entry!(@with run_command, $entry => $handler);
    };
    (whole $entry:ident => $handler:path) => {
        $crate::server::edge::ffi::command_entry!(@with run_command_whole, $entry => $handler);
    };
    (@with $runner:ident, $entry:ident => $handler:path) => {
        extern "C" fn $entry(
            ctx: *mut redis_module::raw::RedisModuleCtx,
            argv: *mut *mut redis_module::raw::RedisModuleString,
            argc: std::ffi::c_int,
        ) -> std::ffi::c_int {
            $crate::server::edge::ffi::$runner(ctx, argv, argc, $handler)
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
/// Registers container `parent` (no handler of its own) and each of its
/// `subcommands` (name, handler, flags); none names a key.
pub fn register_container(
    ctx: Ctx,
    parent: &CStr,
    subcommands: &[(&CStr, raw::RedisModuleCmdFunc, &CStr)],
) -> Result<(), Error> {
    register(ctx, parent, None, c"", false)?;
    let (get, create) = (
        rm!(RedisModule_GetCommand),
        rm!(RedisModule_CreateSubcommand),
    );
    let container = unsafe { get(ctx.0, parent.as_ptr()) };
    if container.is_null() {
        return Err(Error::Internal("container command not found"));
    }
    for (name, entry, flags) in subcommands {
        let status = unsafe { create(container, name.as_ptr(), *entry, flags.as_ptr(), 0, 0, 0) };
        if status != api::OK {
            return Err(Error::Internal("subcommand registration failed"));
        }
    }
    Ok(())
}

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
