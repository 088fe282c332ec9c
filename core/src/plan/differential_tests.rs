//! What is decided two ways must agree: admission of a resource with at
//! most one hold, read inline (every plain lock's fast path,
//! `Summary::of_plain`) and through the indexes every resource with several
//! holds uses; and the single-queue rule (`Holds::admit_queue`, kept as a
//! reference) against the component rule the server runs for every queue,
//! on one resource (`component::admit_component`). Every small reachable state
//! and every short queue over a small alphabet of requests is compared, so a
//! change to one rule book that the other does not share fails here first.
use crate::ask::{Ask, Mode};
use crate::plan::component::{admit_component, Granted, Queued};
use crate::resource::admission::Summary;
use crate::resource::holds::{Decision, Holds, QueueGrant};
use crate::resource::lease::LeaseRef;
use crate::{Error, FenceClock};

const NOW_US: u64 = 1_000_000_000;
const NOW_MS: u64 = NOW_US / 1000;

/// Every request of the alphabet: two tokens, with and without an owner,
/// exclusive and shared, a plain lock and a semaphore of two.
fn alphabet() -> Vec<Ask<'static>> {
    let mut asks = Vec::new();
    for token in [&b"a"[..], b"b"] {
        for owner in [None, Some(&b"o"[..])] {
            for mode in [Mode::Exclusive, Mode::Shared] {
                for limit in [None, Some(2)] {
                    asks.push(Ask {
                        token,
                        owner,
                        mode,
                        limit,
                        ttl_ms: 1000,
                        session: None,
                        max_hold_ms: None,
                        permits: None,
                    });
                }
            }
        }
    }
    asks
}

/// Every state reachable from a free resource by up to `depth` granted
/// requests of the alphabet (fences drawn from one clock, as the server
/// draws them).
fn reachable(depth: usize) -> Vec<Holds> {
    let asks = alphabet();
    let mut states = vec![Holds::new(1)];
    let mut frontier = states.clone();
    for _ in 0..depth {
        let mut next = Vec::new();
        for holds in &frontier {
            for ask in &asks {
                let mut clock = FenceClock::new();
                clock.observe(holds.max_fence());
                let Ok(Decision::Grant { fence }) =
                    holds.decide(ask, false, None, &mut clock, || NOW_US)
                else {
                    continue;
                };
                let mut after = holds.clone();
                after.add(ask, fence, NOW_MS + ask.ttl_ms, 0);
                next.push(after);
            }
        }
        frontier.clear();
        for h in next {
            if !states.contains(&h) {
                states.push(h.clone());
                frontier.push(h);
            }
        }
    }
    states
}

#[test]
fn a_plain_lock_is_decided_alike_inline_and_indexed() {
    let leases: [Option<(&[u8], u64)>; 3] = [None, Some((b"a", 7)), Some((b"b", 9))];
    let asks = alphabet();
    let mut compared = 0;
    for current in leases {
        let lease = current.map(|(t, f)| LeaseRef::new(t, f));
        let holds = match lease {
            Some(l) => Holds::from_plain(l, Some(NOW_MS + 500)),
            None => Holds::new(1),
        };
        for ask in asks.iter().chain(&[Ask {
            token: b"c",
            owner: None,
            mode: Mode::Exclusive,
            limit: None,
            ttl_ms: 1000,
            session: None,
            max_hold_ms: None,
            permits: None,
        }]) {
            for queued in [false, true] {
                let decide = |s: Summary<'_>| {
                    let mut clock = FenceClock::new();
                    clock.observe(20);
                    let d = s.decide(ask, queued, None, || Ok(()), &mut clock, || NOW_US);
                    (d, clock.last())
                };
                let inline = decide(Summary::of_plain(lease));
                let indexed = decide(holds.summary());
                assert_eq!(
                    inline, indexed,
                    "{current:?} asked {ask:?} (queued {queued}): inline vs indexed"
                );
                compared += 1;
            }
        }
    }
    assert_eq!(compared, 3 * 17 * 2);
}

#[test]
fn every_small_state_is_admitted_alike_inline_and_indexed() {
    let states = reachable(3);
    for holds in &states {
        for ask in &alphabet() {
            for queued in [false, true] {
                assert_eq!(
                    holds.summary().admit(ask, queued),
                    holds.summary().admit(ask, queued),
                    "{holds:?} asked {ask:?} (queued {queued})"
                );
            }
        }
    }
}

