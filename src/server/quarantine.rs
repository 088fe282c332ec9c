//! Restart quarantine in the server: what the last run left behind, the
//! durability of this run, and the window during which new grants wait.
//! The rules themselves are in `dlock_core::rules::quarantine`.

mod master_link;
mod metadata;
mod state_file;

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;

use redis_module::raw;

use crate::server::edge::api::{now_us, rm, Ctx};
use crate::server::edge::ffi::guard;
use crate::server::jobs::{self, Job};
use crate::server::{state, waiting::blocking};
use dlock_core::rules::quarantine::{self, Persisted, PreviousRun, Setting, Verdict};
use dlock_core::Error;
use master_link::LINK_UP;
use metadata::{write_meta_now, CARRIED_UNTIL, LOADED_LOSSY};
use state_file::{previous, write_state, PREVIOUS, STATE_FILE};

pub use master_link::on_master_link;
pub use metadata::{
    longest_ttl, lower_longest_ttl, mark_meta_dirty, note_ttl, observe, refresh_durability,
    take_meta_dirty, this_run_lossy,
};
pub use state_file::on_shutdown;

static SETTING: Mutex<Setting> = Mutex::new(Setting::Auto);
/// Unix ms at which the current quarantine ends; 0 = none; `UNDECIDED`
/// until the data loaded at startup has been judged (see `decide`).
static UNTIL_MS: AtomicU64 = AtomicU64::new(UNDECIDED);
const UNDECIDED: u64 = u64::MAX;
static REASON: AtomicU8 = AtomicU8::new(REASON_NONE);
const REASON_NONE: u8 = 0;
const REASON_RESTART: u8 = 1;
const REASON_PROMOTION: u8 = 2;
/// A quarantine that was running when the data was written (persisted with
/// it), outlasting what this restart or promotion decided.
const REASON_RESUMED: u8 = 3;

static UNBOUNDED: AtomicBool = AtomicBool::new(false);

pub fn setting() -> Setting {
    *SETTING.lock().unwrap_or_else(|p| p.into_inner())
}

/// `CONFIG SET dlock.restart-quarantine off` also lifts a running quarantine:
/// the operator's override. The persisted end goes too (written as 0 into
/// the AOF and to replicas at once), so a lifted quarantine does not come
/// back after a restart.
pub fn set_setting(s: Setting) {
    *SETTING.lock().unwrap_or_else(|p| p.into_inner()) = s;
    if s != Setting::Off {
        return;
    }
    let carried = CARRIED_UNTIL.swap(0, Ordering::Relaxed) != 0;
    // Before the decision `off` needs nothing lifted: the verdict follows it.
    let running = |until: u64| (until != 0 && until != UNDECIDED).then_some(0);
    let lifted = UNTIL_MS
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, running)
        .is_ok();
    if lifted {
        REASON.store(REASON_NONE, Ordering::Relaxed);
        release_waiters();
    }
    if lifted || carried {
        write_meta_now();
    }
}

/// One atomic load when no quarantine runs. The first call decides the
/// restart quarantine if nothing did before (no data file: no loading event).
pub fn ms_left() -> u64 {
    if cfg!(feature = "planted-no-quarantine") {
        return 0;
    }
    let until = match UNTIL_MS.load(Ordering::Relaxed) {
        0 => return 0,
        UNDECIDED => decide_on_first_use(),
        until => until,
    };
    until.saturating_sub(now_us() / 1000)
}

#[cold]
fn decide_on_first_use() -> u64 {
    // During the startup load the data is not all in yet, and no command
    // that grants can run (they get -LOADING); only INFO asks.
    if server_loading() {
        return 0;
    }
    decide(Ctx(jobs::timer_ctx()));
    match UNTIL_MS.load(Ordering::Relaxed) {
        UNDECIDED => 0,
        until => until,
    }
}

