//! Restart quarantine in the server: what the last run left behind, the
//! durability of this run, and the window during which new grants wait.
//! The rules themselves are in `dlock_core::rules::quarantine`.
//!
//! How the previous run ended is kept in a small state file in the data
//! directory (Redis runs with its working directory there): "running" is
//! written at load, "clean" by the `Shutdown` event. On Redis 7.0 that event
//! fires after the final RDB save and AOF flush, so a marker inside the data
//! could not record a clean end; a crash leaves "running" behind.
//!
//! Longer than 400 lines because the quarantine's state, its state file
//! and its timers change together; split, a restart could read one half
//! updated and the other not.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;

use redis_module::raw;

use crate::server::edge::api::{self, now_us, rm, Ctx};
use crate::server::edge::ffi::guard;
use crate::server::jobs::{self, Job};
use crate::server::{state, waiting::blocking};
use dlock_core::rules::quarantine::{self, Persisted, PreviousRun, Setting, Verdict};
use dlock_core::Error;

const STATE_FILE: &str = "dlock.state";

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
/// The end (unix ms, 0 = none) of the quarantine the data carries: read from
/// this node's RDB aux data or AOF (`DLOCK.META`) while loading, or the
/// master's running quarantine as its last `DLOCK.META` said. The latest
/// value wins (a lifted quarantine is written as 0). A replica never runs a
/// quarantine from it: it is applied when the startup load is judged and
/// at a promotion (`resume`).
static CARRIED_UNTIL: AtomicU64 = AtomicU64::new(0);
static UNBOUNDED: AtomicBool = AtomicBool::new(false);
static PREVIOUS: AtomicU8 = AtomicU8::new(0);
/// Longest TTL granted here or seen in loaded data and effects.
static LONGEST_TTL: AtomicU64 = AtomicU64::new(0);
/// What loaded data says of the run that wrote it: 0 unknown, 1 lossless, 2 lossy.
static LOADED_LOSSY: AtomicU8 = AtomicU8::new(0);
static THIS_RUN_LOSSY: AtomicBool = AtomicBool::new(true);
/// This run's durability and longest TTL still have to reach the AOF and
/// replicas (set at load, on config changes and when the longest TTL grows).
static META_DIRTY: AtomicBool = AtomicBool::new(true);
static LINK_UP: AtomicBool = AtomicBool::new(false);
static LINK_GENERATION: AtomicU64 = AtomicU64::new(0);

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

/// Records a granted TTL; a new longest one must reach replicas and the AOF.
pub fn note_ttl(ttl_ms: u64) {
    if LONGEST_TTL.fetch_max(ttl_ms, Ordering::Relaxed) < ttl_ms {
        META_DIRTY.store(true, Ordering::Relaxed);
    }
}

pub fn longest_ttl() -> u64 {
    LONGEST_TTL.load(Ordering::Relaxed)
}

/// `CONFIG SET dlock.longest-ttl`: lowers the longest TTL to `asked`, but
/// never below what this node's live locks still have (the rule and why it
/// is safe: `quarantine::lowered_longest_ttl`). A replica refuses: its
/// longest TTL stands for its master's grants, which it may not have
/// received yet. While the module loads (a config-file value) there is
/// nothing to lower: the data brings its own. The lower value reaches an
/// RDB at its next save and the AOF at its next rewrite; a running
/// quarantine keeps its end.
pub fn lower_longest_ttl(asked: u64) -> Result<(), Error> {
    let ctx = jobs::timer_ctx();
    if ctx.is_null() || state::lock_type().is_null() {
        return Ok(());
    }
    if state::is_replica() {
        return Err(Error::BadConfig(
            "the longest TTL is lowered on a master: a replica's stands for its master's grants",
        ));
    }
    let live = crate::server::keyspace::live_ttl::longest_left_ms(ctx);
    let to = quarantine::lowered_longest_ttl(longest_ttl(), asked, live);
    if LONGEST_TTL.swap(to, Ordering::Relaxed) != to {
        write_meta_now();
    }
    Ok(())
}

pub fn this_run_lossy() -> bool {
    THIS_RUN_LOSSY.load(Ordering::Relaxed)
}

