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

use crate::ask::{Cap, Mode};
use crate::observe::hold_mark;
use crate::resource::admission::OwnerHolds;

pub use crate::limits::NEVER;

/// One hold as plain data: what the layout stores, the effects carry and
/// the rules are tested with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    pub token: Box<[u8]>,
    /// Whose hold this is; without `OWNER` the token is its own owner.
    pub owner: Box<[u8]>,
    pub fence: u64,
    pub mode: Mode,
    /// Unix ms; the hold is gone once this has passed. `NEVER` for a
    /// session's hold while its session has not been settled.
    pub deadline_ms: u64,
    /// The session the hold is bound to (`SESSION id`): it lives as long as
    /// that session, with no deadline of its own (`NEVER`). Once its session
    /// ended with a lock-delay the hold keeps the session's id and gets the
    /// delay's end as its deadline: held by nobody until then (its token
    /// may release it, never extend or retry it).
    pub session: Option<Box<[u8]>>,
    /// `MAXHOLD`: the latest it may ever end (never with `session`).
    pub cap: Option<Cap>,
    /// How many of a semaphore's permits the hold counts as (`PERMITS`; 1
    /// for every other hold).
    pub permits: u32,
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
    pub session: Option<&'h [u8]>,
    pub cap: Option<Cap>,
    pub permits: u32,
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
            session: self.session.map(Into::into),
            cap: self.cap,
            permits: self.permits,
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
const BOUND_BIT: u64 = 1 << 61;
const CAPPED_BIT: u64 = 1 << 60;
const WEIGHTED_BIT: u64 = 1 << 59;
const SEQ_BITS: u64 = WEIGHTED_BIT - 1;

impl Held {
    fn new(fence: u64, mode: Mode, deadline_ms: u64, seq: u64, extras: Extras) -> Self {
        let (named, bound, capped, weighted) = extras;
        let mut bits = seq & SEQ_BITS;
        if weighted {
            bits |= WEIGHTED_BIT;
        }
        if bound {
            bits |= BOUND_BIT;
        }
        if capped {
            bits |= CAPPED_BIT;
        }
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
    fn is_bound(&self) -> bool {
        self.bits & BOUND_BIT != 0
    }
    fn is_capped(&self) -> bool {
        self.bits & CAPPED_BIT != 0
    }
    fn is_weighted(&self) -> bool {
        self.bits & WEIGHTED_BIT != 0
    }
}

/// Whether a hold has a named owner, a session, a cap, permits above 1.
type Extras = (bool, bool, bool, bool);

/// What a hold may have beside its token: a named owner, a session, a cap,
/// its permits (1 for most).
type Beside = (Option<Bytes>, Option<Bytes>, Option<Cap>, u32);

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
    /// The limit was set by `DLOCK.RESIZE` while permits were held: any
    /// request with a limit above 1 joins, and holds past a lowered limit
    /// stay. Forgotten with the last hold.
    pub resized: bool,
    by_token: HashMap<Bytes, Held>,
    /// token -> its named owner, for the holds that have one.
    owner_of: HashMap<Bytes, Bytes>,
    /// token -> its session, for the holds bound to one (rare too).
    session_of: HashMap<Bytes, Bytes>,
    /// token -> its cap, for the holds granted with `MAXHOLD` (rare too).
    cap_of: HashMap<Bytes, Cap>,
    /// token -> its permits, for the holds that count as more than one
    /// (`PERMITS`, rare too).
    permits_of: HashMap<Bytes, u32>,
    /// The permits the holds count as together (`len` unless some hold
    /// has `PERMITS` above 1).
    used_permits: u64,
    /// (deadline, grant order) -> token: ordered by integers alone, so a
    /// search among holds ending in the same millisecond never reads a
    /// token.
    by_deadline: BTreeMap<(u64, u64), Bytes>,
    /// (fence, grant order) -> token: a hold found by its fence (`DLOCK.GUARD
    /// ... FENCE`) in O(log n); an owner's reentrant holds share a fence.
    by_fence: BTreeMap<(u64, u64), Bytes>,
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
        self.limit == other.limit
            && self.resized == other.resized
            && self.len() == other.len()
            && self.iter().eq(other.iter())
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

    /// The permits the holds take together: their number, unless some
    /// hold counts as several (`PERMITS`).
    pub fn used_permits(&self) -> u64 {
        self.used_permits
    }

    /// Whether some hold counts as more than one permit.
    pub fn is_weighted(&self) -> bool {
        !self.permits_of.is_empty()
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
        let session = hold.session.map(Bytes::from);
        self.insert_at(
            token,
            (owner, session, hold.cap, hold.permits),
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
        (owner, session, cap, permits): Beside,
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
        self.by_fence.insert((fence, seq), token.clone());
        self.next_seq = self.next_seq.max(seq + 1);
        self.top_fence = self.top_fence.max(fence);
        self.marks ^= hold_mark(&token, fence, mode);
        // A hold counts as one permit at least (a decoder refuses 0).
        let permits = permits.max(1);
        self.used_permits += u64::from(permits);
        let held = Held::new(
            fence,
            mode,
            deadline_ms,
            seq,
            (
                owner.is_some(),
                session.is_some(),
                cap.is_some(),
                permits > 1,
            ),
        );
        if permits > 1 {
            self.permits_of.insert(token.clone(), permits);
        }
        if let Some(c) = cap {
            self.cap_of.insert(token.clone(), c);
        }
        if let Some(o) = owner {
            self.owner_of.insert(token.clone(), o);
        }
        if let Some(s) = session {
            self.session_of.insert(token.clone(), s);
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
        self.by_fence.remove(&(held.fence, held.seq()));
        self.marks ^= hold_mark(&token, held.fence, held.mode());
        let exclusive = usize::from(held.mode() == Mode::Exclusive);
        let owner = if held.is_named() {
            self.owner_of.remove(&token)
        } else {
            None
        };
        let session = if held.is_bound() {
            self.session_of.remove(&token)
        } else {
            None
        };
        let cap = if held.is_capped() {
            self.cap_of.remove(&token)
        } else {
            None
        };
        let permits = if held.is_weighted() {
            self.permits_of.remove(&token).unwrap_or(1)
        } else {
            1
        };
        self.used_permits = self.used_permits.saturating_sub(u64::from(permits));
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
            session: session.map(|s| Box::from(&*s)),
            cap,
            permits,
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
        let session = hold.session.map(Bytes::from);
        self.insert_at(
            token,
            (owner, session, hold.cap, hold.permits),
            hold.fence,
            hold.mode,
            hold.deadline_ms,
            seq,
        );
    }
}

impl Holds {
    fn view<'h>(&'h self, token: &'h Bytes, h: &'h Held) -> HoldRef<'h> {
        let owner = if h.is_named() {
            self.owner_of.get(token).map_or(&**token, |o| &**o)
        } else {
            token
        };
        let session = if h.is_bound() {
            self.session_of.get(token).map(|s| &**s)
        } else {
            None
        };
        let cap = if h.is_capped() {
            self.cap_of.get(token).copied()
        } else {
            None
        };
        let permits = if h.is_weighted() {
            self.permits_of.get(token).copied().unwrap_or(1)
        } else {
            1
        };
        HoldRef {
            token,
            owner,
            fence: h.fence,
            mode: h.mode(),
            deadline_ms: h.deadline_ms,
            session,
            cap,
            permits,
        }
    }
}

mod deadlines;
mod decisions;
mod lookups;
#[cfg(test)]
mod tests;
