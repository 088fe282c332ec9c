//! Sets of resources: `DLOCK.MACQUIRE`, and every queue that
//! holds a set request. Resources whose queues share set requests form a
//! component (one database, one cluster slot), decided in one step: its keys
//! opened together and their dead holds pruned, `lock::component` deciding
//! every queued request (and a new `MACQUIRE`) in enqueue order, one fence
//! per grant, every key written in the same command or timer callback (so
//! replicas and the AOF get one transaction), then the answers handed to
//! the parking lot.
//!
//! The single-resource planner never decides a queue that holds a set
//! request (`holds_queue::plan_queue`); whoever changes such a resource
//! settles its component here instead (commands before and after they
//! decide, timers, revocations, `DLOCK.INFO`).

use std::collections::HashMap;
use std::ffi::c_char;

use redis_module::raw;

use super::api::{now_us, rm, Ctx};
use super::blocking::{self, Resource};
use super::holds::{Deadlines, Work};
use super::holds_queue::arm_for_queue;
use super::keys::LockKey;
use super::{cluster, quarantine, state, stats};
use crate::lock::ask::{Ask, Mode};
use crate::lock::component::{admit_component, Granted, Queued};
use crate::lock::holds::Holds;
use crate::lock::queue::{Component, Wants};
use crate::lock::Error;

/// A key name the module created, freed on drop.
pub struct Name {
    ctx: Ctx,
    pub ptr: *mut raw::RedisModuleString,
}

impl Name {
    pub fn new(ctx: Ctx, key: &[u8]) -> Result<Self, Error> {
        let create = rm!(RedisModule_CreateString);
        let ptr = unsafe { create(ctx.0, key.as_ptr().cast::<c_char>(), key.len()) };
        if ptr.is_null() {
            return Err(Error::Internal("cannot create a key name"));
        }
        Ok(Name { ctx, ptr })
    }
}

impl Drop for Name {
    fn drop(&mut self) {
        if let Some(free) = unsafe { raw::RedisModule_FreeString } {
            unsafe { free(self.ctx.0, self.ptr) };
        }
    }
}

/// One resource of a component, its key open for writing. Fields drop in
/// order: the key is closed before its name is freed.
struct Member {
    work: Work,
    key: LockKey,
    name: Name,
}

/// A `DLOCK.MACQUIRE` being decided now, behind everything queued.
pub struct NewSet<'a> {
    pub members: Vec<Resource>,
    pub token: &'a [u8],
    pub ttl_ms: u64,
    pub mode: Mode,
    /// `WAIT timeout_ms`, when this client may block.
    pub wait_ms: Option<u64>,
    /// Refuses a token above `dlock.max-token-length` for a new set.
    pub check_new_token: &'a dyn Fn() -> Result<(), Error>,
}

impl NewSet<'_> {
    fn ask(&self) -> Ask<'_> {
        Ask {
            token: self.token,
            owner: None,
            mode: self.mode,
            limit: None,
            ttl_ms: self.ttl_ms,
        }
    }
}

/// What became of a new set request.
#[derive(Debug)]
pub enum Outcome {
    Granted {
        fence: u64,
    },
    /// Queued (with `WAIT`); the client is blocked.
    Queued,
    /// Not now, and no `WAIT`: nil.
    Busy,
}

/// Settles the component of `res` (from a timer, a revocation, or around a
/// command on one of its resources).
pub fn settle(ctx: Ctx, res: &Resource) -> Result<(), Error> {
    settle_all(ctx, std::slice::from_ref(res))
}

/// Settles, in one step, the components of those of `resources` (one
/// database) on which a set request waits: a command or a revocation that
/// changed several members pays for their component once.
pub fn settle_all(ctx: Ctx, resources: &[Resource]) -> Result<(), Error> {
    let starts = with_sets(resources);
    if starts.is_empty() {
        return Ok(());
    }
    decide(ctx, &starts, None).map(|_| ())
}

