//! The plain path's decisions, one table row per case, the server
//! played by `Fixed`.

use super::*;
use crate::ask::Mode;

const NOW_US: u64 = 1_000_000_000;

/// The server as a table row.
#[derive(Clone, Copy)]
struct Fixed {
    blocks: bool,
    token_ok: bool,
    quarantined_ms: u64,
    held_until: Option<u64>,
    owns_slot: bool,
}

const SERVER: Fixed = Fixed {
    blocks: false,
    token_ok: true,
    quarantined_ms: 0,
    held_until: None,
    owns_slot: true,
};

impl Reads for Fixed {
    fn blocks(&self) -> bool {
        self.blocks
    }
    fn new_token(&self) -> Result<(), Error> {
        if self.token_ok {
            Ok(())
        } else {
            Err(Error::TokenTooLong { max: 1 })
        }
    }
    fn quarantined_ms(&self) -> u64 {
        self.quarantined_ms
    }
    fn held_until(&self) -> Option<u64> {
        self.held_until
    }
    fn owns_slot(&self) -> Result<bool, Error> {
        Ok(self.owns_slot)
    }
    fn now_us(&self) -> u64 {
        NOW_US
    }
}

fn ask(token: &'static str) -> Ask<'static> {
    Ask {
        token: token.as_bytes(),
        owner: None,
        mode: Mode::Exclusive,
        limit: None,
        ttl_ms: 100,
        session: None,
        max_hold_ms: None,
        permits: None,
    }
}

fn view(lease: Option<LeaseRef<'static>>, head: Option<&'static [u8]>) -> View<'static> {
    // Every waiter ranks ahead of a newcomer at the same priority.
    View {
        lease,
        head,
        head_rank: head.map(|_| Rank { key: 0, id: 1 }),
    }
}

/// A newcomer at the waiters' priority: behind all of them.
const NEWCOMER: Rank = Rank {
    key: 0,
    id: u64::MAX,
};

