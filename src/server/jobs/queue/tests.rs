//! The indexed queue against the plain list it replaces (every operation a
//! scan), on random operations: same jobs, same order, same answers.

use super::*;

/// xorshift64 with a multiplied output: deterministic, dependency-free.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

fn res(db: i32, k: u64) -> Resource {
    Resource {
        db,
        key: format!("r{k}").into_bytes().into(),
    }
}

fn revoke(r: Resource, token: u64) -> Revoke<Resource> {
    Revoke {
        resource: r,
        token: format!("t{token}").into_bytes().into(),
        fence: token,
    }
}

/// The reference: a list in push order, every operation a scan.
#[derive(Default)]
struct Model(Vec<(u64, Job)>);

impl Model {
    fn push(&mut self, due_ms: u64, job: Job) -> bool {
        let once = job.once();
        let dup = once.is_some() && self.0.iter().any(|(d, j)| *d <= due_ms && j.once() == once);
        if !dup {
            if once.is_some() {
                self.0.retain(|(_, j)| j.once() != once);
            }
            self.0.push((due_ms, job));
        }
        !dup
    }

    fn cancel(&mut self, job: &Job) -> bool {
        let once = job.once();
        let before = self.0.len();
        if once.is_some() {
            self.0.retain(|(_, j)| j.once() != once);
        }
        self.0.len() < before
    }

    fn push_front(&mut self, job: Job) {
        self.0.insert(0, (0, job));
    }

    fn take(&mut self, wanted: impl Fn(u64, &Job) -> bool) -> Vec<Job> {
        let (taken, kept) = std::mem::take(&mut self.0)
            .into_iter()
            .partition(|(d, j)| wanted(*d, j));
        self.0 = kept;
        taken.into_iter().map(|(_, j)| j).collect::<Vec<_>>()
    }

    fn revoked_on(&self, r: &Resource) -> Vec<(Box<[u8]>, u64)> {
        self.0
            .iter()
            .filter_map(|(_, j)| match j {
                Job::Revoke(g) => Some(g),
                _ => None,
            })
            .flatten()
            .filter(|rv| rv.resource == *r)
            .map(|rv| (rv.token.clone(), rv.fence))
            .collect()
    }

    fn confirm(&mut self, r: &Resource, token: &[u8]) {
        self.0.retain(|(_, j)| match j {
            Job::Revoke(g) => !g.iter().any(|rv| rv.resource == *r && *rv.token == *token),
            _ => true,
        });
    }

    fn listed(&self) -> Vec<(u64, String)> {
        self.0.iter().map(|(d, j)| (*d, format!("{j:?}"))).collect()
    }
}

fn random_job(rng: &mut Rng) -> Job {
    let r = |rng: &mut Rng| res(rng.below(2) as i32, rng.below(5));
    match rng.below(10) {
        0 => Job::Settle(r(rng)),
        1 => {
            let members = 1 + rng.below(3);
            let token = rng.below(6);
            Job::Revoke((0..members).map(|_| revoke(r(rng), token)).collect())
        }
        2 => Job::HandOver,
        3 => Job::WriteMeta,
        4 => Job::Observed(r(rng)),
        5 => Job::ObserversGiveUp,
        6 => Job::PaceSweep,
        7 => Job::ObservedSlots,
        8 => Job::CheckHolds {
            db: rng.below(2) as i32,
            key: format!("r{}", rng.below(5)).into_bytes().into(),
        },
        _ => Job::ConfirmRestored {
            db: rng.below(2) as i32,
            key: b"k".to_vec().into(),
            fence: rng.below(100),
        },
    }
}

fn names(jobs: &[Job]) -> Vec<String> {
    jobs.iter().map(|j| format!("{j:?}")).collect()
}

fn swap(a: i32, b: i32) -> impl Fn(&mut Job) {
    move |job| {
        let moved = |db: &mut i32| {
            *db = if *db == a {
                b
            } else if *db == b {
                a
            } else {
                *db
            }
        };
        match job {
            Job::Revoke(g) => g.iter_mut().for_each(|rv| moved(&mut rv.resource.db)),
            Job::CheckHolds { db, .. } | Job::ConfirmRestored { db, .. } => moved(db),
            _ => {}
        }
    }
}

