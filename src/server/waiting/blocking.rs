//! Parked clients of `DLOCK.ACQUIRE ... WAIT`: the blocked-client plumbing
//! around `dlock_core::parking` (queues, answers, and the rule that a grant is
//! delivered or revoked).
//!
//! The server's rules that shape this file (Redis 7.0 to 8.0, Valkey 8):
//! - Every blocked client needs exactly one `RedisModule_UnblockClient`, also
//!   after a timeout or a disconnect; only then does the server free the
//!   handle and its two temporary clients.
//! - After `RedisModule_UnblockClient` the reply callback runs later, in the
//!   server's `moduleHandleBlockedClients`. A client that times out, is
//!   `CLIENT UNBLOCK`ed or killed before that never gets the reply, and the
//!   timeout callback is skipped. So answers are handed over only from a
//!   timer (the last phase before the server replies), and `WAIT` timeouts
//!   are our own timer, not the server's: nothing of ours can end a client
//!   between the hand-over and the reply. Whatever else does (a command run
//!   by I/O threads, another module) is caught when the answer is freed.
//!
//! Longer than 400 lines because every blocked-client callback of the
//! server API is here, next to the rules above that they keep together.

use std::ffi::{c_int, c_longlong, c_void};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};

use redis_module::raw;

use crate::server::edge::api::{self, monotonic_us, now_us, rm, Ctx};
use crate::server::edge::ffi::guard;
use crate::server::jobs::{self, Job};
use crate::server::notify::stats;
use crate::server::notify::watchers;
use dlock_core::parking::{Answer, Left, Parking, Revoke};
use dlock_core::queue::{Component, Frontier, WaitQueues, Wants};
use dlock_core::resource::holds::Holds;
use dlock_core::Error;

pub use crate::server::resource::Resource;

/// A blocked client. Only ever used on the server's main thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Blocked(*mut raw::RedisModuleBlockedClient);

// SAFETY: handles are created, used and released on the main thread only; the
// mutex around them exists for soundness, not for sharing across threads.
unsafe impl Send for Blocked {}

/// What the server holds for a handed-over answer until it frees it.
struct Handed {
    handle: Blocked,
    answer: Answer,
    /// Set by the reply callback: the client got the answer.
    delivered: bool,
}

static PARKING: LazyLock<Mutex<Parking<Resource, Blocked>>> = LazyLock::new(Default::default);

/// Mirrors of the number of waiters and of grants in flight, so the common
/// case (nobody waits) costs one atomic load and no hashing.
static TOTAL: AtomicUsize = AtomicUsize::new(0);
static GRANTS_IN_FLIGHT: AtomicBool = AtomicBool::new(false);
/// Never held across a call that could re-enter us (key deletion runs the
/// type's unlink callback, which defers its work instead of locking).
fn parking() -> MutexGuard<'static, Parking<Resource, Blocked>> {
    PARKING.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `f` on the parking lot and refreshes the mirrors.
fn with_parking<R>(f: impl FnOnce(&mut Parking<Resource, Blocked>) -> R) -> R {
    let mut p = parking();
    let r = f(&mut p);
    TOTAL.store(p.queues().total(), Ordering::Relaxed);
    GRANTS_IN_FLIGHT.store(p.has_grants_in_flight(), Ordering::Relaxed);
    let stale = p.queues_mut().take_stale_timers();
    let to_settle = p.queues_mut().take_to_settle();
    let emptied = p.queues_mut().take_emptied();
    drop(p);
    if !stale.is_empty() {
        jobs::stop_wake_ups(&stale);
    }
    // A free resource whose last waiter left is no longer reserved.
    for res in &emptied {
        watchers::changed(res);
    }
    // Who is behind a waiter that left may fit now: look again from a
    // timer (we may be inside a callback that cannot write).
    for res in to_settle {
        jobs::push(Job::Settle(res));
    }
    r
}

fn with_queues<R>(f: impl FnOnce(&mut WaitQueues<Resource, Blocked>) -> R) -> R {
    with_parking(|p| f(p.queues_mut()))
}

pub fn total_waiters() -> usize {
    TOTAL.load(Ordering::Relaxed)
}

