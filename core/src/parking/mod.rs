//! Parked clients of `DLOCK.ACQUIRE ... WAIT`, from queueing to the reply.
//!
//! The rule kept here: **a grant is delivered or revoked.** A waiter can
//! leave (its timeout, `CLIENT UNBLOCK [ERROR]`, a kill, a closed
//! connection) in the same event-loop turn in which it was granted, before
//! the server has run the reply callback; the server then drops the reply.
//! So a decided answer is not handed to the server at once: it is parked
//! here as `Answered` and handed over (`take_answers`) from a place where no
//! client can leave before the server replies. Until then every way of
//! leaving still reaches us, and a grant that loses that race is revoked.
//! After the hand-over the server still tells us, when it frees the answer,
//! whether the reply was sent; an unsent grant is revoked then.
//!
//! Generic over the resource `K` and the blocked-client handle `H`, and free
//! of time and I/O, so every transition is unit-tested without a server.
//!
//! Longer than 400 lines because the rule is kept by one type: every way a
//! waiter can leave and every answer pass through it, so that none is
//! missed.

use std::collections::HashMap;
use std::hash::Hash;

use crate::queue::{WaitQueues, Waiter, Wants};
use crate::Error;
use wait_ends::WaitEnds;

/// What a parked client is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Granted {
        grant: u64,
        fence: u64,
    },
    /// Its `WAIT` ran out: the reply is nil.
    TimedOut,
    Failed(Error),
}

#[derive(Debug)]
enum State {
    /// In a wait queue, as waiter `id`.
    Queued(u64),
    /// Decided, not yet handed to the server.
    Answered(Answer),
    /// Handed to the server, which will free it (and maybe reply).
    HandedOver,
}

#[derive(Debug)]
struct Slot {
    state: State,
}

/// A grant whose replies are not all settled yet.
#[derive(Debug)]
struct Grant<K> {
    /// Every resource granted: one, or each member of a set.
    resources: Vec<K>,
    token: Box<[u8]>,
    fence: u64,
    /// Handles granted that have neither replied nor left.
    open: usize,
    /// At least one reply carried the fence to the client.
    delivered: bool,
    /// The owner learned the fence another way (a same-token refresh).
    confirmed: bool,
}

/// A grant that reached nobody: release it as if its owner had.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revoke<K> {
    pub resource: K,
    pub token: Box<[u8]>,
    pub fence: u64,
}

/// What the server must do for a client that left on its own.
#[derive(Debug, PartialEq, Eq)]
pub struct Left<K> {
    /// We still owe the server an unblock for this handle (it was not
    /// handed over yet); the server frees it only then.
    pub unblock: bool,
    /// One per resource of the grant (a set's members).
    pub revoke: Vec<Revoke<K>>,
}

impl<K> Left<K> {
    /// Nothing to do: the handle is unknown or the server's already.
    pub fn nothing() -> Self {
        Left {
            unblock: false,
            revoke: Vec::new(),
        }
    }
}

#[derive(Debug)]
pub struct Parking<K, H> {
    queues: WaitQueues<K, H>,
    slots: HashMap<H, Slot>,
    /// Handles in the `Answered` state, in the order they were answered.
    answered: Vec<H>,
    grants: HashMap<u64, Grant<K>>,
    next_grant: u64,
    wait_ends: WaitEnds,
}

impl<K: Hash + Eq + Clone, H: Hash + Eq + Copy> Default for Parking<K, H> {
    fn default() -> Self {
        Parking {
            queues: WaitQueues::default(),
            slots: HashMap::new(),
            answered: Vec::new(),
            grants: HashMap::new(),
            next_grant: 1,
            wait_ends: WaitEnds::default(),
        }
    }
}

impl<K: Hash + Eq + Clone, H: Hash + Eq + Copy> Parking<K, H> {
    pub fn queues(&self) -> &WaitQueues<K, H> {
        &self.queues
    }

    pub fn queues_mut(&mut self) -> &mut WaitQueues<K, H> {
        &mut self.queues
    }

    /// Handles the server has not freed yet (queued, answered or handed over).
    pub fn handles(&self) -> usize {
        self.slots.len()
    }

