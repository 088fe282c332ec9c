//! Deferred work, and the timer plumbing every file shares.
//!
//! Work that arises where it may not be done is queued here as data: in a
//! callback that cannot write (the type's unlink callback, a flush or swap
//! event), in a callback that runs inside another command (a waiter killed
//! or unblocked by `CLIENT KILL`/`CLIENT UNBLOCK`: whatever a module
//! replicates there counts as a change made by that command, and the server
//! then propagates the command itself), or while writes are held back. One
//! module timer, armed for the earliest job due, runs the queue through the
//! runner registered at load (`job_runner`), in a turn of its own; commands
//! that touch a resource with pending work complete it first.
//!
//! This file knows no other part of dlock's server layer: it stores jobs and
//! arms the timer, and never runs a job itself.

pub mod queue;

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard, OnceLock};

use redis_module::raw;

use crate::server::edge::api::{self, monotonic_us, rm, Ctx};
use crate::server::edge::ffi::guard;
use crate::server::jobs::queue::JobQueue;
use crate::server::resource::Resource;
use dlock_core::Error;

/// When the server must not produce writes (`CLIENT PAUSE WRITE`, a manual
/// failover in progress), deferred writes retry after this long.
pub const PAUSED_RETRY_MS: u64 = 10;

pub use crate::server::jobs::queue::Job;

/// The queued jobs.
static QUEUE: LazyLock<Mutex<JobQueue>> = LazyLock::new(Default::default);
/// Mirrors whether a revocation is queued: checked on every refresh and
/// before every command, so the common case costs one atomic load.
static REVOCATIONS: AtomicBool = AtomicBool::new(false);
/// The one armed timer: its id and when it fires.
static ARMED: Mutex<Option<(u64, u64)>> = Mutex::new(None);
/// What the timer runs: the runner registered at load.
static RUNNER: OnceLock<fn(Ctx)> = OnceLock::new();
/// The wake-up timer whose callback runs now (0: none). The server removes
/// a timer only after its callback returns: stopping it from inside would
/// free it (and its data) twice.
static FIRING: AtomicU64 = AtomicU64::new(0);
/// A context for arming timers from callbacks that have none (the type's
/// unlink callback). Timers only use it to know which module they belong to.
static TIMER_CTX: AtomicPtr<raw::RedisModuleCtx> = AtomicPtr::new(std::ptr::null_mut());

fn queue() -> MutexGuard<'static, JobQueue> {
    QUEUE.lock().unwrap_or_else(|p| p.into_inner())
}

fn armed() -> MutexGuard<'static, Option<(u64, u64)>> {
    ARMED.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `f` on the queue and refreshes the mirror.
fn with_queue<R>(f: impl FnOnce(&mut JobQueue) -> R) -> R {
    let mut q = queue();
    let r = f(&mut q);
    REVOCATIONS.store(q.has_revocations(), Ordering::Relaxed);
    r
}

pub fn init(ctx: Ctx, runner: fn(Ctx)) -> Result<(), Error> {
    let detached = unsafe { rm!(RedisModule_GetDetachedThreadSafeContext)(ctx.0) };
    TIMER_CTX.store(detached, Ordering::Relaxed);
    // A second load of the module in one process registers the same runner.
    let _ = RUNNER.set(runner);
    Ok(())
}

/// The detached context timers are armed with.
pub fn timer_ctx() -> *mut raw::RedisModuleCtx {
    TIMER_CTX.load(Ordering::Relaxed)
}

/// Whether the server must hold back writes that replicas would see.
pub fn writes_paused() -> bool {
    unsafe { raw::RedisModule_AvoidReplicaTraffic }.is_some_and(|f| unsafe { f() } != 0)
}

/// Queues `job` to run from the timer as soon as possible.
pub fn push(job: Job) {
    push_after(job, 0);
}

/// Queues `job` to run from the timer `delay_ms` from now at the earliest
/// (a job that does at once everything queued before it is not queued
/// twice: see `JobQueue::push`). Due times are on the monotonic clock, as
/// the timer is: a step of the wall clock neither holds a job back nor
/// runs it early.
pub fn push_after(job: Job, delay_ms: u64) {
    let due_ms = now_ms() + delay_ms;
    with_queue(|q| q.push(due_ms, job));
    arm(due_ms);
}

/// Drops the queued job that runs once like `job`, if any: nobody needs
/// it any more (an armed timer then finds nothing due and re-arms).
pub fn cancel(job: &Job) {
    with_queue(|q| q.cancel(job));
}

/// How many jobs are queued (`INFO dlock`).
pub fn queued() -> usize {
    queue().len()
}

/// Takes the jobs due by now, in order.
pub fn take_due() -> Vec<Job> {
    let now = now_ms();
    with_queue(|q| q.take_due(now))
}

/// The jobs' clock: monotonic milliseconds.
fn now_ms() -> u64 {
    monotonic_us() / 1000
}

/// Takes the jobs (due or not) that `wanted` picks, in order. Looks at
/// every queued job: for whole-database events.
pub fn take(wanted: impl Fn(&Job) -> bool) -> Vec<Job> {
    with_queue(|q| q.take_where(wanted))
}

/// Takes the queued revocations of any of `resources`, in order.
pub fn take_revocations(resources: &[Resource]) -> Vec<Job> {
    if !revocations_pending() {
        return Vec::new();
    }
    with_queue(|q| q.take_revocations(resources))
}

/// Changes queued jobs in place (`SWAPDB` moves some with their keys).
pub fn for_each_mut(f: impl Fn(&mut Job)) {
    with_queue(|q| q.for_each_mut(f));
}

/// Whether a revocation is queued.
pub fn revocations_pending() -> bool {
    REVOCATIONS.load(Ordering::Relaxed)
}

