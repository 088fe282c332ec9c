//! Grants in flight: made for a queue's head or a decided step, confirmed
//! by their holder, moved by `SWAPDB`, until their answer is delivered.

use std::collections::HashMap;
use std::hash::Hash;

use super::{Answer, Grant, LeftQueue, Parking};
use crate::stats::Kind;
use crate::Error;

impl<K: Hash + Eq + Clone, H: Hash + Eq + Copy> Parking<K, H> {
    /// Registers a grant of `token` on `resources` answered to `open`
    /// handles; returns its id.
    fn new_grant(
        &mut self,
        resources: Vec<K>,
        token: &[u8],
        fence: u64,
        open: usize,
        confirmed: bool,
    ) -> u64 {
        let grant = self.next_grant;
        self.next_grant += 1;
        self.grants.insert(
            grant,
            Grant {
                resources,
                token: token.into(),
                fence,
                open,
                delivered: false,
                confirmed,
            },
        );
        grant
    }

    /// Grants `resource` to its head waiter and every queued entry with the
    /// same token, under `fence`. Returns the token and TTL granted, or
    /// `None` when nobody waits.
    pub fn grant_head(&mut self, resource: &K, fence: u64) -> Option<(Box<[u8]>, u64)> {
        let g = self.queues.pop_grantee(resource)?;
        let grant = self.new_grant(
            vec![resource.clone()],
            &g.token,
            fence,
            g.handles.len(),
            false,
        );
        let answer = Answer::Granted { grant, fence };
        for h in &g.handles {
            self.answer(*h, answer.clone());
        }
        self.left.push(LeftQueue {
            resource: Some(resource.clone()),
            kind: Kind::Lock,
            queued_at: g.queued_at,
            granted: true,
        });
        Some((g.token, g.ttl_ms))
    }

    /// Grants the queued requests `granted` (id, fence) together (a run of
    /// shared requests, permits, an owner's holds, sets of a component) and
    /// answers the requests `refused` with their errors. Requests of one
    /// token are one grant, delivered or revoked together on every resource
    /// they name; a token in `retried` already held before this step (its
    /// client knows the fence another way): that grant is never revoked.
    pub fn grant_entries(
        &mut self,
        granted: &[(u64, u64)],
        retried: &[&[u8]],
        refused: Vec<(u64, Error)>,
    ) {
        let fences: HashMap<u64, u64> = granted.iter().copied().collect();
        let ids: Vec<u64> = granted.iter().map(|(id, _)| *id).collect();
        // One grant per token and fence: the same token granted twice under
        // two fences in one step (two sets) is revoked as two grants.
        let mut by_token: HashMap<(Box<[u8]>, u64), u64> = HashMap::new();
        for (w, resources) in self.queues.take(&ids) {
            let Some(&fence) = fences.get(&w.id) else {
                continue;
            };
            for r in &resources {
                self.note_left(Some(r.clone()), &w, true);
            }
            let grant = match by_token.get(&(w.token.clone(), fence)) {
                Some(g) => {
                    if let Some(g) = self.grants.get_mut(g) {
                        g.open += 1;
                        for r in resources {
                            if !g.resources.contains(&r) {
                                g.resources.push(r);
                            }
                        }
                    }
                    *g
                }
                None => {
                    let confirmed = retried.contains(&&*w.token);
                    let grant = self.new_grant(resources, &w.token, fence, 1, confirmed);
                    by_token.insert((w.token.clone(), fence), grant);
                    grant
                }
            };
            self.answer(w.handle, Answer::Granted { grant, fence });
        }
        let errors: HashMap<u64, Error> = refused.into_iter().collect();
        let ids: Vec<u64> = errors.keys().copied().collect();
        for (w, resources) in self.queues.take(&ids) {
            self.note_left(resources.into_iter().next(), &w, false);
            if let Some(err) = errors.get(&w.id) {
                self.answer(w.handle, Answer::Failed(err.clone()));
            }
        }
    }

    /// The owner of `token` on `resource` refreshed its hold and so knows
    /// the fence: a grant of it still in flight is no longer revoked.
    pub fn confirm(&mut self, resource: &K, token: &[u8]) {
        for g in self.grants.values_mut() {
            if g.resources.contains(resource) && *g.token == *token {
                g.confirmed = true;
            }
        }
    }

    /// The granted locks moved (`SWAPDB`): a revocation must find them
    /// where they are now. `moved` maps a resource to its new name, if any.
    pub fn move_grants(&mut self, moved: impl Fn(&K) -> Option<K>) {
        for g in self.grants.values_mut() {
            for r in &mut g.resources {
                if let Some(to) = moved(r) {
                    *r = to;
                }
            }
        }
    }

    pub fn has_grants_in_flight(&self) -> bool {
        !self.grants.is_empty()
    }
}
