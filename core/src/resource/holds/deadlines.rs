//! The holds in time: which are live or past their deadline, pruning and
//! clamping them, and the deadlines the key's TTL and wake-ups follow.

use super::{Hold, HoldRef, Holds, NEVER};
use crate::observe::hold_mark;

impl Holds {
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

    /// The key's TTL: the latest hold deadline.
    pub fn deadline_ms(&self) -> Option<u64> {
        self.by_deadline.last_key_value().map(|((d, _), _)| *d)
    }

    /// The latest deadline before `NEVER` (holds without one aside).
    pub fn latest_finite_ms(&self) -> Option<u64> {
        self.by_deadline
            .range(..(NEVER, 0))
            .next_back()
            .map(|((d, _), _)| *d)
    }
}