/// The grants of `res` (token and fence) whose revocation is still queued
/// (writes are held back): nobody received them, so no answer shows them.
pub fn revoked_on(res: &Resource) -> Vec<(Box<[u8]>, u64)> {
    if !revocations_pending() {
        return Vec::new();
    }
    queue().revoked_on(res)
}

/// A same-token refresh confirmed a grant whose revocation is queued.
pub fn confirm_revocations(res: &Resource, token: &[u8]) {
    // The owner knows the fence: the whole grant stands (every member of a
    // set, not just the one refreshed).
    with_queue(|q| q.confirm_revocations(res, token));
}

/// Makes sure the timer fires by `due_ms`: one timer, at the earliest time
/// any job needs.
fn arm(due_ms: u64) {
    let mut armed = armed();
    match *armed {
        Some((_, at)) if at <= due_ms => return,
        Some((id, _)) => {
            stop_timer(id);
        }
        None => {}
    }
    let delay = due_ms.saturating_sub(now_ms());
    *armed = arm_timer(i64::try_from(delay).unwrap_or(i64::MAX), on_timer).map(|id| (id, due_ms));
}

/// Fires the queue's timer at once if it is overdue on the monotonic
/// clock. The server keys module timers on its wall clock (`ustime()`), so
/// a timer armed before the wall clock stepped back would fire that much
/// later (an hour back: an hour late); the server's cron, driven by its
/// monotonic clock, calls this. (A step forward fires a timer early
/// instead: the jobs it finds not yet due re-arm it.)
pub fn rearm_late() {
    let mut armed = armed();
    if let Some((id, due_ms)) = *armed {
        if due_ms < now_ms() {
            stop_timer(id);
            *armed = arm_timer(0, on_timer).map(|id| (id, due_ms));
        }
    }
}

extern "C" fn on_timer(ctx: *mut raw::RedisModuleCtx, _data: *mut c_void) {
    guard("deferred jobs", (), || {
        *armed() = None;
        run(Ctx(ctx));
    })
}

fn run(ctx: Ctx) {
    if let Some(runner) = RUNNER.get() {
        runner(ctx);
    }
    // Jobs not due yet (a retry while writes are paused) keep a timer.
    if let Some(due_ms) = queue().next_due() {
        arm(due_ms);
    }
}

/// A wake-up timer's data: which resource, for which deadline, and its id.
struct WakeUp {
    res: Resource,
    at_ms: u64,
    id: u64,
}

/// Arms a timer that fires `delay_ms` from now for the lease on `res`
/// ending at `at_ms`; its id. Its own timer, not the queue's: each lease
/// end is due at its own time.
pub fn arm_wake_up(res: &Resource, at_ms: u64, delay_ms: u64) -> Option<u64> {
    let data = Box::into_raw(Box::new(WakeUp {
        res: res.clone(),
        at_ms,
        id: 0,
    }));
    let delay = i64::try_from(delay_ms).unwrap_or(i64::MAX);
    match arm_timer_with(delay, on_wake_up, data.cast::<c_void>()) {
        Some(id) => {
            // SAFETY: the timer cannot fire before we return to the event
            // loop.
            unsafe { (*data).id = id };
            Some(id)
        }
        None => {
            drop(unsafe { Box::from_raw(data) });
            None
        }
    }
}

extern "C" fn on_wake_up(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    guard("expiry timer", (), || {
        if data.is_null() {
            return;
        }
        let wake = *unsafe { Box::from_raw(data.cast::<WakeUp>()) };
        FIRING.store(wake.id, Ordering::Relaxed);
        // First: the queue forgets this timer before any job looks at it.
        with_queue(|q| {
            q.push_front(Job::LeaseEnded {
                res: wake.res,
                at_ms: wake.at_ms,
                timer: wake.id,
            })
        });
        run(Ctx(ctx));
        FIRING.store(0, Ordering::Relaxed);
    })
}

/// Stops wake-up timers whose queue emptied, freeing their data.
pub fn stop_wake_ups(ids: &[u64]) {
    for id in ids {
        if let Some(data) = stop_timer(*id).filter(|d| !d.is_null()) {
            drop(unsafe { Box::from_raw(data.cast::<WakeUp>()) });
        }
    }
}

/// Arms a timer from a place without a context of its own; its id.
pub fn arm_timer(
    delay_ms: i64,
    callback: extern "C" fn(*mut raw::RedisModuleCtx, *mut c_void),
) -> Option<u64> {
    arm_timer_with(delay_ms, callback, std::ptr::null_mut())
}

/// As `arm_timer`, with data for the callback (whoever stops the timer
/// frees it: `stop_timer` returns it).
pub fn arm_timer_with(
    delay_ms: i64,
    callback: extern "C" fn(*mut raw::RedisModuleCtx, *mut c_void),
    data: *mut c_void,
) -> Option<u64> {
    let ctx = timer_ctx();
    match unsafe { raw::RedisModule_CreateTimer } {
        Some(create) if !ctx.is_null() => {
            Some(unsafe { create(ctx, delay_ms, Some(callback), data) })
        }
        _ => None,
    }
}

/// Stops a timer that has not fired; returns its data for the caller to
/// free. `None` if it already fired (or was stopped, or is firing now).
pub fn stop_timer(id: u64) -> Option<*mut c_void> {
    if id == FIRING.load(Ordering::Relaxed) {
        return None;
    }
    let ctx = timer_ctx();
    let stop = unsafe { raw::RedisModule_StopTimer }?;
    if ctx.is_null() {
        return None;
    }
    let mut data: *mut c_void = std::ptr::null_mut();
    (unsafe { stop(ctx, id, &mut data) } == api::OK).then_some(data)
}