fn server_loading() -> bool {
    let Some(flags) = (unsafe { raw::RedisModule_GetContextFlags }) else {
        return false;
    };
    let loading = raw::REDISMODULE_CTX_FLAGS_LOADING | raw::REDISMODULE_CTX_FLAGS_ASYNC_LOADING;
    (unsafe { flags(std::ptr::null_mut()) } as u32) & loading != 0
}

/// The end (unix ms) of the quarantine to persist with the data: the one
/// running here, or the one the data carries (a replica's master's), if
/// still ahead; 0 for none.
pub fn persisted_until() -> u64 {
    let now_ms = now_us() / 1000;
    let running = match UNTIL_MS.load(Ordering::Relaxed) {
        UNDECIDED => 0,
        until => until,
    };
    let until = running.max(CARRIED_UNTIL.load(Ordering::Relaxed));
    if until > now_ms {
        until
    } else {
        0
    }
}

/// At module load: remember how the last run ended and mark this one
/// running. The loaded data is judged once it is all in, before any client
/// command can be granted: see `decide`.
pub fn init(ctx: Ctx) -> Result<(), Error> {
    let prev = PreviousRun::from_state_file(std::fs::read_to_string(STATE_FILE).ok().as_deref());
    PREVIOUS.store(prev as u8, Ordering::Relaxed);
    write_state("running");
    refresh_durability(ctx);
    // Without a data file no loading event fires; decide at the first
    // event-loop turn at the latest (commands of that turn decide earlier).
    let create = rm!(RedisModule_CreateTimer);
    unsafe { create(ctx.0, 0, Some(on_first_tick), std::ptr::null_mut()) };
    Ok(())
}

/// The startup load ended (the server's loading event): the data is all in,
/// and no client command has run yet. A later load (a replica's full sync,
/// `DEBUG RELOAD`) finds the decision made.
pub fn on_loading_ended(ctx: Ctx) {
    decide(ctx);
}

extern "C" fn on_first_tick(ctx: *mut raw::RedisModuleCtx, _data: *mut c_void) {
    guard("restart quarantine", (), || decide(Ctx(ctx)))
}

