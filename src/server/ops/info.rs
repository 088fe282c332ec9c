//! The `INFO dlock` section, and a watch on `maxmemory-policy`: a policy that
//! can evict lock keys makes a held lock vanish silently, so operators are
//! told in INFO and in the log.

use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicBool, Ordering};

use redis_module::raw;

use crate::server::edge::api::{self, rm, Ctx};
use crate::server::edge::ffi::guard;
use crate::server::notify::{figures, stats};
use crate::server::state;
use crate::version;
use dlock_core::{rules::policy, Error};

/// How often the policy is re-read (it can change with `CONFIG SET`).
const POLICY_CHECK_MS: i64 = 1000;

/// Whether the last check found an evicting policy, so the log warns once
/// per change rather than every second.
static WARNED: AtomicBool = AtomicBool::new(false);

pub fn register(ctx: Ctx) -> Result<(), Error> {
    if unsafe { rm!(RedisModule_RegisterInfoFunc)(ctx.0, Some(info)) } != api::OK {
        return Err(Error::Internal("info registration failed"));
    }
    check_policy(ctx.0);
    arm_policy_timer(ctx)
}

fn arm_policy_timer(ctx: Ctx) -> Result<(), Error> {
    let create = rm!(RedisModule_CreateTimer);
    unsafe {
        create(
            ctx.0,
            POLICY_CHECK_MS,
            Some(on_policy_timer),
            std::ptr::null_mut(),
        )
    };
    Ok(())
}

extern "C" fn on_policy_timer(ctx: *mut raw::RedisModuleCtx, _data: *mut c_void) {
    guard("policy timer", (), || {
        check_policy(ctx);
        if let Err(e) = arm_policy_timer(Ctx(ctx)) {
            api::log(ctx, c"warning", &format!("policy watch stopped: {e}"));
        }
    })
}

fn check_policy(ctx: *mut raw::RedisModuleCtx) {
    let Ok(Some(policy)) = maxmemory_policy() else {
        return;
    };
    let risky = policy::evicts_locks(&policy);
    if risky && !WARNED.swap(true, Ordering::Relaxed) {
        api::log(
            ctx,
            c"warning",
            &format!(
                "maxmemory-policy is {policy}: under memory pressure Redis may evict \
                 lock keys, silently freeing held locks. Use noeviction for lock data."
            ),
        );
    } else if !risky {
        WARNED.store(false, Ordering::Relaxed);
    }
}

/// The server's current `maxmemory-policy`, read from its own INFO.
fn maxmemory_policy() -> Result<Option<String>, Error> {
    let get = rm!(RedisModule_GetServerInfo);
    let field = rm!(RedisModule_ServerInfoGetFieldC);
    let free = rm!(RedisModule_FreeServerInfo);
    let data = unsafe { get(std::ptr::null_mut(), c"memory".as_ptr()) };
    if data.is_null() {
        return Ok(None);
    }
    let value = unsafe { field(data, c"maxmemory_policy".as_ptr()) };
    let policy = (!value.is_null()).then(|| {
        unsafe { CStr::from_ptr(value) }
            .to_string_lossy()
            .into_owned()
    });
    unsafe { free(std::ptr::null_mut(), data) };
    Ok(policy)
}

extern "C" fn info(ictx: *mut raw::RedisModuleInfoCtx, _for_crash_report: i32) {
    guard("info", (), || {
        let _ = write_info(ictx);
    })
}