pub fn anyone_waiting() -> bool {
    TOTAL.load(Ordering::Relaxed) > 0
}

pub fn waiters_on(res: &Resource) -> usize {
    if !anyone_waiting() {
        return 0;
    }
    parking().queues().waiting(res)
}

/// The resource behind `name` in the caller's database, if anyone waits on it.
pub fn waiting_resource(
    ctx: Ctx,
    name: *mut raw::RedisModuleString,
) -> Result<Option<Resource>, Error> {
    if !anyone_waiting() {
        return Ok(None);
    }
    let res = Resource::of(ctx, name)?;
    Ok((waiters_on(&res) > 0).then_some(res))
}

/// Whether a set request waits on `res`: its queue is then decided only
/// with its component (`server/commands/sets.rs`).
pub fn has_sets(res: &Resource) -> bool {
    anyone_waiting() && parking().queues().has_sets(res)
}

/// The component of `starts` (see `WaitQueues::component`).
pub fn component(starts: &[Resource]) -> Component<Resource> {
    if !anyone_waiting() {
        return Component {
            resources: starts.to_vec(),
            requests: Vec::new(),
            reserved_from: vec![None; starts.len()],
        };
    }
    parking().queues().component(starts)
}

/// The part of a component that `frontier` decides (see
/// `WaitQueues::part`).
pub fn part<'h>(
    frontier: &mut Frontier<Resource>,
    holds: impl Fn(usize) -> Option<&'h Holds>,
) -> Component<Resource> {
    parking().queues().part(frontier, holds)
}

/// Whether deciding `part` uncovered more of its component (see
/// `WaitQueues::widen`); if so `frontier` has grown.
pub fn widen(
    frontier: &mut Frontier<Resource>,
    part: &Component<Resource>,
    decided: &[usize],
) -> bool {
    parking().queues().widen(frontier, part, decided)
}

/// The clock `WAIT`s are reckoned on: monotonic, as the timer that ends
/// them. A `WAIT 5000` ends 5 s after it began whatever the wall clock
/// does meanwhile; the give-up times stored in the queues are on it too,
/// and never leave the process.
fn wait_clock_us() -> u64 {
    monotonic_us()
}

fn wait_clock_ms() -> u64 {
    wait_clock_us() / 1000
}

/// Resources with waiters, optionally only those in one database.
pub fn resources(db: Option<i32>) -> Vec<Resource> {
    resources_where(|r| db.is_none_or(|d| r.db == d))
}

/// Resources with waiters that `keep` accepts, each looked at once.
pub fn resources_where(keep: impl FnMut(&Resource) -> bool) -> Vec<Resource> {
    if !anyone_waiting() {
        return Vec::new();
    }
    parking().queues().resources(keep)
}

/// Parks the calling client at the tail of `res`'s queue; `timeout_ms` 0
/// waits forever.
pub fn block(
    ctx: Ctx,
    res: Resource,
    token: &[u8],
    wants: Wants,
    ttl_ms: u64,
    timeout_ms: u64,
) -> Result<(), Error> {
    block_on(ctx, vec![res], token, wants, ttl_ms, timeout_ms)
}

