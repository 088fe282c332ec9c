//! Leader election on one resource: candidates campaign (wait to lead), the
//! leader holds the resource's lock with a watchdog, and its term is the
//! lock's fence; anyone can follow who leads with `DLOCK.OBSERVE`, which
//! the server answers when the holders change, never by polling.
//!
//! Terms rise with every new leader (fences never go back, across
//! restarts and failover), so a leader that passes its term to the storage
//! it writes to can be fenced off there by any later leader. A leader
//! learns it lost leadership from its guard: the watchdog renews at a
//! third of the ttl, so a lease taken away (an admin's `DEL`, an expiry
//! while the leader was paused) is noticed within a third of the ttl, and
//! a leadership whose renewals do not get through is given up before its
//! lease can have ended.

use crate::error::{Error, Failure, Result};
use crate::guard::Guard;
use crate::locker::Locker;
use crate::single::with_asking;
use redis::Value;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long one `DLOCK.OBSERVE` waits on the server before it is sent
/// again: a bound on how long a dead connection goes unnoticed.
pub(crate) const OBSERVE_CHUNK: Duration = Duration::from_secs(30);

/// Who leads, as an observer sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Leader {
    /// Nobody leads.
    Nobody,
    /// The leadership is being handed to the next candidate (the lock is
    /// free but reserved for its queue).
    HandingOver,
    /// `id` leads in `term`.
    Leads {
        /// The candidate's id ([`Election::id`]), or its token when it
        /// campaigned without one.
        id: String,
        term: u64,
        /// The lease's token.
        token: String,
    },
}

/// One election: the resource every candidate campaigns for.
///
/// ```no_run
/// use std::time::Duration;
/// let locker = dlock_client::Locker::new("redis://127.0.0.1:6379/")?;
/// let election = locker.election("leader:billing").id("worker-7");
/// if let Some(lead) = election.campaign(Duration::from_secs(60))? {
///     println!("leading in term {}", lead.term());
///     // ... work, passing lead.term() to the storage written to ...
///     lead.resign()?;
/// }
/// # Ok::<(), dlock_client::Error>(())
/// ```
#[derive(Clone)]
pub struct Election {
    locker: Locker,
    name: String,
    id: Option<String>,
    ttl: Duration,
    prefer: Option<String>,
}

impl Locker {
    /// The election held on `name` (a resource, like any lock's).
    pub fn election(&self, name: impl Into<String>) -> Election {
        Election {
            locker: self.clone(),
            name: name.into(),
            id: None,
            ttl: Duration::from_secs(15),
            prefer: None,
        }
    }
}

impl Locker {
    /// Hands the lock `guard` holds to the election candidate `id` waiting
    /// on its resource, as [`Leadership::hand_over`] does (for a lead held
    /// through a plain guard, as `dlock elect` holds it). `Ok(true)`: `id`
    /// holds it now, and `guard` is lost (its loss reason says it was
    /// handed over). A guard of a set is refused.
    pub fn hand_over(&self, guard: &Guard, id: &str) -> Result<bool> {
        let [name] = guard.resources() else {
            return Err(Error::Invalid(
                "a set's guard cannot be handed over (RELEASE ... TO names one resource)".into(),
            ));
        };
        crate::prefer::hand_over(self, name, guard.held(), guard.token(), id)
    }
}

impl Election {
    /// The id observers see for this candidate (default: its random
    /// token). It becomes the prefix of the lease's token, before a `/`.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// The leadership's lease (default 15 s): a leader that stops renewing
    /// (crashed, cut off) is replaced within this long.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Prefer candidate `id` as the leader: while this candidate leads
    /// and `id` waits in the queue, it hands the lead over
    /// ([`Leadership::hand_over`]), tried when it starts leading and again
    /// at every renewal (a third of the ttl). Nothing changes while `id`
    /// does not campaign; `id` itself (and a candidate without this) keeps
    /// its lead. An id that is empty or holds a `/` is refused by
    /// [`Election::campaign`].
    pub fn prefer(mut self, id: impl Into<String>) -> Self {
        self.prefer = Some(id.into());
        self
    }

