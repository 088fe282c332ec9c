//! One resource, many holders: the model every kind of lock
//! shares. A resource holds a set of holds, each with its own token, owner,
//! fence, mode and absolute deadline, and a limit on how many may coexist.
//! A plain lock is a resource with limit 1 and one exclusive hold; a
//! read-write lock mixes shared and exclusive holds; a semaphore has limit
//! n; reentrancy is several holds of one owner. The kinds differ only in
//! `Holds::decide`, so persistence, effects, handoff and INFO can have one
//! path each.
//!
//! This is the rule book, unit-tested without a server; `server::holds`
//! maps the commands onto it. Time is always passed in.

use super::admission::{Admission, Summary};
use super::ask::{Ask, Mode};
use super::fence::FenceClock;
use super::lease::LeaseRef;
use super::Error;

/// The deadline of a hold that has none: a plain lock whose key an admin
/// made persistent (`PERSIST`) keeps no deadline when it gains holds.
pub const NEVER: u64 = i64::MAX as u64;

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

pub use super::admission::Decision;

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
    SameAs(usize),
    /// Its token is granted earlier in the same step (entry `n`), asking
    /// the same: that grant answers it too, nothing is added.
    Duplicate(usize),
}

/// The holds of one resource.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Holds {
    /// How many holds may coexist (1 for plain and read-write locks).
    pub limit: u32,
    pub holds: Vec<Hold>,
}

impl Holds {
    pub fn new(limit: u32) -> Self {
        Holds {
            limit,
            holds: Vec::new(),
        }
    }

    /// Drops every hold past its deadline; returns them (the master
    /// propagates each drop). A hold past its deadline is gone for every
    /// decision.
    pub fn prune(&mut self, now_ms: u64) -> Vec<Hold> {
        let (live, gone) = std::mem::take(&mut self.holds)
            .into_iter()
            .partition(|h| h.is_live(now_ms));
        self.holds = live;
        gone
    }

    pub fn is_empty(&self) -> bool {
        self.holds.is_empty()
    }

    /// Ends every hold at `until_ms` at the latest: an admin's expiry of
    /// the whole resource. Returns the tokens of the holds it moved.
    pub fn clamp(&mut self, until_ms: u64) -> Vec<Box<[u8]>> {
        self.holds
            .iter_mut()
            .filter(|h| h.deadline_ms > until_ms)
            .map(|h| {
                h.deadline_ms = until_ms;
                h.token.clone()
            })
            .collect()
    }

    /// A plain lock as holds: its one exclusive hold, ending at the key's
    /// deadline (`None`: the key has no TTL).
    pub fn from_plain(lease: LeaseRef<'_>, deadline_ms: Option<u64>) -> Self {
        let token: Box<[u8]> = lease.token().into();
        Holds {
            limit: 1,
            holds: vec![Hold {
                owner: token.clone(),
                token,
                fence: lease.fence(),
                mode: Mode::Exclusive,
                deadline_ms: deadline_ms.unwrap_or(NEVER),
            }],
        }
    }

    /// The one hold, if these holds are exactly what a plain lock stores
    /// (limit 1, one exclusive hold that is its own owner): then the plain
    /// layout, effects and INFO reply are used.
    pub fn as_plain(&self) -> Option<&Hold> {
        match self.holds.as_slice() {
            [h] if self.limit == 1 && h.mode == Mode::Exclusive && h.owner == h.token => Some(h),
            _ => None,
        }
    }

