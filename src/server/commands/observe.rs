//! `DLOCK.OBSERVE resource [SINCE version] [WAIT timeout_ms]`: what a
//! resource's holders are, as a version and `DLOCK.INFO`'s reply, at once
//! when the version differs from `SINCE` (or without `SINCE` or `WAIT`),
//! else when its holders next change or the wait ends (nil).
//!
//! A waiting observer is registered with `watchers`; every change of a lock
//! queues a check of its resource, run here from the jobs' timer: the
//! resource is read once, and the observers that saw another version are
//! answered. Holds that end by their deadline change the holders without
//! any command: a check is scheduled at the earliest live deadline of every
//! observed resource. Events the module sees no other way (a key renamed,
//! moved, copied or restored onto the resource's name) reach it through a
//! subscription to the server's generic keyspace events, made by the first
//! observer that waits.
//!
//! In Redis Cluster an observer is answered only while this node answers
//! reads of its resource's slot as the cluster routes them: when the slot
//! moves, or the resource's key leaves a slot being handed over (`MIGRATE`
//! deletes it here), its observers are sent away with `TRYAGAIN`, as
//! waiters are, never shown the key's absence as "free". A check after a
//! change asks first, and while observers wait the slots are looked at
//! every `SLOTS_CHECK_MS` (a free resource's slot can move with no change
//! here), as the server does for its own clients blocked on keys.
//!
//! Answers are handed over only from that timer, and `WAIT`'s end is ours
//! too (not the server's timeout): nothing can end the client between the
//! hand-over and its reply (see `blocking` for why that matters). The
//! reply is read when the server sends it, so it is the latest state.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};

use redis_module::raw;

use crate::server::commands::info::{self, View};
use crate::server::edge::api::{self, monotonic_us, now_us, rm, Ctx};
use crate::server::edge::cluster;
use crate::server::edge::ffi::{guard, Argv};
use crate::server::jobs::{self, Job};
use crate::server::notify::watchers::{self, Watcher};
use crate::server::resource::Resource;
use crate::server::{notify::stats, state};
use dlock_core::observe::show_version;
use dlock_core::request::args;
use dlock_core::rules::cluster::{key_slot, reads_here};
use dlock_core::Error;

/// Why an observer is answered.
#[derive(Clone, Copy)]
enum Woken {
    Changed,
    TimedOut,
    /// This node no longer answers for the resource (Redis Cluster).
    SlotMoved,
}

/// How often, in Redis Cluster, the slots of observed resources are
/// looked at while observers wait.
const SLOTS_CHECK_MS: u64 = 1000;

/// Whether the generic keyspace events reach us (see the file comment).
static SUBSCRIBED: AtomicBool = AtomicBool::new(false);

pub fn observe(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    let req = args::observe(argv.bytes())?;
    let name = argv.key()?;
    // Inside MULTI or a script it is a read: nothing may block there.
    let may_block = req.wait_ms.is_some() && !ctx.flags()?.in_transaction_or_script();
    info::read(ctx, name, true, |view| {
        let version = view.seen().version();
        let wait_ms = req.wait_ms.unwrap_or(0);
        if may_block && req.waits(version) {
            let res = Resource::of(ctx, name)?;
            return block(ctx, res, version, wait_ms, view.ends_at());
        }
        // A follower that is out of date: answered now if the pace of
        // its resource's answers allows, else with the next batch.
        if let (true, Some(since)) = (may_block, req.since) {
            let res = Resource::of(ctx, name)?;
            let (now, rate) = (monotonic_us(), state::observe_rate());
            if let Some(until) = watchers::with(|w| w.paces.held_until(&res, now, rate)) {
                stats::OBSERVERS_PACED.add();
                block(ctx, res.clone(), since, wait_ms, view.ends_at())?;
                watchers::look_at(&res, until, now);
                return Ok(());
            }
            reply(ctx, version, view)?;
            spent(&res, 1, now, rate);
            return Ok(());
        }
        reply(ctx, version, view)
    })
}

/// `[version, DLOCK.INFO's reply]`.
fn reply(ctx: Ctx, version: u64, view: &View<'_>) -> Result<(), Error> {
    ctx.reply_array(2)?;
    ctx.reply_bytes(show_version(version).as_bytes())?;
    view.reply(ctx)
}

