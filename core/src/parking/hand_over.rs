//! Answers handed to the server, and every way a waiter leaves before or
//! after: a grant its client never received is revoked.

use std::hash::Hash;

use super::{Answer, Left, Parking, Revoke, State};

impl<K: Hash + Eq + Clone, H: Hash + Eq + Copy> Parking<K, H> {
    /// Every decided answer, to hand to the server now.
    pub fn take_answers(&mut self) -> Vec<(H, Answer)> {
        let handles = std::mem::take(&mut self.answered);
        handles
            .into_iter()
            .filter_map(|h| {
                let slot = self.slots.get_mut(&h)?;
                match std::mem::replace(&mut slot.state, State::HandedOver) {
                    State::Answered(a) => Some((h, a)),
                    other => {
                        slot.state = other;
                        None
                    }
                }
            })
            .collect()
    }

    pub fn has_answers(&self) -> bool {
        !self.answered.is_empty()
    }

    /// One handle of `grant` is done; the last one decides. An undelivered
    /// grant is revoked on every resource it granted.
    fn settle(&mut self, grant: u64, delivered: bool) -> Vec<Revoke<K>> {
        let Some(g) = self.grants.get_mut(&grant) else {
            return Vec::new();
        };
        g.open = g.open.saturating_sub(1);
        g.delivered |= delivered;
        if g.open > 0 {
            return Vec::new();
        }
        let Some(g) = self.grants.remove(&grant) else {
            return Vec::new();
        };
        if g.delivered || g.confirmed {
            return Vec::new();
        }
        g.resources
            .into_iter()
            .map(|resource| Revoke {
                resource,
                token: g.token.clone(),
                fence: g.fence,
            })
            .collect()
    }

    /// The client left on its own (timeout, `CLIENT UNBLOCK`, kill,
    /// disconnect) before its answer was handed over. A handle already
    /// handed over is the server's: its free tells us the rest.
    pub fn leave(&mut self, handle: H) -> Left<K> {
        let Some(slot) = self.slots.get(&handle) else {
            return Left::nothing();
        };
        if matches!(slot.state, State::HandedOver) {
            return Left::nothing();
        }
        let Some(slot) = self.slots.remove(&handle) else {
            return Left::nothing();
        };
        let revoke = match slot.state {
            State::Queued(id) => {
                self.unqueue(id);
                Vec::new()
            }
            State::Answered(answer) => {
                self.answered.retain(|h| *h != handle);
                match answer {
                    Answer::Granted { grant, .. } => self.settle(grant, false),
                    _ => Vec::new(),
                }
            }
            State::HandedOver => Vec::new(),
        };
        Left {
            unblock: true,
            revoke,
        }
    }

    /// The server freed a handed-over answer; `delivered` says whether its
    /// reply callback ran.
    pub fn freed(&mut self, handle: H, answer: &Answer, delivered: bool) -> Vec<Revoke<K>> {
        self.slots.remove(&handle);
        match answer {
            Answer::Granted { grant, .. } => self.settle(*grant, delivered),
            _ => Vec::new(),
        }
    }
}
