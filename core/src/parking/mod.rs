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

use std::collections::HashMap;
use std::hash::Hash;

use crate::queue::{Priority, WaitQueues, Waiter, Wants};
use crate::stats::Kind;
use crate::Error;

fn kind_of(w: &Wants) -> Kind {
    Kind::of(w.mode, w.limit.unwrap_or(1))
}
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
    /// Waits that ended since the server last took them (`take_left`).
    left: Vec<LeftQueue<K, H>>,
}

/// A request that left a queue: granted there, or gone without a grant
/// (timeout, refusal, disconnect, sent away). What the statistics count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftQueue<K, H> {
    /// The queue it left: one entry per resource granted; a request that
    /// left without a grant is one entry, under its first resource (`None`
    /// when every queue was emptied at once).
    pub resource: Option<K>,
    pub kind: Kind,
    /// `Waiter::queued_at` (0: the server never said when it joined).
    pub queued_at: u64,
    pub granted: bool,
    /// Who it was, for the slow-lock log.
    pub token: Box<[u8]>,
    pub owner: Option<Box<[u8]>>,
    pub session: Option<Box<[u8]>>,
    pub handle: H,
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
            left: Vec::new(),
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

    /// The resources request `id` waits for, while it waits.
    pub fn resources_of(&self, id: u64) -> Option<Vec<K>> {
        self.queues.resources_of(id).map(<[K]>::to_vec)
    }

    /// Request `id`'s token and resources, while it waits.
    pub fn waiting(&self, id: u64) -> Option<(Box<[u8]>, Vec<K>)> {
        let token = self.queues.token_of(id)?;
        Some((token.into(), self.resources_of(id)?))
    }

    /// Whether request `id` still waits in a queue.
    pub fn is_queued(&self, id: u64) -> bool {
        self.queues.is_queued(id)
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
    ) -> u64 {
        self.park_ranked(
            resource,
            token,
            wants,
            ttl_ms,
            gives_up_at,
            handle,
            Priority::FIFO,
        )
    }

    /// Parks a request at its rank (`priority.key`, then arrival).
    #[allow(clippy::too_many_arguments)]
    pub fn park_ranked(
        &mut self,
        resource: K,
        token: &[u8],
        wants: Wants,
        ttl_ms: u64,
        gives_up_at: Option<u64>,
        handle: H,
        priority: Priority,
    ) -> u64 {
        let id = self.queues.push_ranked(
            resource,
            token,
            wants,
            ttl_ms,
            gives_up_at,
            handle,
            priority,
        );
        self.queued(handle, id);
        id
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
    ) -> u64 {
        self.park_set_ranked(
            members,
            token,
            wants,
            ttl_ms,
            gives_up_at,
            handle,
            Priority::FIFO,
        )
    }

    /// Parks a set request at one rank in every member's queue.
    #[allow(clippy::too_many_arguments)]
    pub fn park_set_ranked(
        &mut self,
        members: Vec<K>,
        token: &[u8],
        wants: Wants,
        ttl_ms: u64,
        gives_up_at: Option<u64>,
        handle: H,
        priority: Priority,
    ) -> u64 {
        let id = self.queues.push_set_ranked(
            members,
            token,
            wants,
            ttl_ms,
            gives_up_at,
            handle,
            priority,
        );
        self.queued(handle, id);
        id
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

    fn answer_all(&mut self, gone: Vec<Waiter<H>>, resource: Option<&K>, answer: &Answer) {
        for w in gone {
            self.note_left(resource.cloned(), &w, false);
            self.answer(w.handle, answer.clone());
        }
    }

    fn note_left(&mut self, resource: Option<K>, w: &Waiter<H>, granted: bool) {
        self.left.push(LeftQueue {
            resource,
            kind: kind_of(&w.wants),
            queued_at: w.queued_at,
            granted,
            token: w.token.clone(),
            owner: w.wants.owner.clone(),
            session: w.wants.session.clone(),
            handle: w.handle,
        });
    }

    /// Takes queued request `id` out of every queue it waits in, noted as
    /// leaving without a grant under its first resource. The note takes
    /// the removed waiter's token, owner and session: no second look-up of
    /// the request and no copies.
    fn unqueue(&mut self, id: u64) {
        let Some((first, w)) = self.queues.remove_with_first(id) else {
            return;
        };
        self.left.push(LeftQueue {
            resource: first,
            kind: kind_of(&w.wants),
            queued_at: w.queued_at,
            granted: false,
            token: w.token,
            owner: w.wants.owner,
            session: w.wants.session,
            handle: w.handle,
        });
    }

    /// The requests that left a queue since the last call.
    pub fn take_left(&mut self) -> Vec<LeftQueue<K, H>> {
        std::mem::take(&mut self.left)
    }

    /// The waiters of `resource` whose `WAIT` has run out are answered nil
    /// (never granted). Returns how many.
    pub fn time_out_given_up(&mut self, resource: &K, now_ms: u64) -> usize {
        let gone = self.queues.take_given_up(resource, now_ms);
        let n = gone.len();
        self.answer_all(gone, Some(resource), &Answer::TimedOut);
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
        self.unqueue(id);
        self.answer(handle, Answer::TimedOut);
        true
    }

    /// Every waiter of `resource` (or of all resources) gets `err`.
    pub fn fail(&mut self, resource: Option<&K>, err: Error) {
        let gone = match resource {
            Some(r) => self.queues.drain(r),
            None => self.queues.drain_all(),
        };
        self.answer_all(gone, resource, &Answer::Failed(err))
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

mod grants;
mod hand_over;
mod wait_ends;

#[cfg(test)]
mod tests;