fn same_grant(q: &QueueGrant, c: &Granted) -> bool {
    match (q, c) {
        (QueueGrant::Fresh, Granted::Fresh) => true,
        (QueueGrant::Retry { fence: a }, Granted::Retry { fence: b })
        | (QueueGrant::Owner { fence: a }, Granted::Owner { fence: b }) => a == b,
        (QueueGrant::SameOwnerAs(a), Granted::SameOwnerAs(b))
        | (QueueGrant::AnsweredBy(a), Granted::AnsweredBy(b)) => a == b,
        _ => false,
    }
}

/// The component rule book's answer for `queue` on one resource.
type ComponentBook = fn(&[&Holds], &[Queued<'_>]) -> Vec<(usize, Result<Granted, Error>)>;

/// Compares the single-queue rule book with `component` on `holds` and
/// `queue`; the first difference, described.
fn differs(holds: &Holds, queue: &[Ask<'_>], component: ComponentBook) -> Option<String> {
    let single = holds.admit_queue(queue);
    let queued: Vec<Queued<'_>> = queue
        .iter()
        .map(|ask| Queued {
            members: vec![0],
            ask: *ask,
            frozen: false,
            stays: true,
        })
        .collect();
    let component = component(&[holds], &queued);
    let agree = single.len() == component.len()
        && single.iter().zip(&component).all(|(s, c)| {
            s.0 == c.0
                && match (&s.1, &c.1) {
                    (Ok(a), Ok(b)) => same_grant(a, b),
                    (Err(a), Err(b)) => a == b,
                    _ => false,
                }
        });
    (!agree).then(|| {
        format!(
            "holds {holds:?}\nqueue {queue:?}\nas one queue: {single:?}\nas a component: {component:?}"
        )
    })
}

/// Every queue of one to three requests of the alphabet.
fn queues() -> Vec<Vec<Ask<'static>>> {
    let asks = alphabet();
    let mut all: Vec<Vec<Ask<'static>>> = Vec::new();
    let mut last: Vec<Vec<Ask<'static>>> = vec![Vec::new()];
    for _ in 0..3 {
        last = last
            .iter()
            .flat_map(|q| {
                asks.iter().map(move |a| {
                    let mut q = q.clone();
                    q.push(*a);
                    q
                })
            })
            .collect();
        all.extend(last.iter().cloned());
    }
    all
}

/// How many (state, queue) pairs `component` answers unlike the single
/// queue, and the first of them.
fn disagreements(component: ComponentBook) -> (usize, usize, Option<String>) {
    let (states, queues) = (reachable(3), queues());
    let mut compared = 0;
    let mut differing = 0;
    let mut first = None;
    for holds in &states {
        for queue in &queues {
            compared += 1;
            if let Some(why) = differs(holds, queue, component) {
                differing += 1;
                first.get_or_insert(why);
            }
        }
    }
    (compared, differing, first)
}

#[test]
fn one_queue_is_decided_alike_alone_and_as_a_component_of_one() {
    let (compared, differing, first) = disagreements(admit_component);
    // Every state and queue counted: the comparison really ran.
    assert_eq!(compared, reachable(3).len() * (16 + 16 * 16 + 16 * 16 * 16));
    // Free, shared runs, semaphores, an owner's holds, mixed: some thirty
    // distinct states (a shrinking alphabet would show here).
    assert!(reachable(3).len() >= 30, "{} states", reachable(3).len());
    assert_eq!(
        differing,
        0,
        "the queue rule books disagree:\n{}",
        first.unwrap_or_default()
    );
}

/// A component rule book with a planted bug: each request judged as if
/// nobody were queued before it (no FIFO).
fn without_fifo(
    resources: &[&Holds],
    queued: &[Queued<'_>],
) -> Vec<(usize, Result<Granted, Error>)> {
    queued
        .iter()
        .enumerate()
        .flat_map(|(i, q)| {
            admit_component(resources, std::slice::from_ref(q))
                .into_iter()
                .map(move |(_, d)| (i, d))
        })
        .collect()
}

/// The comparison catches a planted difference.
#[test]
fn a_component_without_fifo_is_caught() {
    let (_, differing, first) = disagreements(without_fifo);
    assert!(differing > 0);
    assert!(first.is_some_and(|w| w.contains("as a component")));
}
