//! The server's sessions (`dlock_core::sessions::Sessions`): one registry,
//! and the hooks the rest of the module calls when a bound hold comes or
//! goes, or a bound waiter queues. What a session's end carries out (the
//! effects, the answers, the releases) is `execute/sessions.rs`; the
//! commands are `commands/session.rs`.
//!
//! Commands and callbacks run on the main thread; the mutex is for the
//! fork a `BGSAVE` writes from, which reads its own copy.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::server::jobs::{self, Job};
use dlock_core::resource::holds::Holds;
use dlock_core::sessions::{Fate, Place, Sessions};

/// A bound hold as the hooks name it: its token and its session.
pub type Binding = (Box<[u8]>, Box<[u8]>);

static REGISTRY: Mutex<Option<Sessions>> = Mutex::new(None);

/// Whether any session is live or ending: while none is, a hold's fate is
/// never asked and the hooks return at once.
static ANY: AtomicBool = AtomicBool::new(false);

/// The waiters (their request ids) of each live session.
/// Request ids by session.
type Waits = HashMap<Box<[u8]>, HashSet<u64>>;

static WAITS: Mutex<Option<Waits>> = Mutex::new(None);

pub fn with<R>(f: impl FnOnce(&mut Sessions) -> R) -> R {
    let mut guard = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
    let sessions = guard.get_or_insert_with(Sessions::new);
    let r = f(sessions);
    ANY.store(!sessions.is_empty(), Ordering::Relaxed);
    r
}

pub fn any() -> bool {
    ANY.load(Ordering::Relaxed)
}

/// What becomes of a hold bound to `session` at `now_ms`.
pub fn fate(session: &[u8], now_ms: u64) -> Fate {
    if !any() {
        return Fate::Gone;
    }
    with(|s| s.fate(session, now_ms))
}

/// The planted bug `planted-session-leaves-hold` (docs/history.md): the
/// hold of `token` was left behind by its session's end.
pub fn planted_leaked(token: &[u8]) -> bool {
    with(|s| s.planted_leaked(token))
}

/// A request names session `id`: it must be live (a session past its
/// deadline has ended, whether or not its timer ran yet).
pub fn require_live(id: Option<&[u8]>, now_ms: u64) -> Result<(), dlock_core::Error> {
    let Some(id) = id else {
        return Ok(());
    };
    let live = any() && with(|s| s.get(id).is_some_and(|s| s.deadline_ms >= now_ms));
    if live {
        Ok(())
    } else {
        Err(dlock_core::Error::NoSession)
    }
}

/// Holds bound (`added`) and unbound or gone (`removed`) on `key` in `db`:
/// (token, session).
pub fn note_holds(db: i32, key: &[u8], added: &[Binding], removed: &[Binding]) {
    if added.is_empty() && removed.is_empty() {
        return;
    }
    with(|s| {
        for (token, session) in removed {
            s.unbind(session, &place(db, key, token));
        }
        for (token, session) in added {
            s.bind(session, place(db, key, token));
        }
    });
}

/// A key's value went away (deleted, expired, evicted, overwritten, moved).
pub fn value_gone(db: i32, key: &[u8], holds: &Holds) {
    if !any() {
        return;
    }
    let bound: Vec<Binding> = holds
        .bound()
        .map(|(t, s)| (Box::from(t), Box::from(s)))
        .collect();
    note_holds(db, key, &[], &bound);
}

/// Every bound hold of `db` (or all databases) went with a flush.
pub fn flushed(db: Option<i32>) {
    if any() {
        with(|s| s.unbind_db(db));
    }
}

/// Two databases swapped: the places follow their keys.
pub fn swapped(a: i32, b: i32) {
    if any() {
        with(|s| s.swap_dbs(a, b));
    }
}

fn place(db: i32, key: &[u8], token: &[u8]) -> Place {
    Place {
        db,
        key: key.into(),
        token: token.into(),
    }
}

fn waits<R>(f: impl FnOnce(&mut Waits) -> R) -> R {
    let mut guard = WAITS.lock().unwrap_or_else(|p| p.into_inner());
    f(guard.get_or_insert_with(Default::default))
}

/// A waiter of `session` queued as request `id`. Requests that left are
/// forgotten here as the set doubles, so a session that waits often keeps
/// a set the size of what it waits for now.
pub fn note_wait(session: &[u8], id: u64, still_queued: impl Fn(u64) -> bool) {
    waits(|w| {
        let set = w.entry(session.into()).or_default();
        set.insert(id);
        if set.len().is_power_of_two() && set.len() >= 64 {
            set.retain(|id| still_queued(*id));
        }
    });
}

/// The request ids of `session`'s waiters (some may have left).
pub fn wait_ids(session: &[u8]) -> Vec<u64> {
    waits(|w| {
        w.get(session)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    })
}

/// The waiters of a session that ended, to answer.
pub fn take_waits(session: &[u8]) -> Vec<u64> {
    waits(|w| {
        w.remove(session)
            .map(|s| s.into_iter().collect())
            .unwrap_or_default()
    })
}

/// How many of `session`'s waiters still wait.
pub fn waits_of(session: &[u8], still_queued: impl Fn(u64) -> bool) -> usize {
    waits(|w| {
        w.get(session)
            .map_or(0, |s| s.iter().filter(|id| still_queued(**id)).count())
    })
}

/// Forgets every session (a full resync or load replaces them).
pub fn clear() {
    with(Sessions::clear);
    waits(HashMap::clear);
}

/// A connection closed (inside `CLIENT KILL`, or as it closes): the
/// sessions bound to it end, from a job.
pub fn connection_closed(client: u64) {
    if any() && with(|s| s.has_client(client)) {
        jobs::push(Job::ClientGone(client));
    }
}

/// The data loaded (or a promotion) may lack acknowledged writes: a
/// session's holds can no longer be vouched for, so every session ends
/// and its client learns it at its next keep-alive (`NOSESSION`).
pub fn lost() {
    if any() {
        jobs::push(Job::SessionsLost);
    }
}

/// The expiry job is queued for the earliest session deadline.
pub fn arm_expiry(now_ms: u64) {
    if let Some(at) = with(|s| s.next_deadline()) {
        // Live up to and including the deadline.
        jobs::push_after(
            Job::SessionsDue,
            at.saturating_add(1).saturating_sub(now_ms),
        );
    }
}

/// Ended sessions have holds to settle: the job that does it, a bounded
/// batch a turn.
pub fn arm_ending() {
    if any() && with(|s| s.has_ending()) {
        jobs::push(Job::SessionsEnd);
    }
}
