//! The statistics of `DLOCK.STATS` (`dlock_core::stats`), fed by what the
//! server carries out: grants, holds that end, requests that leave a
//! queue. Only a master counts: a replica applies its master's effects,
//! which are not events of its own.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};

use redis_module::raw;

use crate::server::edge::api::{self, Ctx};
use crate::server::notify::slowlog;
use crate::server::resource::Resource;
use crate::server::state;
use dlock_core::parking::LeftQueue;
use dlock_core::stats::slowlog::{Ended, Seen, Slow};
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
pub fn named<'a>(ctx: Ctx, name: *mut raw::RedisModuleString) -> Option<stats::Resource<'a>> {
    let db_of = unsafe { raw::RedisModule_GetSelectedDb }?;
    let db = unsafe { db_of(ctx.0) };
    Some(stats::Resource {
        db,
        name: api::bytes(name).ok()?,
    })
}

/// A command was granted at once.
pub fn granted(kind: Kind) {
    count(|s| s.granted(kind));
}

/// A request found `name` taken.
pub fn contended(ctx: Ctx, name: *mut raw::RedisModuleString, kind: Kind) {
    if let Some(res) = named(ctx, name) {
        count(|s| s.contended(&res, kind));
    }
}

/// As `contended_set`, for the names of the caller's database.
pub fn contended_names(ctx: Ctx, names: &[*mut raw::RedisModuleString], kind: Kind) {
    contended_members(names.iter().filter_map(|n| named(ctx, *n)), kind);
}

/// A set request found one of `members` taken: one contended request,
/// shown on each member in the hot tables.
pub fn contended_set(members: &[Resource], kind: Kind) {
    contended_members(members.iter().map(as_stats), kind);
}

/// One contended request, counted on the first member, shown on each.
fn contended_members<'a>(members: impl Iterator<Item = stats::Resource<'a>>, kind: Kind) {
    count(|s| {
        for (i, r) in members.enumerate() {
            if i == 0 {
                s.contended(&r, kind);
            } else {
                s.contended_member(&r);
            }
        }
    });
}

/// A `RELEASE ... TO` handed a hold over.
pub fn handed_over(kind: Kind) {
    count(|s| s.handed_over(kind));
}

/// A hold that ended: what the statistics and the slow-lock log know of it.
#[derive(Debug, Clone, Copy)]
pub struct Ending<'a> {
    pub kind: Kind,
    /// Its fence: the server's clock in µs at its grant.
    pub fence: u64,
    pub end_us: u64,
    pub end: End,
    pub token: &'a [u8],
    pub owner: Option<&'a [u8]>,
    pub session: Option<&'a [u8]>,
}

impl Ending<'_> {
    fn held_us(&self) -> u64 {
        self.end_us.saturating_sub(self.fence)
    }
}

/// Who held a hold, kept for the slow-lock log until the hold's end is
/// counted.
#[derive(Debug, Clone)]
pub struct Holder {
    token: Box<[u8]>,
    owner: Option<Box<[u8]>>,
    session: Option<Box<[u8]>>,
}

impl Holder {
    pub fn of(token: &[u8], owner: Option<&[u8]>, session: Option<&[u8]>) -> Self {
        Holder {
            token: token.into(),
            owner: owner.map(Into::into),
            session: session.map(Into::into),
        }
    }
}

/// A hold's end as counted: who held it when `holder` kept that.
pub fn ending(
    holder: Option<&Holder>,
    kind: Kind,
    fence: u64,
    end_us: u64,
    end: End,
) -> Ending<'_> {
    Ending {
        kind,
        fence,
        end_us,
        end,
        token: holder.map_or(&[][..], |h| &h.token),
        owner: holder.and_then(|h| h.owner.as_deref()),
        session: holder.and_then(|h| h.session.as_deref()),
    }
}

/// Whether a hold granted under `fence` and ending at `end_us` goes to the
/// slow-lock log (so its caller keeps its token for it).
pub fn slow_hold(fence: u64, end_us: u64) -> bool {
    slowlog::logs(Slow::Hold, end_us.saturating_sub(fence))
}

/// A hold on `res` ended; `ctx` is the client's that ended it, if any.
pub fn hold_ended(ctx: Option<Ctx>, res: &stats::Resource<'_>, e: &Ending<'_>) {
    let held = e.held_us();
    count(|s| s.hold_ended(res, e.kind, held, e.end));
    if slowlog::logs(Slow::Hold, held) {
        let seen = Seen {
            slow: Slow::Hold,
            ended: match e.end {
                End::Released => Ended::Released,
                End::Expired => Ended::Expired,
                End::Revoked => Ended::Revoked,
            },
            micros: held,
            db: res.db,
            resource: res.name,
            token: e.token,
            owner: e.owner,
            session: e.session,
        };
        slowlog::record(ctx, &seen);
    }
}

/// As `hold_ended`, for `name` in the caller's database; `client` whether
/// the caller's client ended it.
pub fn hold_of_name_ended(
    ctx: Ctx,
    name: *mut raw::RedisModuleString,
    client: bool,
    e: &Ending<'_>,
) {
    if !enabled() && !slow_hold(e.fence, e.end_us) {
        return;
    }
    if let Some(res) = named(ctx, name) {
        hold_ended(client.then_some(ctx), &res, e);
    }
}

