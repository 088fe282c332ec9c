//! Observing a resource (`DLOCK.OBSERVE`): what its holders are, as a
//! version, and who waits to hear of the next change.
//!
//! A version names a state, not a moment: the set of live holds (token,
//! fence, mode), or "free", or "free but reserved for the queue". Two reads
//! of the same holders give the same version, so an observer that passes
//! the version it last saw is answered at once if anything changed since,
//! whatever it missed in between (state, not a log: intermediate states may
//! be skipped, the latest never).
//!
//! The holds' marks are a keyed hash (the key drawn once per process), so
//! a client cannot craft holds whose version equals another state's; a
//! version is therefore meaningful only to the server process that gave
//! it, and anywhere else it reads as "changed" (answered at once).
//!
//! The observers of each resource are grouped by the version they saw, so
//! a change costs O(1) per observer woken and nothing for the others.

use std::collections::hash_map::{Entry, RandomState};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::LazyLock;

use crate::ask::Mode;
use crate::observe::pace::Paces;
use crate::Error;

/// The key of the holds' marks, drawn once per process.
static MARK_KEY: LazyLock<RandomState> = LazyLock::new(RandomState::new);

/// One hold's share of a version: XORed over the holds, so holds are
/// added and removed in O(1).
pub fn hold_mark(token: &[u8], fence: u64, mode: Mode) -> u64 {
    let mut h = MARK_KEY.build_hasher();
    token.hash(&mut h);
    fence.hash(&mut h);
    (mode == Mode::Shared).hash(&mut h);
    // Never 0: a single hold never reads as "free".
    h.finish() | 1
}

/// What an observer sees of a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// Nobody holds it and nobody waits for it.
    Free,
    /// Nobody holds it; a handoff to its queue is pending.
    Reserved,
    /// The XOR of its live holds' marks.
    Held(u64),
}

impl Seen {
    /// The version a reply carries.
    pub fn version(self) -> u64 {
        match self {
            Seen::Free => 0,
            // An odd mark XORs to any value, but the reserved state is told
            // apart by its own mark, drawn like a hold's.
            Seen::Reserved => hold_mark(b"", 0, Mode::Exclusive) ^ 2,
            Seen::Held(marks) => marks,
        }
    }
}

/// A version as replies show it: 16 hex digits.
pub fn show_version(version: u64) -> String {
    format!("{version:016x}")
}

/// A version as `SINCE` gives it.
pub fn parse_version(raw: &[u8]) -> Result<u64, Error> {
    let text = std::str::from_utf8(raw).map_err(|_| Error::BadVersion)?;
    if text.len() != 16 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::BadVersion);
    }
    u64::from_str_radix(text, 16).map_err(|_| Error::BadVersion)
}

/// `DLOCK.OBSERVE resource [SINCE version] [WAIT timeout_ms]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observe {
    /// The version the client last saw; `None`: it has seen nothing yet.
    pub since: Option<u64>,
    /// How long to wait for a change (0: no limit); `None`: answer at once.
    pub wait_ms: Option<u64>,
}

impl Observe {
    /// Whether the client waits, given the resource's version now: only
    /// when it asked to and has already seen this version.
    pub fn waits(&self, now: u64) -> bool {
        // The planted bug (test-only, docs/history.md): any version is
        // taken for the current one, so a client that missed a change
        // waits for the next instead of hearing of it at once.
        let seen = self.since == Some(now)
            || (cfg!(feature = "planted-observe-miss") && self.since.is_some());
        self.wait_ms.is_some() && seen
    }
}

/// Who waits to hear of a change, per resource and by the version seen.
#[derive(Debug)]
pub struct Observers<K, H> {
    by_key: HashMap<K, Watch<H>>,
    /// handle -> (its resource, the version it saw, when it gives up).
    index: HashMap<H, (K, u64, Option<u64>)>,
    /// (give-up time, handle) of the observers whose `WAIT` ends.
    giving_up: BTreeSet<(u64, H)>,
    /// How fast each resource's observers may be answered.
    pub paces: Paces<K>,
    /// Resources that lost their last observer while a check of them was
    /// scheduled: the caller drops the check (nobody needs it, and it
    /// could be due at a lease's end, far away).
    unwatched: Vec<K>,
    /// Whether the last observer with a `WAIT` end left: the caller drops
    /// the give-up job (it could be due far away).
    give_ups_ended: bool,
}