fn block(
    ctx: Ctx,
    res: Resource,
    version: u64,
    wait_ms: u64,
    ends_at: Option<u64>,
) -> Result<(), Error> {
    subscribe(ctx)?;
    let block = rm!(RedisModule_BlockClient);
    let on_disconnect = rm!(RedisModule_SetDisconnectCallback);
    // No server-side timeout (0): ours is the jobs' timer.
    let bc = unsafe { block(ctx.0, Some(on_reply), Some(on_timeout), Some(free_woken), 0) };
    if bc.is_null() {
        return Err(Error::Internal("cannot block client"));
    }
    unsafe { on_disconnect(bc, Some(on_disconnected)) };
    // A `WAIT` is a length of time: reckoned on the monotonic clock, which
    // a step of the wall clock neither shortens nor stretches.
    let gives_up_at = (wait_ms > 0).then(|| (monotonic_us() / 1000).saturating_add(wait_ms));
    watchers::with(|w| w.watch(res.clone(), Watcher(bc), version, gives_up_at));
    if gives_up_at.is_some() {
        jobs::push_after(Job::ObserversGiveUp, wait_ms.saturating_add(1));
    }
    if let Some(at) = ends_at {
        check_at(&res, at);
    }
    if ctx.flags()?.is_cluster() {
        jobs::push_after(Job::ObservedSlots, SLOTS_CHECK_MS);
    }
    Ok(())
}

/// `n` observers of `res` were answered at `now` (monotonic µs): the pace
/// takes their cost, and a sweep will forget its record once the budget is
/// full again.
fn spent(res: &Resource, n: usize, now: u64, rate: u64) {
    if watchers::with(|w| w.paces.answered(res, n, now, rate)) {
        watchers::sweep_later();
    }
}

/// Schedules a check of `res` just after `at_ms` (a hold's deadline, unix
/// ms: the server ends leases on the wall clock), unless one is due by
/// then.
fn check_at(res: &Resource, at_ms: u64) {
    let in_us = at_ms
        .saturating_add(1)
        .saturating_sub(now_us() / 1000)
        .saturating_mul(1000);
    let now = monotonic_us();
    watchers::look_at(res, now.saturating_add(in_us), now);
}

/// Runs `f` with `res`'s key as a server string, in the context's
/// selected database.
fn with_key<R>(
    ctx: Ctx,
    res: &Resource,
    f: impl FnOnce(*mut raw::RedisModuleString) -> R,
) -> Result<R, Error> {
    let create = rm!(RedisModule_CreateString);
    let free = rm!(RedisModule_FreeString);
    let name = unsafe { create(ctx.0, res.key.as_ptr().cast::<c_char>(), res.key.len()) };
    let r = f(name);
    unsafe { free(ctx.0, name) };
    Ok(r)
}

fn subscribe(ctx: Ctx) -> Result<(), Error> {
    if SUBSCRIBED.load(Ordering::Relaxed) {
        return Ok(());
    }
    let subscribe = rm!(RedisModule_SubscribeToKeyspaceEvents);
    let types = raw::REDISMODULE_NOTIFY_GENERIC;
    if unsafe { subscribe(ctx.0, types, Some(on_generic)) } != api::OK {
        return Err(Error::Internal("keyspace event subscription failed"));
    }
    SUBSCRIBED.store(true, Ordering::Relaxed);
    Ok(())
}

extern "C" fn on_generic(
    ctx: *mut raw::RedisModuleCtx,
    _kind: c_int,
    _event: *const c_char,
    key: *mut raw::RedisModuleString,
) -> c_int {
    guard("keyspace event", api::OK, || {
        watchers::changed_name(Ctx(ctx), key);
        api::OK
    })
}

/// The check a change queued (`Job::Observed`): reads `res` once and
/// answers its observers that saw another version.
pub fn check_logged(ctx: Ctx, res: &Resource) {
    if let Err(e) = check(ctx, res) {
        ctx.log_warning(&format!("observers' check failed: {e}"));
    }
}

