//! What admission needs to know of a resource's holds, read through
//! indexes: a resource with several holds keeps them itself (`Holds`), so a
//! decision reads them in place and a step records only what it changes
//! (holds ended, holds granted) beside them. Every kind of lock decides
//! through `Summary::admit` and `Summary::decide`: a plain lock
//! (`Summary::of_plain`, read from its one-allocation value), a resource
//! with several holds (`Holds::summary`), and each step of a queue. One rule
//! book.
//!
//! The fast path lives inside the model: while a plain lock has at most one
//! hold, that hold is kept inline and nothing is allocated.

use std::collections::HashMap;

use crate::ask::{Ask, Mode};
use crate::fence::FenceClock;
use crate::resource::lease::LeaseRef;
use crate::Error;

/// What a request gets, with the fence drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// A new hold under `fence` (fresh, or its owner's).
    Grant { fence: u64 },
    /// The token's own identical hold: the same fence, a new deadline.
    Refresh { fence: u64 },
    /// Not now.
    Busy,
}

/// Whether a request may hold the resource now (before any fence is drawn).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// The token's own identical hold: a retry.
    Retry {
        fence: u64,
    },
    /// A new hold; `owner_fence` when its owner already holds (the fence it
    /// shares), else a fresh fence is drawn.
    New {
        owner_fence: Option<u64>,
    },
    Busy,
}

/// What one owner holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnerHolds {
    /// The fence its holds share.
    pub fence: u64,
    pub holds: usize,
    pub exclusive: usize,
}

/// What admission reads of a resource's stored holds: their indexes
/// (`Holds` keeps them). A hold is its mode, owner and fence.
pub trait Indexed: std::fmt::Debug {
    fn limit(&self) -> u32;
    /// How many holds there are.
    fn holds(&self) -> usize;
    /// Owners with at least one exclusive hold.
    fn exclusive_owners(&self) -> usize;
    fn token(&self, token: &[u8]) -> Option<Held<'_>>;
    fn owner(&self, owner: &[u8]) -> Option<OwnerHolds>;
    /// The session `token`'s hold is bound to.
    fn session_of(&self, _token: &[u8]) -> Option<&[u8]> {
        None
    }
    /// The `MAXHOLD` `token`'s hold was granted with.
    fn max_hold_of(&self, _token: &[u8]) -> Option<u64> {
        None
    }
    /// The permits the holds take together (`PERMITS`).
    fn used(&self) -> u64 {
        self.holds() as u64
    }
    /// The permits `token`'s hold counts as (1 when it holds none).
    fn permits_of(&self, _token: &[u8]) -> u32 {
        1
    }
    /// Whether `DLOCK.RESIZE` set the limit (any limit above 1 joins).
    fn resized(&self) -> bool {
        false
    }
}

/// One owner's holds.
#[derive(Debug, Clone, Copy)]
struct Owner {
    fence: u64,
    holds: usize,
    exclusive: usize,
}

impl From<OwnerHolds> for Owner {
    fn from(o: OwnerHolds) -> Self {
        Owner {
            fence: o.fence,
            holds: o.holds,
            exclusive: o.exclusive,
        }
    }
}

/// One hold, as admission sees it.
#[derive(Debug, Clone, Copy)]
struct Entry<'x> {
    token: &'x [u8],
    owner: &'x [u8],
    mode: Mode,
    fence: u64,
}

/// A hold's mode, owner and fence.
pub type Held<'x> = (Mode, &'x [u8], u64);

/// A resource's holds as admission sees them, while a step decides: the
/// stored holds' own indexes (`base`, read in place) or a plain lock's one
/// hold (`one`, nothing allocated), under the changes the step makes
/// before and while it decides (holds that ended, holds granted), kept in
/// small overlays. Every lookup is O(1) or O(log n) in the holds.
#[derive(Debug)]
pub struct Summary<'x> {
    limit: u32,
    len: usize,
    /// The permits the holds take together (`len`, unless a hold counts
    /// as several).
    used: u64,
    /// The limit was set by `DLOCK.RESIZE` (see `Holds::resized`).
    resized: bool,
    base: Option<&'x dyn Indexed>,
    /// The only hold of a resource read without `base` while it has one.
    one: Option<Entry<'x>>,
    /// Holds granted (`Some`) or ended (`None`) in this step.
    tokens: HashMap<&'x [u8], Option<Held<'x>>>,
    /// The permits of the holds granted in this step that count as more
    /// than one.
    weights: HashMap<&'x [u8], u32>,
    /// Owners whose holds this step changed: what they hold now.
    owners: HashMap<&'x [u8], Option<Owner>>,
    /// Owners with at least one exclusive hold.
    exclusive_owners: usize,
    /// The session and `MAXHOLD` of each hold granted in this step
    /// (`add_granted`): a later request of the same token is answered by
    /// that grant only if it asks the same.
    granted_terms: HashMap<&'x [u8], Terms<'x>>,
}

