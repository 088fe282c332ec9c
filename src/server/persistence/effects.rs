//! What replicas and the AOF receive. Never the client's command: a command
//! carries a relative TTL, and replaying it later would stretch the lease.
//! An effect carries the absolute deadline and the fence, so any replay ends
//! up with exactly the owner, fence and deadline the master had.
//!
//! - a grant: `DLOCK.APPLY key token fence deadline_ms [last_fence]`
//!   (`last_fence` only when the fence clock is past this fence)
//! - a refresh or an extension, where only the deadline moves:
//!   `PEXPIREAT key deadline_ms`
//! - a release: `DEL key`
//!
//! Numbers go out as text (`b`), which the server turns into one string
//! object each; `RedisModule_Replicate` with `l` would allocate two.

use std::ffi::{c_char, c_longlong, CStr};

use redis_module::raw;

use crate::server::edge::api::{rm, Ctx, OK};
use crate::server::edge::ffi::Argv;
use crate::server::keyspace::keys::LockKey;
use crate::server::{notify::watchers, quarantine, state};
use dlock_core::decimal::Decimal;
use dlock_core::resource::lease::LeaseRef;
use dlock_core::{request::args, Error};

pub const APPLY: &CStr = c"DLOCK.APPLY";
/// `DLOCK.META longest_ttl_ms lossy [quarantine_until_ms]`: what a restart
/// quarantine needs to know about the run that wrote the data, and the end
/// (unix ms) of the quarantine running there, if one runs. Sent before a grant
/// whenever it changed, and from the deferred jobs when an AOF rewrite or a
/// quarantine starts or a quarantine is lifted (`data_type::write_meta`):
/// with two arguments, followed by the three-argument form while a
/// quarantine runs (`meta_args` says why).
pub const META: &CStr = c"DLOCK.META";

/// Propagates a new owner: the lease as it now is, with its deadline.
pub fn granted(
    ctx: Ctx,
    key: *mut raw::RedisModuleString,
    token: &[u8],
    fence: u64,
    deadline_ms: u64,
) -> Result<(), Error> {
    let replicate = rm!(RedisModule_Replicate);
    meta_if_changed(ctx)?;
    let f = Decimal::new(fence);
    let d = Decimal::new(deadline_ms);
    let (f, d) = (f.as_bytes(), d.as_bytes());
    let last = state::last_fence();
    let l = Decimal::new(last);
    let l = l.as_bytes();
    // A fresh grant's fence is the clock's mark: `last_fence` is left out by
    // a format that stops before it (C ignores the unread variadic pair).
    let format = if last == fence { c"sbbb" } else { c"sbbbb" };
    let status = unsafe {
        replicate(
            ctx.0,
            APPLY.as_ptr(),
            format.as_ptr(),
            key,
            token.as_ptr().cast::<c_char>(),
            token.len(),
            f.as_ptr().cast::<c_char>(),
            f.len(),
            d.as_ptr().cast::<c_char>(),
            d.len(),
            l.as_ptr().cast::<c_char>(),
            l.len(),
        )
    };
    checked(status)
}

/// Propagates a lease whose owner and fence stay and whose deadline moved
/// (a refresh or an extension). The core command is the exact effect, and
/// a replica or the AOF applies it natively: a past deadline only sets the
/// expiry there, it never deletes on its own.
pub fn deadline_moved(
    ctx: Ctx,
    key: *mut raw::RedisModuleString,
    deadline_ms: u64,
) -> Result<(), Error> {
    let replicate = rm!(RedisModule_Replicate);
    meta_if_changed(ctx)?;
    let d = Decimal::new(deadline_ms);
    let d = d.as_bytes();
    let status = unsafe {
        replicate(
            ctx.0,
            c"PEXPIREAT".as_ptr(),
            c"sb".as_ptr(),
            key,
            d.as_ptr().cast::<c_char>(),
            d.len(),
        )
    };
    checked(status)
}

/// A new longest TTL (or a quarantine's end) must reach replicas and the AOF
/// before the lease that has it.
pub fn meta_if_changed(ctx: Ctx) -> Result<(), Error> {
    if quarantine::take_meta_dirty() {
        meta_effect(ctx)?;
    }
    Ok(())
}

