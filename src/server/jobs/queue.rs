//! The deferred jobs as data: what each job is, and the queue that keeps
//! them in the order they were pushed while finding them by due time, by
//! the resource a revocation is for, and by the kind of job that runs once
//! for everything queued before it. Every operation but the rare whole-queue
//! ones (a flush's, `SWAPDB`'s) costs O(log n) in the jobs queued, so a
//! dataset load, a flush or a changed database that queues one job per
//! resource stays linear in the resources.
//!
//! Plain data, no server calls: `jobs` owns the one queue and its timer.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::server::resource::Resource;
use dlock_core::parking::Revoke;

/// One piece of deferred work.
#[derive(Debug)]
pub enum Job {
    /// Re-evaluate a resource with waiters: hand it over if it is free.
    Settle(Resource),
    /// Release a grant whose reply never reached its waiter: one entry per
    /// resource of that one grant (a set grant revokes every member).
    Revoke(Vec<Revoke<Resource>>),
    /// Give the decided answers to the server (see `blocking`).
    HandOver,
    /// Raise the fence clock to a restored lock's fence once its key is
    /// known to hold that lock (see `restored`).
    ConfirmRestored { db: i32, key: Box<[u8]>, fence: u64 },
    /// Write the `DLOCK.META` facts, if they changed, into the AOF and to
    /// replicas (see `data_type::write_meta`).
    WriteMeta,
    /// Look at a multi-hold key whose guard fired, or that was loaded
    /// (see `hold_guards`).
    CheckHolds { db: i32, key: Box<[u8]> },
    /// The holders of `res` may have changed: answer its observers that
    /// saw another version (see `observe`).
    Observed(Resource),
    /// Answer nil to the observers whose `WAIT` ran out.
    ObserversGiveUp,
    /// Forget the pace records of resources whose observers' budget is
    /// full again (see `watchers`).
    PaceSweep,
    /// In Redis Cluster, send away the observers of resources whose slot
    /// this node no longer answers for (see `observe`).
    ObservedSlots,
    /// A lease on `res` ended at `at_ms`: its wake-up timer `timer` fired
    /// (see `jobs::arm_wake_up`).
    LeaseEnded {
        res: Resource,
        at_ms: u64,
        timer: u64,
    },
    /// Sessions whose ttl passed end (see `sessions`).
    SessionsDue,
    /// Holds of ended sessions are settled, a bounded batch a turn.
    SessionsEnd,
    /// A connection closed: the sessions bound to it end.
    ClientGone(u64),
    /// A restored lock whose session is not here ends when the session
    /// would have (see `restored`).
    EndRestoredAt {
        db: i32,
        key: Box<[u8]>,
        token: Box<[u8]>,
        at_ms: u64,
    },
}

impl Job {
    /// For a job that does at once everything queued before it (one
    /// hand-over gives every answer decided by then, one write every fact
    /// changed by then, one check of a resource every change made to it by
    /// then): what makes two of them the same.
    fn once(&self) -> Option<Once> {
        Some(match self {
            Job::HandOver => Once::HandOver,
            Job::WriteMeta => Once::WriteMeta,
            Job::ObserversGiveUp => Once::ObserversGiveUp,
            Job::ObservedSlots => Once::ObservedSlots,
            Job::PaceSweep => Once::PaceSweep,
            Job::SessionsDue => Once::SessionsDue,
            Job::SessionsEnd => Once::SessionsEnd,
            Job::Observed(res) => Once::Observed(res.clone()),
            _ => return None,
        })
    }