/// Those of `resources` on which a set request waits.
fn with_sets(resources: &[Resource]) -> Vec<Resource> {
    resources
        .iter()
        .filter(|r| blocking::has_sets(r))
        .cloned()
        .collect()
}

/// Settles the component of `starts` and decides `new` behind its queue.
/// `None` without a new request. On `Err` nothing a client can see changed
/// (waiters whose `WAIT` ran out may have been answered nil).
pub fn decide(
    ctx: Ctx,
    starts: &[Resource],
    new: Option<&NewSet<'_>>,
) -> Result<Option<Outcome>, Error> {
    let now = now_us();
    match open(ctx, starts, new.is_some(), now)? {
        Some((comp, members)) => step(ctx, &comp, members, new, now),
        None => Ok(None),
    }
}

/// How many fresh fences settling the components of those of `resources`
/// on which a set request waits would draw now, were `released`'s holds
/// of `resources` dropped first. Changes no key and draws no fence (waiters
/// whose `WAIT` ran out may have been answered nil).
pub fn fences_needed(
    ctx: Ctx,
    resources: &[Resource],
    released: Option<&[u8]>,
) -> Result<usize, Error> {
    let starts = with_sets(resources);
    if starts.is_empty() {
        return Ok(0);
    }
    let now = now_us();
    let Some((comp, mut members)) = open(ctx, &starts, false, now)? else {
        return Ok(0);
    };
    if let Some(token) = released {
        for (res, member) in comp.resources.iter().zip(members.iter_mut()) {
            if resources.contains(res) {
                member.work.drop_hold(token);
            }
        }
    }
    let held_until = held_until(&comp, now / 1000);
    let queued = queued_of(&comp, &held_until, quarantine::ms_left(), None);
    let holds: Vec<&Holds> = members.iter().map(|m| &m.work.holds).collect();
    Ok(admit_component(&holds, &queued)
        .iter()
        .filter(|(_, d)| matches!(d, Ok(Granted::Fresh)))
        .count())
}

/// A component with every key open and its holds loaded.
type Opened = (Component<Resource>, Vec<Member>);

/// The component of `starts` with every key open and its holds loaded at
/// `now`; `None` when nothing is left to settle. `new`: a request is to be
/// decided on `starts`, which refuses a start of another type.
fn open(ctx: Ctx, starts: &[Resource], new: bool, now: u64) -> Result<Option<Opened>, Error> {
    // Each pass drops the waiters of a resource that no longer holds a
    // lock; it ends when none is left, at the latest once every queue of
    // the component is gone.
    loop {
        let comp = gather(ctx, starts, now / 1000)?;
        let mut members = Vec::with_capacity(comp.resources.len());
        let mut wrong = Vec::new();
        for (i, res) in comp.resources.iter().enumerate() {
            let name = Name::new(ctx, &res.key)?;
            let key = LockKey::open_write(ctx, name.ptr)?;
            match Work::load_at(&key, now) {
                Ok(work) => members.push(Member { work, key, name }),
                Err(Error::WrongType) if new && i < starts.len() => return Err(Error::WrongType),
                Err(Error::WrongType) => wrong.push(res.clone()),
                Err(e) => return Err(e),
            }
        }
        if wrong.is_empty() {
            return Ok(Some((comp, members)));
        }
        drop(members);
        for res in &wrong {
            blocking::fail(Some(res), Error::WrongType);
        }
        // A start resource of another type stays so: once nobody waits on
        // what remains, there is nothing left to settle (else: endless loop).
        if !new && blocking::component(starts).requests.is_empty() {
            return Ok(None);
        }
    }
}

/// Until when each resource of `comp` is still believed held by the owner
/// of an evicted lease (`None`: not, or no longer at `now_ms`).
fn held_until(comp: &Component<Resource>, now_ms: u64) -> Vec<Option<u64>> {
    comp.resources
        .iter()
        .map(|r| blocking::held_until(r).filter(|u| *u >= now_ms))
        .collect()
}