fn meta_effect(ctx: Ctx) -> Result<(), Error> {
    let replicate = rm!(RedisModule_Replicate);
    let (longest, lossy, until) = meta_args();
    checked(unsafe { replicate(ctx.0, META.as_ptr(), c"ll".as_ptr(), longest, lossy) })?;
    if until == 0 {
        return Ok(());
    }
    let status = unsafe { replicate(ctx.0, META.as_ptr(), c"lll".as_ptr(), longest, lossy, until) };
    checked(status)
}

/// The `DLOCK.META` arguments: longest TTL, lossy, and the end of a
/// running quarantine, 0 when none runs. The effect always goes out in the
/// two-argument form, which releases without the third argument read (an
/// AOF or a replica of such a release keeps the longest TTL and the
/// durability from it); while a quarantine runs, the three-argument form
/// follows, which such a release refuses (and an AOF load skips), losing
/// only the end. Several effects of one command or timer reach the AOF and
/// replicas inside one `MULTI`/`EXEC`, so the pair is never split.
pub fn meta_args() -> (c_longlong, c_longlong, c_longlong) {
    (
        quarantine::longest_ttl() as c_longlong,
        c_longlong::from(quarantine::this_run_lossy()),
        quarantine::persisted_until() as c_longlong,
    )
}

pub fn released(ctx: Ctx, key: *mut raw::RedisModuleString) -> Result<(), Error> {
    let replicate = rm!(RedisModule_Replicate);
    let status = unsafe { replicate(ctx.0, c"DEL".as_ptr(), c"s".as_ptr(), key) };
    checked(status)
}

/// `DLOCK.META longest_ttl_ms lossy [quarantine_until_ms]`, from the AOF or
/// the master.
pub fn meta(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    let flags = ctx.flags()?;
    if !(flags.is_replicated() || flags.is_loading()) {
        return Err(Error::ForgedEffect("DLOCK.META"));
    }
    let m = args::meta(argv.bytes())?;
    // Durability read from our own files describes the run that wrote them;
    // a master's durability says nothing about this node's files. A
    // quarantine's end is kept either way: from our files it is resumed
    // when the startup load is judged; from the master it is not run while
    // this node is a replica (replicas grant nothing), only inherited if it
    // is promoted (`quarantine::on_promotion`).
    quarantine::observe(
        m.longest_ttl,
        flags.is_loading().then_some(m.lossy),
        m.quarantine_until,
    );
    if flags.is_replicated() {
        // Our own AOF gets our own metadata.
        meta_effect(ctx)?;
    }
    ctx.reply_ok()
}

fn checked(status: i32) -> Result<(), Error> {
    if status == OK {
        Ok(())
    } else {
        // The change is already made; a failed propagation is a bug to see.
        Err(Error::Internal("replication of the effect failed"))
    }
}

/// `DLOCK.APPLY key token fence deadline_ms [last_fence]`: applies an effect
/// from the master or the AOF. Refused from clients: a forged effect could
/// hand a lock to anyone or push the fence clock to its ceiling.
pub fn apply(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    let flags = ctx.flags()?;
    if !(flags.is_replicated() || flags.is_loading()) {
        return Err(Error::ForgedEffect("DLOCK.APPLY"));
    }
    let effect = args::apply(argv.bytes())?;
    let mut key = LockKey::open_write(ctx, argv.key()?)?;
    // Replacing a lock keeps the key's TTL when the effect carries none.
    key.put(LeaseRef::new(effect.token, effect.fence))?;
    if effect.deadline_ms > 0 {
        key.set_deadline(effect.deadline_ms)?;
    }
    state::observe_fence(effect.fence.max(effect.last_fence));
    // Module commands are never propagated by the server itself: a replica
    // passes the effect on to its own AOF explicitly.
    unsafe { rm!(RedisModule_ReplicateVerbatim)(ctx.0) };
    key.signal_modified()?;
    watchers::changed_name(ctx, argv.key()?);
    ctx.reply_ok()
}