fn head(token: &'static str) -> Option<&'static [u8]> {
    Some(token.as_bytes())
}

fn plan(v: View<'_>, token: &'static str, server: Fixed) -> Result<AcquirePlan, Error> {
    acquire(
        &v,
        &ask(token),
        NEWCOMER,
        &server,
        &mut FenceClock::starting_at(7),
    )
}

fn outcome(v: View<'_>, token: &'static str, server: Fixed) -> Result<Acquire, Error> {
    plan(v, token, server).map(|p| p.outcome)
}

#[test]
fn routes_a_plain_request_on_a_plain_lock_and_queue_to_the_fast_path() {
    use Shape::*;
    for (shape, plain_queue, plain_request, expected) in [
        (Free, true, true, Route::Plain),
        (Plain, true, true, Route::Plain),
        (Multi, true, true, Route::Step),
        (Plain, false, true, Route::Step),
        (Free, true, false, Route::Step),
    ] {
        assert_eq!(route(shape, plain_queue, plain_request), expected);
    }
}

#[test]
fn a_free_lock_is_granted_and_a_held_one_refreshed_or_busy() {
    let blocks = Fixed {
        blocks: true,
        ..SERVER
    };
    let free = view(None, None);
    assert_eq!(
        outcome(free, "a", SERVER),
        Ok(Acquire::Grant { fence: NOW_US })
    );
    let held = view(Some(LeaseRef::new(b"a", 9)), None);
    assert_eq!(
        outcome(held, "a", SERVER),
        Ok(Acquire::Refresh { fence: 9 })
    );
    assert_eq!(outcome(held, "b", SERVER), Ok(Acquire::Busy));
    assert_eq!(outcome(held, "b", blocks), Ok(Acquire::Wait));
    assert_eq!(plan(held, "b", SERVER).map(|p| p.handoff), Ok(None));
}

#[test]
fn a_free_lock_goes_to_its_head_waiter_before_the_newcomer() {
    let blocks = Fixed {
        blocks: true,
        ..SERVER
    };
    let handoff = Some(Handoff::Grant { fence: NOW_US });
    // The newcomer finds the head's lease: busy, or a wait behind it.
    let p = plan(view(None, head("h")), "n", SERVER);
    assert_eq!(
        p,
        Ok(AcquirePlan {
            handoff,
            outcome: Acquire::Busy
        })
    );
    let p = plan(view(None, head("h")), "n", blocks);
    assert_eq!(
        p,
        Ok(AcquirePlan {
            handoff,
            outcome: Acquire::Wait
        })
    );
    // The head's own token, asking again, refreshes what it was handed.
    let p = plan(view(None, head("h")), "h", SERVER);
    let refresh = Acquire::Refresh { fence: NOW_US };
    assert_eq!(
        p,
        Ok(AcquirePlan {
            handoff,
            outcome: refresh
        })
    );
}

#[test]
fn a_handoff_that_may_not_happen_keeps_the_newcomer_out() {
    let quarantined = Fixed {
        quarantined_ms: 5,
        ..SERVER
    };
    let evicted = Fixed {
        held_until: Some(NOW_US / 1000 + 2),
        ..SERVER
    };
    let moved = Fixed {
        owns_slot: false,
        ..SERVER
    };
    let queued = view(None, head("h"));
    let p = plan(queued, "n", quarantined);
    let busy = Acquire::Busy;
    assert_eq!(
        p,
        Ok(AcquirePlan {
            handoff: Some(Handoff::Quarantined),
            outcome: busy
        })
    );
    let p = plan(queued, "n", evicted);
    let until = Handoff::HeldUntil(NOW_US / 1000 + 2);
    assert_eq!(
        p,
        Ok(AcquirePlan {
            handoff: Some(until),
            outcome: busy
        })
    );
    // Its waiters sent away, the lock is free for the newcomer.
    let p = plan(queued, "n", moved);
    let grant = Acquire::Grant { fence: NOW_US };
    assert_eq!(
        p,
        Ok(AcquirePlan {
            handoff: Some(Handoff::SlotMoved),
            outcome: grant
        })
    );
    // An eviction whose lease has ended holds nothing back.
    let ended = Fixed {
        held_until: Some(NOW_US / 1000 - 1),
        ..SERVER
    };
    let p = plan(queued, "n", ended).map(|p| p.handoff);
    assert_eq!(p, Ok(Some(Handoff::Grant { fence: NOW_US })));
}

#[test]
fn a_free_lock_quarantined_is_not_granted() {
    let q = Fixed {
        quarantined_ms: 5,
        ..SERVER
    };
    let q_blocks = Fixed { blocks: true, ..q };
    let free = view(None, None);
    assert_eq!(outcome(free, "a", q), Err(Error::Quarantine { ms_left: 5 }));
    assert_eq!(outcome(free, "a", q_blocks), Ok(Acquire::Wait));
    // Behind waiters the answer is nil, not the quarantine.
    assert_eq!(outcome(view(None, head("h")), "a", q), Ok(Acquire::Busy));
}

#[test]
fn a_long_token_may_refresh_but_not_hold_anew_or_wait() {
    let long = Fixed {
        token_ok: false,
        ..SERVER
    };
    let long_blocks = Fixed {
        blocks: true,
        ..long
    };
    let held = view(Some(LeaseRef::new(b"a", 9)), None);
    assert_eq!(
        outcome(held, "a", long_blocks),
        Ok(Acquire::Refresh { fence: 9 })
    );
    assert!(outcome(held, "b", long_blocks).is_err());
    assert_eq!(outcome(held, "b", long), Ok(Acquire::Busy));
    assert!(outcome(view(None, None), "b", long).is_err());
    // Refused before the handoff draws its fence: nothing is to be done.
    let mut clock = FenceClock::starting_at(7);
    let queued = view(None, head("h"));
    assert!(acquire(&queued, &ask("n"), NEWCOMER, &long_blocks, &mut clock).is_err());
    assert_eq!(clock, FenceClock::starting_at(7));
}

#[test]
fn a_release_frees_the_holders_lock_and_hands_it_to_the_queue() {
    let mut clock = FenceClock::starting_at(7);
    let held = view(Some(LeaseRef::new(b"a", 9)), None);
    assert_eq!(
        release(&held, b"b", &SERVER, &mut clock),
        Ok(Release::NotHeld)
    );
    assert_eq!(
        release(&held, b"a", &SERVER, &mut clock),
        Ok(Release::Freed { handoff: None })
    );
    let queued = view(Some(LeaseRef::new(b"a", 9)), head("h"));
    let handoff = Some(Handoff::Grant { fence: NOW_US });
    assert_eq!(
        release(&queued, b"a", &SERVER, &mut clock),
        Ok(Release::Freed { handoff })
    );
}

#[test]
fn a_set_is_free_a_retry_busy_or_the_general_paths() {
    let (a, b) = (LeaseRef::new(b"t", 4), LeaseRef::new(b"t", 5));
    let other = LeaseRef::new(b"x", 6);
    let p = Member::Plain;
    assert_eq!(set(&[p(None), p(None)], b"t"), Ok(Set::Free));
    assert_eq!(set(&[p(Some(a)), p(Some(a))], b"t"), Ok(Set::Retry(4)));
    assert_eq!(set(&[p(Some(a)), p(Some(b))], b"t"), Ok(Set::Other));
    assert_eq!(set(&[p(None), p(Some(a))], b"t"), Ok(Set::Other));
    assert_eq!(set(&[p(None), p(Some(other))], b"t"), Ok(Set::Busy));
    assert_eq!(set(&[p(None), Member::Multi], b"t"), Ok(Set::Other));
    assert_eq!(set(&[], b"t"), Ok(Set::Other));
}

#[test]
fn a_set_of_free_members_is_granted_one_fence_unless_it_must_go_the_long_way() {
    let free = [Member::Plain(None), Member::Plain(None)];
    let a = LeaseRef::new(b"t", 4);
    let held_by_t = [Member::Plain(Some(a)), Member::Plain(Some(a))];
    let other = [
        Member::Plain(None),
        Member::Plain(Some(LeaseRef::new(b"x", 6))),
    ];
    let blocks = Fixed {
        blocks: true,
        ..SERVER
    };
    let quarantined = Fixed {
        quarantined_ms: 5,
        ..SERVER
    };
    let long = Fixed {
        token_ok: false,
        ..SERVER
    };
    let decide = |m: &[Member<'_>], server: Fixed| {
        let mut clock = FenceClock::starting_at(7);
        macquire(m, b"t", &server, &mut clock)
    };
    assert_eq!(decide(&free, SERVER), Ok(SetPlan::Grant { fence: NOW_US }));
    assert_eq!(decide(&held_by_t, SERVER), Ok(SetPlan::Retry { fence: 4 }));
    assert_eq!(decide(&other, SERVER), Ok(SetPlan::Busy));
    assert_eq!(decide(&other, blocks), Ok(SetPlan::Step));
    assert_eq!(decide(&free, quarantined), Ok(SetPlan::Step));
    assert_eq!(decide(&[Member::Multi], SERVER), Ok(SetPlan::Step));
    // Refused before a fence is drawn.
    let mut clock = FenceClock::starting_at(7);
    assert!(macquire(&free, b"t", &long, &mut clock).is_err());
    assert_eq!(clock, FenceClock::starting_at(7));
    assert_eq!(set_route(false, true), Route::Plain);
    assert_eq!(set_route(true, true), Route::Step);
    assert_eq!(set_route(false, false), Route::Step);
}

#[test]
fn a_revocation_releases_exactly_the_grant_it_names() {
    let lease = Some(LeaseRef::new(b"t", 4));
    assert!(revokes(lease, b"t", 4));
    assert!(!revokes(lease, b"t", 5));
    assert!(!revokes(lease, b"u", 4));
    assert!(!revokes(None, b"t", 4));
}

/// A newcomer that outranks every waiter (a higher `PRIORITY`).
const OUTRANKING: Rank = Rank {
    key: 0,
    id: u64::MAX,
};

fn ranked(lease: Option<LeaseRef<'static>>, head: Option<&'static [u8]>) -> View<'static> {
    View {
        lease,
        head,
        head_rank: head.map(|_| Rank { key: 10, id: 1 }),
    }
}