/// The requests queued in `comp`, in enqueue order, then `new`; none
/// may be granted while `quarantined`.
fn queued_of<'a>(
    comp: &'a Component<Resource>,
    held_until: &[Option<u64>],
    quarantined: u64,
    new: Option<&'a NewSet<'_>>,
) -> Vec<Queued<'a>> {
    let mut queued: Vec<Queued<'_>> = comp
        .requests
        .iter()
        .map(|r| Queued {
            members: r.members.clone(),
            ask: ask_of(&r.token, &r.wants, r.ttl_ms),
            frozen: quarantined > 0
                || r.members
                    .iter()
                    .any(|m| held_until.get(*m).is_some_and(Option::is_some)),
        })
        .collect();
    if let Some(n) = new {
        queued.push(Queued {
            members: (0..n.members.len()).collect(),
            ask: n.ask(),
            frozen: false,
        });
    }
    queued
}

/// The component of `starts`, after its given-up waiters left and, where
/// this node may not grant the slot, its waiters were sent away.
fn gather(ctx: Ctx, starts: &[Resource], now_ms: u64) -> Result<Component<Resource>, Error> {
    let comp = blocking::component(starts);
    if comp.requests.is_empty() {
        return Ok(comp);
    }
    for res in &comp.resources {
        blocking::time_out_given_up(res, now_ms);
    }
    let comp = blocking::component(starts);
    let first = comp.resources.first().map(|r| &*r.key).unwrap_or_default();
    if !comp.requests.is_empty() && !cluster::may_grant(ctx, first)? {
        // The slot is moving: the waiters retry and follow the redirect.
        for res in &comp.resources {
            blocking::fail(Some(res), Error::SlotMoved);
        }
        return Ok(blocking::component(starts));
    }
    Ok(comp)
}