    pub fn park(
        &mut self,
        resource: K,
        token: &[u8],
        wants: Wants,
        ttl_ms: u64,
        gives_up_at: Option<u64>,
        handle: H,
    ) {
        let id = self
            .queues
            .push(resource, token, wants, ttl_ms, gives_up_at, handle);
        self.queued(handle, id);
    }

    /// Parks a set request (`DLOCK.MACQUIRE ... WAIT`): one handle queued
    /// on every member at once.
    pub fn park_set(
        &mut self,
        members: Vec<K>,
        token: &[u8],
        wants: Wants,
        ttl_ms: u64,
        gives_up_at: Option<u64>,
        handle: H,
    ) {
        let id = self
            .queues
            .push_set(members, token, wants, ttl_ms, gives_up_at, handle);
        self.queued(handle, id);
    }

    fn queued(&mut self, handle: H, id: u64) {
        self.slots.insert(
            handle,
            Slot {
                state: State::Queued(id),
            },
        );
    }

    /// Answers a handle that left its queue.
    fn answer(&mut self, handle: H, answer: Answer) {
        if let Some(slot) = self.slots.get_mut(&handle) {
            slot.state = State::Answered(answer);
            self.answered.push(handle);
        }
    }

    fn answer_all(&mut self, gone: Vec<Waiter<H>>, answer: &Answer) {
        for w in gone {
            self.answer(w.handle, answer.clone());
        }
    }

    /// The waiters of `resource` whose `WAIT` has run out are answered nil
    /// (never granted). Returns how many.
    pub fn time_out_given_up(&mut self, resource: &K, now_ms: u64) -> usize {
        let gone = self.queues.take_given_up(resource, now_ms);
        let n = gone.len();
        self.answer_all(gone, &Answer::TimedOut);
        n
    }

    /// A waiter's `WAIT` ended: answer it nil if still queued.
    pub fn time_out(&mut self, handle: H) -> bool {
        let Some(Slot {
            state: State::Queued(id),
            ..
        }) = self.slots.get(&handle)
        else {
            return false;
        };
        let id = *id;
        self.queues.remove(id);
        self.answer(handle, Answer::TimedOut);
        true
    }

    /// Every waiter of `resource` (or of all resources) gets `err`.
    pub fn fail(&mut self, resource: Option<&K>, err: Error) {
        let gone = match resource {
            Some(r) => self.queues.drain(r),
            None => self.queues.drain_all(),
        };
        self.answer_all(gone, &Answer::Failed(err))
    }

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
        for (w, _) in self.queues.take(&ids) {
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
                self.queues.remove(id);
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

impl<K: Hash + Eq + Clone, H: Hash + Eq + Copy> Parking<K, H> {
    /// The queued `handle`'s `WAIT` ends at `at_us` (µs, on the clock the
    /// server reckons `WAIT`s on: monotonic, see the module's `server/waiting/blocking.rs`);
    /// the server makes sure its timer fires by then.
    pub fn ends_wait_at(&mut self, handle: H, at_us: u64) {
        let Some(State::Queued(id)) = self.slots.get(&handle).map(|s| &s.state) else {
            return;
        };
        let (id, queues) = (*id, &self.queues);
        self.wait_ends
            .push(at_us, id, queues.total(), |id| queues.is_queued(id));
    }

    /// The earliest end (µs) of a `WAIT` still running.
    pub fn next_wait_end(&mut self) -> Option<u64> {
        let queues = &self.queues;
        self.wait_ends.next(|id| queues.is_queued(id))
    }

    /// Answers nil to every queued waiter whose `WAIT` has ended by
    /// `now_us` (as its own timer did); returns how many.
    pub fn time_out_ended(&mut self, now_us: u64) -> usize {
        let mut n = 0;
        while let Some(id) = self.wait_ends.pop_ended(now_us) {
            if let Some(handle) = self.queues.handle(id).copied() {
                n += usize::from(self.time_out(handle));
            }
        }
        n
    }

    /// Entries in the `WAIT` ends' heap, departed waiters' included.
    #[cfg(test)]
    pub fn wait_ends(&self) -> usize {
        self.wait_ends.len()
    }
}

mod wait_ends;

#[cfg(test)]
mod tests;