/// Judges the data loaded at startup, exactly once: at the end of the
/// startup load, at the first check of the quarantine, or at the first
/// event-loop turn, whichever comes first. The server runs a turn's client
/// commands before its timers, so a timer alone would decide too late.
fn decide(ctx: Ctx) {
    if UNTIL_MS
        .compare_exchange(UNDECIDED, 0, Ordering::Relaxed, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    let data = Persisted {
        longest_ttl: longest_ttl(),
        lossy: match LOADED_LOSSY.load(Ordering::Relaxed) {
            1 => Some(false),
            2 => Some(true),
            _ => None,
        },
    };
    let verdict = quarantine::after_restart(setting(), previous(), data, state::limits().max_ttl);
    apply(
        ctx,
        verdict,
        REASON_RESTART,
        "a crash of a run that could lose acknowledged grants",
    );
    resume(ctx);
}

/// The quarantine the data carries outlasts what was just decided: it runs
/// until its end (see `quarantine::resume`). With `off` it is dropped.
fn resume(ctx: Ctx) {
    let now_ms = now_us() / 1000;
    let decided = match UNTIL_MS.load(Ordering::Relaxed) {
        UNDECIDED => 0,
        until => until,
    };
    let carried = CARRIED_UNTIL.load(Ordering::Relaxed);
    let setting = setting();
    if matches!(setting, Setting::Off) && carried != 0 {
        CARRIED_UNTIL.store(0, Ordering::Relaxed);
        write_meta_now();
        return;
    }
    let Some(until) = quarantine::resume(setting, decided, carried, now_ms) else {
        return;
    };
    UNTIL_MS.fetch_max(until, Ordering::Relaxed);
    REASON.store(REASON_RESUMED, Ordering::Relaxed);
    let ms = until - now_ms;
    ctx.log_warning(&format!(
        "restart quarantine: new grants refused for {ms} ms, until the end of the \
         quarantine that was running when the data was written"
    ));
    arm_end(ctx, ms);
    write_meta_now();
}

fn apply(ctx: Ctx, verdict: Verdict, reason: u8, why: &str) {
    match verdict {
        Verdict::None => {}
        Verdict::For(ms) => {
            let until = now_us() / 1000 + ms;
            UNTIL_MS.fetch_max(until, Ordering::Relaxed);
            REASON.store(reason, Ordering::Relaxed);
            ctx.log_warning(&format!(
                "restart quarantine: new grants refused for {ms} ms after {why}"
            ));
            arm_end(ctx, ms);
            write_meta_now();
            crate::server::sessions::lost();
        }
        Verdict::Unbounded => {
            UNBOUNDED.store(true, Ordering::Relaxed);
            crate::server::sessions::lost();
            ctx.log_warning(&format!(
                "restart quarantine cannot be bounded after {why}: no longest TTL was \
                 persisted and dlock.max-ttl is unlimited. Set dlock.max-ttl."
            ));
        }
    }
}

fn arm_end(ctx: Ctx, ms: u64) {
    if ctx.0.is_null() {
        return;
    }
    if let Some(create) = unsafe { raw::RedisModule_CreateTimer } {
        let delay = i64::try_from(ms.saturating_add(1)).unwrap_or(i64::MAX);
        unsafe { create(ctx.0, delay, Some(on_end), std::ptr::null_mut()) };
    }
}

extern "C" fn on_end(ctx: *mut raw::RedisModuleCtx, _data: *mut c_void) {
    guard("quarantine end", (), || match ms_left() {
        0 => {
            if UNTIL_MS.swap(0, Ordering::Relaxed) != 0 {
                REASON.store(REASON_NONE, Ordering::Relaxed);
                Ctx(ctx).log_warning("restart quarantine over: grants resume");
            }
            release_waiters();
        }
        left => arm_end(Ctx(ctx), left),
    })
}

/// Waiters queued during the quarantine are granted in order now.
fn release_waiters() {
    blocking::resources(None)
        .into_iter()
        .for_each(|res| jobs::push(Job::Settle(res)));
}

/// This replica became a master: an unplanned promotion (the link to the old
/// master was down) may have missed the old master's last grants.
pub fn on_promotion(ctx: Ctx) {
    decide(ctx);
    let verdict = quarantine::after_promotion(
        setting(),
        LINK_UP.load(Ordering::Relaxed),
        longest_ttl(),
        state::limits().max_ttl,
    );
    LINK_UP.store(false, Ordering::Relaxed);
    apply(
        ctx,
        verdict,
        REASON_PROMOTION,
        "an unplanned promotion to master",
    );
    // Even a coordinated promotion inherits the old master's running
    // quarantine: the grants it protects against are still out there.
    resume(ctx);
}

/// INFO fields, in order.
pub fn info() -> [(&'static std::ffi::CStr, String); 7] {
    let reason = match REASON.load(Ordering::Relaxed) {
        REASON_RESTART => "restart",
        REASON_PROMOTION => "promotion",
        REASON_RESUMED => "resumed",
        _ => "none",
    };
    let prev = match previous() {
        PreviousRun::None => "none",
        PreviousRun::Clean => "clean",
        PreviousRun::Crashed => "crashed",
        PreviousRun::Unsaved => "unsaved",
    };
    [
        (c"restart_quarantine", setting().to_string()),
        (c"quarantine_ms_left", ms_left().to_string()),
        (
            c"quarantine_reason",
            if ms_left() > 0 { reason } else { "none" }.to_string(),
        ),
        (
            c"quarantine_unbounded",
            u8::from(UNBOUNDED.load(Ordering::Relaxed)).to_string(),
        ),
        (c"previous_run", prev.to_string()),
        (c"longest_ttl", longest_ttl().to_string()),
        (
            c"persistence_lossless",
            u8::from(!this_run_lossy()).to_string(),
        ),
    ]
}
