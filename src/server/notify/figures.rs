//! The statistics of `DLOCK.STATS` (`dlock_core::stats`), fed by what the
//! server carries out: grants, holds that end, requests that leave a
//! queue. Only a master counts: a replica applies its master's effects,
//! which are not events of its own.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};

use redis_module::raw;

use crate::server::edge::api::{self, Ctx};
use crate::server::resource::Resource;
use crate::server::state;
use dlock_core::parking::LeftQueue;
use dlock_core::stats::{self, End, Kind, Stats};

static STATS: LazyLock<Mutex<Stats>> =
    LazyLock::new(|| Mutex::new(Stats::new(api::now_us() / 1000)));

/// `dlock.stats`: whether anything is counted.
static ENABLED: AtomicBool = AtomicBool::new(true);

pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// The statistics, to read or reset.
pub fn with<R>(f: impl FnOnce(&mut Stats) -> R) -> R {
    f(&mut lock())
}

fn lock() -> MutexGuard<'static, Stats> {
    STATS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `f` when this server counts: enabled, and a master.
fn count(f: impl FnOnce(&mut Stats)) {
    if enabled() && !state::is_replica() {
        f(&mut lock());
    }
}

fn as_stats(res: &Resource) -> stats::Resource<'_> {
    stats::Resource {
        db: res.db,
        name: &res.key,
    }
}

/// `name` in the caller's database, as the statistics know it.
fn named(ctx: Ctx, name: *mut raw::RedisModuleString) -> Option<Resource> {
    Resource::of(ctx, name).ok()
}

/// A command was granted at once.
pub fn granted(kind: Kind) {
    count(|s| s.granted(kind));
}

/// A request found `name` taken.
pub fn contended(ctx: Ctx, name: *mut raw::RedisModuleString, kind: Kind) {
    if let Some(res) = named(ctx, name) {
        contended_on(&res, kind);
    }
}

pub fn contended_on(res: &Resource, kind: Kind) {
    count(|s| s.contended(&as_stats(res), kind));
}

/// A `RELEASE ... TO` handed a hold over.
pub fn handed_over(kind: Kind) {
    count(|s| s.handed_over(kind));
}

/// A hold granted under `fence` (the server's clock in µs at the grant)
/// ended at `end_us`.
pub fn hold_ended(res: &Resource, kind: Kind, fence: u64, end_us: u64, end: End) {
    count(|s| s.hold_ended(&as_stats(res), kind, end_us.saturating_sub(fence), end));
}

/// As `hold_ended`, for `name` in the caller's database.
pub fn hold_of_name_ended(
    ctx: Ctx,
    name: *mut raw::RedisModuleString,
    kind: Kind,
    fence: u64,
    end_us: u64,
    end: End,
) {
    if !enabled() {
        return;
    }
    if let Some(res) = named(ctx, name) {
        hold_ended(&res, kind, fence, end_us, end);
    }
}

/// Requests that left their queues, at `now_ms` on the clock their
/// `queued_at` is on.
pub fn left_queues(left: Vec<LeftQueue<Resource>>, now_ms: u64) {
    if left.is_empty() {
        return;
    }
    count(|s| {
        for l in &left {
            let waited_us = match l.queued_at {
                0 => 0,
                at => now_ms.saturating_sub(at).saturating_mul(1000),
            };
            let anonymous = Resource {
                db: -1,
                key: Box::default(),
            };
            let res = as_stats(l.resource.as_ref().unwrap_or(&anonymous));
            if l.granted {
                s.granted_after_wait(&res, l.kind, waited_us);
            } else {
                s.gave_up(&res, l.kind, waited_us);
            }
        }
    });
}

/// The holds of the lock value last unlinked, for its `expired` event
/// (which comes right after, without the value): at most `UNLINKED_HOLDS`
/// of them, as (kind, fence, deadline in ms; `u64::MAX` when the key's
/// own expiry is the deadline).
static UNLINKED: Mutex<Vec<(Kind, u64, u64)>> = Mutex::new(Vec::new());

/// Holds of one value counted when its key expires; a semaphore of more
/// holds than this counts the first ones only.
const UNLINKED_HOLDS: usize = 64;

fn unlinked_stash() -> MutexGuard<'static, Vec<(Kind, u64, u64)>> {
    UNLINKED.lock().unwrap_or_else(|p| p.into_inner())
}

/// A plain lock leaves the keyspace (a release, DEL, expiry ...).
pub fn unlinked_plain(fence: u64) {
    if !enabled() {
        return;
    }
    let mut stash = unlinked_stash();
    stash.clear();
    stash.push((Kind::Lock, fence, u64::MAX));
}

/// A resource of several holds leaves the keyspace.
pub fn unlinked_holds(holds: impl Iterator<Item = (Kind, u64, u64)>) {
    if !enabled() {
        return;
    }
    let mut stash = unlinked_stash();
    stash.clear();
    stash.extend(holds.take(UNLINKED_HOLDS));
}

/// The lock unlinked last (`was_lock` said so) expired: each of its holds
/// ran out, at its deadline or, for a plain lock, now (the key's expiry,
/// which active expiry notices within about 100 ms).
pub fn expired(ctx: Ctx, name: *mut raw::RedisModuleString) {
    let holds = std::mem::take(&mut *unlinked_stash());
    let Some(res) = named(ctx, name) else {
        return;
    };
    let now_us = api::now_us();
    for (kind, fence, deadline_ms) in holds {
        let end_us = now_us.min(deadline_ms.saturating_mul(1000));
        hold_ended(&res, kind, fence, end_us, End::Expired);
    }
}