fn check(ctx: Ctx, res: &Resource) -> Result<(), Error> {
    let (now, rate) = (monotonic_us(), state::observe_rate());
    watchers::with(|w| w.checked(res));
    if !watchers::with(|w| w.is_watched(res)) {
        return Ok(());
    }
    if let Some(until) = watchers::with(|w| w.paces.held_until(res, now, rate)) {
        watchers::look_at(res, until, now);
        return Ok(());
    }
    let Some((version, ends_at)) = current(ctx, res)? else {
        send_away(res);
        return Ok(());
    };
    let woken = watchers::with(|w| w.changed(res, version));
    spent(res, woken.len(), now, rate);
    hand_over(woken, Woken::Changed);
    if let Some(at) = ends_at {
        check_at(res, at);
    }
    Ok(())
}

/// `res`'s version now and its earliest live deadline, or `None` when this
/// node no longer answers for it (Redis Cluster).
fn current(ctx: Ctx, res: &Resource) -> Result<Option<(u64, Option<u64>)>, Error> {
    unsafe { rm!(RedisModule_SelectDb)(ctx.0, res.db) };
    let (seen, here) = with_key(ctx, res, |name| {
        let seen = info::read(ctx, name, true, |view| {
            Ok((view.seen().version(), view.ends_at()))
        });
        (seen, reads_slot(ctx, res, name))
    })?;
    if !here? {
        return Ok(None);
    }
    Ok(Some(match seen {
        Ok(seen) => seen,
        // Not a lock any more (another type): the observers learn it from
        // the reply, read as the command would.
        Err(_) => (u64::MAX, None),
    }))
}

/// Whether this node answers reads of `res` (its key `name`) as the
/// cluster routes them; always outside Redis Cluster.
fn reads_slot(ctx: Ctx, res: &Resource, name: *mut raw::RedisModuleString) -> Result<bool, Error> {
    let Some(nodes) = cluster::view(ctx)? else {
        return Ok(true);
    };
    let exists = unsafe { rm!(RedisModule_KeyExists)(ctx.0, name) } != 0;
    Ok(reads_here(&nodes, key_slot(&res.key), exists))
}

/// Every observer of `res` is answered `TRYAGAIN`: it retries where the
/// cluster routes it now (a redirect, then an answer at once there, since
/// versions are per process).
fn send_away(res: &Resource) {
    let gone = watchers::with(|w| w.take(res));
    hand_over(gone, Woken::SlotMoved);
}

/// The slots job (`Job::ObservedSlots`, Redis Cluster only): sends away
/// the observers of resources this node no longer answers for, and runs
/// again while observers wait.
pub fn check_slots_logged(ctx: Ctx) {
    if let Err(e) = check_slots(ctx) {
        ctx.log_warning(&format!("observers' slots check failed: {e}"));
    }
    if watchers::count() > 0 {
        jobs::push_after(Job::ObservedSlots, SLOTS_CHECK_MS);
    }
}

fn check_slots(ctx: Ctx) -> Result<(), Error> {
    if watchers::count() == 0 {
        return Ok(());
    }
    let Some(nodes) = cluster::view(ctx)? else {
        return Ok(());
    };
    let exists = rm!(RedisModule_KeyExists);
    for res in watchers::with(|w| w.keys()) {
        unsafe { rm!(RedisModule_SelectDb)(ctx.0, res.db) };
        let here = with_key(ctx, &res, |name| unsafe { exists(ctx.0, name) } != 0)?;
        if !reads_here(&nodes, key_slot(&res.key), here) {
            send_away(&res);
        }
    }
    Ok(())
}

/// The give-up job: nil to every observer whose `WAIT` ran out while its
/// resource still reads as it saw it; the state to one whose resource
/// changed (it was held back by the pace), `TRYAGAIN` if the resource's
/// slot moved.
pub fn give_up(ctx: Ctx) {
    let now_ms = monotonic_us() / 1000;
    let gone = watchers::with(|w| w.take_given_up(now_ms));
    if let Some(at) = watchers::with(|w| w.next_give_up()) {
        jobs::push_after(
            Job::ObserversGiveUp,
            at.saturating_sub(now_ms).saturating_add(1),
        );
    }
    // Observers of one resource are read once. A read that fails answers
    // nil: no observer taken out of the registry may go unanswered.
    let mut read: HashMap<Resource, Option<u64>> = HashMap::new();
    let (mut timed_out, mut moved, mut changed) = (Vec::new(), Vec::new(), Vec::new());
    for (w, res, seen) in gone {
        let now = *read.entry(res.clone()).or_insert_with(|| {
            current(ctx, &res).map_or(Some(seen), |c| c.map(|(version, _)| version))
        });
        match now {
            None => moved.push(w),
            Some(v) if v == seen => timed_out.push(w),
            Some(_) => changed.push(w),
        }
    }
    hand_over(timed_out, Woken::TimedOut);
    hand_over(moved, Woken::SlotMoved);
    // Not charged to the pace: the pace did not choose these answers, and
    // charged they would let short `WAIT`s run its budget into a debt with
    // no bound, holding back the followers that wait without one.
    hand_over(changed, Woken::Changed);
}