    /// The resource the election is held on.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Waits up to `wait` to lead (`Duration::MAX`: until it does), in the
    /// server's FIFO queue of candidates. `None`: another candidate still
    /// leads when the wait ends.
    pub fn campaign(&self, wait: Duration) -> Result<Option<Leadership>> {
        let mut req = self
            .locker
            .request(self.name.clone())
            .ttl(self.ttl)
            .watchdog();
        if let Some(token) = candidate_token(self.id.as_deref())? {
            req = req.token(token);
        }
        if let Some(p) = &self.prefer {
            crate::handover::check_id(p)?;
        }
        if !wait.is_zero() {
            req = req.wait(wait);
        }
        let Some(guard) = req.acquire()? else {
            return Ok(None);
        };
        let lead = Leadership {
            guard,
            locker: self.locker.clone(),
            name: self.name.clone(),
        };
        if let Some(p) = self
            .prefer
            .as_ref()
            .filter(|p| self.id.as_ref() != Some(*p))
        {
            let g = &lead.guard;
            let (held, token) = (g.held().clone(), g.token().to_string());
            let (locker, name, every) = (self.locker.clone(), self.name.clone(), self.ttl / 3);
            crate::prefer::start(locker, name, held, token, p.clone(), every);
        }
        Ok(Some(lead))
    }

    /// Who leads now.
    pub fn leader(&self) -> Result<Leader> {
        self.observe_once(None, None)
            .map(|(_, l)| l.unwrap_or(Leader::Nobody))
    }

    /// Every change of leader, as it happens: the first item is who leads
    /// now, then one item per change (states, not steps: a leadership that
    /// came and went while nobody was listening may not be shown; the
    /// latest always is). Blocking; an error (the server unreachable) is
    /// an item too, and the next call resumes from the last leader seen.
    pub fn observe(&self) -> Observe {
        Observe {
            election: self.clone(),
            version: None,
        }
    }

    /// `DLOCK.OBSERVE name [SINCE version WAIT ms]`: the version and the
    /// leader, or `None` for the leader when the wait ran out.
    fn observe_once(
        &self,
        since: Option<&str>,
        wait: Option<Duration>,
    ) -> Result<(Option<String>, Option<Leader>)> {
        let cmd = observe_cmd(&self.name, since, wait);
        let io = self.locker.io_timeout();
        let reply = self
            .locker
            .topology()
            .run(&self.name, io, wait.unwrap_or_default(), |c, asking| {
                with_asking(asking, &cmd, None).query::<Vec<Value>>(c)
            })
            .map(|mut v| v.pop().unwrap_or(Value::Nil))
            .map_err(Failure::into_error)?;
        observed(reply, since)
    }
}

/// The leadership this candidate holds. Dropping it resigns.
pub struct Leadership {
    guard: Guard,
    locker: Locker,
    name: String,
}

impl Leadership {
    /// This leadership's term: its lease's fence, above every term granted
    /// before it on this resource.
    pub fn term(&self) -> u64 {
        self.guard.fence()
    }

    /// The lease's token (`id/random`, or random without an id).
    pub fn token(&self) -> &str {
        self.guard.token()
    }

    /// Whether the leadership is lost (or may be: its renewals did not get
    /// through before the lease could have ended). A lost leader must stop
    /// acting as one.
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// A channel that receives once when the leadership is lost.
    pub fn lost_signal(&self) -> mpsc::Receiver<()> {
        self.guard.lost_signal()
    }

    /// Waits up to `timeout` for the loss; whether it happened.
    pub fn wait_lost(&self, timeout: Duration) -> bool {
        self.guard.wait_lost(timeout)
    }

    /// Until when the leadership surely lasts (counted from the send time
    /// of the grant or the last renewal).
    pub fn valid_until(&self) -> Instant {
        self.guard.valid_until()
    }

    /// Steps down: the next candidate in the queue leads at once. Whether
    /// this candidate still led.
    pub fn resign(self) -> Result<bool> {
        self.guard.release()
    }

