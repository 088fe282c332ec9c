//! What admission needs to know of a resource's holds, as indexes: built
//! once per decision, and kept up to date while a queue step grants, so a
//! run of thousands of queued readers is decided in linear time instead of
//! rescanning every hold for every reader. Every kind of lock decides
//! through `Summary::admit` and `Summary::decide`: a plain lock
//! (`Summary::of_plain`, read from its one-allocation value), a resource
//! with several holds (`Holds::summary`), and each step of a queue. One rule
//! book.
//!
//! The fast path lives inside the model: while a resource has at most one
//! hold (every plain lock), that hold is kept inline and nothing is
//! allocated; the indexes are built when a second hold arrives.

use std::collections::HashMap;

use super::ask::{Ask, Mode};
use super::fence::FenceClock;
use super::lease::LeaseRef;
use super::Error;

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

/// One owner's holds.
#[derive(Debug, Clone, Copy)]
struct Owner {
    fence: u64,
    holds: usize,
    exclusive: usize,
}

/// One hold, as admission sees it.
#[derive(Debug, Clone, Copy)]
struct Entry<'x> {
    token: &'x [u8],
    owner: &'x [u8],
    mode: Mode,
    fence: u64,
}

#[derive(Debug)]
pub struct Summary<'x> {
    limit: u32,
    len: usize,
    /// The only hold while there is exactly one: no index is built.
    one: Option<Entry<'x>>,
    /// token -> (mode, owner, fence) of its hold, from the second hold on.
    tokens: HashMap<&'x [u8], (Mode, &'x [u8], u64)>,
    owners: HashMap<&'x [u8], Owner>,
    /// Owners with at least one exclusive hold.
    exclusive_owners: usize,
    /// Room to reserve when the indexes are built.
    capacity: usize,
}

impl<'x> Summary<'x> {
    /// No holds yet, room for `holds` of them (`Holds::summary` adds them).
    #[inline]
    pub fn new(limit: u32, holds: usize) -> Self {
        Summary {
            limit,
            len: 0,
            one: None,
            tokens: HashMap::new(),
            owners: HashMap::new(),
            exclusive_owners: 0,
            capacity: holds,
        }
    }

    /// A plain lock: one exclusive hold that is its own owner, limit 1.
    /// Allocates nothing.
    #[inline]
    pub fn of_plain(lease: Option<LeaseRef<'x>>) -> Self {
        let mut s = Summary::new(1, 0);
        if let Some(l) = lease {
            s.add(l.token(), l.token(), Mode::Exclusive, l.fence(), 1);
        }
        s
    }

    /// A hold granted (or present).
    #[inline]
    pub fn add(&mut self, token: &'x [u8], owner: &'x [u8], mode: Mode, fence: u64, limit: u32) {
        if self.len == 0 {
            self.limit = limit;
        }
        let entry = Entry {
            token,
            owner,
            mode,
            fence,
        };
        if mode == Mode::Exclusive && !self.owner_is_exclusive(owner) {
            self.exclusive_owners += 1;
        }
        self.len += 1;
        match self.len {
            1 => self.one = Some(entry),
            _ => {
                if let Some(first) = self.one.take() {
                    self.tokens.reserve(self.capacity.max(2));
                    self.index(first);
                }
                self.index(entry);
            }
        }
    }

    fn index(&mut self, e: Entry<'x>) {
        self.tokens.insert(e.token, (e.mode, e.owner, e.fence));
        let o = self.owners.entry(e.owner).or_insert(Owner {
            fence: e.fence,
            holds: 0,
            exclusive: 0,
        });
        o.holds += 1;
        if e.mode == Mode::Exclusive {
            o.exclusive += 1;
        }
    }

    /// The same holds with the indexes built even for a single hold: the
    /// representation every resource with several holds uses, so the
    /// inline fast path can be compared with it.
    #[cfg(test)]
    pub fn indexed(mut self) -> Self {
        if let Some(first) = self.one.take() {
            self.index(first);
        }
        self
    }

    #[inline]
    fn owner_is_exclusive(&self, owner: &[u8]) -> bool {
        self.owner(owner).is_some_and(|o| o.exclusive > 0)
    }

    /// `token`'s hold: its mode, owner and fence.
    #[inline]
    fn token(&self, token: &[u8]) -> Option<(Mode, &'x [u8], u64)> {
        match &self.one {
            Some(e) if e.token == token => Some((e.mode, e.owner, e.fence)),
            Some(_) => None,
            None => self.tokens.get(token).copied(),
        }
    }

    /// What `owner` holds.
    #[inline]
    fn owner(&self, owner: &[u8]) -> Option<Owner> {
        match &self.one {
            Some(e) if e.owner == owner => Some(Owner {
                fence: e.fence,
                holds: 1,
                exclusive: usize::from(e.mode == Mode::Exclusive),
            }),
            Some(_) => None,
            None => self.owners.get(owner).copied(),
        }
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
        if ask.limit.is_some() || ask.owner.is_some() || ask.mode != Mode::Exclusive {
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
            let same = mode == ask.mode && held_by == owner && self.limit == limit;
            return if same {
                Ok(Admission::Retry { fence })
            } else {
                Err(Error::TokenInUse)
            };
        }
        if limit > 1 && ask.mode == Mode::Shared {
            return Err(Error::SharedSemaphore);
        }
        if self.len > 0 && self.limit != limit {
            return Err(Error::LimitMismatch { limit: self.limit });
        }
        let me = self.owner(owner);
        let mine = me.map_or(0, |o| o.holds);
        let my_exclusive = me.map_or(0, |o| o.exclusive);
        let fits = match (ask.mode, limit) {
            // A semaphore: any owner's permits count.
            (_, n) if n > 1 => self.len < n as usize,
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