#[derive(Debug)]
struct Watch<H> {
    by_version: HashMap<u64, HashSet<H>>,
    /// The time a check of the resource is due (the earliest live hold's
    /// deadline), if one is scheduled.
    check_at: Option<u64>,
}

impl<K, H> Default for Observers<K, H> {
    fn default() -> Self {
        Observers {
            by_key: HashMap::new(),
            index: HashMap::new(),
            giving_up: BTreeSet::new(),
            paces: Paces::default(),
            unwatched: Vec::new(),
            give_ups_ended: false,
        }
    }
}

impl<K: Hash + Eq + Clone, H: Hash + Ord + Copy> Observers<K, H> {
    pub fn total(&self) -> usize {
        self.index.len()
    }

    pub fn is_watched(&self, key: &K) -> bool {
        self.by_key.contains_key(key)
    }

    /// `handle` waits for `key` to differ from `version`, until
    /// `gives_up_at` (ms on a monotonic clock; `None`: no limit).
    pub fn watch(&mut self, key: K, handle: H, version: u64, gives_up_at: Option<u64>) {
        if self.index.contains_key(&handle) {
            return;
        }
        self.index
            .insert(handle, (key.clone(), version, gives_up_at));
        if let Some(at) = gives_up_at {
            self.giving_up.insert((at, handle));
        }
        let watch = self.by_key.entry(key).or_insert_with(|| Watch {
            by_version: HashMap::new(),
            check_at: None,
        });
        watch.by_version.entry(version).or_default().insert(handle);
    }

    /// The resource `handle` waits on and the version it saw.
    pub fn seen(&self, handle: H) -> Option<(K, u64)> {
        self.index.get(&handle).map(|(k, v, _)| (k.clone(), *v))
    }

    /// `handle` stops waiting (timeout, disconnect, unblock); whether it
    /// was waiting. Idempotent: a handle leaves once.
    pub fn leave(&mut self, handle: H) -> bool {
        let Some((key, version, gives_up_at)) = self.index.remove(&handle) else {
            return false;
        };
        if let Some(at) = gives_up_at {
            self.stop_giving_up(at, handle);
        }
        if let Entry::Occupied(mut w) = self.by_key.entry(key) {
            if let Entry::Occupied(mut set) = w.get_mut().by_version.entry(version) {
                set.get_mut().remove(&handle);
                if set.get().is_empty() {
                    set.remove();
                }
            }
            if w.get().by_version.is_empty() {
                let (key, watch) = w.remove_entry();
                self.forget(key, watch);
            }
        }
        true
    }

    fn stop_giving_up(&mut self, at: u64, handle: H) {
        self.giving_up.remove(&(at, handle));
        if self.giving_up.is_empty() {
            self.give_ups_ended = true;
        }
    }

    /// `key`'s last observer left.
    fn forget(&mut self, key: K, watch: Watch<H>) {
        if watch.check_at.is_some() {
            self.unwatched.push(key);
        }
    }

    /// The resources whose scheduled check nobody needs any more, and
    /// whether the give-up job is needed no more, since the last call.
    pub fn take_idle(&mut self) -> (Vec<K>, bool) {
        let ended = std::mem::take(&mut self.give_ups_ended) && self.giving_up.is_empty();
        (std::mem::take(&mut self.unwatched), ended)
    }

    /// `key` reads as `version` now: the observers that saw another
    /// version stop waiting and are returned, to be answered.
    pub fn changed(&mut self, key: &K, version: u64) -> Vec<H> {
        let Some(watch) = self.by_key.get_mut(key) else {
            return Vec::new();
        };
        let stale: Vec<u64> = watch
            .by_version
            .keys()
            .filter(|v| **v != version)
            .copied()
            .collect();
        let mut woken = Vec::new();
        for v in stale {
            if let Some(set) = watch.by_version.remove(&v) {
                woken.extend(set);
            }
        }
        if watch.by_version.is_empty() {
            if let Some((key, watch)) = self.by_key.remove_entry(key) {
                self.forget(key, watch);
            }
        }
        for h in &woken {
            if let Some((_, _, Some(at))) = self.index.remove(h) {
                self.stop_giving_up(at, *h);
            }
        }
        woken
    }

