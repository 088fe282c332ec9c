//! `DLOCK.INFO`: what a resource holds, read after any handoff that is
//! due (a resource with waiters never shows as free), or as it stands
//! inside a transaction or script. The replies are `holds_info`'s.

pub mod holds;

use redis_module::raw;

use crate::server::commands::wanted::Wanted;
use crate::server::edge::api::{self, Ctx};
use crate::server::edge::ffi::Argv;
use crate::server::execute::inputs;
use crate::server::keyspace::keys::LockKey;
use crate::server::keyspace::value::Stored;
use crate::server::waiting::blocking::{self, Resource};
use crate::server::{execute::handoff, execute::revoke, execute::step, jobs};
use dlock_core::ask::Mode;
use dlock_core::observe::{hold_mark, Seen};
use dlock_core::plan::plain::Route;
use dlock_core::resource::holds::{Holds, NEVER};
use dlock_core::{request::args, Error};

/// `DLOCK.INFO resource` -> nil when free, else a map of the lease (of
/// the holds, for a resource that is not a plain lock: `holds_info`).
pub fn info(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    args::info(argv.bytes())?;
    let name = argv.key()?;
    read(ctx, name, true, |view| view.reply(ctx))
}

/// What `DLOCK.INFO` shows of a resource.
pub enum View<'a> {
    Free,
    /// Nobody holds it; a handoff to its queue is pending.
    Reserved {
        queue: Wanted,
    },
    Plain {
        token: &'a [u8],
        fence: u64,
        /// Like PTTL: -1 when an admin removed the expiry.
        ttl: i64,
        queue: Wanted,
    },
    /// A resource that is not a plain lock, with a live hold.
    Holds {
        holds: &'a Holds,
        now_ms: u64,
        queue: Wanted,
    },
}

impl View<'_> {
    pub fn reply(&self, ctx: Ctx) -> Result<(), Error> {
        match self {
            View::Free => ctx.reply_null(),
            // The same map as a held lock, with no token (nil), fence 0 and
            // ttl -2.
            View::Reserved { queue } => holds::reply_plain(ctx, None, 0, -2, *queue),
            View::Plain {
                token,
                fence,
                ttl,
                queue,
            } => holds::reply_plain(ctx, Some(token), *fence, *ttl, *queue),
            View::Holds {
                holds,
                now_ms,
                queue,
            } => holds::reply(ctx, holds, *now_ms, *queue),
        }
    }

    /// When a live hold next ends by its deadline (unix ms): the holders
    /// change then, with no command.
    pub fn ends_at(&self) -> Option<u64> {
        match self {
            View::Free | View::Reserved { .. } => None,
            View::Plain { ttl, .. } => u64::try_from(*ttl)
                .ok()
                .map(|ttl| api::now_us() / 1000 + ttl),
            View::Holds { holds, now_ms, .. } => {
                holds.next_deadline(*now_ms).filter(|d| *d < NEVER)
            }
        }
    }

    /// Its holders, as observers compare them.
    pub fn seen(&self) -> Seen {
        match self {
            View::Free => Seen::Free,
            View::Reserved { .. } => Seen::Reserved,
            View::Plain { token, fence, .. } => {
                Seen::Held(hold_mark(token, *fence, Mode::Exclusive))
            }
            View::Holds { holds, now_ms, .. } => Seen::Held(holds.live_marks(*now_ms)),
        }
    }
}