/// A hold's session and `MAXHOLD`, as its request asked.
type Terms<'x> = (Option<&'x [u8]>, Option<u64>);

impl<'x> Summary<'x> {
    /// No holds yet (`add` adds them).
    #[inline]
    pub fn new(limit: u32) -> Self {
        Summary {
            limit,
            len: 0,
            used: 0,
            resized: false,
            base: None,
            one: None,
            tokens: HashMap::new(),
            weights: HashMap::new(),
            owners: HashMap::new(),
            exclusive_owners: 0,
            granted_terms: HashMap::new(),
        }
    }

    /// A resource's stored holds, read through their indexes.
    #[inline]
    pub fn of_holds(holds: &'x dyn Indexed) -> Self {
        Summary {
            limit: holds.limit(),
            len: holds.holds(),
            used: holds.used(),
            resized: holds.resized(),
            base: Some(holds),
            exclusive_owners: holds.exclusive_owners(),
            ..Summary::new(holds.limit())
        }
    }

    /// A plain lock: one exclusive hold that is its own owner, limit 1.
    /// Allocates nothing.
    #[inline]
    pub fn of_plain(lease: Option<LeaseRef<'x>>) -> Self {
        let mut s = Summary::new(1);
        if let Some(l) = lease {
            s.add(l.token(), l.token(), Mode::Exclusive, l.fence(), (1, 1));
        }
        s
    }

    /// A hold granted in this step to `ask`, remembering its session and
    /// `MAXHOLD` (`add` records mode, owner and fence only).
    #[inline]
    pub fn add_granted(&mut self, ask: &Ask<'x>, fence: u64) {
        self.add(
            ask.token,
            ask.owner(),
            ask.mode,
            fence,
            (ask.limit(), ask.permits()),
        );
        self.granted_terms
            .insert(ask.token, (ask.session, ask.max_hold_ms));
    }

    /// A hold granted (or present), under `(limit, permits)`: the limit
    /// it asked for and the permits it counts as.
    #[inline]
    pub fn add(
        &mut self,
        token: &'x [u8],
        owner: &'x [u8],
        mode: Mode,
        fence: u64,
        (limit, permits): (u32, u32),
    ) {
        if self.len == 0 {
            self.limit = limit;
            self.resized = false;
        }
        self.used += u64::from(permits);
        if permits > 1 {
            self.weights.insert(token, permits);
        }
        let entry = Entry {
            token,
            owner,
            mode,
            fence,
        };
        if self.len == 0 && self.base.is_none() && self.tokens.is_empty() {
            if mode == Mode::Exclusive {
                self.exclusive_owners += 1;
            }
            self.len = 1;
            self.one = Some(entry);
            return;
        }
        if let Some(first) = self.one.take() {
            self.put(first, true);
        }
        self.put(entry, false);
        self.len += 1;
    }

    /// Records `e` in the overlays; `moved`: it was counted already (the
    /// inline hold, moving to the overlays).
    fn put(&mut self, e: Entry<'x>, moved: bool) {
        let before = if moved { None } else { self.owner(e.owner) };
        let exclusive = usize::from(e.mode == Mode::Exclusive);
        let after = match before {
            Some(o) => Owner {
                fence: o.fence,
                holds: o.holds + 1,
                exclusive: o.exclusive + exclusive,
            },
            None => Owner {
                fence: e.fence,
                holds: 1,
                exclusive,
            },
        };
        if !moved && exclusive > 0 && before.is_none_or(|o| o.exclusive == 0) {
            self.exclusive_owners += 1;
        }
        self.owners.insert(e.owner, Some(after));
        self.tokens
            .insert(e.token, Some((e.mode, e.owner, e.fence)));
    }

    /// `DLOCK.RESIZE` in this step: the limit becomes `limit`, marked
    /// resized.
    pub fn set_limit(&mut self, limit: u32) {
        self.limit = limit;
        self.resized = true;
    }

    /// The limit of the holds (the request's own once none is left).
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Whether a request asking `limit` is under the same limit as the
    /// holds: the same number, or any above 1 on a resized semaphore.
    fn same_limit(&self, limit: u32) -> bool {
        self.limit == limit || (self.resized && limit > 1 && self.limit > 1)
    }