    /// Hands the lead to candidate `id` (its [`Election::id`]) if it waits
    /// in the queue: `DLOCK.RELEASE ... TO` its token, found with
    /// `DLOCK.WAITERS`. `Ok(true)`: `id` leads now and this leadership
    /// ended, as by [`Leadership::resign`] ([`Leadership::is_lost`] is
    /// true and its loss was signalled); `Ok(false)`: `id` does not wait
    /// (or no longer fits), and this candidate still leads, or its
    /// leadership had been lost already.
    pub fn hand_over(&self, id: &str) -> Result<bool> {
        let g = &self.guard;
        crate::prefer::hand_over(&self.locker, &self.name, g.held(), g.token(), id)
    }

    /// The lock behind the leadership.
    pub fn guard(&self) -> &Guard {
        &self.guard
    }
}

/// The leader changes of an election ([`Election::observe`]).
pub struct Observe {
    election: Election,
    version: Option<String>,
}

impl Observe {
    /// The next leader: at once the first time (and after a change that
    /// happened since), else when it changes. Blocks until then.
    pub fn next_leader(&mut self) -> Result<Leader> {
        loop {
            let (version, leader) = match &self.version {
                None => self.election.observe_once(None, None)?,
                Some(v) => self.election.observe_once(Some(v), Some(OBSERVE_CHUNK))?,
            };
            self.version = version;
            if let Some(l) = leader {
                return Ok(l);
            }
        }
    }
}

impl Iterator for Observe {
    type Item = Result<Leader>;

    fn next(&mut self) -> Option<Result<Leader>> {
        Some(self.next_leader())
    }
}

/// The lease token of a candidate with `id`: `id/random` (observers see
/// the id before the `/`); `None` without an id (a random token).
pub(crate) fn candidate_token(id: Option<&str>) -> Result<Option<String>> {
    match id {
        None => Ok(None),
        Some(id) if id.contains('/') => Err(Error::Invalid(format!(
            "an election id must not contain '/': {id:?}"
        ))),
        Some(id) => Ok(Some(format!("{id}/{}", crate::request::new_token()))),
    }
}

/// `DLOCK.OBSERVE name [SINCE version WAIT ms]`.
pub(crate) fn observe_cmd(name: &str, since: Option<&str>, wait: Option<Duration>) -> redis::Cmd {
    let mut cmd = redis::cmd("DLOCK.OBSERVE");
    cmd.arg(name);
    if let (Some(v), Some(w)) = (since, wait) {
        cmd.arg("SINCE")
            .arg(v)
            .arg("WAIT")
            .arg(w.as_millis() as u64);
    }
    cmd
}