#[test]
fn a_newcomer_outranking_the_head_takes_a_free_lock_before_the_handoff() {
    let mut clock = FenceClock::starting_at(7);
    let p = acquire(
        &ranked(None, head("h")),
        &ask("n"),
        OUTRANKING,
        &SERVER,
        &mut clock,
    );
    assert_eq!(
        p,
        Ok(AcquirePlan {
            handoff: None,
            outcome: Acquire::Grant { fence: NOW_US }
        })
    );
}

/// The head's own token asking again at a higher priority (a client that
/// retried its wait): its grant answers the queued entry too, as a step
/// answers it (`Granted::AnsweredBy`), rather than a fresh lease for the
/// newcomer that leaves the token's earlier wait queued to be granted a
/// second time after it releases.
#[test]
fn a_newcomer_outranking_its_own_tokens_queued_wait_shares_its_grant() {
    let mut clock = FenceClock::starting_at(7);
    let p = acquire(
        &ranked(None, head("h")),
        &ask("h"),
        OUTRANKING,
        &SERVER,
        &mut clock,
    );
    assert_eq!(
        p,
        Ok(AcquirePlan {
            handoff: Some(Handoff::Grant { fence: NOW_US }),
            outcome: Acquire::Refresh { fence: NOW_US }
        })
    );
}