    /// Whether these holds could have come from the rules: tokens unique; a
    /// semaphore's permits exclusive, their own owners and within the
    /// limit; an exclusive hold beside holds of its own owner only; one
    /// fence per owner. The decoder refuses anything else.
    pub fn is_consistent(&self) -> bool {
        let mut tokens: Vec<&[u8]> = self.holds.iter().map(|h| &*h.token).collect();
        tokens.sort_unstable();
        if tokens.windows(2).any(|w| w.first() == w.get(1)) {
            return false;
        }
        if self.limit > 1 {
            return self.holds.len() <= self.limit as usize
                && self
                    .holds
                    .iter()
                    .all(|h| h.mode == Mode::Exclusive && h.owner == h.token);
        }
        let mut fences: std::collections::HashMap<&[u8], u64> = Default::default();
        let one_fence = self
            .holds
            .iter()
            .all(|h| *fences.entry(&h.owner).or_insert(h.fence) == h.fence);
        let writers_alone = self
            .holds
            .iter()
            .filter(|h| h.mode == Mode::Exclusive)
            .all(|w| self.others(&w.owner).next().is_none());
        one_fence && writers_alone
    }

    /// The holds still live at `now_ms` (a replica hides, never prunes).
    pub fn live(&self, now_ms: u64) -> impl Iterator<Item = &Hold> + '_ {
        self.holds.iter().filter(move |h| h.is_live(now_ms))
    }

    /// The earliest deadline of any hold: when waiters may next fit.
    pub fn earliest_deadline_ms(&self) -> Option<u64> {
        self.holds.iter().map(|h| h.deadline_ms).min()
    }

    /// The highest fence stored (what a read of the value reveals).
    pub fn max_fence(&self) -> u64 {
        self.holds.iter().map(|h| h.fence).max().unwrap_or(0)
    }

    pub fn hold_of(&self, token: &[u8]) -> Option<&Hold> {
        self.holds.iter().find(|h| *h.token == *token)
    }

    fn others<'h>(&'h self, owner: &'h [u8]) -> impl Iterator<Item = &'h Hold> + 'h {
        self.holds.iter().filter(move |h| *h.owner != *owner)
    }

    /// The key's TTL: the latest hold deadline.
    pub fn deadline_ms(&self) -> Option<u64> {
        self.holds.iter().map(|h| h.deadline_ms).max()
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

    /// The holds as admission's indexes (see `Summary`).
    pub fn summary(&self) -> Summary<'_> {
        let mut s = Summary::new(self.limit, self.holds.len());
        for h in &self.holds {
            s.add(&h.token, &h.owner, h.mode, h.fence, self.limit);
        }
        s
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
                    let grant = match drawn_by(fence).filter(|_| fence > super::fence::MAX_FENCE) {
                        Some(first) => QueueGrant::Duplicate(first),
                        None => QueueGrant::Retry { fence },
                    };
                    out.push((i, Ok(grant)));
                    continue;
                }
                Ok(Admission::New { owner_fence: None }) => (QueueGrant::Fresh, stand_in(i)),
                Ok(Admission::New {
                    owner_fence: Some(f),
                }) if f > super::fence::MAX_FENCE => match drawn_by(f) {
                    Some(first) => (QueueGrant::SameAs(first), f),
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
        self.holds.push(Hold {
            token: ask.token.into(),
            owner: ask.owner().into(),
            fence,
            mode: ask.mode,
            deadline_ms,
        });
    }

    /// Moves the deadline of `token`'s hold, live or not (a queued retry);
    /// whether it exists.
    pub fn set_deadline(&mut self, token: &[u8], deadline_ms: u64) -> bool {
        match self.holds.iter_mut().find(|h| *h.token == *token) {
            Some(h) => {
                h.deadline_ms = deadline_ms;
                true
            }
            None => false,
        }
    }

    /// Ends the hold of `token`; whether it existed.
    pub fn release(&mut self, token: &[u8]) -> bool {
        let before = self.holds.len();
        self.holds.retain(|h| *h.token != *token);
        self.holds.len() != before
    }

    /// Moves the deadline of `token`'s live hold; whether it existed.
    pub fn extend(&mut self, token: &[u8], deadline_ms: u64, now_ms: u64) -> bool {
        match self
            .holds
            .iter_mut()
            .find(|h| *h.token == *token && h.is_live(now_ms))
        {
            Some(h) => {
                h.deadline_ms = deadline_ms;
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
#[path = "holds_tests.rs"]
mod tests;
