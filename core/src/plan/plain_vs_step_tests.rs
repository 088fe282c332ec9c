//! The plain fast path and a step decide a plain `DLOCK.ACQUIRE` alike
//! when waiters are ranked by priority: every small plain lock, queue of
//! plain waiters (ranks in queue order), newcomer (token and rank) and
//! server state (may wait, quarantine, evicted lease) compared.
use crate::ask::{Ask, Mode};
use crate::plan::plain::{self, Acquire, Handoff, Reads, View};
use crate::plan::{plan, Command, Member, Outcome, Step, Waiting};
use crate::queue::{Priority, Rank};
use crate::resource::holds::Holds;
use crate::resource::lease::LeaseRef;
use crate::{Error, FenceClock};

const NOW_US: u64 = 1_000_000_000;
const NOW_MS: u64 = NOW_US / 1000;

#[derive(Clone, Copy)]
struct Server {
    blocks: bool,
    quarantined_ms: u64,
    held_until: Option<u64>,
}

impl Reads for Server {
    fn blocks(&self) -> bool {
        self.blocks
    }
    fn new_token(&self) -> Result<(), Error> {
        Ok(())
    }
    fn quarantined_ms(&self) -> u64 {
        self.quarantined_ms
    }
    fn held_until(&self) -> Option<u64> {
        self.held_until
    }
    fn owns_slot(&self) -> Result<bool, Error> {
        Ok(true)
    }
    fn now_us(&self) -> u64 {
        NOW_US
    }
}

fn ask(token: &'static [u8]) -> Ask<'static> {
    Ask {
        token,
        owner: None,
        mode: Mode::Exclusive,
        limit: None,
        ttl_ms: 100,
        session: None,
        max_hold_ms: None,
        permits: None,
    }
}

/// What a decision amounts to: whether the queue's head was handed the
/// lock, and the newcomer's answer (`Granted` refresh or not, wait, nil).
type Seen = Result<(bool, &'static str), Error>;

fn by_plain(
    lease: Option<LeaseRef<'_>>,
    queue: &[(&'static [u8], Rank)],
    token: &'static [u8],
    rank: Rank,
    s: Server,
) -> Seen {
    let view = View {
        lease,
        head: queue.first().map(|(t, _)| *t),
        head_rank: queue.first().map(|(_, r)| *r),
    };
    let p = plain::acquire(
        &view,
        &ask(token),
        rank,
        &s,
        &mut FenceClock::starting_at(7),
    )?;
    let handed = matches!(p.handoff, Some(Handoff::Grant { .. }));
    let outcome = match p.outcome {
        Acquire::Grant { .. } => "grant",
        Acquire::Refresh { .. } => "refresh",
        Acquire::Wait => "wait",
        Acquire::Busy => "busy",
    };
    Ok((handed, outcome))
}

fn by_step(
    holds: &Holds,
    queue: &[(&'static [u8], Rank)],
    token: &'static [u8],
    rank: Rank,
    s: Server,
) -> Seen {
    let member = Member {
        holds,
        has_waiters: !queue.is_empty(),
        reserved_from: None,
        reserved_rank: None,
        held_elsewhere: s.held_until.is_some_and(|u| u >= NOW_MS),
    };
    let waiting: Vec<Waiting<'_>> = queue
        .iter()
        .map(|(t, r)| Waiting {
            rank: *r,
            members: vec![0],
            ask: ask(t),
        })
        .collect();
    let step = Step {
        members: &[member],
        waiting: &waiting,
        command: Command::Acquire {
            ask: ask(token),
            priority: Priority {
                level: 0,
                key: rank.key,
            },
            members: 1,
            blocks: s.blocks,
            new_token: Ok(()),
        },
        quarantined_ms: s.quarantined_ms,
        now_us: NOW_US,
    };
    let p = plan(&step, &FenceClock::starting_at(7), || Ok(true))?;
    let handed = p.granted.iter().any(|(i, _)| *i == 0);
    // Only the head's token is handed a plain lock, every entry of it.
    let head = queue.first().map(|(t, _)| *t);
    let others = p
        .granted
        .iter()
        .any(|(i, _)| queue.get(*i).map(|(t, _)| *t) != head);
    if others {
        return Ok((handed, "a waiter behind the head granted"));
    }
    let outcome = match p.outcome {
        Outcome::Granted { refresh: false, .. } => "grant",
        Outcome::Granted { refresh: true, .. } => "refresh",
        Outcome::Wait => "wait",
        Outcome::Busy => "busy",
        _ => "other",
    };
    Ok((handed, outcome))
}

#[test]
fn the_plain_path_decides_a_ranked_acquire_as_a_step() {
    let tokens: [&'static [u8]; 3] = [b"a", b"b", b"c"];
    let mut queues: Vec<Vec<(&'static [u8], Rank)>> = vec![Vec::new()];
    for len in 1..=2u64 {
        let mut next = Vec::new();
        for q in queues.iter().filter(|q| q.len() as u64 == len - 1) {
            for t in tokens {
                let mut q = q.clone();
                q.push((
                    t,
                    Rank {
                        key: 10 * len,
                        id: len,
                    },
                ));
                next.push(q);
            }
        }
        queues.extend(next);
    }
    let mut compared = 0;
    let mut differ = Vec::new();
    for lease in [None, Some((&b"a"[..], 3u64)), Some((&b"n"[..], 3))] {
        let lease = lease.map(|(t, f)| LeaseRef::new(t, f));
        let holds = match lease {
            Some(l) => Holds::from_plain(l, Some(NOW_MS + 500)),
            None => Holds::new(1),
        };
        // At rest: nobody waits whose token holds the lock (its grant
        // answered every entry of it).
        let at_rest = |q: &&Vec<(&'static [u8], Rank)>| {
            q.iter().all(|(t, _)| lease.is_none_or(|l| l.token() != *t))
        };
        for queue in queues.iter().filter(at_rest) {
            for token in [&b"a"[..], b"b", b"n"] {
                for key in [5, 15, 25] {
                    let rank = Rank::arriving(key);
                    for blocks in [false, true] {
                        for quarantined_ms in [0, 700] {
                            for held_until in [None, Some(NOW_MS + 50)] {
                                let s = Server {
                                    blocks,
                                    quarantined_ms,
                                    held_until,
                                };
                                let view = View {
                                    lease,
                                    head: queue.first().map(|(t, _)| *t),
                                    head_rank: queue.first().map(|(_, r)| *r),
                                };
                                let own_wait = || queue.iter().any(|(t, _)| *t == token);
                                if plain::outranks_own_wait(&view, rank, own_wait) {
                                    // The server decides it by a step.
                                    continue;
                                }
                                let p = by_plain(lease, queue, token, rank, s);
                                let q = by_step(&holds, queue, token, rank, s);
                                compared += 1;
                                // The head's own token outranking its wait: one
                                // grant answers both, whichever it counts as.
                                let own_head = queue.first().is_some_and(|(t, _)| *t == token);
                                let same = p == q
                                    || own_head
                                        && p == Ok((true, "refresh"))
                                        && q == Ok((true, "grant"));
                                if !same {
                                    differ.push(format!(
                                        "lease {:?} queue {queue:?} newcomer {} key {key} blocks {blocks} quarantine {quarantined_ms} held {held_until:?}: plain {p:?} step {q:?}",
                                        lease.map(|l| String::from_utf8_lossy(l.token()).into_owned()),
                                        String::from_utf8_lossy(token),
                                    ));
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(compared > 1000);
    assert!(
        differ.is_empty(),
        "{} of {compared} differ:\n{}",
        differ.len(),
        differ
            .iter()
            .take(12)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
