//! What admission needs to know of a resource's holds, as indexes: built
//! once per decision, and kept up to date while a queue step grants, so a
//! run of thousands of queued readers is decided in linear time instead of
//! rescanning every hold for every reader. `Holds::admit` and
//! `Holds::admit_queue` both decide through `Summary::admit`: one rule book.

use std::collections::HashMap;

use super::ask::{Ask, Mode};
use super::Error;

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

#[derive(Debug)]
pub struct Summary<'x> {
    limit: u32,
    len: usize,
    /// token -> (mode, owner, fence) of its hold.
    tokens: HashMap<&'x [u8], (Mode, &'x [u8], u64)>,
    owners: HashMap<&'x [u8], Owner>,
    /// Owners with at least one exclusive hold.
    exclusive_owners: usize,
}

impl<'x> Summary<'x> {
    /// No holds yet, room for `holds` of them (`Holds::summary` adds them).
    pub fn new(limit: u32, holds: usize) -> Self {
        Summary {
            limit,
            len: 0,
            tokens: HashMap::with_capacity(holds),
            owners: HashMap::new(),
            exclusive_owners: 0,
        }
    }

    /// A hold granted (or present).
    pub fn add(&mut self, token: &'x [u8], owner: &'x [u8], mode: Mode, fence: u64, limit: u32) {
        if self.len == 0 {
            self.limit = limit;
        }
        self.len += 1;
        self.tokens.insert(token, (mode, owner, fence));
        let o = self.owners.entry(owner).or_insert(Owner {
            fence,
            holds: 0,
            exclusive: 0,
        });
        o.holds += 1;
        if mode == Mode::Exclusive {
            o.exclusive += 1;
            if o.exclusive == 1 {
                self.exclusive_owners += 1;
            }
        }
    }

    /// Whether `owner` holds anything.
    pub fn holds_owner(&self, owner: &[u8]) -> bool {
        self.owners.contains_key(owner)
    }

    /// Whether `ask` may hold the resource now, without drawing a fence
    /// (see `Holds::admit`).
    pub fn admit(&self, ask: &Ask<'_>, queued: bool) -> Result<Admission, Error> {
        let limit = ask.limit.unwrap_or(1);
        let owner = ask.owner.unwrap_or(ask.token);
        if let Some(&(mode, held_by, fence)) = self.tokens.get(ask.token) {
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
        let me = self.owners.get(owner).copied();
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
