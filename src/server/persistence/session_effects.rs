//! What replicas and the AOF receive of sessions, with absolute times, and
//! how a replica (or the AOF loader) applies it:
//!
//! - `DLOCK.SESSIONSET id deadline_ms ttl_ms lock_delay_ms`: a session
//!   opened or kept alive, as it now is;
//! - `DLOCK.SESSIONEND id until_ms`: a session ended, its holds kept from
//!   everyone until `until_ms` (its end, plus a lock-delay); the master's
//!   releases of those holds follow as their own effects;
//! - `DLOCK.SESSIONEND id DONE`: every hold of that ended session was
//!   settled, so the replica forgets it.
//!
//! Whether a session is bound to a connection stays on the master.

use std::ffi::{c_char, CStr};
use std::sync::atomic::{AtomicBool, Ordering};

use redis_module::raw;

use crate::server::edge::api::{rm, Ctx, OK};
use crate::server::edge::ffi::Argv;
use crate::server::sessions;
use dlock_core::decimal::Decimal;
use dlock_core::request::args::parse_u64;
use dlock_core::sessions::Settings;
use dlock_core::Error;

pub const SESSIONSET: &CStr = c"DLOCK.SESSIONSET";
pub const SESSIONEND: &CStr = c"DLOCK.SESSIONEND";

pub fn set(ctx: Ctx, id: &[u8], deadline_ms: u64, settings: Settings) -> Result<(), Error> {
    let d = Decimal::new(deadline_ms);
    let t = Decimal::new(settings.ttl_ms);
    let l = Decimal::new(settings.lock_delay_ms);
    let status = unsafe {
        rm!(RedisModule_Replicate)(
            ctx.0,
            SESSIONSET.as_ptr(),
            c"bbbb".as_ptr(),
            id.as_ptr().cast::<c_char>(),
            id.len(),
            d.as_bytes().as_ptr().cast::<c_char>(),
            d.as_bytes().len(),
            t.as_bytes().as_ptr().cast::<c_char>(),
            t.as_bytes().len(),
            l.as_bytes().as_ptr().cast::<c_char>(),
            l.as_bytes().len(),
        )
    };
    replicated(status)
}

/// The session ended, its holds kept until `until_ms`; `None`: every hold
/// settled (`DONE`).
pub fn ended(ctx: Ctx, id: &[u8], until_ms: Option<u64>) -> Result<(), Error> {
    let until = until_ms.map(Decimal::new);
    let arg: &[u8] = match &until {
        Some(d) => d.as_bytes(),
        None => b"DONE",
    };
    let status = unsafe {
        rm!(RedisModule_Replicate)(
            ctx.0,
            SESSIONEND.as_ptr(),
            c"bb".as_ptr(),
            id.as_ptr().cast::<c_char>(),
            id.len(),
            arg.as_ptr().cast::<c_char>(),
            arg.len(),
        )
    };
    replicated(status)
}

fn replicated(status: i32) -> Result<(), Error> {
    if status != OK {
        return Err(Error::Internal("cannot replicate a session effect"));
    }
    Ok(())
}

fn refuse_forged(ctx: Ctx, command: &'static str) -> Result<(), Error> {
    let flags = ctx.flags()?;
    if !(flags.is_replicated() || flags.is_loading()) {
        return Err(Error::ForgedEffect(command));
    }
    Ok(())
}

fn number(raw: &[u8], what: &'static str) -> Result<u64, Error> {
    parse_u64(raw).ok_or(Error::BadEffect(what))
}

/// `DLOCK.SESSIONSET`, applied.
pub fn apply_set(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    refuse_forged(ctx, "DLOCK.SESSIONSET")?;
    let [_, id, deadline, ttl, delay] = argv.bytes() else {
        return Err(Error::WrongArity);
    };
    let settings = Settings {
        ttl_ms: number(ttl, "ttl_ms")?,
        lock_delay_ms: number(delay, "lock_delay_ms")?,
    };
    let deadline = number(deadline, "deadline_ms")?;
    sessions::with(|s| s.put(id, settings, deadline)).map_err(|_| Error::BadEffect("session"))?;
    unsafe { rm!(RedisModule_ReplicateVerbatim)(ctx.0) };
    ctx.reply_ok()
}

/// `DLOCK.SESSIONEND`, applied. Bound waiters there are none: a replica
/// answers every waiter when it becomes one.
pub fn apply_end(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    refuse_forged(ctx, "DLOCK.SESSIONEND")?;
    let [_, id, until] = argv.bytes() else {
        return Err(Error::WrongArity);
    };
    if until.eq_ignore_ascii_case(b"DONE") {
        sessions::with(|s| s.forget(id));
    } else {
        let until = number(until, "until_ms")?;
        sessions::with(|s| s.end_until(id, until));
        sessions::take_waits(id);
    }
    unsafe { rm!(RedisModule_ReplicateVerbatim)(ctx.0) };
    ctx.reply_ok()
}

/// Whether this AOF rewrite wrote the sessions yet. A rewrite runs in a
/// forked child, which starts with the server's `false` (the server itself
/// never rewrites), so each rewrite writes them once.
static WRITTEN: AtomicBool = AtomicBool::new(false);

/// What an AOF rewrite writes of the sessions, once, before the first lock
/// it writes: each live session as it is now, so the bound holds that
/// follow find theirs. A rewrite with no lock at all writes none (and a
/// session without holds is then lost, like the fence clock's mark:
/// docs/sessions.md#persistence).
pub fn rewrite_once(aof: *mut raw::RedisModuleIO) {
    if WRITTEN.swap(true, Ordering::Relaxed) || !sessions::any() {
        return;
    }
    let Some(emit) = (unsafe { raw::RedisModule_EmitAOF }) else {
        return;
    };
    let live: Vec<(Box<[u8]>, u64, Settings)> = sessions::with(|s| {
        s.live_sessions()
            .map(|(id, s)| (Box::from(&**id), s.deadline_ms, s.settings))
            .collect()
    });
    for (id, deadline, settings) in live {
        let d = Decimal::new(deadline);
        let t = Decimal::new(settings.ttl_ms);
        let l = Decimal::new(settings.lock_delay_ms);
        unsafe {
            emit(
                aof,
                SESSIONSET.as_ptr(),
                c"bbbb".as_ptr(),
                id.as_ptr().cast::<c_char>(),
                id.len(),
                d.as_bytes().as_ptr().cast::<c_char>(),
                d.as_bytes().len(),
                t.as_bytes().as_ptr().cast::<c_char>(),
                t.as_bytes().len(),
                l.as_bytes().as_ptr().cast::<c_char>(),
                l.as_bytes().len(),
            )
        };
    }
}
