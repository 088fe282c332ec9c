//! One resource, many holders: the model every kind of lock
//! shares. A resource holds a set of holds, each with its own token, owner,
//! fence, mode and absolute deadline, and a limit on how many may coexist.
//! A plain lock is a resource with limit 1 and one exclusive hold; a
//! read-write lock mixes shared and exclusive holds; a semaphore has limit
//! n; reentrancy is several holds of one owner. The kinds differ only in
//! `Holds::decide`, so persistence, effects, handoff and INFO can have one
//! path each.
//!
//! This is the rule book, unit-tested without a server; `server/execute/hold_work.rs`
//! maps the commands onto it. Time is always passed in.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::ask::{Ask, Mode};
use crate::fence::FenceClock;
use crate::observe::hold_mark;
use crate::resource::admission::{Admission, Held as Entry, Indexed, OwnerHolds, Summary};
use crate::resource::lease::LeaseRef;
use crate::Error;

/// The deadline of a hold that has none: a plain lock whose key an admin
/// made persistent (`PERSIST`) keeps no deadline when it gains holds.
pub const NEVER: u64 = i64::MAX as u64;

/// One hold as plain data: what the layout stores, the effects carry and
/// the rules are tested with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    pub token: Box<[u8]>,
    /// Whose hold this is; without `OWNER` the token is its own owner.
    pub owner: Box<[u8]>,
    pub fence: u64,
    pub mode: Mode,
    /// Unix ms; the hold is gone once this has passed.
    pub deadline_ms: u64,
}

impl Hold {
    /// Like a Redis key: live up to and including its deadline.
    pub fn is_live(&self, now_ms: u64) -> bool {
        self.deadline_ms >= now_ms
    }
}

/// One stored hold, borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldRef<'h> {
    pub token: &'h [u8],
    pub owner: &'h [u8],
    pub fence: u64,
    pub mode: Mode,
    pub deadline_ms: u64,
}

impl HoldRef<'_> {
    /// Like a Redis key: live up to and including its deadline.
    pub fn is_live(&self, now_ms: u64) -> bool {
        self.deadline_ms >= now_ms
    }

    pub fn to_hold(self) -> Hold {
        Hold {
            token: self.token.into(),
            owner: self.owner.into(),
            fence: self.fence,
            mode: self.mode,
            deadline_ms: self.deadline_ms,
        }
    }
}

pub use crate::resource::admission::Decision;

/// How a queued request is granted by `Holds::admit_queue`.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueGrant {
    /// Its token already holds identically: the same fence back.
    Retry { fence: u64 },
    /// Its owner holds: the owner's fence.
    Owner { fence: u64 },
    /// A new owner: a fresh fence.
    Fresh,
    /// Its owner is granted earlier in the same step (entry `n`): that fence.
    SameOwnerAs(usize),
    /// Its token is granted earlier in the same step (entry `n`), asking
    /// the same: that grant answers it too, nothing is added.
    AnsweredBy(usize),
}

/// Token and owner bytes, shared by the indexes that name them.
type Bytes = Arc<[u8]>;

/// A stored hold, under its token: 24 bytes, so that a slot of the token
/// table stays small. A named owner (rare: `OWNER` apart from the token)
/// sits in a table of its own.
#[derive(Debug, Clone)]
struct Held {
    fence: u64,
    deadline_ms: u64,
    /// Grant order (INFO and the stored layout list holds in it), with the
    /// mode and whether an owner is named in the two top bits.
    bits: u64,
}

const SHARED_BIT: u64 = 1 << 63;
const NAMED_BIT: u64 = 1 << 62;
const SEQ_BITS: u64 = NAMED_BIT - 1;

impl Held {
    fn new(fence: u64, mode: Mode, deadline_ms: u64, seq: u64, named: bool) -> Self {
        let mut bits = seq & SEQ_BITS;
        if mode == Mode::Shared {
            bits |= SHARED_BIT;
        }
        if named {
            bits |= NAMED_BIT;
        }
        Held {
            fence,
            deadline_ms,
            bits,
        }
    }
    fn seq(&self) -> u64 {
        self.bits & SEQ_BITS
    }
    fn mode(&self) -> Mode {
        if self.bits & SHARED_BIT != 0 {
            Mode::Shared
        } else {
            Mode::Exclusive
        }
    }
    fn is_named(&self) -> bool {
        self.bits & NAMED_BIT != 0
    }
}

