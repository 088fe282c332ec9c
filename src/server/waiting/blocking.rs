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

mod answers;
mod grants;
mod lookups;
mod parked;
mod wait_timer;
mod wake_ups;

use std::ffi::c_longlong;

use crate::server::edge::api::{rm, Ctx};
use crate::server::notify::watchers;
use crate::server::sessions;
use answers::{free_answer, on_disconnected, on_reply, on_timeout};
use dlock_core::queue::{Priority, Rank, Wants};
use dlock_core::Error;
use parked::{wait_clock_us, with_parking, Blocked};
use wait_timer::arm_wait_timer;

pub use crate::server::resource::Resource;
pub use answers::hand_over;
pub use grants::{confirm, fail, grant_entries, grant_head, move_grants, plain_head};
pub use lookups::{
    component, has_sets, held_until, ids_of_token, part, position, queue_is_plain, resources,
    resources_where, waiters_page, waiting_resource, widen, QueuedRequest,
};
pub use parked::{anyone_waiting, total_waiters, waiters_on};
pub use wait_timer::{rearm_late, time_out_given_up};
pub use wake_ups::{arm_expiry, hold_after_eviction, note_deadline, timer_fired};

/// The resources request `id` waits for, while it waits.
pub fn resources_of(id: u64) -> Option<Vec<Resource>> {
    with_parking(|p| p.resources_of(id))
}

/// Request `id`'s token and resources, while it waits.
pub fn waiting(id: u64) -> Option<(Box<[u8]>, Vec<Resource>)> {
    with_parking(|p| p.waiting(id))
}

/// Whether request `id` still waits.
pub fn is_queued(id: u64) -> bool {
    with_parking(|p| p.is_queued(id))
}

/// Parks the calling client at the tail of `res`'s queue; `timeout_ms` 0
/// waits forever.
#[allow(clippy::too_many_arguments)]
pub fn block(
    ctx: Ctx,
    res: Resource,
    token: &[u8],
    wants: Wants,
    ttl_ms: u64,
    timeout_ms: u64,
    priority: Priority,
) -> Result<(), Error> {
    block_on(ctx, vec![res], token, wants, ttl_ms, timeout_ms, priority)
}

/// A command's `PRIORITY` with its rank key, computed once when it runs,
/// on the clock waits are reckoned on (monotonic: a wall clock stepping
/// back would let a later request pass), with `dlock.priority-aging-ms`
/// as it is now.
pub fn arriving(priority: Option<u16>) -> Priority {
    let level = priority.unwrap_or(0);
    let aging = crate::server::state::priority_aging_ms();
    Priority {
        level,
        key: Rank::key(wait_clock_us() / 1000, level, aging),
    }
}

/// The rank of `res`'s head waiter, if anyone waits.
pub fn head_rank(res: &Resource) -> Option<Rank> {
    if waiters_on(res) == 0 {
        return None;
    }
    parked::parking().queues().head_rank(res)
}

/// The highest priority waiting on `res`: 0 when nobody waits or none
/// asked for one.
pub fn top_priority(res: &Resource) -> u16 {
    if waiters_on(res) == 0 {
        return 0;
    }
    parked::parking().queues().top_priority(res)
}

/// Parks the calling client, at its rank (`priority`), in the queue of
/// every resource of `members` at once (one set request, or a single one).
#[allow(clippy::too_many_arguments)]
pub fn block_on(
    ctx: Ctx,
    members: Vec<Resource>,
    token: &[u8],
    wants: Wants,
    ttl_ms: u64,
    timeout_ms: u64,
    priority: Priority,
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
    let session = wants.session.clone();
    let id = with_parking(|p| {
        let id = match <[Resource; 1]>::try_from(members) {
            Ok([res]) => p.park_ranked(res, token, wants, ttl_ms, gives_up_at, handle, priority),
            Err(members) => {
                p.park_set_ranked(members, token, wants, ttl_ms, gives_up_at, handle, priority)
            }
        };
        p.queues_mut().joined_at(id, now / 1000);
        if let Some(at) = ends_at {
            p.ends_wait_at(handle, at);
        }
        id
    });
    if let Some(s) = session {
        sessions::note_wait(&s, id, is_queued);
    }
    if let Some(at) = ends_at {
        arm_wait_timer(at);
    }
    for res in &starting {
        watchers::changed(res);
    }
    Ok(())
}