/// Reads the resource behind `name` as `DLOCK.INFO` shows it, after any
/// handoff that is due (a resource with waiters never shows as free), or
/// as it stands inside a transaction or script, and gives the view to `f`.
/// Without `settle` it only reads (a blocked client's reply callback, where
/// nothing may be written): a pending handoff shows as reserved.
pub fn read<R>(
    ctx: Ctx,
    name: *mut raw::RedisModuleString,
    settle: bool,
    f: impl FnOnce(&View<'_>) -> Result<R, Error>,
) -> Result<R, Error> {
    // Also inside a transaction or script: no answer may show a grant
    // whose waiter left.
    if settle {
        revoke::before_command(ctx, [name])?;
    }
    let waiting = blocking::waiting_resource(ctx, name)?;
    // Inside MULTI/EXEC or a script INFO only reads, at the transaction's
    // frozen time where the server has one: a transaction of INFOs is one
    // instant (nothing is decided between them; a pending handoff shows as
    // reserved).
    let in_unit = waiting.is_some() && ctx.flags()?.in_transaction_or_script();
    if let Some(res) = waiting.as_ref().filter(|_| settle && !in_unit) {
        settle_before_reading(ctx, name, res)?;
    }
    let key = LockKey::open_read(ctx, name)?;
    // Who waits: how many, and the highest priority among them (shown
    // only when above 0).
    let queue = waiting.as_ref().map_or(Wanted::default(), |res| Wanted {
        waiters: blocking::waiters_on(res),
        priority: blocking::top_priority(res),
    });
    // Revocations that must wait (writes are held back): their grants
    // reached nobody, and an owner reading its fence here would believe it
    // holds the lock its revocation is about to release.
    let revoked = if jobs::revocations_pending() {
        jobs::revoked_on(&Resource::of(ctx, name)?)
    } else {
        Vec::new()
    };
    let is_revoked =
        |token: &[u8], fence: u64| revoked.iter().any(|(t, f)| **t == *token && *f == fence);
    let now_ms = api::read_now_us(in_unit || multi_read_in_unit(ctx, &key)?) / 1000;
    let nobody = if queue.waiters > 0 {
        // Free, but reserved for its queue: the handoff waits for a
        // quarantine, paused writes or an evicted lease's deadline.
        View::Reserved { queue }
    } else {
        View::Free
    };
    if let Some(Stored::Multi(h)) = key.stored()? {
        // An admin's earlier expiry of the key ends every hold there
        // (`Work::load` writes that down at the next change).
        let clamped;
        let h = match key.deadline()? {
            Some(until) if h.deadline_ms().is_some_and(|latest| latest > until) => {
                let mut c = h.clone();
                c.clamp(until);
                clamped = c;
                &clamped
            }
            _ => h,
        };
        let unrevoked;
        let revoked: Vec<Box<[u8]>> = h
            .iter()
            .filter(|x| is_revoked(x.token, x.fence))
            .map(|x| Box::from(x.token))
            .collect();
        let h = if !revoked.is_empty() {
            let mut c = h.clone();
            revoked.iter().for_each(|t| {
                c.release(t);
            });
            unrevoked = c;
            &unrevoked
        } else {
            h
        };
        // The live holds decide the form, not when the dead ones are
        // dropped: one live plain hold answers as a plain lock.
        if h.live(now_ms).next().is_some() {
            return f(&View::Holds {
                holds: h,
                now_ms,
                queue,
            });
        }
        // Every hold has passed its deadline: free (or reserved).
        return f(&nobody);
    }
    let lease = key.lease()?.filter(|l| !is_revoked(l.token(), l.fence()));
    let Some(lease) = lease else {
        return f(&nobody);
    };
    let ttl = match key.deadline()? {
        Some(at) => at.saturating_sub(now_ms) as i64,
        None => -1,
    };
    f(&View::Plain {
        token: lease.token(),
        fence: lease.fence(),
        ttl,
        queue,
    })
}

/// Whether this is a read of a multi-hold value (whose holds' deadlines
/// are judged by the module's clock, not by key expiry) inside a
/// transaction or script. The flags are asked only then: they cost a call.
fn multi_read_in_unit(ctx: Ctx, key: &LockKey) -> Result<bool, Error> {
    Ok(key.is_multi().unwrap_or(false) && ctx.flags()?.in_transaction_or_script())
}

/// INFO must not show a resource as free while it has waiters: complete a
/// pending handoff first, unless writes are held back right now.
pub(crate) fn settle_before_reading(
    ctx: Ctx,
    name: *mut raw::RedisModuleString,
    res: &blocking::Resource,
) -> Result<(), Error> {
    if ctx.flags()?.is_replica() || jobs::writes_paused() {
        return Ok(());
    }
    let mut key = LockKey::open_write(ctx, name)?;
    if inputs::route_key(&key, Some(res), true) == Route::Step {
        // Readers, permits, owners or sets: one step serves the queue.
        drop(key);
        if let Err(e) = step::settle(ctx, res) {
            ctx.log_warning(&format!("handoff before DLOCK.INFO failed: {e}"));
        }
        return Ok(());
    }
    if matches!(key.lease(), Ok(None)) {
        // If the handoff cannot happen (no fence left), INFO still answers:
        // the resource shows as reserved for its queue.
        if let Err(e) = handoff::serve_queue(ctx, &mut key, name, res) {
            ctx.log_warning(&format!("handoff before DLOCK.INFO failed: {e}"));
        }
    }
    Ok(())
}
