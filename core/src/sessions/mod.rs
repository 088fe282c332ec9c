//! Sessions: one liveness lease for many holds and waits. A session has an
//! id the client chose, a ttl that each keep-alive renews, an optional
//! lock-delay, and (on the master) the connection it may be bound to. A
//! hold bound to a session has no deadline of its own (`Hold::session`):
//! the session's fate decides it (`Sessions::fate`), so a keep-alive costs
//! O(log s) in the number of sessions whatever the number of holds.
//!
//! When a session ends it moves to `ending`: its holds are settled a bounded
//! batch at a time (`next_batch`), each released (or, after an involuntary
//! end with a lock-delay, kept until the delay passes) as a release would,
//! and until then nobody else is granted them, because a hold of an ending
//! session is still held until its fate is carried out. What the registry
//! indexes of a session's holds (`Place`s) is what finds them; a hold the
//! index missed (its key renamed) is judged by the same fate wherever it is
//! next read, so none outlives its session for long.
//!
//! Time is passed in; the server keeps one `Sessions` and carries out what
//! it returns (the effects, the releases, the timer).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use crate::limits::{MAX_LOCK_DELAY_MS, MAX_SESSION_ID, MAX_TTL_MS};
use crate::Error;

pub mod deadlock;
pub mod encoding;
#[cfg(test)]
mod tests;

/// A session's id, shared by the indexes that name it.
pub type Id = Arc<[u8]>;

/// Where a bound hold is: the database, the key and the hold's token.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Place {
    pub db: i32,
    pub key: Box<[u8]>,
    pub token: Box<[u8]>,
}

/// Why a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    /// Its ttl passed without a keep-alive.
    Expired,
    /// `DLOCK.SESSION CLOSE`.
    Closed,
    /// `DLOCK.SESSION KILL`.
    Killed,
    /// The connection it was bound to closed.
    Disconnected,
    /// The server may have lost some of what the session did (a restart or
    /// promotion after which acknowledged writes may be missing): its
    /// holds can no longer be vouched for.
    Lost,
}

impl EndReason {
    /// Whether the holder let go: only then is no lock-delay applied.
    pub fn is_voluntary(self) -> bool {
        self == EndReason::Closed
    }
}

/// What a session asks for when opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    pub ttl_ms: u64,
    pub lock_delay_ms: u64,
}

/// One live session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub settings: Settings,
    /// Unix ms: the session is live up to and including it.
    pub deadline_ms: u64,
    /// The connection (client id) it ends with, on the master that saw
    /// `OPEN ... BIND`; never persisted or replicated.
    pub client: Option<u64>,
    holds: Bindings,
}

impl Session {
    pub fn holds(&self) -> usize {
        self.holds.seq_of.len()
    }
}

/// A session's holds in the order they were bound, found by place.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Bindings {
    by_seq: BTreeMap<u64, Place>,
    seq_of: HashMap<Place, u64>,
    next: u64,
}

impl Bindings {
    fn insert(&mut self, place: Place) {
        if self.seq_of.contains_key(&place) {
            return;
        }
        self.next += 1;
        self.by_seq.insert(self.next, place.clone());
        self.seq_of.insert(place, self.next);
    }
    fn remove(&mut self, place: &Place) -> bool {
        match self.seq_of.remove(place) {
            Some(seq) => {
                self.by_seq.remove(&seq);
                true
            }
            None => false,
        }
    }
}

/// A session that ended, its holds not all settled yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ending {
    /// Unix ms until which its holds are kept from everyone (its end plus
    /// the lock-delay; the end itself when there is none).
    pub until_ms: u64,
    /// Its holds still to settle, in the order they were bound: moved
    /// from the session whole, so ending one costs O(1) whatever its holds.
    places: Bindings,
}

impl Ending {
    pub fn left(&self) -> usize {
        self.places.seq_of.len()
    }
}

/// What becomes of a hold bound to a session, at a given time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// The session is live: the hold stays, with no deadline.
    Live,
    /// The session ended with a lock-delay still running: the hold stays,
    /// unbound, until then.
    DelayedUntil(u64),
    /// The session is gone: so is the hold.
    Gone,
}

