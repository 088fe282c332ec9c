//! `MAXHOLD`: the cap a hold may not pass, decided by the planner.
use super::*;
use crate::ask::{Cap, Mode};
use crate::fence::FenceClock;
use crate::queue::Priority;
use crate::resource::holds::Holds;

const NOW_US: u64 = 1_000_000_000;
const NOW_MS: u64 = NOW_US / 1000;

fn ask(token: &'static str, ttl_ms: u64, max_hold_ms: Option<u64>) -> Ask<'static> {
    Ask {
        token: token.as_bytes(),
        owner: None,
        mode: Mode::Exclusive,
        limit: None,
        ttl_ms,
        session: None,
        max_hold_ms,
        permits: None,
    }
}

/// `token` holds, granted `ago` ms before now with `MAXHOLD 1000`.
fn capped(token: &'static str, ago: u64) -> Holds {
    let mut h = Holds::new(1);
    let a = ask(token, 100, Some(1000));
    let granted = NOW_MS - ago;
    h.add(&a, 5, a.deadline_ms(granted), granted);
    h
}

fn member(holds: &Holds) -> Member<'_> {
    Member {
        holds,
        has_waiters: false,
        reserved_from: None,
        reserved_rank: None,
        held_elsewhere: false,
    }
}

fn run(members: &[Member<'_>], command: Command<'_>) -> Result<Plan, Error> {
    let step = Step {
        members,
        waiting: &[],
        command,
        quarantined_ms: 0,
        now_us: NOW_US,
    };
    plan(&step, &FenceClock::starting_at(10), || Ok(true))
}

fn extend(token: &'static str, ttl_ms: u64, members: usize) -> Command<'static> {
    Command::Extend {
        token: token.as_bytes(),
        ttl_ms,
        members,
    }
}

fn acquire(a: Ask<'static>) -> Command<'static> {
    Command::Acquire {
        ask: a,
        members: 1,
        blocks: false,
        new_token: Ok(()),
        priority: Priority::FIFO,
    }
}

#[test]
fn a_grant_is_capped_from_its_grant_and_leased_at_most_the_cap() {
    let a = ask("t", 5000, Some(1000));
    assert_eq!(a.deadline_ms(NOW_MS), NOW_MS + 1000, "min(ttl, MAXHOLD)");
    assert_eq!(
        a.cap(NOW_MS),
        Some(Cap {
            at_ms: NOW_MS + 1000,
            ms: 1000
        })
    );
    assert_eq!(ask("t", 300, Some(1000)).deadline_ms(NOW_MS), NOW_MS + 300);
    assert_eq!(ask("t", 300, None).cap(NOW_MS), None);
    let h = capped("t", 0);
    assert_eq!(
        h.hold_of(b"t").and_then(|x| x.cap).map(|c| c.at_ms),
        Some(NOW_MS + 1000)
    );
    assert!(
        h.as_plain().is_none(),
        "a capped hold is never a plain lease"
    );
}

#[test]
fn an_extend_up_to_the_cap_passes_and_one_past_it_is_refused_whole() {
    // Granted 400 ms ago with MAXHOLD 1000: 600 ms left to the cap.
    let h = capped("t", 400);
    let plan = run(&[member(&h)], extend("t", 600, 1)).unwrap();
    assert_eq!(plan.outcome, Outcome::Count(1));
    assert_eq!(
        run(&[member(&h)], extend("t", 601, 1)).err(),
        Some(Error::MaxHold { ms_left: 600 })
    );
    // A set: one capped member refuses the whole command.
    let free = Holds::new(1);
    let mut other = Holds::new(1);
    other.add(&ask("t", 100, None), 5, NOW_MS + 50, NOW_MS);
    assert_eq!(
        run(
            &[member(&other), member(&h), member(&free)],
            extend("t", 601, 3)
        )
        .err(),
        Some(Error::MaxHold { ms_left: 600 })
    );
    assert!(run(&[member(&other), member(&h)], extend("t", 600, 2)).is_ok());
}

#[test]
fn a_retry_must_name_the_same_max_hold_and_stay_within_the_cap() {
    let h = capped("t", 400);
    let plan = run(&[member(&h)], acquire(ask("t", 600, Some(1000)))).unwrap();
    assert_eq!(
        plan.outcome,
        Outcome::Granted {
            fence: 5,
            refresh: true
        }
    );
    assert_eq!(
        run(&[member(&h)], acquire(ask("t", 601, Some(1000)))).err(),
        Some(Error::MaxHold { ms_left: 600 })
    );
    for other in [None, Some(999), Some(1001)] {
        assert_eq!(
            run(&[member(&h)], acquire(ask("t", 10, other))).err(),
            Some(Error::MaxHoldMismatch),
            "{other:?}"
        );
    }
    // An uncapped hold retried with MAXHOLD: the same mismatch.
    let mut plain = Holds::new(1);
    plain.add(&ask("t", 100, None), 5, NOW_MS + 50, NOW_MS);
    assert_eq!(
        run(&[member(&plain)], acquire(ask("t", 10, Some(1000)))).err(),
        Some(Error::MaxHoldMismatch)
    );
}

#[test]
fn another_token_waits_for_a_capped_hold_as_for_any() {
    let h = capped("t", 0);
    let plan = run(&[member(&h)], acquire(ask("u", 10, Some(5)))).unwrap();
    assert_eq!(plan.outcome, Outcome::Busy);
}