/// The holds of one resource, indexed so that every operation on one hold
/// costs O(log n) in their number: by token, by deadline (pruning, the
/// key's TTL, the next expiry) and by named owner (`OWNER`: reentrant and
/// up- and downgraded holds), with the count of owners holding
/// exclusively kept as holds come and go. Admission reads these indexes
/// directly (`Summary`), so no command copies or rescans the holds.
#[derive(Debug, Clone, Default)]
pub struct Holds {
    /// How many holds may coexist (1 for plain and read-write locks).
    pub limit: u32,
    by_token: HashMap<Bytes, Held>,
    /// token -> its named owner, for the holds that have one.
    owner_of: HashMap<Bytes, Bytes>,
    /// (deadline, grant order) -> token: ordered by integers alone, so a
    /// search among holds ending in the same millisecond never reads a
    /// token.
    by_deadline: BTreeMap<(u64, u64), Bytes>,
    /// Owners named by `OWNER` that differ from the token: their holds. A
    /// hold whose token is its own owner is found under its token.
    named: HashMap<Bytes, OwnerHolds>,
    /// Owners with at least one exclusive hold.
    exclusive_owners: usize,
    next_seq: u64,
    /// The highest fence any hold had since these holds were made or
    /// loaded: every read of the value raises the fence clock to it, in
    /// O(1). A fence that was stored here once is one the clock already
    /// passed, so counting a hold that ended since changes nothing.
    top_fence: u64,
    /// The XOR of every hold's mark (`observe::hold_mark`): what observers
    /// compare, kept up to date in O(1) per change.
    marks: u64,
}