    /// `token`'s hold ended in this step.
    #[inline]
    pub fn remove(&mut self, token: &'x [u8]) {
        let Some((mode, owner, _)) = self.token(token) else {
            return;
        };
        if let Some(first) = self.one.take() {
            self.put(first, true);
        }
        self.granted_terms.remove(token);
        let exclusive = usize::from(mode == Mode::Exclusive);
        let after = self.owner(owner).and_then(|o| {
            let left = Owner {
                holds: o.holds.saturating_sub(1),
                exclusive: o.exclusive.saturating_sub(exclusive),
                ..o
            };
            (left.holds > 0).then_some(left)
        });
        if exclusive > 0 && after.is_none_or(|o| o.exclusive == 0) {
            self.exclusive_owners = self.exclusive_owners.saturating_sub(1);
        }
        self.used = self.used.saturating_sub(u64::from(self.permits_of(token)));
        self.weights.remove(token);
        self.owners.insert(owner, after);
        self.tokens.insert(token, None);
        self.len = self.len.saturating_sub(1);
    }

    /// `token`'s hold: its mode, owner and fence.
    #[inline]
    /// Whether `token`'s hold is bound to another session than `session`
    /// (or to one where `session` is none, or the other way round). A hold
    /// granted in this step is compared with the session its request asked
    /// for: a token queued twice is answered by one grant only if both
    /// entries ask the same.
    fn session_differs(&self, token: &[u8], session: Option<&[u8]>) -> bool {
        if let Some((granted, _)) = self.granted_terms.get(token) {
            return *granted != session;
        }
        if self.one.is_some() {
            return session.is_some();
        }
        if self.tokens.contains_key(token) {
            return false;
        }
        self.base.and_then(|b| b.session_of(token)) != session
    }

    /// Whether `token`'s hold was granted with another `MAXHOLD` (or
    /// none) than `max_hold`; as `session_differs`, a hold granted in this
    /// step was granted to the same request.
    fn max_hold_differs(&self, token: &[u8], max_hold: Option<u64>) -> bool {
        if let Some((_, granted)) = self.granted_terms.get(token) {
            return *granted != max_hold;
        }
        if self.one.is_some() {
            return max_hold.is_some();
        }
        if self.tokens.contains_key(token) {
            return false;
        }
        self.base.and_then(|b| b.max_hold_of(token)) != max_hold
    }

    /// The permits `token`'s hold counts as (1 when it holds none): a
    /// hold granted in this step by its request's `PERMITS`, a stored one
    /// by its own.
    fn permits_of(&self, token: &[u8]) -> u32 {
        if let Some(k) = self.weights.get(token) {
            return *k;
        }
        if self.one.is_some() || self.tokens.contains_key(token) {
            return 1;
        }
        self.base.map_or(1, |b| b.permits_of(token))
    }