#[test]
fn matches_a_plain_list_on_random_operations() {
    for seed in 1..=40u64 {
        let mut rng = Rng(seed * 0x9e37_79b9_7f4a_7c15);
        let mut q = JobQueue::new();
        let mut m = Model::default();
        let mut now = 0u64;
        for step in 0..600 {
            let ctx = format!("seed {seed} step {step}");
            match rng.below(12) {
                0..=4 => {
                    let due = now + rng.below(4) * 5;
                    let job = random_job(&mut rng);
                    let twin = random_twin(&job);
                    assert_eq!(q.push(due, job), m.push(due, twin), "{ctx}: push");
                }
                5 => {
                    let job = Job::LeaseEnded {
                        res: res(0, rng.below(5)),
                        at_ms: now,
                        timer: step,
                    };
                    let twin = random_twin(&job);
                    q.push_front(job);
                    m.push_front(twin);
                }
                6 => {
                    now += rng.below(8);
                    let got = q.take_due(now);
                    let want = m.take(|d, _| d <= now);
                    assert_eq!(names(&got), names(&want), "{ctx}: take_due");
                }
                7 => {
                    let rs = [res(0, rng.below(5)), res(1, rng.below(5))];
                    let got = q.take_revocations(&rs);
                    let want = m.take(|_, j| {
                        matches!(j, Job::Revoke(g) if g.iter().any(|rv| rs.contains(&rv.resource)))
                    });
                    assert_eq!(names(&got), names(&want), "{ctx}: take_revocations");
                }
                8 => {
                    let r = res(rng.below(2) as i32, rng.below(5));
                    assert_eq!(q.revoked_on(&r), m.revoked_on(&r), "{ctx}: revoked_on");
                    let token = format!("t{}", rng.below(6)).into_bytes();
                    q.confirm_revocations(&r, &token);
                    m.confirm(&r, &token);
                }
                9 => {
                    let db = rng.below(2) as i32;
                    let wanted =
                        |j: &Job| matches!(j, Job::ConfirmRestored { db: d, .. } if *d == db);
                    let got = q.take_where(wanted);
                    let want = m.take(|_, j| wanted(j));
                    assert_eq!(names(&got), names(&want), "{ctx}: take_where");
                }
                11 => {
                    let job = random_job(&mut rng);
                    assert_eq!(q.cancel(&job), m.cancel(&job), "{ctx}: cancel");
                }
                10 => {
                    q.for_each_mut(swap(0, 1));
                    m.0.iter_mut().for_each(|(_, j)| swap(0, 1)(j));
                }
                _ => {}
            }
            assert_eq!(q.listed(), m.listed(), "{ctx}: contents");
            assert_eq!(q.len(), m.0.len(), "{ctx}: length");
            let revoking = m.0.iter().any(|(_, j)| matches!(j, Job::Revoke(_)));
            assert_eq!(q.has_revocations(), revoking, "{ctx}: revocations");
            assert_eq!(
                q.next_due(),
                m.0.iter().map(|(d, _)| *d).min(),
                "{ctx}: next due"
            );
        }
    }
}

/// The same job again (jobs are not `Clone`: a revocation's grant is owned).
fn random_twin(job: &Job) -> Job {
    match job {
        Job::Settle(r) => Job::Settle(r.clone()),
        Job::Revoke(g) => Job::Revoke(
            g.iter()
                .map(|rv| Revoke {
                    resource: rv.resource.clone(),
                    token: rv.token.clone(),
                    fence: rv.fence,
                })
                .collect(),
        ),
        Job::HandOver => Job::HandOver,
        Job::ConfirmRestored { db, key, fence } => Job::ConfirmRestored {
            db: *db,
            key: key.clone(),
            fence: *fence,
        },
        Job::WriteMeta => Job::WriteMeta,
        Job::CheckHolds { db, key } => Job::CheckHolds {
            db: *db,
            key: key.clone(),
        },
        Job::Observed(r) => Job::Observed(r.clone()),
        Job::ObserversGiveUp => Job::ObserversGiveUp,
        Job::PaceSweep => Job::PaceSweep,
        Job::ObservedSlots => Job::ObservedSlots,
        Job::SessionsDue => Job::SessionsDue,
        Job::SessionsEnd => Job::SessionsEnd,
        Job::ClientGone(c) => Job::ClientGone(*c),
        Job::EndRestoredAt {
            db,
            key,
            token,
            at_ms,
        } => Job::EndRestoredAt {
            db: *db,
            key: key.clone(),
            token: token.clone(),
            at_ms: *at_ms,
        },
        Job::LeaseEnded { res, at_ms, timer } => Job::LeaseEnded {
            res: res.clone(),
            at_ms: *at_ms,
            timer: *timer,
        },
    }
}