/// Equal when they hold the same holds in the same grant order.
impl PartialEq for Holds {
    fn eq(&self, other: &Self) -> bool {
        self.limit == other.limit && self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for Holds {}

impl Holds {
    pub fn new(limit: u32) -> Self {
        Holds {
            limit,
            ..Holds::default()
        }
    }

    /// `holds`, in this order, under `limit`; a token given twice keeps its
    /// first hold (`push` tells decoders).
    pub fn from_holds(limit: u32, holds: impl IntoIterator<Item = Hold>) -> Self {
        let mut h = Holds::new(limit);
        for hold in holds {
            h.push(hold);
        }
        h
    }

    pub fn len(&self) -> usize {
        self.by_token.len()
    }

    /// Every owner that holds (a token is its own owner), among the
    /// tokens of the holds whose owner is named apart: more names than
    /// owners, enough to find each.
    pub fn owner_names(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let tokens = self.by_token.keys().map(|t| &**t);
        tokens.chain(self.named.keys().map(|o| &**o))
    }

    /// How many names `owner_names` gives.
    pub fn owner_name_count(&self) -> usize {
        self.by_token.len() + self.named.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_token.is_empty()
    }

    /// The holds in grant order. O(n log n): for replies and encoding,
    /// which are O(n) anyway.
    pub fn iter(&self) -> impl Iterator<Item = HoldRef<'_>> + '_ {
        let mut v: Vec<(&Bytes, &Held)> = self.by_token.iter().collect();
        v.sort_unstable_by_key(|(_, h)| h.seq());
        v.into_iter().map(|(t, h)| self.view(t, h))
    }

    /// Adds `hold` after the others; false (and nothing changes) when its
    /// token already holds.
    pub fn push(&mut self, hold: Hold) -> bool {
        let token: Bytes = Arc::from(hold.token);
        if self.by_token.contains_key(&token) {
            return false;
        }
        let owner = (*hold.owner != *token).then(|| Bytes::from(hold.owner));
        self.insert_at(
            token,
            owner,
            hold.fence,
            hold.mode,
            hold.deadline_ms,
            self.next_seq,
        );
        true
    }

    fn insert_at(
        &mut self,
        token: Bytes,
        owner: Option<Bytes>,
        fence: u64,
        mode: Mode,
        deadline_ms: u64,
        seq: u64,
    ) {
        let exclusive = usize::from(mode == Mode::Exclusive);
        let owner_key: &[u8] = owner.as_deref().unwrap_or(&token);
        let was_exclusive = self.owner(owner_key).is_some_and(|o| o.exclusive > 0);
        if exclusive > 0 && !was_exclusive {
            self.exclusive_owners += 1;
        }
        if let Some(o) = &owner {
            let e = self.named.entry(o.clone()).or_insert(OwnerHolds {
                fence,
                holds: 0,
                exclusive: 0,
            });
            e.holds += 1;
            e.exclusive += exclusive;
        }
        self.by_deadline.insert((deadline_ms, seq), token.clone());
        self.next_seq = self.next_seq.max(seq + 1);
        self.top_fence = self.top_fence.max(fence);
        self.marks ^= hold_mark(&token, fence, mode);
        let held = Held::new(fence, mode, deadline_ms, seq, owner.is_some());
        if let Some(o) = owner {
            self.owner_of.insert(token.clone(), o);
        }
        self.by_token.insert(token, held);
    }

    /// Removes `token`'s hold, keeping every index right.
    fn remove(&mut self, token: &[u8]) -> Option<Hold> {
        self.take(token).map(|(hold, _)| hold)
    }

    /// Removes `token`'s hold; returns it with its place in grant order,
    /// for `restore`.
    pub fn take(&mut self, token: &[u8]) -> Option<(Hold, u64)> {
        let (token, held) = self.by_token.remove_entry(token)?;
        self.by_deadline.remove(&(held.deadline_ms, held.seq()));
        self.marks ^= hold_mark(&token, held.fence, held.mode());
        let exclusive = usize::from(held.mode() == Mode::Exclusive);
        let owner = if held.is_named() {
            self.owner_of.remove(&token)
        } else {
            None
        };
        if let Some(o) = &owner {
            if let Some(e) = self.named.get_mut(o) {
                e.holds -= 1;
                e.exclusive -= exclusive;
                if e.holds == 0 {
                    self.named.remove(o);
                }
            }
        }
        let owner_key: &[u8] = owner.as_deref().unwrap_or(&token);
        if exclusive > 0 && self.owner(owner_key).is_none_or(|o| o.exclusive == 0) {
            self.exclusive_owners -= 1;
        }
        let hold = Hold {
            owner: Box::from(owner_key),
            token: Box::from(&*token),
            fence: held.fence,
            mode: held.mode(),
            deadline_ms: held.deadline_ms,
        };
        Some((hold, held.seq()))
    }

    /// Puts back a hold `take` removed, in its place in grant order.
    pub fn restore(&mut self, hold: Hold, seq: u64) {
        let token: Bytes = Arc::from(hold.token);
        if self.by_token.contains_key(&token) {
            return;
        }
        let owner = (*hold.owner != *token).then(|| Bytes::from(hold.owner));
        self.insert_at(token, owner, hold.fence, hold.mode, hold.deadline_ms, seq);
    }

    /// The token of a hold past its deadline at `now_ms`, the earliest.
    pub fn first_dead(&self, now_ms: u64) -> Option<Box<[u8]>> {
        let ((deadline, _), token) = self.by_deadline.first_key_value()?;
        (*deadline < now_ms).then(|| Box::from(&**token))
    }

    /// The holds ending after `until_ms`: (token, deadline).
    pub fn later_than(&self, until_ms: u64) -> Vec<(Box<[u8]>, u64)> {
        self.by_deadline
            .range((until_ms.saturating_add(1), 0)..)
            .map(|((d, _), t)| (Box::from(&**t), *d))
            .collect()
    }

    /// What `owner` holds: its named holds and the hold of the token equal
    /// to it that is its own owner.
    pub fn owner(&self, owner: &[u8]) -> Option<OwnerHolds> {
        let named = self.named.get(owner).copied();
        let own = self
            .by_token
            .get(owner)
            .filter(|h| !h.is_named())
            .map(|h| OwnerHolds {
                fence: h.fence,
                holds: 1,
                exclusive: usize::from(h.mode() == Mode::Exclusive),
            });
        match (named, own) {
            (Some(a), Some(b)) => Some(OwnerHolds {
                fence: a.fence,
                holds: a.holds + b.holds,
                exclusive: a.exclusive + b.exclusive,
            }),
            (a, b) => a.or(b),
        }
    }

    /// Drops every hold past its deadline; returns them (the master
    /// propagates each drop). A hold past its deadline is gone for every
    /// decision.
    pub fn prune(&mut self, now_ms: u64) -> Vec<Hold> {
        let mut gone = Vec::new();
        while let Some(token) = self.first_dead(now_ms) {
            gone.extend(self.remove(&token));
        }
        gone
    }

    /// Ends every hold at `until_ms` at the latest: an admin's expiry of
    /// the whole resource. Returns the tokens of the holds it moved.
    pub fn clamp(&mut self, until_ms: u64) -> Vec<Box<[u8]>> {
        let later = self.later_than(until_ms);
        for (t, _) in &later {
            self.set_deadline(t, until_ms);
        }
        later.into_iter().map(|(t, _)| t).collect()
    }

    /// A plain lock as holds: its one exclusive hold, ending at the key's
    /// deadline (`None`: the key has no TTL).
    pub fn from_plain(lease: LeaseRef<'_>, deadline_ms: Option<u64>) -> Self {
        let mut h = Holds::new(1);
        h.insert_at(
            Bytes::from(lease.token()),
            None,
            lease.fence(),
            Mode::Exclusive,
            deadline_ms.unwrap_or(NEVER),
            0,
        );
        h
    }

    /// The one hold, if these holds are exactly what a plain lock stores
    /// (limit 1, one exclusive hold that is its own owner): then the plain
    /// layout, effects and INFO reply are used.
    pub fn as_plain(&self) -> Option<HoldRef<'_>> {
        if self.limit != 1 || self.by_token.len() != 1 {
            return None;
        }
        let (t, h) = self.by_token.iter().next()?;
        (h.mode() == Mode::Exclusive && !h.is_named()).then(|| self.view(t, h))
    }

    /// Whether these holds could have come from the rules: a semaphore's
    /// permits exclusive, their own owners and within the limit; an
    /// exclusive hold beside holds of its own owner only; one fence per
    /// owner. The decoder refuses anything else (and a token twice, which
    /// `push` reports).
    pub fn is_consistent(&self) -> bool {
        if self.limit > 1 {
            return self.len() <= self.limit as usize
                && self
                    .by_token
                    .values()
                    .all(|h| h.mode() == Mode::Exclusive && !h.is_named());
        }
        let one_fence = self.iter().all(|h| {
            self.named.get(h.owner).is_none_or(|o| o.fence == h.fence)
                && self
                    .by_token
                    .get(h.owner)
                    .filter(|x| !x.is_named())
                    .is_none_or(|x| x.fence == h.fence)
        });
        let owners = self.named.len()
            + self
                .by_token
                .iter()
                .filter(|(t, h)| !h.is_named() && !self.named.contains_key(*t))
                .count();
        let writers_alone = self.exclusive_owners == 0 || owners == 1;
        one_fence && writers_alone
    }

    /// The holds still live at `now_ms` (a replica hides, never prunes).
    pub fn live(&self, now_ms: u64) -> impl Iterator<Item = HoldRef<'_>> + '_ {
        self.iter().filter(move |h| h.is_live(now_ms))
    }

    /// The XOR of the marks of the holds live at `now_ms` (what observers
    /// see): O(1), plus O(1) per hold past its deadline and not pruned yet.
    pub fn live_marks(&self, now_ms: u64) -> u64 {
        let dead = self.by_deadline.range(..(now_ms, 0));
        dead.fold(self.marks, |m, (_, token)| match self.by_token.get(token) {
            Some(h) => m ^ hold_mark(token, h.fence, h.mode()),
            None => m,
        })
    }

    /// The earliest deadline of a hold live at `now_ms`.
    pub fn next_deadline(&self, now_ms: u64) -> Option<u64> {
        let mut live = self.by_deadline.range((now_ms, 0)..);
        live.next().map(|((d, _), _)| *d)
    }

    /// Whether a hold is past its deadline at `now_ms`.
    pub fn any_dead(&self, now_ms: u64) -> bool {
        self.earliest_deadline_ms().is_some_and(|d| d < now_ms)
    }

    /// The earliest deadline of any hold: when waiters may next fit.
    pub fn earliest_deadline_ms(&self) -> Option<u64> {
        self.by_deadline.first_key_value().map(|((d, _), _)| *d)
    }

    /// The highest fence the value reveals to whoever reads it (see
    /// `top_fence`).
    pub fn max_fence(&self) -> u64 {
        self.top_fence
    }

    pub fn hold_of(&self, token: &[u8]) -> Option<HoldRef<'_>> {
        self.by_token
            .get_key_value(token)
            .map(|(t, h)| self.view(t, h))
    }