/// The metadata must go out again (with the next effect, or sooner).
pub fn mark_meta_dirty() {
    META_DIRTY.store(true, Ordering::Relaxed);
}

pub fn take_meta_dirty() -> bool {
    META_DIRTY.swap(false, Ordering::Relaxed)
}

/// Metadata loaded from RDB aux data or the AOF (`lossy` only from disk:
/// a master's durability says nothing about this node's files), or sent by
/// the master. `quarantine_until` is the writer's running quarantine's end
/// (0 = none).
pub fn observe(longest_ttl: u64, lossy: Option<bool>, quarantine_until: u64) {
    LONGEST_TTL.fetch_max(longest_ttl, Ordering::Relaxed);
    if let Some(l) = lossy {
        LOADED_LOSSY.store(if l { 2 } else { 1 }, Ordering::Relaxed);
    }
    CARRIED_UNTIL.store(quarantine_until, Ordering::Relaxed);
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

/// A quarantine just started (or was lifted): its end must be in the AOF
/// and at the replicas before anything else is, and without waiting for a
/// grant (none comes during a quarantine). Written from the deferred jobs,
/// like the metadata of an AOF rewrite: the events that start a quarantine run
/// inside commands (`REPLICAOF NO ONE`, `CONFIG SET`) where a propagation
/// would make the server propagate the command too. Until the job runs
/// no grant can happen (the quarantine is in force in memory), and a
/// refresh or extension of a surviving lock sends the dirty metadata first.
fn write_meta_now() {
    META_DIRTY.store(true, Ordering::Relaxed);
    jobs::push(Job::WriteMeta);
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

fn previous() -> PreviousRun {
    match PREVIOUS.load(Ordering::Relaxed) {
        x if x == PreviousRun::Clean as u8 => PreviousRun::Clean,
        x if x == PreviousRun::Crashed as u8 => PreviousRun::Crashed,
        x if x == PreviousRun::Unsaved as u8 => PreviousRun::Unsaved,
        _ => PreviousRun::None,
    }
}

fn write_state(what: &str) {
    if let Err(e) = std::fs::write(STATE_FILE, what) {
        api::log(
            std::ptr::null_mut(),
            c"warning",
            &format!("dlock: cannot write {STATE_FILE} in the data directory: {e}"),
        );
    }
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
        }
        Verdict::Unbounded => {
            UNBOUNDED.store(true, Ordering::Relaxed);
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

/// Reads this run's durability from the server's own configuration.
pub fn refresh_durability(ctx: Ctx) {
    let (Some(aof), Some(fsync), Some(no_fsync)) = (
        config_get(ctx, c"appendonly"),
        config_get(ctx, c"appendfsync"),
        config_get(ctx, c"no-appendfsync-on-rewrite"),
    ) else {
        return;
    };
    let lossy = !quarantine::lossless(aof == "yes", &fsync, no_fsync == "yes");
    if THIS_RUN_LOSSY.swap(lossy, Ordering::Relaxed) != lossy {
        META_DIRTY.store(true, Ordering::Relaxed);
    }
}

fn config_get(ctx: Ctx, name: &std::ffi::CStr) -> Option<String> {
    let (call, elem, text, free) = unsafe {
        (
            raw::RedisModule_Call?,
            raw::RedisModule_CallReplyArrayElement?,
            raw::RedisModule_CallReplyStringPtr?,
            raw::RedisModule_FreeCallReply?,
        )
    };
    let reply = unsafe {
        call(
            ctx.0,
            c"CONFIG".as_ptr(),
            c"cc".as_ptr(),
            c"GET".as_ptr(),
            name.as_ptr(),
        )
    };
    if reply.is_null() {
        return None;
    }
    let value = unsafe { elem(reply, 1) };
    let out = (!value.is_null()).then(|| {
        let mut len = 0usize;
        let ptr = unsafe { text(value, &mut len) };
        if ptr.is_null() {
            return String::new();
        }
        String::from_utf8_lossy(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) })
            .into_owned()
    });
    unsafe { free(reply) };
    out
}

/// The server is shutting down (after its last save and AOF fsync). Only a
/// shutdown that persisted every write is clean: with nothing saved (no AOF,
/// and changes since the last RDB save, as with `save ""` or `SHUTDOWN
/// NOSAVE`) grants this run acknowledged are lost as in a crash, and their
/// holders still believe they hold them.
pub fn on_shutdown() {
    let [aof, rewriting, unsaved] = api::server_info_numbers(
        c"persistence",
        [
            c"aof_enabled",
            c"aof_rewrite_in_progress",
            c"rdb_changes_since_last_save",
        ],
    );
    let persisted = (aof == Some(1) && rewriting == Some(0)) || unsaved == Some(0);
    write_state(if persisted { "clean" } else { "unsaved" });
}

/// A promotion with the link up (`REPLICAOF NO ONE`, `CLUSTER FAILOVER`)
/// also reports the link going down, just before the role change and in the
/// same call. So a lost link only counts once the event loop has moved on:
/// at the server's next before-sleep, which comes before it reads any
/// further command. (A zero-delay module timer is not enough: with other
/// module timers pending, the server may run them a millisecond later,
/// after a `REPLICAOF NO ONE` that a fast client sent on seeing the link
/// down, and the promotion would pass for a coordinated one.)
pub fn on_master_link(ctx: Ctx, up: bool) {
    let generation = LINK_GENERATION.fetch_add(1, Ordering::Relaxed) + 1;
    if up {
        LINK_UP.store(true, Ordering::Relaxed);
        return;
    }
    LOST_GENERATION.store(generation, Ordering::Relaxed);
    LOSS_PENDING.store(true, Ordering::Relaxed);
    if watch_before_sleep(ctx, Some(on_before_sleep)) {
        return;
    }
    // A server without the event-loop event: a zero-delay timer.
    LOSS_PENDING.store(false, Ordering::Relaxed);
    if let Some(create) = unsafe { raw::RedisModule_CreateTimer } {
        let data = generation as usize as *mut c_void;
        unsafe { create(ctx.0, 0, Some(on_link_lost), data) };
    }
}

/// The generation of the last link-down report, and whether it still waits
/// for a before-sleep.
static LOST_GENERATION: AtomicU64 = AtomicU64::new(0);
static LOSS_PENDING: AtomicBool = AtomicBool::new(false);

/// Subscribes `callback` to the server's event-loop event (`None`:
/// unsubscribes); whether the server has it.
fn watch_before_sleep(ctx: Ctx, callback: raw::RedisModuleEventCallback) -> bool {
    let Some(subscribe) = (unsafe { raw::RedisModule_SubscribeToServerEvent }) else {
        return false;
    };
    let event = raw::RedisModuleEvent {
        id: raw::REDISMODULE_EVENT_EVENTLOOP,
        dataver: 1,
    };
    unsafe { subscribe(ctx.0, event, callback) == api::OK }
}

extern "C" fn on_before_sleep(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    guard("master link", (), || {
        if subevent != raw::REDISMODULE_SUBEVENT_EVENTLOOP_BEFORE_SLEEP
            || !LOSS_PENDING.swap(false, Ordering::Relaxed)
        {
            return;
        }
        lost(LOST_GENERATION.load(Ordering::Relaxed));
        // Every event-loop turn calls us while subscribed. The server is
        // walking its listeners now, so the unsubscription waits for a
        // timer.
        if let Some(create) = unsafe { raw::RedisModule_CreateTimer } {
            unsafe { create(ctx, 0, Some(on_unwatch), std::ptr::null_mut()) };
        }
    })
}

extern "C" fn on_unwatch(ctx: *mut raw::RedisModuleCtx, _data: *mut c_void) {
    guard("master link", (), || {
        // A newer loss waiting for its before-sleep keeps the subscription.
        if !LOSS_PENDING.load(Ordering::Relaxed) {
            watch_before_sleep(Ctx(ctx), None);
        }
    })
}

/// The link loss of `generation` counts, unless the link changed since.
fn lost(generation: u64) {
    if LINK_GENERATION.load(Ordering::Relaxed) == generation {
        LINK_UP.store(false, Ordering::Relaxed);
    }
}

extern "C" fn on_link_lost(_ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    guard("master link", (), || lost(data as usize as u64))
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