/// Decides and writes one step of an opened component.
fn step(
    ctx: Ctx,
    comp: &Component<Resource>,
    mut members: Vec<Member>,
    new: Option<&NewSet<'_>>,
    now_us: u64,
) -> Result<Option<Outcome>, Error> {
    let quarantined = quarantine::ms_left();
    let held_until = held_until(comp, now_us / 1000);
    let queued = queued_of(comp, &held_until, quarantined, new);
    let new_at = new.map(|_| comp.requests.len());
    let decisions = {
        let holds: Vec<&Holds> = members.iter().map(|m| &m.work.holds).collect();
        admit_component(&holds, &queued)
    };
    let mut outcome = None;
    // Every fence first: a failure leaves every key as it was.
    let mut fences: HashMap<usize, u64> = HashMap::with_capacity(decisions.len());
    for (i, d) in &decisions {
        let fence = match d {
            Ok(Granted::Fresh) if Some(*i) == new_at => {
                if let Some(n) = new {
                    (n.check_new_token)()?;
                }
                if quarantined > 0 {
                    outcome = Some(match new.and_then(|n| n.wait_ms) {
                        Some(_) => Outcome::Queued,
                        None => {
                            return Err(Error::Quarantine {
                                ms_left: quarantined,
                            })
                        }
                    });
                    continue;
                }
                state::with_clock(|c| c.next(now_us))?
            }
            Ok(Granted::Fresh) => state::with_clock(|c| c.next(now_us))?,
            Ok(Granted::Retry { fence } | Granted::Owner { fence }) => *fence,
            Ok(Granted::SameAs(j) | Granted::Duplicate(j)) => match fences.get(j) {
                Some(f) => *f,
                None => continue,
            },
            Err(e) if Some(*i) == new_at => return Err(e.clone()),
            Err(_) => continue,
        };
        fences.insert(*i, fence);
    }
    let mut granted = Vec::new();
    let mut retried: Vec<Box<[u8]>> = Vec::new();
    let mut refused = Vec::new();
    let mut acquired = Vec::new();
    for (i, d) in decisions {
        let Some(q) = queued.get(i) else { continue };
        let grant = match d {
            Err(e) => {
                if let Some(r) = comp.requests.get(i) {
                    refused.push((r.id, e));
                }
                continue;
            }
            Ok(g) => g,
        };
        let Some(&fence) = fences.get(&i) else {
            continue;
        };
        let is_new = Some(i) == new_at;
        match grant {
            Granted::Retry { .. } => {
                for m in &q.members {
                    if let Some(member) = members.get_mut(*m) {
                        member.work.move_deadline(q.ask.token, q.ask.ttl_ms);
                    }
                }
                retried.push(q.ask.token.into());
            }
            // The same token granted earlier in this step: its client now
            // knows the fence, so that grant stands.
            Granted::Duplicate(_) if is_new => retried.push(q.ask.token.into()),
            Granted::Duplicate(_) => {}
            Granted::Fresh | Granted::SameAs(_) | Granted::Owner { .. } => {
                for m in &q.members {
                    if let Some(member) = members.get_mut(*m) {
                        member.work.add(&q.ask, fence);
                    }
                }
            }
        }
        if is_new {
            if matches!(grant, Granted::Retry { .. } | Granted::Duplicate(_)) {
                stats::REFRESHES.add();
                for res in comp.resources.iter().take(q.members.len()) {
                    blocking::confirm(|| Ok(res.clone()), q.ask.token)?;
                }
            } else {
                stats::GRANTS.add();
                acquired.extend(q.members.iter().copied());
            }
            outcome = Some(Outcome::Granted { fence });
        } else if let Some(r) = comp.requests.get(i) {
            granted.push((r.id, fence));
        }
    }
    let handed: Vec<usize> = granted
        .iter()
        .filter_map(|(id, _)| comp.requests.iter().find(|r| r.id == *id))
        .flat_map(|r| r.members.iter().copied())
        .collect();
    let mut deadlines: Vec<Deadlines> = Vec::with_capacity(members.len());
    for (i, m) in members.into_iter().enumerate() {
        let Member {
            work,
            mut key,
            name,
        } = m;
        deadlines.push(work.finish(ctx, &mut key, name.ptr)?);
        if acquired.contains(&i) {
            stats::notify(ctx, c"dlock.acquired", name.ptr);
        }
        if handed.contains(&i) {
            stats::notify(ctx, c"dlock.handoff", name.ptr);
        }
    }
    for _ in &granted {
        stats::GRANTS.add();
        stats::HANDOFFS.add();
    }
    let retried: Vec<&[u8]> = retried.iter().map(|t| &**t).collect();
    if !granted.is_empty() || !refused.is_empty() {
        blocking::grant_entries(&granted, &retried, refused);
    }
    let outcome = new.map(|n| match outcome {
        Some(Outcome::Granted { fence }) => Ok(Outcome::Granted { fence }),
        _ => wait_or_busy(ctx, n),
    });
    let outcome = outcome.transpose()?;
    for (i, res) in comp.resources.iter().enumerate() {
        if blocking::waiters_on(res) == 0 {
            continue;
        }
        if let Some(Some(until)) = held_until.get(i) {
            blocking::arm_expiry(res, *until)?;
        }
        if let Some(d) = deadlines.get(i) {
            arm_for_queue(res, *d)?;
        }
    }
    Ok(outcome)
}

/// A new set that cannot be granted now: queued with `WAIT`, else nil.
fn wait_or_busy(ctx: Ctx, n: &NewSet<'_>) -> Result<Outcome, Error> {
    let Some(timeout) = n.wait_ms else {
        stats::CONTENDED.add();
        return Ok(Outcome::Busy);
    };
    // A refused request counts nothing.
    (n.check_new_token)()?;
    stats::CONTENDED.add();
    let wants = Wants {
        mode: n.mode,
        ..Wants::default()
    };
    blocking::block_on(ctx, n.members.clone(), n.token, wants, n.ttl_ms, timeout)?;
    Ok(Outcome::Queued)
}

fn ask_of<'a>(token: &'a [u8], wants: &'a Wants, ttl_ms: u64) -> Ask<'a> {
    Ask {
        token,
        owner: wants.owner.as_deref(),
        mode: wants.mode,
        limit: wants.limit,
        ttl_ms,
    }
}