/// Parks the calling client at the tail of the queue of every resource of
/// `members` at once (one set request, or a single one).
pub fn block_on(
    ctx: Ctx,
    members: Vec<Resource>,
    token: &[u8],
    wants: Wants,
    ttl_ms: u64,
    timeout_ms: u64,
) -> Result<(), Error> {
    let block = rm!(RedisModule_BlockClient);
    let on_disconnect = rm!(RedisModule_SetDisconnectCallback);
    c_longlong::try_from(timeout_ms).map_err(|_| Error::Internal("timeout"))?;
    let now = wait_clock_us();
    // No server-side timeout (0): ours is a timer, see the file comment.
    let bc = unsafe {
        block(
            ctx.0,
            Some(on_reply),
            Some(on_timeout),
            Some(free_answer),
            0,
        )
    };
    if bc.is_null() {
        return Err(Error::Internal("cannot block client"));
    }
    unsafe { on_disconnect(bc, Some(on_disconnected)) };
    let handle = Blocked(bc);
    let gives_up_at = (timeout_ms > 0).then(|| (now / 1000).saturating_add(timeout_ms));
    let ends_at = (timeout_ms > 0).then(|| now.saturating_add(timeout_ms.saturating_mul(1000)));
    // A free resource whose queue starts here becomes reserved: a new
    // version, with no write to tell its observers of it.
    let starting: Vec<Resource> = if watchers::count() > 0 {
        members
            .iter()
            .filter(|r| waiters_on(r) == 0)
            .cloned()
            .collect()
    } else {
        Vec::new()
    };
    with_parking(|p| {
        match <[Resource; 1]>::try_from(members) {
            Ok([res]) => p.park(res, token, wants, ttl_ms, gives_up_at, handle),
            Err(members) => p.park_set(members, token, wants, ttl_ms, gives_up_at, handle),
        }
        if let Some(at) = ends_at {
            p.ends_wait_at(handle, at);
        }
    });
    if let Some(at) = ends_at {
        arm_wait_timer(at);
    }
    for res in &starting {
        watchers::changed(res);
    }
    Ok(())
}

/// The one timer that ends `WAIT`s: its id and the end (on the wait clock,
/// µs) it was armed for, never later than any running `WAIT`'s end.
static WAIT_TIMER: Mutex<Option<(u64, u64)>> = Mutex::new(None);

fn wait_timer() -> MutexGuard<'static, Option<(u64, u64)>> {
    WAIT_TIMER.lock().unwrap_or_else(|p| p.into_inner())
}

/// Makes the `WAIT` timer fire at `at_us` at the latest.
fn arm_wait_timer(at_us: u64) {
    let mut armed = wait_timer();
    match *armed {
        Some((_, at)) if at <= at_us => return,
        Some((id, _)) => {
            jobs::stop_timer(id);
        }
        None => {}
    }
    // The server fires a timer once its delay has passed, in ms: rounded
    // up, never before the end.
    let delay = at_us.saturating_sub(wait_clock_us()).div_ceil(1000);
    *armed = jobs::arm_timer(i64::try_from(delay).unwrap_or(i64::MAX), on_wait_timer)
        .map(|id| (id, at_us));
}

/// Fires the `WAIT` timer at once if it is overdue on the wait clock: a
/// module timer armed before the wall clock stepped back fires that much
/// late (see `jobs::rearm_late`, called from the same cron).
pub fn rearm_late() {
    let mut armed = wait_timer();
    if let Some((id, at)) = *armed {
        if at < wait_clock_us() {
            jobs::stop_timer(id);
            *armed = jobs::arm_timer(0, on_wait_timer).map(|id| (id, at));
        }
    }
}

extern "C" fn on_wait_timer(_ctx: *mut raw::RedisModuleCtx, _data: *mut c_void) {
    guard("wait timeout", (), || {
        *wait_timer() = None;
        let (n, next) = with_parking(|p| (p.time_out_ended(wait_clock_us()), p.next_wait_end()));
        for _ in 0..n {
            stats::WAIT_TIMEOUTS.add();
        }
        if let Some(at) = next {
            arm_wait_timer(at);
        }
        hand_over();
    })
}

/// Answers nil to the waiters of `res` whose `WAIT` has run out, so they
/// are never chosen for a grant.
pub fn time_out_given_up(res: &Resource) {
    let now_ms = wait_clock_ms();
    let n = with_parking(|p| p.time_out_given_up(res, now_ms));
    for _ in 0..n {
        stats::WAIT_TIMEOUTS.add();
    }
    answers_ready();
}

/// The head of the plain queue of `res` (its token, and whether another
/// token waits behind it), once the waiters whose `WAIT` ran out have left
/// (their timeout is due whatever the caller does): the head a handoff now
/// grants. `None`: nobody waits.
pub fn plain_head(res: &Resource) -> Option<(Box<[u8]>, bool)> {
    if waiters_on(res) == 0 {
        return None;
    }
    time_out_given_up(res);
    let parking = parking();
    let (token, others) = parking.queues().head(res)?;
    Some((token.into(), others))
}