/// What `open` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opened {
    New { deadline_ms: u64 },
    Renewed { deadline_ms: u64 },
}

/// A session just ended: what replicas are told, and how many holds its
/// ending settles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    pub id: Id,
    pub until_ms: u64,
    pub holds: usize,
}

/// Every session this server knows, live and ending.
#[derive(Debug, Default)]
pub struct Sessions {
    live: HashMap<Id, Session>,
    by_deadline: BTreeSet<(u64, Id)>,
    by_client: HashMap<u64, BTreeSet<Id>>,
    ending: HashMap<Id, Ending>,
    ending_order: VecDeque<Id>,
    /// Every id live or ending, in order: `LIST` pages through it.
    ids: BTreeSet<Id>,
    /// The planted bug `planted-session-leaves-hold` (docs/history.md):
    /// tokens of holds an ended session left behind.
    #[cfg(feature = "planted-session-leaves-hold")]
    leaked: std::collections::HashSet<Box<[u8]>>,
}

impl Sessions {
    pub fn new() -> Self {
        Sessions::default()
    }

    pub fn len(&self) -> usize {
        self.live.len()
    }

    pub fn is_empty(&self) -> bool {
        self.live.is_empty() && self.ending.is_empty()
    }

    pub fn get(&self, id: &[u8]) -> Option<&Session> {
        self.live.get(id)
    }

    /// Holds of ended sessions still to settle.
    pub fn holds_ending(&self) -> usize {
        self.ending.values().map(Ending::left).sum()
    }

    /// Holds bound to live sessions.
    pub fn holds_bound(&self) -> usize {
        self.live.values().map(Session::holds).sum()
    }

    /// `OPEN id ttl [BIND] [LOCKDELAY ms]` at `now_ms`: a new session, or
    /// the live one renewed with these settings (a retry after a lost
    /// reply). An id still ending is refused: its holds are being released.
    pub fn open(
        &mut self,
        id: &[u8],
        settings: Settings,
        client: Option<u64>,
        now_ms: u64,
    ) -> Result<Opened, Error> {
        check_settings(id, settings)?;
        if self.ending.contains_key(id) {
            return Err(Error::SessionEnding);
        }
        let deadline_ms = now_ms.saturating_add(settings.ttl_ms);
        if let Some(s) = self.live.get(id) {
            let (old_deadline, old_client) = (s.deadline_ms, s.client);
            let id: Id = self.id_of(id);
            self.by_deadline.remove(&(old_deadline, id.clone()));
            self.by_deadline.insert((deadline_ms, id.clone()));
            if let Some(c) = old_client {
                self.unbind_client(c, &id);
            }
            if let Some(c) = client {
                self.by_client.entry(c).or_default().insert(id.clone());
            }
            if let Some(s) = self.live.get_mut(&id) {
                s.settings = settings;
                s.deadline_ms = deadline_ms;
                s.client = client;
            }
            return Ok(Opened::Renewed { deadline_ms });
        }
        let id: Id = Arc::from(id);
        self.insert(id, settings, deadline_ms, client);
        Ok(Opened::New { deadline_ms })
    }

    /// A session as the master stated it (`DLOCK.SESSIONSET`, a load):
    /// created or set to exactly this, never bound to a connection here.
    pub fn put(&mut self, id: &[u8], settings: Settings, deadline_ms: u64) -> Result<(), Error> {
        check_settings(id, settings)?;
        if let Some(s) = self.live.get(id) {
            let (old, client) = (s.deadline_ms, s.client);
            let id = self.id_of(id);
            self.by_deadline.remove(&(old, id.clone()));
            self.by_deadline.insert((deadline_ms, id.clone()));
            if let Some(s) = self.live.get_mut(&id) {
                s.settings = settings;
                s.deadline_ms = deadline_ms;
                s.client = client;
            }
            return Ok(());
        }
        // A replayed set after the end it preceded changes nothing.
        if self.ending.contains_key(id) {
            return Ok(());
        }
        self.insert(Arc::from(id), settings, deadline_ms, None);
        Ok(())
    }