    fn token(&self, token: &[u8]) -> Option<Held<'x>> {
        if let Some(e) = &self.one {
            return (e.token == token).then_some((e.mode, e.owner, e.fence));
        }
        if let Some(changed) = self.tokens.get(token) {
            return *changed;
        }
        self.base?.token(token)
    }

    /// What `owner` holds.
    #[inline]
    fn owner(&self, owner: &[u8]) -> Option<Owner> {
        if let Some(e) = &self.one {
            return (e.owner == owner).then_some(Owner {
                fence: e.fence,
                holds: 1,
                exclusive: usize::from(e.mode == Mode::Exclusive),
            });
        }
        if let Some(changed) = self.owners.get(owner) {
            return *changed;
        }
        self.base?.owner(owner).map(Owner::from)
    }

    /// Whether `owner` holds anything.
    pub fn holds_owner(&self, owner: &[u8]) -> bool {
        self.owner(owner).is_some()
    }

    /// Decides `ask` (see `admit`) and draws the fence of a new owner:
    /// `check_new` runs first for any new hold (a token too long for one
    /// may still refresh its own), and `quarantined` (ms left) refuses new
    /// holds while retries pass.
    #[inline]
    pub fn decide(
        &self,
        ask: &Ask<'_>,
        queued: bool,
        quarantined: Option<u64>,
        check_new: impl FnOnce() -> Result<(), Error>,
        clock: &mut FenceClock,
        now_us: impl FnOnce() -> u64,
    ) -> Result<Decision, Error> {
        match self.admit(ask, queued)? {
            Admission::Retry { fence } => Ok(Decision::Refresh { fence }),
            Admission::Busy => Ok(Decision::Busy),
            Admission::New { owner_fence } => {
                check_new()?;
                if let Some(ms_left) = quarantined {
                    return Err(Error::Quarantine { ms_left });
                }
                Ok(Decision::Grant {
                    fence: match owner_fence {
                        Some(fence) => fence,
                        None => clock.next(now_us())?,
                    },
                })
            }
        }
    }

    /// The common case answered without the general rule's lookups: a
    /// plain request (exclusive, no `OWNER`, no `LIMIT`) on a free resource
    /// or on one inline hold that is not its owner's. `None`: any other
    /// case. What the general rule answers for these cases, this answers
    /// (`differential_tests` compares the two on every small state).
    #[inline]
    fn admit_plain(&self, ask: &Ask<'_>, queued: bool) -> Option<Result<Admission, Error>> {
        if ask.limit.is_some()
            || ask.owner.is_some()
            || ask.mode != Mode::Exclusive
            || ask.session.is_some()
            || ask.max_hold_ms.is_some()
            || ask.permits.is_some()
        {
            return None;
        }
        match (&self.one, self.len) {
            (None, 0) if queued => Some(Ok(Admission::Busy)),
            (None, 0) => Some(Ok(Admission::New { owner_fence: None })),
            (Some(e), 1) if e.token == ask.token => {
                let same = e.mode == Mode::Exclusive && e.owner == ask.token && self.limit == 1;
                Some(if same {
                    Ok(Admission::Retry { fence: e.fence })
                } else {
                    Err(Error::TokenInUse)
                })
            }
            (Some(e), 1) if e.owner != ask.token && self.limit == 1 => Some(Ok(Admission::Busy)),
            _ => None,
        }
    }

    /// Whether `ask` may hold the resource now, without drawing a fence
    /// (see `Holds::admit`).
    #[inline]
    pub fn admit(&self, ask: &Ask<'_>, queued: bool) -> Result<Admission, Error> {
        if let Some(admission) = self.admit_plain(ask, queued) {
            return admission;
        }
        let limit = ask.limit.unwrap_or(1);
        let owner = ask.owner.unwrap_or(ask.token);
        if let Some((mode, held_by, fence)) = self.token(ask.token) {
            // The same token: a retry only if everything matches.
            let same = mode == ask.mode && held_by == owner && self.same_limit(limit);
            return if !same {
                Err(Error::TokenInUse)
            } else if self.session_differs(ask.token, ask.session) {
                Err(Error::SessionMismatch)
            } else if self.max_hold_differs(ask.token, ask.max_hold_ms) {
                Err(Error::MaxHoldMismatch)
            } else if self.permits_of(ask.token) != ask.permits() {
                Err(Error::PermitsMismatch)
            } else {
                Ok(Admission::Retry { fence })
            };
        }
        if limit > 1 && ask.mode == Mode::Shared {
            return Err(Error::SharedSemaphore);
        }
        if self.len > 0 && !self.same_limit(limit) {
            return Err(Error::LimitMismatch { limit: self.limit });
        }
        let me = self.owner(owner);
        let mine = me.map_or(0, |o| o.holds);
        let my_exclusive = me.map_or(0, |o| o.exclusive);
        let fits = match (ask.mode, limit) {
            // A semaphore: every hold's permits count, and a request
            // fits only with all of its own (never some now, the rest
            // later).
            // Against the holds' limit, which a resize may have set.
            (_, n) if n > 1 => {
                let n = if self.len > 0 { self.limit } else { n };
                // The planted bug counts a request as one permit, however
                // many it asks for (`make check-history HISTORY_BROKEN=permits`).
                let k = if cfg!(feature = "planted-permits-as-one") {
                    1
                } else {
                    ask.permits()
                };
                self.used + u64::from(k) <= u64::from(n)
            }
            (Mode::Exclusive, _) => self.len == mine,
            (Mode::Shared, _) => self.exclusive_owners == usize::from(my_exclusive > 0),
        };
        let upgrade =
            me.is_some() && ask.mode == Mode::Exclusive && limit == 1 && my_exclusive == 0;
        if upgrade && !fits {
            // Two upgraders waiting on each other would deadlock.
            return Err(Error::UpgradeRefused);
        }
        // An owner that holds is decided before, and regardless of, the queue.
        if !fits || (me.is_none() && queued) {
            return Ok(Admission::Busy);
        }
        Ok(Admission::New {
            // Holds of one owner share a fence; a permit is its own owner
            // (OWNER with LIMIT > 1 is refused when parsed).
            owner_fence: me.map(|o| o.fence).filter(|_| limit == 1),
        })
    }
}