fn hand_over(watchers: Vec<Watcher>, why: Woken) {
    let Some(unblock) = (unsafe { raw::RedisModule_UnblockClient }) else {
        return;
    };
    for w in watchers {
        let data = Box::into_raw(Box::new(why));
        if unsafe { unblock(w.0, data.cast::<c_void>()) } != api::OK {
            // Not taken: the server will never free it, so we do.
            drop(unsafe { Box::from_raw(data) });
        }
    }
}

extern "C" fn on_reply(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    guard("observer reply", api::OK, || {
        let c = Ctx(ctx);
        let result = (|| {
            let get = rm!(RedisModule_GetBlockedClientPrivateData);
            match unsafe { get(ctx).cast::<Woken>().as_ref() } {
                Some(Woken::Changed) => {}
                Some(Woken::TimedOut) => return c.reply_null(),
                Some(Woken::SlotMoved) => return c.reply_error(&Error::SlotMoved),
                None => {
                    return c.reply_error(&Error::Internal("observation ended without a reason"))
                }
            }
            let argv = Argv::new(argv, argc)?;
            let name = argv.key()?;
            // Only reads here: the server is sending replies, not running
            // commands.
            info::read(c, name, false, |view| reply(c, view.seen().version(), view))
        })();
        if let Err(e) = result {
            let _ = c.reply_error(&e);
        }
        api::OK
    })
}

/// `CLIENT UNBLOCK` (without ERROR), which the server reports as a timeout:
/// nil, unless the observer was held back by the pace from a change it has
/// not heard of (then the state, as when its own `WAIT` ends).
extern "C" fn on_timeout(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    guard("observer unblocked", api::OK, || {
        let Some(handle_of) = (unsafe { raw::RedisModule_GetBlockedClientHandle }) else {
            return api::OK;
        };
        let bc = unsafe { handle_of(ctx) };
        let c = Ctx(ctx);
        let seen = watchers::with(|w| w.seen(Watcher(bc)));
        let answered =
            seen.is_some_and(|(res, saw)| reply_if_changed(c, &res, saw).unwrap_or(false));
        if !answered {
            let _ = c.reply_null();
        }
        left(bc);
        api::OK
    })
}

/// Replies the state of `res` if its version is not `saw`; whether it did.
/// The context is the observer's own client, so its database is the one
/// it observed in and is never changed here.
fn reply_if_changed(ctx: Ctx, res: &Resource, saw: u64) -> Result<bool, Error> {
    if unsafe { rm!(RedisModule_GetSelectedDb)(ctx.0) } != res.db {
        return Ok(false);
    }
    with_key(ctx, res, |name| {
        info::read(ctx, name, false, |view| {
            let version = view.seen().version();
            if version == saw {
                return Ok(false);
            }
            reply(ctx, version, view)?;
            Ok(true)
        })
    })?
}

/// The connection closed or was killed, or `CLIENT UNBLOCK ... ERROR`
/// ended the wait with the server's own error reply.
extern "C" fn on_disconnected(
    _ctx: *mut raw::RedisModuleCtx,
    bc: *mut raw::RedisModuleBlockedClient,
) {
    guard("observer disconnect", (), || left(bc))
}

/// The observer left on its own: `unblock` it if we still owe that (once).
fn left(bc: *mut raw::RedisModuleBlockedClient) {
    if watchers::with(|w| w.leave(Watcher(bc))) {
        if let Some(unblock) = unsafe { raw::RedisModule_UnblockClient } {
            unsafe { unblock(bc, std::ptr::null_mut()) };
        }
    }
}

extern "C" fn free_woken(_ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    guard("observer free", (), || {
        if !data.is_null() {
            drop(unsafe { Box::from_raw(data.cast::<Woken>()) });
        }
    })
}