    fn insert(&mut self, id: Id, settings: Settings, deadline_ms: u64, client: Option<u64>) {
        self.by_deadline.insert((deadline_ms, id.clone()));
        if let Some(c) = client {
            self.by_client.entry(c).or_default().insert(id.clone());
        }
        self.ids.insert(id.clone());
        self.live.insert(
            id,
            Session {
                settings,
                deadline_ms,
                client,
                holds: Bindings::default(),
            },
        );
    }

    /// The shared id of a live or ending session.
    fn id_of(&self, id: &[u8]) -> Id {
        match self.ids.get(id) {
            Some(shared) => shared.clone(),
            None => Arc::from(id),
        }
    }

    fn unbind_client(&mut self, client: u64, id: &Id) {
        if let Some(ids) = self.by_client.get_mut(&client) {
            ids.remove(id);
            if ids.is_empty() {
                self.by_client.remove(&client);
            }
        }
    }

    /// `KEEPALIVE id [ttl]`: the session's new deadline.
    pub fn keep_alive(
        &mut self,
        id: &[u8],
        ttl_ms: Option<u64>,
        now_ms: u64,
    ) -> Result<u64, Error> {
        let Some(s) = self.live.get(id) else {
            return Err(Error::NoSession);
        };
        if s.deadline_ms < now_ms {
            // Past its deadline: ended, whether or not its timer ran yet.
            return Err(Error::NoSession);
        }
        let ttl = ttl_ms.unwrap_or(s.settings.ttl_ms);
        if !(1..=MAX_TTL_MS).contains(&ttl) {
            return Err(Error::ttl());
        }
        let (old, settings) = (s.deadline_ms, s.settings);
        let deadline_ms = now_ms.saturating_add(ttl);
        let id = self.id_of(id);
        self.by_deadline.remove(&(old, id.clone()));
        self.by_deadline.insert((deadline_ms, id.clone()));
        if let Some(s) = self.live.get_mut(&id) {
            s.deadline_ms = deadline_ms;
            s.settings = Settings {
                ttl_ms: ttl,
                ..settings
            };
        }
        Ok(deadline_ms)
    }

    /// Ends a live session at `now_ms`: its holds move to the ending list.
    /// `None` if no such live session.
    pub fn end(&mut self, id: &[u8], reason: EndReason, now_ms: u64) -> Option<Ended> {
        let delay = match self.live.get(id) {
            Some(s) if !reason.is_voluntary() => s.settings.lock_delay_ms,
            Some(_) => 0,
            None => return None,
        };
        // An expiry ends the session at its deadline, however late the
        // timer ran: the delay counts from then.
        let at = match (reason, self.live.get(id)) {
            (EndReason::Expired, Some(s)) => s.deadline_ms.min(now_ms),
            _ => now_ms,
        };
        self.end_until(id, at.saturating_add(delay))
    }

    /// Ends a live session, its holds kept until `until_ms` (the master's
    /// `DLOCK.SESSIONEND`, or `end`).
    pub fn end_until(&mut self, id: &[u8], until_ms: u64) -> Option<Ended> {
        let (id, s) = self.live.remove_entry(id)?;
        self.by_deadline.remove(&(s.deadline_ms, id.clone()));
        if let Some(c) = s.client {
            self.unbind_client(c, &id);
        }
        #[allow(unused_mut)]
        let mut places = s.holds;
        #[cfg(feature = "planted-session-leaves-hold")]
        if let Some((_, first)) = places.by_seq.pop_first() {
            places.seq_of.remove(&first);
            self.leaked.insert(first.token);
        }
        let holds = places.seq_of.len();
        if holds == 0 {
            self.ids.remove(&id);
        } else {
            self.ending.insert(id.clone(), Ending { until_ms, places });
            self.ending_order.push_back(id.clone());
        }
        Some(Ended {
            id,
            until_ms,
            holds,
        })
    }

    /// Live sessions whose deadline passed before `now_ms` (a session is
    /// live up to and including its deadline), at most `max`.
    pub fn expired(&self, now_ms: u64, max: usize) -> Vec<Id> {
        self.by_deadline
            .range(..(now_ms, Arc::from(&[][..])))
            .take(max)
            .map(|(_, id)| id.clone())
            .collect()
    }