/// Requests that left their queues, at `now_ms` on the clock their
/// `queued_at` is on.
pub fn left_queues<H: Copy + Into<usize>>(left: Vec<LeftQueue<Resource, H>>, now_ms: u64) {
    if left.is_empty() {
        return;
    }
    let waited = |l: &LeftQueue<Resource, H>| match l.queued_at {
        0 => 0,
        at => now_ms.saturating_sub(at).saturating_mul(1000),
    };
    let anonymous = Resource {
        db: -1,
        key: Box::default(),
    };
    count(|s| {
        for l in &left {
            let res = as_stats(l.resource.as_ref().unwrap_or(&anonymous));
            if l.granted {
                s.granted_after_wait(&res, l.kind, waited(l));
            } else {
                s.gave_up(&res, l.kind, waited(l));
            }
        }
    });
    let mut logged: Vec<usize> = Vec::new();
    for l in &left {
        let micros = waited(l);
        // A set request leaves every member's queue: one entry for it.
        let handle: usize = l.handle.into();
        if !slowlog::logs(Slow::Wait, micros) || logged.contains(&handle) {
            continue;
        }
        logged.push(handle);
        let res = l.resource.as_ref().unwrap_or(&anonymous);
        let seen = Seen {
            slow: Slow::Wait,
            ended: if l.granted {
                Ended::Granted
            } else {
                Ended::GaveUp
            },
            micros,
            db: res.db,
            resource: &res.key,
            token: &l.token,
            owner: l.owner.as_deref(),
            session: l.session.as_deref(),
        };
        slowlog::record_wait(handle, &seen);
    }
}

/// A hold of the lock value last unlinked, kept for its `expired` event
/// (which comes right after, without the value): its kind, fence and
/// deadline (ms; `u64::MAX` when the key's own expiry is the deadline),
/// and, when the slow-lock log would take it, who held it.
struct Unlinked {
    kind: Kind,
    fence: u64,
    deadline_ms: u64,
    holder: Option<Holder>,
}

/// The first `UNLINKED_HOLDS` holds with their lengths, and how many more
/// of each kind (counted without a length).
struct Stash {
    holds: Vec<Unlinked>,
    more: [u64; 3],
}

static UNLINKED: Mutex<Stash> = Mutex::new(Stash {
    holds: Vec::new(),
    more: [0; 3],
});

/// Holds of one value kept with their lengths when its key leaves: a key of
/// more holds costs no more per deletion, the rest are only counted.
const UNLINKED_HOLDS: usize = 64;

fn unlinked_stash() -> MutexGuard<'static, Stash> {
    UNLINKED.lock().unwrap_or_else(|p| p.into_inner())
}

/// A hold (kind, token, owner, session, fence, deadline in ms) of a value
/// leaving the keyspace.
pub type UnlinkedHold<'a> = (Kind, &'a [u8], Option<&'a [u8]>, Option<&'a [u8]>, u64, u64);

/// A lock value leaves the keyspace (a release, DEL, expiry ...): its
/// holds are kept for an `expired` event that may follow.
pub fn unlinked<'a>(holds: impl Iterator<Item = UnlinkedHold<'a>>) {
    if !enabled() && slowlog::hold_ms() == 0 {
        return;
    }
    let now_us = api::now_us();
    let mut stash = unlinked_stash();
    stash.holds.clear();
    stash.more = [0; 3];
    let mut holds = holds;
    for (kind, token, owner, session, fence, deadline_ms) in holds.by_ref().take(UNLINKED_HOLDS) {
        let end_us = now_us.min(deadline_ms.saturating_mul(1000));
        let holder = slow_hold(fence, end_us).then(|| Holder::of(token, owner, session));
        stash.holds.push(Unlinked {
            kind,
            fence,
            deadline_ms,
            holder,
        });
    }
    for (kind, ..) in holds {
        if let Some(n) = stash.more.get_mut(kind.slot()) {
            *n += 1;
        }
    }
}

/// The lock unlinked last (`was_lock` said so) expired: each of its holds
/// ran out, at its deadline or, for a plain lock, now (the key's expiry,
/// which active expiry notices within about 100 ms).
pub fn expired(ctx: Ctx, name: *mut raw::RedisModuleString) {
    let (holds, more) = {
        let mut stash = unlinked_stash();
        (
            std::mem::take(&mut stash.holds),
            std::mem::take(&mut stash.more),
        )
    };
    if holds.is_empty() {
        return;
    }
    let Some(res) = named(ctx, name) else {
        return;
    };
    let now_us = api::now_us();
    for h in &holds {
        let end_us = now_us.min(h.deadline_ms.saturating_mul(1000));
        let e = ending(h.holder.as_ref(), h.kind, h.fence, end_us, End::Expired);
        hold_ended(None, &res, &e);
    }
    count(|s| {
        for kind in Kind::ALL {
            s.expired_unmeasured(&res, kind, more.get(kind.slot()).copied().unwrap_or(0));
        }
    });
}
