//! Read-only questions about who waits where: the resources with waiters,
//! their components and parts, and what their queues hold.

use redis_module::raw;

use super::parked::{anyone_waiting, parking, wait_clock_ms, waiters_on};
use crate::server::edge::api::Ctx;
use crate::server::resource::Resource;
use dlock_core::ask::Mode;
use dlock_core::queue::{Component, Frontier};
use dlock_core::resource::holds::Holds;
use dlock_core::Error;

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
            reserved_rank: vec![None; starts.len()],
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

/// The ids of `token`'s requests queued on `res` (O(1): the queue's token
/// index), in enqueue order; none when it does not wait there.
pub fn ids_of_token(res: &Resource, token: &[u8]) -> Vec<u64> {
    if !anyone_waiting() {
        return Vec::new();
    }
    parking().queues().ids_of_token(res, token)
}

/// Whether every request queued on `res` is a plain one (then the plain
/// handoff applies).
pub fn queue_is_plain(res: &Resource) -> bool {
    !anyone_waiting() || parking().queues().is_plain(res)
}

pub fn held_until(res: &Resource) -> Option<u64> {
    if !anyone_waiting() {
        return None;
    }
    parking().queues().held_until(res)
}

/// Where `token` stands in `res`'s queue (1: served next), if it waits
/// there. O(log n) in the queue's length.
pub fn position(res: &Resource, token: &[u8]) -> Option<usize> {
    if !anyone_waiting() {
        return None;
    }
    parking().queues().position(res, token)
}

/// One waiter as `DLOCK.WAITERS` shows it.
#[derive(Debug)]
pub struct QueuedRequest {
    pub position: usize,
    pub token: Box<[u8]>,
    pub owner: Option<Box<[u8]>>,
    pub mode: Mode,
    pub limit: u32,
    /// The permits it asks for (`PERMITS k`), when more than 1.
    pub permits: Option<u32>,
    /// Its `PRIORITY` (0 when none).
    pub priority: u16,
    /// A set request's member count.
    pub set: Option<usize>,
    pub session: Option<Box<[u8]>>,
    /// Milliseconds since it joined the queue.
    pub waited_ms: u64,
    /// Milliseconds left of its `WAIT`; `None` waits forever.
    pub timeout_ms: Option<u64>,
}

/// Up to `count` waiters of `res` from position `offset + 1` on, in the
/// order they are served. O(log n + count), copied out so that no lock is
/// held while replying.
pub fn waiters_page(res: &Resource, offset: u64, count: usize) -> Vec<QueuedRequest> {
    if !anyone_waiting() {
        return Vec::new();
    }
    let Some(from) = usize::try_from(offset).ok().and_then(|o| o.checked_add(1)) else {
        return Vec::new();
    };
    let now_ms = wait_clock_ms();
    let p = parking();
    let queues = p.queues();
    queues
        .waiters_from(res, from)
        .take(count)
        .map(|(position, w)| QueuedRequest {
            position,
            token: w.token.clone(),
            owner: w.wants.owner.clone(),
            mode: w.wants.mode,
            limit: w.wants.limit.unwrap_or(1),
            permits: w.wants.permits,
            priority: w.priority,
            set: w
                .in_set
                .then(|| queues.resources_of(w.id).map_or(0, <[Resource]>::len)),
            session: w.wants.session.clone(),
            waited_ms: now_ms.saturating_sub(w.queued_at),
            timeout_ms: w.gives_up_at.map(|at| at.saturating_sub(now_ms)),
        })
        .collect()
}