    /// Every observer of `key` stops waiting and is returned, whatever it
    /// saw (this node no longer answers for the resource).
    pub fn take(&mut self, key: &K) -> Vec<H> {
        let Some((key, mut watch)) = self.by_key.remove_entry(key) else {
            return Vec::new();
        };
        let gone: Vec<H> = std::mem::take(&mut watch.by_version)
            .into_values()
            .flatten()
            .collect();
        self.forget(key, watch);
        for h in &gone {
            if let Some((_, _, Some(at))) = self.index.remove(h) {
                self.stop_giving_up(at, *h);
            }
        }
        gone
    }

    /// The observers whose `WAIT` ran out before `now_ms` stop waiting and
    /// are returned with their resource and the version they saw: the
    /// caller answers nil those whose resource still reads so, and the
    /// state to the others (held back by the pace, they have a change to
    /// hear). Like a blocked client's timeout, the deadline itself still
    /// counts.
    pub fn take_given_up(&mut self, now_ms: u64) -> Vec<(H, K, u64)> {
        let gone: Vec<H> = self
            .giving_up
            .iter()
            .take_while(|(at, _)| *at < now_ms)
            .map(|(_, h)| *h)
            .collect();
        gone.into_iter()
            .filter_map(|h| {
                let (key, version, _) = self.index.get(&h)?.clone();
                self.leave(h).then_some((h, key, version))
            })
            .collect()
    }

    /// When the next observer gives up.
    pub fn next_give_up(&self) -> Option<u64> {
        self.giving_up.first().map(|(at, _)| *at)
    }

    /// Whether a check of `key` at `at_ms` must be scheduled: someone
    /// watches it and no check is due by then.
    pub fn needs_check(&mut self, key: &K, at_ms: u64) -> bool {
        let Some(watch) = self.by_key.get_mut(key) else {
            return false;
        };
        if watch.check_at.is_some_and(|c| c <= at_ms) {
            return false;
        }
        watch.check_at = Some(at_ms);
        true
    }

    /// The check of `key` ran. It was the only one queued (a check due
    /// earlier takes the place of a later one), so none is scheduled now:
    /// the check schedules again what it still needs (the pace's end, a
    /// hold's deadline).
    pub fn checked(&mut self, key: &K) {
        if let Some(watch) = self.by_key.get_mut(key) {
            watch.check_at = None;
        }
    }

    /// Every resource watched (a flush checks them all).
    pub fn keys(&self) -> Vec<K> {
        self.by_key.keys().cloned().collect()
    }
}

