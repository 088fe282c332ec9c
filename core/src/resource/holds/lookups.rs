//! Holds found by token and by owner, the plain lock's view of them, their
//! highest fence and size, and the check that their indexes agree.

use super::{Bytes, Held, HoldRef, Holds, NEVER};
use crate::ask::{Cap, Mode};
use crate::resource::admission::OwnerHolds;
use crate::resource::lease::LeaseRef;

impl Holds {
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

    /// A plain lock as holds: its one exclusive hold, ending at the key's
    /// deadline (`None`: the key has no TTL).
    pub fn from_plain(lease: LeaseRef<'_>, deadline_ms: Option<u64>) -> Self {
        let mut h = Holds::new(1);
        h.insert_at(
            Bytes::from(lease.token()),
            (None, None, None, 1),
            lease.fence(),
            Mode::Exclusive,
            deadline_ms.unwrap_or(NEVER),
            0,
        );
        h
    }

    /// The holds bound to a session that has not been settled (no
    /// deadline of their own): (token, session). O(1) per bound hold.
    pub fn bound(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.session_of
            .iter()
            .filter(|(t, _)| {
                self.by_token
                    .get(*t)
                    .is_some_and(|h| h.deadline_ms >= NEVER)
            })
            .map(|(t, s)| (&**t, &**s))
    }

    /// The one hold, if these holds are exactly what a plain lock stores
    /// (limit 1, one exclusive hold that is its own owner): then the plain
    /// layout, effects and INFO reply are used.
    pub fn as_plain(&self) -> Option<HoldRef<'_>> {
        if self.limit != 1 || self.by_token.len() != 1 {
            return None;
        }
        let (t, h) = self.by_token.iter().next()?;
        let plain = h.mode() == Mode::Exclusive
            && !h.is_named()
            && !h.is_bound()
            && !h.is_capped()
            && !h.is_weighted();
        plain.then(|| self.view(t, h))
    }

    /// Whether these holds could have come from the rules: a semaphore's
    /// permits exclusive, their own owners and within the limit; an
    /// exclusive hold beside holds of its own owner only; one fence per
    /// owner. The decoder refuses anything else (and a token twice, which
    /// `push` reports).
    pub fn is_consistent(&self) -> bool {
        if self.limit > 1 {
            // Holds past a lowered limit stay until they end. The planted
            // bug's states pass too, so that its build runs on and the
            // history checker, not a refused load, finds it.
            let planted = cfg!(feature = "planted-permits-as-one");
            return (self.resized || planted || self.used_permits <= u64::from(self.limit))
                && self
                    .by_token
                    .values()
                    .all(|h| h.mode() == Mode::Exclusive && !h.is_named());
        }
        // Only a semaphore's holds count as several permits, and only a
        // semaphore is resized.
        if self.is_weighted() || self.resized {
            return false;
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

    /// The highest fence the value reveals to whoever reads it (see
    /// `top_fence`).
    pub fn max_fence(&self) -> u64 {
        self.top_fence
    }

    /// The holds whose fence is `fence` (one, or an owner's reentrant
    /// holds), in grant order.
    pub fn holds_of_fence(&self, fence: u64) -> impl Iterator<Item = HoldRef<'_>> + '_ {
        self.by_fence
            .range((fence, 0)..=(fence, u64::MAX))
            .filter_map(|(_, token)| self.hold_of(token))
    }

    pub fn hold_of(&self, token: &[u8]) -> Option<HoldRef<'_>> {
        self.by_token
            .get_key_value(token)
            .map(|(t, h)| self.view(t, h))
    }

    /// Heap bytes the holds and their indexes take, about (`MEMORY
    /// USAGE`): each hold's token (and named owner) once, shared by the
    /// indexes, the tables' slots, and the deadline index's entries with
    /// the slack its nodes carry (holds end in about the order they come,
    /// which leaves its nodes about half full).
    pub fn heap_bytes(&self) -> usize {
        const ARC: usize = 16;
        let token_slot = std::mem::size_of::<(Bytes, Held)>() + 1;
        // The deadline and fence indexes' entries are the same size.
        let deadline_entry = std::mem::size_of::<((u64, u64), Bytes)>();
        let named_slot = std::mem::size_of::<(Bytes, OwnerHolds)>() + 1;
        let owner_slot = std::mem::size_of::<(Bytes, Bytes)>() + 1;
        let cap_slot = std::mem::size_of::<(Bytes, Cap)>() + 1;
        let permits_slot = std::mem::size_of::<(Bytes, u32)>() + 1;
        let tokens: usize = self.by_token.keys().map(|t| ARC + t.len()).sum();
        let owners: usize = self.named.keys().map(|o| ARC + o.len()).sum();
        tokens
            + owners
            + self.by_token.capacity() * token_slot
            + self.len() * deadline_entry * 4
            + self.named.capacity() * named_slot
            + self.owner_of.capacity() * owner_slot
            + self.cap_of.capacity() * cap_slot
            + self.permits_of.capacity() * permits_slot
    }
}