    /// Up to `max` live sessions, in id order.
    pub fn some_live(&self, max: usize) -> Vec<Id> {
        self.ids
            .iter()
            .filter(|id| self.live.contains_key(*id))
            .take(max)
            .cloned()
            .collect()
    }

    /// The earliest deadline of a live session.
    pub fn next_deadline(&self) -> Option<u64> {
        self.by_deadline.first().map(|(d, _)| *d)
    }

    /// Whether a live session is bound to connection `client`.
    pub fn has_client(&self, client: u64) -> bool {
        self.by_client.contains_key(&client)
    }

    /// The sessions bound to a connection that closed.
    pub fn bound_to(&self, client: u64) -> Vec<Id> {
        self.by_client
            .get(&client)
            .map(|ids| ids.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// A hold at `place` was bound to session `id`.
    pub fn bind(&mut self, id: &[u8], place: Place) {
        if let Some(s) = self.live.get_mut(id) {
            s.holds.insert(place);
        }
    }

    /// The hold at `place`, bound to `id`, is gone or unbound.
    pub fn unbind(&mut self, id: &[u8], place: &Place) {
        if let Some(s) = self.live.get_mut(id) {
            s.holds.remove(place);
        }
    }

    /// Every bound hold of `db` (all databases: `None`) is gone (a flush).
    pub fn unbind_db(&mut self, db: Option<i32>) {
        let gone = |p: &Place| db.is_none_or(|d| p.db == d);
        for s in self.live.values_mut() {
            let places: Vec<Place> = s.holds.seq_of.keys().filter(|p| gone(p)).cloned().collect();
            for p in &places {
                s.holds.remove(p);
            }
        }
        for e in self.ending.values_mut() {
            let places: Vec<Place> = e
                .places
                .seq_of
                .keys()
                .filter(|p| gone(p))
                .cloned()
                .collect();
            for p in &places {
                e.places.remove(p);
            }
        }
    }

    /// Databases `a` and `b` swapped (`SWAPDB`): the places follow.
    pub fn swap_dbs(&mut self, a: i32, b: i32) {
        let swap = |p: &mut Place| {
            if p.db == a {
                p.db = b;
            } else if p.db == b {
                p.db = a;
            }
        };
        for s in self.live.values_mut() {
            let old = std::mem::take(&mut s.holds);
            for mut p in old.by_seq.into_values() {
                swap(&mut p);
                s.holds.insert(p);
            }
        }
        for e in self.ending.values_mut() {
            let old = std::mem::take(&mut e.places);
            for mut p in old.by_seq.into_values() {
                swap(&mut p);
                e.places.insert(p);
            }
        }
    }

    /// What becomes of a hold bound to `id` at `now_ms`.
    pub fn fate(&self, id: &[u8], now_ms: u64) -> Fate {
        if self.live.contains_key(id) {
            return Fate::Live;
        }
        match self.ending.get(id) {
            Some(e) if e.until_ms > now_ms => Fate::DelayedUntil(e.until_ms),
            _ => Fate::Gone,
        }
    }

    /// Whether the planted bug `planted-session-leaves-hold` left the hold
    /// of `token` behind (its fate stays `Live`); never without it.
    pub fn planted_leaked(&self, _token: &[u8]) -> bool {
        #[cfg(feature = "planted-session-leaves-hold")]
        return self.leaked.contains(_token);
        #[cfg(not(feature = "planted-session-leaves-hold"))]
        false
    }

    /// Up to `max` holds of ended sessions to settle now, oldest ending
    /// first, each with its session. An ending whose holds were all handed
    /// out by an earlier call is forgotten here (returned in `done`, for
    /// the replicas), so the fate of those holds held while they settled.
    pub fn next_batch(&mut self, max: usize) -> Batch {
        let mut batch = Batch::default();
        while let Some(id) = self.ending_order.front().cloned() {
            if self.ending.get(&id).is_some_and(|e| e.left() > 0) {
                break;
            }
            self.ending.remove(&id);
            self.ending_order.pop_front();
            if !self.live.contains_key(&id) {
                self.ids.remove(&id);
            }
            batch.done.push(id);
        }
        for id in &self.ending_order {
            let Some(e) = self.ending.get_mut(id) else {
                continue;
            };
            while batch.places.len() < max {
                let Some((_, place)) = e.places.by_seq.pop_first() else {
                    break;
                };
                e.places.seq_of.remove(&place);
                batch.places.push((place, id.clone()));
            }
            if batch.places.len() >= max {
                break;
            }
        }
        batch
    }

    /// Whether `next_batch` has anything to do.
    pub fn has_ending(&self) -> bool {
        !self.ending_order.is_empty()
    }

    /// An ended session the master finished settling (`DLOCK.SESSIONEND
    /// ... DONE`): forgotten.
    pub fn forget(&mut self, id: &[u8]) {
        if self.ending.remove(id).is_some() {
            self.ending_order.retain(|e| &**e != id);
            if !self.live.contains_key(id) {
                self.ids.remove(id);
            }
        }
    }

    /// Forgets everything (`FLUSHALL` keeps sessions; a full resync
    /// replaces them).
    pub fn clear(&mut self) {
        *self = Sessions::new();
    }

    /// A page of ids after `after`, matching `matches`: at most `count`
    /// ids, examining at most `examine` (so a page costs bounded work);
    /// the id to continue after, or `None` when the list is done.
    pub fn page(
        &self,
        after: Option<&[u8]>,
        count: usize,
        examine: usize,
        matches: impl Fn(&[u8]) -> bool,
    ) -> (Vec<Id>, Option<Id>) {
        let start = match after {
            Some(a) => std::ops::Bound::Excluded(Arc::from(a)),
            None => std::ops::Bound::Unbounded,
        };
        let mut out = Vec::new();
        let mut last = None;
        let ids = self.ids.range::<Id, _>((start, std::ops::Bound::Unbounded));
        for (seen, id) in ids.enumerate() {
            if out.len() >= count || seen >= examine {
                return (out, last);
            }
            last = Some(id.clone());
            if self.live.contains_key(id) && matches(id) {
                out.push(id.clone());
            }
        }
        (out, None)
    }

    /// A page of the holds of live session `id`, after bind sequence
    /// `after`: the places and the sequence to continue after.
    pub fn holds_page(
        &self,
        id: &[u8],
        after: u64,
        count: usize,
    ) -> Option<(Vec<&Place>, Option<u64>)> {
        let s = self.live.get(id)?;
        let mut out = Vec::new();
        let mut last = 0;
        for (seq, place) in s.holds.by_seq.range(after.saturating_add(1)..) {
            if out.len() >= count {
                return Some((out, Some(last)));
            }
            out.push(place);
            last = *seq;
        }
        Some((out, None))
    }

    /// Every live session and every ending one (persistence).
    pub fn live_sessions(&self) -> impl Iterator<Item = (&Id, &Session)> + '_ {
        self.live.iter()
    }

    pub fn endings(&self) -> impl Iterator<Item = (&Id, &Ending)> + '_ {
        self.ending_order
            .iter()
            .filter_map(|id| self.ending.get(id).map(|e| (id, e)))
    }

    /// An ending as loaded from persistence.
    pub fn put_ending(&mut self, id: &[u8], until_ms: u64, places: Vec<Place>) {
        if self.live.contains_key(id) || self.ending.contains_key(id) || places.is_empty() {
            return;
        }
        let id: Id = Arc::from(id);
        self.ids.insert(id.clone());
        let mut bindings = Bindings::default();
        for p in places {
            bindings.insert(p);
        }
        self.ending.insert(
            id.clone(),
            Ending {
                until_ms,
                places: bindings,
            },
        );
        self.ending_order.push_back(id);
    }
}

/// Holds to settle, and endings finished.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Batch {
    pub places: Vec<(Place, Id)>,
    pub done: Vec<Id>,
}

fn check_settings(id: &[u8], settings: Settings) -> Result<(), Error> {
    if id.is_empty() || id.len() > MAX_SESSION_ID {
        return Err(Error::SessionIdLength);
    }
    if !(1..=MAX_TTL_MS).contains(&settings.ttl_ms) {
        return Err(Error::ttl());
    }
    if settings.lock_delay_ms > MAX_LOCK_DELAY_MS {
        return Err(Error::LockDelay);
    }
    Ok(())
}
