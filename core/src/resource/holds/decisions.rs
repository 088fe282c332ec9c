//! Requests decided against the holds (`decide`, `admit`, `admit_queue`)
//! and the changes a decision makes: add, put, extend, release.

#[cfg(test)]
use super::QueueGrant;
use super::{Bytes, Hold, Holds, NEVER};
use crate::ask::Ask;
use crate::fence::FenceClock;
use crate::resource::admission::{
    Admission, Decision, Held as Entry, Indexed, OwnerHolds, Summary,
};
use crate::Error;

impl Holds {
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

    /// The holds as admission sees them (see `Summary`): a view of the
    /// indexes, nothing copied.
    pub fn summary(&self) -> Summary<'_> {
        Summary::of_holds(self)
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
                    let grant = match drawn_by(fence).filter(|_| fence > crate::fence::MAX_FENCE) {
                        Some(first) => QueueGrant::AnsweredBy(first),
                        None => QueueGrant::Retry { fence },
                    };
                    out.push((i, Ok(grant)));
                    continue;
                }
                Ok(Admission::New { owner_fence: None }) => (QueueGrant::Fresh, stand_in(i)),
                Ok(Admission::New {
                    owner_fence: Some(f),
                }) if f > crate::fence::MAX_FENCE => match drawn_by(f) {
                    Some(first) => (QueueGrant::SameOwnerAs(first), f),
                    None => (QueueGrant::Fresh, stand_in(i)),
                },
                Ok(Admission::New {
                    owner_fence: Some(f),
                }) => (QueueGrant::Owner { fence: f }, f),
            };
            after.add_granted(ask, grant.1);
            out.push((i, Ok(grant.0)));
        }
        out
    }

    /// Adds the hold `decide` granted at `now_ms` (its cap counts from
    /// then), ending at `deadline_ms`.
    pub fn add(&mut self, ask: &Ask<'_>, fence: u64, deadline_ms: u64, now_ms: u64) {
        if self.is_empty() {
            self.limit = ask.limit();
            self.resized = false;
        }
        let token = Bytes::from(ask.token);
        if self.by_token.contains_key(&token) {
            return;
        }
        let owner = ask.owner.filter(|o| *o != ask.token).map(Bytes::from);
        let session = ask.session.map(Bytes::from);
        self.insert_at(
            token,
            (owner, session, ask.cap(now_ms), ask.permits()),
            fence,
            ask.mode,
            deadline_ms,
            self.next_seq,
        );
    }

    /// `DLOCK.RESIZE`: the limit becomes `limit`, and the holds are marked
    /// resized (see `resized`).
    pub fn set_limit(&mut self, limit: u32) {
        self.limit = limit;
        self.resized = true;
    }

    /// Adds or replaces `hold` (a replayed effect): the master's hold wins.
    pub fn put(&mut self, hold: Hold) {
        self.remove(&hold.token);
        self.push(hold);
    }

    /// Moves the deadline of `token`'s hold, live or not (a queued retry);
    /// whether it exists. A session's hold keeps its session: a deadline
    /// is its lock-delay's end.
    pub fn set_deadline(&mut self, token: &[u8], deadline_ms: u64) -> bool {
        let Some(h) = self.by_token.get_mut(token) else {
            return false;
        };
        if let Some(t) = self.by_deadline.remove(&(h.deadline_ms, h.seq())) {
            self.by_deadline.insert((deadline_ms, h.seq()), t);
        }
        h.deadline_ms = deadline_ms;
        true
    }

    /// Ends the hold of `token`; whether it existed.
    pub fn release(&mut self, token: &[u8]) -> bool {
        self.remove(token).is_some()
    }

    /// Moves the deadline of `token`'s live hold; whether it existed.
    pub fn extend(&mut self, token: &[u8], deadline_ms: u64, now_ms: u64) -> bool {
        let live = self
            .by_token
            .get(token)
            .is_some_and(|h| h.deadline_ms >= now_ms);
        live && self.set_deadline(token, deadline_ms)
    }
}

impl Indexed for Holds {
    fn limit(&self) -> u32 {
        self.limit
    }
    fn holds(&self) -> usize {
        self.len()
    }
    fn exclusive_owners(&self) -> usize {
        self.exclusive_owners
    }
    fn token(&self, token: &[u8]) -> Option<Entry<'_>> {
        self.hold_of(token).map(|h| (h.mode, h.owner, h.fence))
    }
    fn owner(&self, owner: &[u8]) -> Option<OwnerHolds> {
        Holds::owner(self, owner)
    }
    fn max_hold_of(&self, token: &[u8]) -> Option<u64> {
        self.hold_of(token)?.cap.map(|c| c.ms)
    }
    fn used(&self) -> u64 {
        self.used_permits()
    }
    fn permits_of(&self, token: &[u8]) -> u32 {
        self.hold_of(token).map_or(1, |h| h.permits)
    }
    fn resized(&self) -> bool {
        self.resized
    }
    fn session_of(&self, token: &[u8]) -> Option<&[u8]> {
        let h = self.hold_of(token)?;
        match h.session {
            // Its session ended (a lock-delay runs): no request's session
            // is its own any more, so no retry takes it back.
            Some(_) if h.deadline_ms < NEVER => Some(&[]),
            s => s,
        }
    }
}