pub mod pace;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_wakes_only_the_observers_that_saw_another_version() {
        let mut o: Observers<&str, u32> = Observers::default();
        o.watch("r", 1, 10, None);
        o.watch("r", 2, 10, Some(50));
        o.watch("r", 3, 11, None);
        o.watch("s", 4, 10, None);
        assert!(o.changed(&"r", 10).iter().eq([3].iter()));
        let mut woken = o.changed(&"r", 12);
        woken.sort();
        assert_eq!(woken, [1, 2]);
        assert!(!o.is_watched(&"r"));
        assert_eq!(o.total(), 1);
        assert!(o.changed(&"r", 13).is_empty());
        assert_eq!(o.next_give_up(), None, "a woken observer gives up no more");
    }

    #[test]
    fn leaving_is_idempotent_and_forgets_the_resource() {
        let mut o: Observers<&str, u32> = Observers::default();
        o.watch("r", 1, 10, Some(100));
        assert_eq!(o.seen(1), Some(("r", 10)));
        assert!(o.leave(1));
        assert_eq!(o.seen(1), None);
        assert_eq!(o.next_give_up(), None);
        assert!(!o.leave(1));
        assert!(!o.is_watched(&"r"));
        assert_eq!(o.total(), 0);
        // A woken observer has left already.
        o.watch("r", 2, 10, None);
        assert_eq!(o.changed(&"r", 11), [2]);
        assert!(!o.leave(2));
    }

    #[test]
    fn taking_a_resource_ends_all_its_observers() {
        let mut o: Observers<&str, u32> = Observers::default();
        o.watch("r", 1, 10, Some(100));
        o.watch("r", 2, 11, None);
        o.watch("s", 3, 10, Some(200));
        let mut gone = o.take(&"r");
        gone.sort();
        assert_eq!(gone, [1, 2]);
        assert!(!o.is_watched(&"r"));
        assert!(!o.leave(1), "gone already");
        assert_eq!(o.next_give_up(), Some(200));
        assert!(o.take(&"r").is_empty());
        assert_eq!(o.total(), 1);
    }

    #[test]
    fn observers_give_up_at_their_time_and_only_once() {
        let mut o: Observers<&str, u32> = Observers::default();
        o.watch("r", 1, 10, Some(100));
        o.watch("r", 2, 10, Some(200));
        o.watch("s", 3, 10, None);
        assert_eq!(o.next_give_up(), Some(100));
        assert!(
            o.take_given_up(100).is_empty(),
            "the deadline itself counts"
        );
        assert_eq!(o.take_given_up(101), [(1, "r", 10)]);
        assert_eq!(o.next_give_up(), Some(200));
        assert!(o.leave(2));
        assert!(o.take_given_up(1000).is_empty());
        assert_eq!(o.total(), 1);
    }

    #[test]
    fn checks_are_scheduled_once_per_deadline() {
        let mut o: Observers<&str, u32> = Observers::default();
        assert!(!o.needs_check(&"r", 100), "nobody watches");
        o.watch("r", 1, 10, None);
        assert!(o.needs_check(&"r", 100));
        assert!(!o.needs_check(&"r", 150), "one is due earlier");
        assert!(o.needs_check(&"r", 50), "an earlier deadline");
        o.checked(&"r");
        assert!(
            o.needs_check(&"r", 100),
            "the check that ran was the only one"
        );
    }

    #[test]
    fn the_last_observer_leaving_drops_what_was_scheduled_for_it() {
        let mut o: Observers<&str, u32> = Observers::default();
        o.watch("r", 1, 10, Some(100));
        o.watch("s", 2, 10, None);
        o.watch("t", 3, 10, Some(300));
        assert!(o.needs_check(&"r", 5_000));
        assert!(o.needs_check(&"t", 5_000));
        assert_eq!(o.take_idle(), (vec![], false));
        assert!(o.leave(1));
        assert_eq!(o.take_idle(), (vec!["r"], false), "t still gives up");
        assert_eq!(o.take_idle(), (vec![], false), "said once");
        assert!(o.leave(2));
        assert_eq!(
            o.take_idle(),
            (vec![], false),
            "no check was scheduled for s"
        );
        assert_eq!(o.changed(&"t", 11), [3]);
        assert_eq!(o.take_idle(), (vec!["t"], true));
        o.watch("r", 4, 10, Some(100));
        assert!(o.needs_check(&"r", 50));
        assert_eq!(o.take(&"r"), [4]);
        assert_eq!(o.take_idle(), (vec!["r"], true));
    }

    #[test]
    fn versions_tell_states_apart() {
        let a = hold_mark(b"a", 1, Mode::Exclusive);
        assert_ne!(a, 0);
        assert_ne!(a, hold_mark(b"a", 2, Mode::Exclusive), "another grant");
        assert_ne!(a, hold_mark(b"a", 1, Mode::Shared), "another mode");
        assert_ne!(Seen::Free.version(), Seen::Reserved.version());
        assert_eq!(Seen::Held(a).version(), a);
        let shown = show_version(a);
        assert_eq!(parse_version(shown.as_bytes()), Ok(a));
        for bad in [&b""[..], b"12", b"zzzzzzzzzzzzzzzz", b"00000000000000000"] {
            assert_eq!(parse_version(bad), Err(Error::BadVersion));
        }
    }

    #[test]
    fn only_a_client_that_saw_this_version_and_asked_to_wait_waits() {
        let o = |since, wait_ms| Observe { since, wait_ms };
        assert!(o(Some(5), Some(0)).waits(5));
        assert!(!o(Some(5), Some(0)).waits(6));
        assert!(!o(None, Some(100)).waits(5));
        assert!(!o(Some(5), None).waits(5));
    }
}