    /// The key's TTL: the latest hold deadline.
    pub fn deadline_ms(&self) -> Option<u64> {
        self.by_deadline.last_key_value().map(|((d, _), _)| *d)
    }

    /// Heap bytes the holds and their indexes take, about (`MEMORY
    /// USAGE`): each hold's token (and named owner) once, shared by the
    /// indexes, the tables' slots, and the deadline index's entries with
    /// the slack its nodes carry (holds end in about the order they come,
    /// which leaves its nodes about half full).
    pub fn heap_bytes(&self) -> usize {
        const ARC: usize = 16;
        let token_slot = std::mem::size_of::<(Bytes, Held)>() + 1;
        let deadline_entry = std::mem::size_of::<((u64, u64), Bytes)>();
        let named_slot = std::mem::size_of::<(Bytes, OwnerHolds)>() + 1;
        let owner_slot = std::mem::size_of::<(Bytes, Bytes)>() + 1;
        let tokens: usize = self.by_token.keys().map(|t| ARC + t.len()).sum();
        let owners: usize = self.named.keys().map(|o| ARC + o.len()).sum();
        tokens
            + owners
            + self.by_token.capacity() * token_slot
            + self.len() * deadline_entry * 2
            + self.named.capacity() * named_slot
            + self.owner_of.capacity() * owner_slot
    }