#[test]
fn a_job_that_runs_once_is_queued_again_only_if_due_earlier() {
    let mut q = JobQueue::new();
    assert!(q.push(10, Job::WriteMeta));
    assert!(!q.push(10, Job::WriteMeta));
    assert!(!q.push(20, Job::WriteMeta));
    assert!(q.push(5, Job::WriteMeta), "due earlier: takes its place");
    assert!(q.push(10, Job::Observed(res(0, 1))));
    assert!(q.push(10, Job::Observed(res(0, 2))));
    assert!(!q.push(12, Job::Observed(res(0, 1))));
    assert_eq!(q.len(), 3, "one of each");
    assert_eq!(names(&q.take_due(5)), ["WriteMeta"]);
    assert!(q.push(11, Job::WriteMeta));
    assert_eq!(q.take_due(10).len(), 2);
    assert!(!q.push(12, Job::WriteMeta), "the one due at 11 stands");
}

/// Each observer that asks for a shorter `WAIT` than the one before
/// pushes an earlier give-up job: one job stays queued, not one per
/// observer, and a job nobody needs any more can be dropped.
#[test]
fn earlier_pushes_of_a_job_that_runs_once_keep_one_queued() {
    let mut q = JobQueue::new();
    for due in (1..=1000u64).rev() {
        assert!(q.push(due * 1000, Job::ObserversGiveUp));
    }
    assert_eq!(q.len(), 1);
    assert_eq!(q.next_due(), Some(1000));
    assert!(q.cancel(&Job::ObserversGiveUp));
    assert!(!q.cancel(&Job::ObserversGiveUp));
    assert_eq!(q.len(), 0);
    assert_eq!(q.next_due(), None);
    assert!(
        !q.cancel(&Job::Settle(res(0, 1))),
        "only jobs that run once"
    );
}

#[test]
fn many_jobs_keep_their_order() {
    let mut q = JobQueue::new();
    for k in 0..200_000u64 {
        q.push(k % 7, Job::Settle(res(0, k)));
    }
    q.push_front(Job::HandOver);
    let taken = q.take_due(6);
    assert_eq!(taken.len(), 200_001);
    assert!(matches!(taken[0], Job::HandOver));
    for (k, job) in taken[1..].iter().enumerate() {
        assert!(
            matches!(job, Job::Settle(r) if *r == res(0, k as u64)),
            "{k}"
        );
    }
    assert_eq!(q.next_due(), None);
}

/// A flush with many observed resources queues an `Observed` job per
/// resource, and many waiters leaving in their grants' turn a `Revoke` each:
/// once they are taken, the indexes must not keep their peak size (the list
/// this queue replaced was rebuilt from what was kept on every take). With
/// hash maps that never shrink, 5,000 observers and one `FLUSHALL` leave
/// about 520 KB of server memory (`used_memory`) behind for good.
#[test]
fn taking_every_job_frees_the_indexes() {
    let mut q = JobQueue::new();
    for k in 0..20_000u64 {
        q.push(0, Job::Observed(res(0, k)));
    }
    for k in 0..20_000u64 {
        q.push(0, Job::Revoke(vec![revoke(res(1, k), k)]));
    }
    assert_eq!(q.take_due(0).len(), 40_000);
    assert_eq!(q.len(), 0);
    assert!(
        q.once.capacity() <= 64 && q.revokes.capacity() <= 64,
        "empty indexes keep room for {} run-once jobs and {} revoked resources",
        q.once.capacity(),
        q.revokes.capacity()
    );
}