/// An OBSERVE reply: the version and the leader, or (nil: the wait ran
/// out) `since` again and no leader.
pub(crate) fn observed(
    reply: Value,
    since: Option<&str>,
) -> Result<(Option<String>, Option<Leader>)> {
    match reply {
        Value::Nil => Ok((since.map(str::to_string), None)),
        Value::Array(parts) => match parts.as_slice() {
            [version, info] => {
                let version = text(version).ok_or_else(|| unexpected(&parts))?;
                Ok((Some(version), Some(leader_of(info)?)))
            }
            _ => Err(unexpected(&parts)),
        },
        other => Err(unexpected(&[other])),
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

fn unexpected(parts: &[Value]) -> Error {
    Error::Server(format!("unexpected DLOCK.OBSERVE reply: {parts:?}"))
}

/// The leader `DLOCK.INFO`'s reply shows (`DLOCK.OBSERVE`'s second part).
fn leader_of(info: &Value) -> Result<Leader> {
    let fields: Vec<(Vec<u8>, &Value)> = match info {
        Value::Nil => return Ok(Leader::Nobody),
        Value::Map(pairs) => pairs
            .iter()
            .filter_map(|(k, v)| Some((bytes(k)?, v)))
            .collect(),
        Value::Array(items) => items
            .chunks(2)
            .filter_map(|p| match p {
                [k, v] => Some((bytes(k)?, v)),
                _ => None,
            })
            .collect(),
        other => return Err(unexpected(std::slice::from_ref(other))),
    };
    let get = |name: &[u8]| fields.iter().find(|(k, _)| k == name).map(|(_, v)| *v);
    if let Some(holds) = get(b"holds") {
        // An election's lock has one exclusive holder: several holds (a
        // shared lock's readers, a semaphore's holders) name no leader.
        let one = match holds {
            Value::Array(h) if h.len() == 1 => &h[0],
            Value::Array(h) if h.is_empty() => return Ok(Leader::Nobody),
            Value::Array(h) => {
                let kind = get(b"kind").and_then(text).unwrap_or_default();
                return Err(Error::Server(format!(
                    "no leader: {} holders share the resource (a {kind}), an election's lock has one",
                    h.len()
                )));
            }
            _ => return Err(unexpected(std::slice::from_ref(info))),
        };

        return leader_of(one);
    }
    let token = match get(b"token") {
        Some(Value::Nil) => return Ok(Leader::HandingOver),
        Some(t) => text(t),
        None => None,
    };
    let term = match get(b"fence") {
        Some(Value::Int(f)) => u64::try_from(*f).ok(),
        _ => None,
    };
    match (token, term) {
        (Some(token), Some(term)) => {
            let id = token.rsplit_once('/').map_or(token.as_str(), |(id, _)| id);
            Ok(Leader::Leads {
                id: id.to_string(),
                term,
                token,
            })
        }
        _ => Err(unexpected(std::slice::from_ref(info))),
    }
}

fn bytes(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::BulkString(b) => Some(b.clone()),
        Value::SimpleString(s) => Some(s.clone().into_bytes()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, Value)]) -> Value {
        Value::Map(
            pairs
                .iter()
                .map(|(k, v)| (Value::BulkString(k.as_bytes().to_vec()), v.clone()))
                .collect(),
        )
    }

    fn s(x: &str) -> Value {
        Value::BulkString(x.as_bytes().to_vec())
    }

    #[test]
    fn the_leader_is_read_from_every_reply_form() {
        assert_eq!(leader_of(&Value::Nil).unwrap(), Leader::Nobody);
        let plain = map(&[
            ("token", s("w7/abc")),
            ("fence", Value::Int(42)),
            ("ttl", Value::Int(900)),
            ("waiters", Value::Int(0)),
        ]);
        assert_eq!(
            leader_of(&plain).unwrap(),
            Leader::Leads {
                id: "w7".into(),
                term: 42,
                token: "w7/abc".into()
            }
        );
        let reserved = map(&[
            ("token", Value::Nil),
            ("fence", Value::Int(0)),
            ("ttl", Value::Int(-2)),
            ("waiters", Value::Int(1)),
        ]);
        assert_eq!(leader_of(&reserved).unwrap(), Leader::HandingOver);
        // RESP2: a flat array; a token without an id is its own id.
        let flat = Value::Array(vec![s("token"), s("abc"), s("fence"), Value::Int(7)]);
        assert!(
            matches!(leader_of(&flat).unwrap(), Leader::Leads { id, term: 7, .. } if id == "abc")
        );
        // Garbage is an error, never a panic.
        assert!(leader_of(&Value::Int(3)).is_err());
        assert!(leader_of(&map(&[("token", s("x"))])).is_err());
        assert!(leader_of(&map(&[("holds", Value::Int(1))])).is_err());
    }

    #[test]
    fn several_holders_name_no_leader() {
        let hold = |t: &str, f: i64| {
            map(&[
                ("token", s(t)),
                ("fence", Value::Int(f)),
                ("mode", s("shared")),
            ])
        };
        let shared = map(&[
            ("kind", s("rwlock")),
            ("holds", Value::Array(vec![hold("r1", 5), hold("r2", 6)])),
        ]);
        let e = leader_of(&shared).unwrap_err().to_string();
        assert!(e.contains("2 holders share the resource (a rwlock)"), "{e}");
        let one = map(&[
            ("kind", s("semaphore")),
            ("holds", Value::Array(vec![hold("p/1", 9)])),
        ]);
        assert!(matches!(leader_of(&one).unwrap(), Leader::Leads { id, term: 9, .. } if id == "p"));
    }
}