    /// The latest deadline before `NEVER` (holds without one aside).
    pub fn latest_finite_ms(&self) -> Option<u64> {
        self.by_deadline
            .range(..(NEVER, 0))
            .next_back()
            .map(|((d, _), _)| *d)
    }

    /// Decides `ask` against the live holds (call `prune` first).
    /// `queued`: someone waits in the resource's queue; a new owner never
    /// passes a queued request, an existing owner is decided regardless of
    /// it. `quarantined` (ms left): new holds are refused, retries pass.
    pub fn decide(
        &self,
        ask: &Ask<'_>,
        queued: bool,
        quarantined: Option<u64>,
        clock: &mut FenceClock,
        now_us: impl FnOnce() -> u64,
    ) -> Result<Decision, Error> {
        self.summary()
            .decide(ask, queued, quarantined, || Ok(()), clock, now_us)
    }

    /// The holds as admission sees them (see `Summary`): a view of the
    /// indexes, nothing copied.
    pub fn summary(&self) -> Summary<'_> {
        Summary::of_holds(self)
    }

    /// Whether `ask` may hold the resource now, without drawing a fence.
    pub fn admit(&self, ask: &Ask<'_>, queued: bool) -> Result<Admission, Error> {
        self.summary().admit(ask, queued)
    }

    /// The single-queue rule, kept as the reference that the component rule
    /// (`component::admit_component`, which the server runs for every
    /// queue) is compared with on one resource (`differential_tests`).
    /// Which queued requests can hold the resource now, in queue order,
    /// after holds ended: `Ok` entries are granted in that order, `Err`
    /// entries get that error and leave the queue, the rest keep waiting.
    /// Strict FIFO for new owners: a run of shared requests at the head is
    /// granted together, a semaphore grants as many as fit, and nobody passes
    /// an earlier request that still waits, except an owner that already
    /// holds or is granted in this same step.
    #[cfg(test)]
    pub fn admit_queue<'x>(
        &'x self,
        queue: &'x [Ask<'x>],
    ) -> Vec<(usize, Result<QueueGrant, Error>)> {
        // Fences drawn in this step are not known yet: stand-ins above every
        // real fence mark them, and map back to the entry that draws them.
        let stand_in = |i: usize| u64::MAX - i as u64;
        let drawn_by = |fence: u64| usize::try_from(u64::MAX - fence).ok();
        let mut after = self.summary();
        let mut out = Vec::new();
        let mut someone_waits = false;
        for (i, ask) in queue.iter().enumerate() {
            // Behind a request that waits only owners that hold can pass.
            if someone_waits && !after.holds_owner(ask.owner()) {
                continue;
            }
            let grant = match after.admit(ask, someone_waits) {
                Ok(Admission::Busy) => {
                    someone_waits = true;
                    continue;
                }
                Err(e) => {
                    out.push((i, Err(e)));
                    continue;
                }
                Ok(Admission::Retry { fence }) => {
                    let grant = match drawn_by(fence).filter(|_| fence > crate::fence::MAX_FENCE) {
                        Some(first) => QueueGrant::AnsweredBy(first),
                        None => QueueGrant::Retry { fence },
                    };
                    out.push((i, Ok(grant)));
                    continue;
                }
                Ok(Admission::New { owner_fence: None }) => (QueueGrant::Fresh, stand_in(i)),
                Ok(Admission::New {
                    owner_fence: Some(f),
                }) if f > crate::fence::MAX_FENCE => match drawn_by(f) {
                    Some(first) => (QueueGrant::SameOwnerAs(first), f),
                    None => (QueueGrant::Fresh, stand_in(i)),
                },
                Ok(Admission::New {
                    owner_fence: Some(f),
                }) => (QueueGrant::Owner { fence: f }, f),
            };
            after.add(ask.token, ask.owner(), ask.mode, grant.1, ask.limit());
            out.push((i, Ok(grant.0)));
        }
        out
    }

    /// Adds the hold `decide` granted.
    pub fn add(&mut self, ask: &Ask<'_>, fence: u64, deadline_ms: u64) {
        if self.is_empty() {
            self.limit = ask.limit();
        }
        let token = Bytes::from(ask.token);
        if self.by_token.contains_key(&token) {
            return;
        }
        let owner = ask.owner.filter(|o| *o != ask.token).map(Bytes::from);
        self.insert_at(token, owner, fence, ask.mode, deadline_ms, self.next_seq);
    }

    /// Adds or replaces `hold` (a replayed effect): the master's hold wins.
    pub fn put(&mut self, hold: Hold) {
        self.remove(&hold.token);
        self.push(hold);
    }

    /// Moves the deadline of `token`'s hold, live or not (a queued retry);
    /// whether it exists.
    pub fn set_deadline(&mut self, token: &[u8], deadline_ms: u64) -> bool {
        let Some(h) = self.by_token.get_mut(token) else {
            return false;
        };
        if let Some(t) = self.by_deadline.remove(&(h.deadline_ms, h.seq())) {
            self.by_deadline.insert((deadline_ms, h.seq()), t);
        }
        h.deadline_ms = deadline_ms;
        true
    }

    /// Ends the hold of `token`; whether it existed.
    pub fn release(&mut self, token: &[u8]) -> bool {
        self.remove(token).is_some()
    }

    /// Moves the deadline of `token`'s live hold; whether it existed.
    pub fn extend(&mut self, token: &[u8], deadline_ms: u64, now_ms: u64) -> bool {
        let live = self
            .by_token
            .get(token)
            .is_some_and(|h| h.deadline_ms >= now_ms);
        live && self.set_deadline(token, deadline_ms)
    }
}

impl Indexed for Holds {
    fn limit(&self) -> u32 {
        self.limit
    }
    fn holds(&self) -> usize {
        self.len()
    }
    fn exclusive_owners(&self) -> usize {
        self.exclusive_owners
    }
    fn token(&self, token: &[u8]) -> Option<Entry<'_>> {
        self.hold_of(token).map(|h| (h.mode, h.owner, h.fence))
    }
    fn owner(&self, owner: &[u8]) -> Option<OwnerHolds> {
        Holds::owner(self, owner)
    }
}

impl Holds {
    fn view<'h>(&'h self, token: &'h Bytes, h: &'h Held) -> HoldRef<'h> {
        let owner = if h.is_named() {
            self.owner_of.get(token).map_or(&**token, |o| &**o)
        } else {
            token
        };
        HoldRef {
            token,
            owner,
            fence: h.fence,
            mode: h.mode(),
            deadline_ms: h.deadline_ms,
        }
    }
}

#[cfg(test)]
mod tests;