/// Grants `res` to its head waiter (and every queued entry with the same
/// token) under `fence`; returns the token and TTL granted.
pub fn grant_head(res: &Resource, fence: u64) -> Option<(Box<[u8]>, u64)> {
    let (token, ttl) = with_parking(|p| p.grant_head(res, fence))?;
    answers_ready();
    Some((token, ttl))
}

/// Whether every request queued on `res` is a plain one (then the plain
/// handoff applies).
pub fn queue_is_plain(res: &Resource) -> bool {
    !anyone_waiting() || parking().queues().is_plain(res)
}

/// Grants the queued requests `granted` (id, fence) together and answers
/// `refused` with their errors (see `Parking::grant_entries`).
pub fn grant_entries(granted: &[(u64, u64)], retried: &[&[u8]], refused: Vec<(u64, Error)>) {
    with_parking(|p| p.grant_entries(granted, retried, refused));
    answers_ready();
}

/// Every waiter of `res` (or of all resources) is answered `err`.
pub fn fail(res: Option<&Resource>, err: Error) {
    with_parking(|p| p.fail(res, err));
    answers_ready();
}

/// The owner of `token` on `res` refreshed or extended its hold: it knows
/// the fence, so a grant of it still in flight stands whatever happens to
/// the waiter's connection.
pub fn confirm(res: impl FnOnce() -> Result<Resource, Error>, token: &[u8]) -> Result<(), Error> {
    if GRANTS_IN_FLIGHT.load(Ordering::Relaxed) || jobs::revocations_pending() {
        let res = res()?;
        with_parking(|p| p.confirm(&res, token));
        jobs::confirm_revocations(&res, token);
    }
    Ok(())
}

/// Grants in flight whose locks `SWAPDB` moved are revoked where they went.
pub fn move_grants(moved: impl Fn(&Resource) -> Option<Resource>) {
    if GRANTS_IN_FLIGHT.load(Ordering::Relaxed) {
        with_parking(|p| p.move_grants(moved));
    }
}

/// Wakes `res` just after `deadline_ms` so a lease that ends with waiters
/// queued is handed over within milliseconds, without waiting for Redis's
/// lazy or sampled active expiry. (A key expires strictly after its deadline.)
pub fn arm_expiry(res: &Resource, deadline_ms: u64) -> Result<(), Error> {
    if waiters_on(res) == 0 {
        return Ok(());
    }
    note_deadline(res, deadline_ms);
    if !needs_timer(res, deadline_ms) {
        return Ok(());
    }
    let delay = deadline_ms.saturating_sub(now_us() / 1000) + 1;
    if let Some(id) = jobs::arm_wake_up(res, deadline_ms, delay) {
        add_timer(res, id);
    }
    Ok(())
}

/// Whether a wake-up timer for `res` at `at_ms` still has to be armed.
pub fn needs_timer(res: &Resource, at_ms: u64) -> bool {
    with_queues(|q| q.needs_timer(res, at_ms))
}

pub fn note_deadline(res: &Resource, at_ms: u64) {
    with_queues(|q| q.note_deadline(res, at_ms));
}

pub fn hold_after_eviction(res: &Resource) -> Option<u64> {
    with_queues(|q| q.hold_after_eviction(res))
}

pub fn held_until(res: &Resource) -> Option<u64> {
    if !anyone_waiting() {
        return None;
    }
    parking().queues().held_until(res)
}

pub fn timer_fired(res: &Resource, at_ms: u64, id: u64) {
    with_queues(|q| q.timer_fired(res, at_ms, id));
}

/// The server armed wake-up timer `id` for `res`.
pub fn add_timer(res: &Resource, id: u64) {
    with_queues(|q| q.add_timer(res, id));
}

/// Answers were decided: hand them over from a timer (see the file comment).
pub fn answers_ready() {
    if parking().has_answers() {
        jobs::push(Job::HandOver);
    }
}