    /// The resources a revocation is for (none for other jobs).
    fn revoked(&self) -> impl Iterator<Item = &Resource> {
        let grant: &[Revoke<Resource>] = match self {
            Job::Revoke(grant) => grant,
            _ => &[],
        };
        grant.iter().map(|rv| &rv.resource)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Once {
    HandOver,
    WriteMeta,
    ObserversGiveUp,
    ObservedSlots,
    PaceSweep,
    SessionsDue,
    SessionsEnd,
    Observed(Resource),
}

#[derive(Debug)]
struct Queued {
    due_ms: u64,
    job: Job,
}

/// Positions: pushes to the back count up from the middle of the range,
/// pushes to the front count down from it, so the order of positions is
/// the queue's order.
const MIDDLE: u64 = 1 << 63;

/// The jobs in the order they were pushed (a push to the front goes before
/// all of them), with indexes by due time, by resource revoked and by the
/// kind of job that runs once.
#[derive(Debug)]
pub struct JobQueue {
    jobs: BTreeMap<u64, Queued>,
    by_due: BTreeSet<(u64, u64)>,
    once: HashMap<Once, BTreeSet<(u64, u64)>>,
    revokes: HashMap<Resource, BTreeSet<u64>>,
    revocations: usize,
    next_back: u64,
    next_front: u64,
}

impl Default for JobQueue {
    fn default() -> Self {
        JobQueue::new()
    }
}

impl JobQueue {
    pub fn new() -> JobQueue {
        JobQueue {
            jobs: BTreeMap::new(),
            by_due: BTreeSet::new(),
            once: HashMap::new(),
            revokes: HashMap::new(),
            revocations: 0,
            next_back: MIDDLE,
            next_front: MIDDLE - 1,
        }
    }

    /// Whether a revocation is queued.
    pub fn has_revocations(&self) -> bool {
        self.revocations > 0
    }

    /// The earliest time a queued job is due.
    pub fn next_due(&self) -> Option<u64> {
        self.by_due.first().map(|&(due, _)| due)
    }

    /// Queues `job` behind every other, due at `due_ms`; unless it is a job
    /// that runs once and one like it is already due by then. A job that
    /// runs once and is due earlier takes the place of the one queued (which
    /// it makes redundant: each such job, when it runs, schedules again
    /// whatever later work is still needed), so at most one of each is ever
    /// queued. Whether it was queued.
    pub fn push(&mut self, due_ms: u64, job: Job) -> bool {
        if let Some(once) = job.once() {
            let queued = self.once.get(&once).and_then(|s| s.first()).copied();
            match queued {
                Some((due, _)) if due <= due_ms => return false,
                Some((_, at)) => {
                    self.remove(at);
                }
                None => {}
            }
        }
        let at = self.next_back;
        self.next_back += 1;
        self.insert(at, due_ms, job);
        true
    }

    /// Queues `job` before every other, due at once.
    pub fn push_front(&mut self, job: Job) {
        let at = self.next_front;
        self.next_front -= 1;
        self.insert(at, 0, job);
    }

    fn insert(&mut self, at: u64, due_ms: u64, job: Job) {
        self.by_due.insert((due_ms, at));
        if let Some(once) = job.once() {
            self.once.entry(once).or_default().insert((due_ms, at));
        }
        if matches!(job, Job::Revoke(_)) {
            self.revocations += 1;
            for res in job.revoked() {
                self.revokes.entry(res.clone()).or_default().insert(at);
            }
        }
        self.jobs.insert(at, Queued { due_ms, job });
    }

    fn remove(&mut self, at: u64) -> Option<Job> {
        let Queued { due_ms, job } = self.jobs.remove(&at)?;
        self.by_due.remove(&(due_ms, at));
        if let Some(once) = job.once() {
            if let Some(set) = self.once.get_mut(&once) {
                set.remove(&(due_ms, at));
                if set.is_empty() {
                    self.once.remove(&once);
                }
            }
        }
        if matches!(job, Job::Revoke(_)) {
            self.revocations -= 1;
            for res in job.revoked() {
                if let Some(set) = self.revokes.get_mut(res) {
                    set.remove(&at);
                    if set.is_empty() {
                        self.revokes.remove(res);
                    }
                }
            }
        }
        Some(job)
    }

    /// Removes the jobs at `positions` (any order, repeats allowed); they
    /// come back in the queue's order.
    fn take_at(&mut self, mut positions: Vec<u64>) -> Vec<Job> {
        positions.sort_unstable();
        positions.dedup();
        let taken = positions
            .into_iter()
            .filter_map(|at| self.remove(at))
            .collect();
        shrink(&mut self.once);
        shrink(&mut self.revokes);
        taken
    }

    /// Drops the queued job that runs once like `job` (nobody needs it any
    /// more); whether there was one.
    pub fn cancel(&mut self, job: &Job) -> bool {
        let Some(once) = job.once() else {
            return false;
        };
        let Some(&(_, at)) = self.once.get(&once).and_then(|s| s.first()) else {
            return false;
        };
        self.remove(at);
        shrink(&mut self.once);
        true
    }

    /// How many jobs are queued.
    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    /// Takes the jobs due by `now_ms`, in the queue's order.
    pub fn take_due(&mut self, now_ms: u64) -> Vec<Job> {
        let due = self
            .by_due
            .range(..=(now_ms, u64::MAX))
            .map(|&(_, at)| at)
            .collect();
        self.take_at(due)
    }

    /// Takes the queued revocations of any of `resources`, in the queue's
    /// order.
    pub fn take_revocations(&mut self, resources: &[Resource]) -> Vec<Job> {
        let found = resources
            .iter()
            .filter_map(|r| self.revokes.get(r))
            .flatten()
            .copied()
            .collect();
        self.take_at(found)
    }

    /// The grants of `res` (token and fence) whose revocation is queued.
    pub fn revoked_on(&self, res: &Resource) -> Vec<(Box<[u8]>, u64)> {
        let Some(found) = self.revokes.get(res) else {
            return Vec::new();
        };
        found
            .iter()
            .filter_map(|at| match &self.jobs.get(at)?.job {
                Job::Revoke(grant) => Some(grant),
                _ => None,
            })
            .flatten()
            .filter(|rv| rv.resource == *res)
            .map(|rv| (rv.token.clone(), rv.fence))
            .collect()
    }

    /// Drops the queued revocations of a grant that holds `res` with
    /// `token` (every member of it, not just `res`).
    pub fn confirm_revocations(&mut self, res: &Resource, token: &[u8]) {
        let Some(found) = self.revokes.get(res) else {
            return;
        };
        let confirmed = found
            .iter()
            .copied()
            .filter(|at| match self.jobs.get(at).map(|q| &q.job) {
                Some(Job::Revoke(grant)) => grant
                    .iter()
                    .any(|rv| rv.resource == *res && *rv.token == *token),
                _ => false,
            })
            .collect();
        self.take_at(confirmed);
    }

    /// Takes the jobs (due or not) that `wanted` picks, in the queue's
    /// order. Looks at every job: for whole-database events only.
    pub fn take_where(&mut self, wanted: impl Fn(&Job) -> bool) -> Vec<Job> {
        let picked = self
            .jobs
            .iter()
            .filter(|(_, q)| wanted(&q.job))
            .map(|(&at, _)| at)
            .collect();
        self.take_at(picked)
    }

    /// Changes every queued job in place (`SWAPDB` moves some with their
    /// keys), then indexes them again.
    pub fn for_each_mut(&mut self, f: impl Fn(&mut Job)) {
        let jobs = std::mem::take(&mut self.jobs);
        self.by_due.clear();
        self.once.clear();
        self.revokes.clear();
        self.revocations = 0;
        for (at, mut q) in jobs {
            f(&mut q.job);
            self.insert(at, q.due_ms, q.job);
        }
    }

    #[cfg(test)]
    fn listed(&self) -> Vec<(u64, String)> {
        self.jobs
            .values()
            .map(|q| (q.due_ms, format!("{:?}", q.job)))
            .collect()
    }
}

/// Gives back most of a hash map's room once it is mostly empty: a flush
/// queues a job per resource, and a map keeps its largest size otherwise.
/// Halving at a quarter full keeps the cost amortized O(1) per removal.
fn shrink<K: std::hash::Hash + Eq, V>(map: &mut HashMap<K, V>) {
    if map.capacity() > 64 && map.len() * 4 < map.capacity() {
        map.shrink_to(map.len() * 2);
    }
}

#[cfg(test)]
mod tests;