/// Fields appear as `dlock_<name>` (the server prefixes the module name).
fn write_info(ictx: *mut raw::RedisModuleInfoCtx) -> Result<(), Error> {
    let section = rm!(RedisModule_InfoAddSection);
    let add_u = rm!(RedisModule_InfoAddFieldULongLong);
    let add_s = rm!(RedisModule_InfoAddFieldCString);
    let policy = maxmemory_policy()?.unwrap_or_default();
    let mut policy_c: Vec<u8> = policy.bytes().filter(|b| *b != 0).collect();
    policy_c.push(0);
    unsafe {
        section(ictx, c"".as_ptr());
        for (name, value) in [
            (c"version", version::VERSION),
            (c"git_sha", version::GIT_SHA),
        ] {
            let mut v = value.as_bytes().to_vec();
            v.push(0);
            add_s(ictx, name.as_ptr(), v.as_ptr().cast::<c_char>());
        }
        add_u(ictx, c"locks".as_ptr(), stats::locks());
        for (name, counter) in [
            (c"grants", &stats::GRANTS),
            (c"refreshes", &stats::REFRESHES),
            (c"contended", &stats::CONTENDED),
            (c"releases", &stats::RELEASES),
            (c"extends", &stats::EXTENDS),
            (c"expired_locks", &stats::EXPIRED),
            (c"handoffs", &stats::HANDOFFS),
            (c"handovers", &stats::HANDOVERS),
            (c"wait_timeouts", &stats::WAIT_TIMEOUTS),
            (c"revoked_grants", &stats::REVOKED),
            (c"observers_paced", &stats::OBSERVERS_PACED),
        ] {
            add_u(ictx, name.as_ptr(), counter.get());
        }
        add_u(
            ictx,
            c"waiters".as_ptr(),
            crate::server::waiting::blocking::total_waiters() as u64,
        );
        add_u(
            ictx,
            c"observers".as_ptr(),
            crate::server::notify::watchers::count() as u64,
        );
        add_u(
            ictx,
            c"deferred_jobs".as_ptr(),
            crate::server::jobs::queued() as u64,
        );
        let (live, bound, ending) = crate::server::sessions::with(|s| {
            (
                s.len() as u64,
                s.holds_bound() as u64,
                s.holds_ending() as u64,
            )
        });
        add_u(ictx, c"sessions".as_ptr(), live);
        for (name, counter) in [
            (c"sessions_opened", &stats::SESSIONS_OPENED),
            (c"sessions_closed", &stats::SESSIONS_CLOSED),
            (c"sessions_expired", &stats::SESSIONS_EXPIRED),
            (c"sessions_killed", &stats::SESSIONS_KILLED),
            (c"sessions_disconnected", &stats::SESSIONS_DISCONNECTED),
            (c"sessions_lost", &stats::SESSIONS_LOST),
        ] {
            add_u(ictx, name.as_ptr(), counter.get());
        }
        add_u(ictx, c"session_holds".as_ptr(), bound);
        for (name, counter) in [
            (c"guards_run", &stats::GUARDS_RUN),
            (c"guards_not_held", &stats::GUARDS_NOT_HELD),
            (c"guard_batches_undone", &stats::GUARD_BATCHES_UNDONE),
        ] {
            add_u(ictx, name.as_ptr(), counter.get());
        }
        add_u(ictx, c"session_holds_ending".as_ptr(), ending);
        add_u(ictx, c"observe_rate".as_ptr(), state::observe_rate());
        // A summary of DLOCK.STATS (microseconds; since its last reset).
        let (wait, hold) = figures::with(|s| {
            let t = s.total();
            (t.wait.summary(), t.hold.summary())
        });
        add_u(
            ictx,
            c"stats_enabled".as_ptr(),
            u64::from(figures::enabled()),
        );
        for (name, value) in [
            (c"wait_p50_us", wait.p50),
            (c"wait_p99_us", wait.p99),
            (c"wait_max_us", wait.max),
            (c"hold_p50_us", hold.p50),
            (c"hold_p99_us", hold.p99),
            (c"hold_max_us", hold.max),
        ] {
            add_u(ictx, name.as_ptr(), value);
        }
        add_u(ictx, c"last_fence".as_ptr(), state::last_fence());
        add_u(
            ictx,
            c"max_token_length".as_ptr(),
            state::limits().max_token as u64,
        );
        add_s(
            ictx,
            c"maxmemory_policy".as_ptr(),
            policy_c.as_ptr().cast::<c_char>(),
        );
        add_u(
            ictx,
            c"eviction_can_free_locks".as_ptr(),
            u64::from(policy::evicts_locks(&policy)),
        );
        add_u(ictx, c"max_ttl".as_ptr(), state::limits().max_ttl);
        add_u(
            ictx,
            c"evicted_locks".as_ptr(),
            crate::server::keyspace::eviction::evicted_locks(),
        );
        for (name, value) in crate::server::quarantine::info() {
            let mut v = value.into_bytes();
            v.push(0);
            add_s(ictx, name.as_ptr(), v.as_ptr().cast::<c_char>());
        }
    }
    Ok(())
}
