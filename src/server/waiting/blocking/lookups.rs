//! Read-only questions about who waits where: the resources with waiters,
//! their components and parts, and what their queues hold.

use redis_module::raw;

use super::parked::{anyone_waiting, parking, waiters_on};
use crate::server::edge::api::Ctx;
use crate::server::resource::Resource;
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