/// Gives every decided answer to the server, which replies before it next
/// sleeps. Called only from timers (last, after every job they run): the
/// last phase of the event loop before the server serves unblocked clients.
pub fn hand_over() {
    let answers = with_parking(|p| p.take_answers());
    let Some(unblock) = (unsafe { raw::RedisModule_UnblockClient }) else {
        return;
    };
    for (handle, answer) in answers {
        let data = Box::into_raw(Box::new(Handed {
            handle,
            answer,
            delivered: false,
        }));
        if unsafe { unblock(handle.0, data.cast::<c_void>()) } != api::OK {
            // Not taken: the server will never free it, so we do.
            let handed = unsafe { Box::from_raw(data) };
            freed(&handed);
        }
    }
}

fn freed(handed: &Handed) {
    let revoke = with_parking(|p| p.freed(handed.handle, &handed.answer, handed.delivered));
    revoke_later(revoke);
}

/// The client left on its own; `unblock` it if we still owe that, and
/// revoke a grant it never heard of.
fn left(left: Left<Resource>, handle: Blocked) {
    if left.unblock {
        if let Some(unblock) = unsafe { raw::RedisModule_UnblockClient } {
            unsafe { unblock(handle.0, std::ptr::null_mut()) };
        }
    }
    revoke_later(left.revoke);
}

/// A grant nobody received is revoked by the deferred jobs: the callbacks
/// that learn of it may run inside another command (`CLIENT KILL`,
/// `CLIENT UNBLOCK`), which must not propagate as if it had changed data.
fn revoke_later(grant: Vec<Revoke<Resource>>) {
    if !grant.is_empty() {
        jobs::push(Job::Revoke(grant));
    }
}

extern "C" fn on_reply(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    guard("blocked reply", api::OK, || {
        let c = Ctx(ctx);
        let result = (|| {
            let get = rm!(RedisModule_GetBlockedClientPrivateData);
            let Some(handed) = (unsafe { get(ctx).cast::<Handed>().as_mut() }) else {
                return c.reply_error(&Error::Internal("wait ended without an answer"));
            };
            match &handed.answer {
                // The server drops replies to a client it has decided to
                // close: that grant is not delivered (freed, then revoked).
                Answer::Granted { .. } if crate::server::edge::clients::marked_for_closing(ctx) => {
                    return Ok(())
                }
                Answer::Granted { fence, .. } => c.reply_integer(*fence as i64)?,
                Answer::TimedOut => c.reply_null()?,
                Answer::Failed(e) => c.reply_error(e)?,
            }
            handed.delivered = true;
            Ok(())
        })();
        if let Err(e) = result {
            c.log_warning(&format!("blocked reply failed: {e}"));
        }
        api::OK
    })
}

/// `CLIENT UNBLOCK` (without ERROR), which the server reports as a timeout.
/// (The server's own timeouts are not used.)
extern "C" fn on_timeout(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    guard("wait unblocked", api::OK, || {
        let Some(handle_of) = (unsafe { raw::RedisModule_GetBlockedClientHandle }) else {
            return api::OK;
        };
        let handle = Blocked(unsafe { handle_of(ctx) });
        stats::WAIT_TIMEOUTS.add();
        let _ = Ctx(ctx).reply_null();
        let l = with_parking(|p| p.leave(handle));
        left(l, handle);
        api::OK
    })
}

/// The connection closed or was killed, or `CLIENT UNBLOCK ... ERROR` (or a
/// demotion) ended the wait with the server's own error reply.
extern "C" fn on_disconnected(
    ctx: *mut raw::RedisModuleCtx,
    bc: *mut raw::RedisModuleBlockedClient,
) {
    guard("waiter disconnect", (), || {
        let handle = Blocked(bc);
        let l = with_parking(|p| p.leave(handle));
        if l.unblock && !crate::server::edge::clients::disconnecting(ctx) {
            // Unblocked with an error, still connected: the wait ended
            // without a grant, as a timeout does.
            stats::WAIT_TIMEOUTS.add();
        }
        left(l, handle);
    })
}

/// The server is done with a handed-over answer: replied (`delivered`) or
/// not (the client left first).
extern "C" fn free_answer(_ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    guard("free answer", (), || {
        if data.is_null() {
            return;
        }
        let handed = unsafe { Box::from_raw(data.cast::<Handed>()) };
        freed(&handed);
    })
}
