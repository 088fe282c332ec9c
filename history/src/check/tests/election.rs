//! `election`: terms rise from leadership to leadership, observers are
//! never shown a term go back nor told nil while another leader led; and
//! the election workload's coverage.
use super::*;
use crate::history::{HoldView, InfoView};

/// `OBSERVE e0`, waiting `wait` ms for a state other than `since`.
fn observe(since: Option<&str>, wait: Option<u64>) -> Op {
    Op {
        since: since.map(String::from),
        wait_ms: wait,
        ..op(Command::Observe, "e0", "")
    }
}

/// An observer's reply: `version` showing `leader` (token, term) or nobody.
fn shows(version: &str, leader: Option<(&str, u64)>) -> Option<Outcome> {
    ok(Value::Observed {
        version: version.into(),
        holds: leader.map(|(token, fence)| InfoView {
            holds: vec![HoldView {
                token: token.into(),
                owner: token.into(),
                fence,
                mode: Mode::Exclusive,
                ttl_ms: 500,
            }],
            waiters: 1,
        }),
    })
}

fn release(h: &mut H, client: u32, t: u64, token: &str) {
    h.op(
        client,
        t,
        t + ms(1),
        op(Command::Release, "e0", token),
        ok(Value::Int(1)),
    );
}

/// Leader a (term 10) from 1 ms to its resignation at 400 ms; b, queued
/// since 100 ms, leads in term 20 from 401 ms to 900 ms. Observer 7 sees
/// nobody, a, b, then waits 300 ms in b's term and is told nil.
fn two_terms(h: &mut H) {
    h.op(1, 0, ms(1), acq("e0", "e1/a", 1000), ok(Value::Fence(10)));
    h.write(ms(2), 1, "e0", "e1/a", 10, true, 10);
    h.op(
        2,
        ms(100),
        ms(401),
        Op {
            wait_ms: Some(2000),
            ..acq("e0", "e2/b", 1000)
        },
        ok(Value::Fence(20)),
    );
    release(h, 1, ms(400), "e1/a");
    h.write(ms(402), 2, "e0", "e2/b", 20, true, 20);
    release(h, 2, ms(900), "e2/b");
    h.op(7, 0, ms(1), observe(None, None), shows("00", None));
    h.op(
        7,
        ms(1),
        ms(2),
        observe(Some("00"), Some(3000)),
        shows("aa", Some(("e1/a", 10))),
    );
    h.op(
        7,
        ms(3),
        ms(401),
        observe(Some("aa"), Some(3000)),
        shows("bb", Some(("e2/b", 20))),
    );
    h.op(
        7,
        ms(402),
        ms(703),
        observe(Some("bb"), Some(300)),
        ok(Value::Nil),
    );
}

fn election(r: &Report) -> Vec<Violation> {
    found(r, "election")
}

#[test]
fn a_correct_election_has_no_violations() {
    let mut h = H::election();
    two_terms(&mut h);
    let r = h.check();
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    let s = r.election.clone().expect("the election's figures");
    assert_eq!((s.leaderships, s.terms_judged, s.resigned), (2, 1, 2));
    assert_eq!((s.queued_grants, s.observed, s.terms_shown), (1, 3, 2));
    assert_eq!((s.waits_out, s.waits_judged), (1, 1));
    let text = r.render(&h.events, std::time::Duration::from_millis(1));
    assert!(text.contains("election: 2 leaderships"), "{text}");
    // Only the election's coverage is asked: no lock command is missing.
    assert!(
        !r.gaps.iter().any(|g| g.contains("macquire")),
        "{:?}",
        r.gaps
    );
    assert!(
        r.gaps.iter().any(|g| g.contains("late write")),
        "{:?}",
        r.gaps
    );
}

#[test]
fn a_term_below_the_leadership_before_is_caught() {
    let mut h = H::election();
    h.op(1, 0, ms(1), acq("e0", "e1/a", 1000), ok(Value::Fence(30)));
    release(&mut h, 1, ms(400), "e1/a");
    h.op(
        2,
        ms(100),
        ms(401),
        acq("e0", "e2/b", 1000),
        ok(Value::Fence(20)),
    );
    let v = election(&h.check());
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].what.contains("terms must rise"), "{}", v[0].what);
    assert_eq!(v[0].ops, vec![1, 3]);
}

#[test]
fn an_observer_shown_a_term_go_back_is_caught_unless_a_failover_lost_it() {
    let back = |h: &mut H| {
        h.op(
            7,
            0,
            ms(1),
            observe(None, None),
            shows("bb", Some(("e2/b", 20))),
        );
        h.op(
            7,
            ms(2),
            ms(500),
            observe(Some("bb"), Some(3000)),
            shows("aa", Some(("e1/a", 10))),
        );
    };
    let mut h = H::election();
    back(&mut h);
    let v = election(&h.check());
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].what.contains("shown term 10 (op 2) after term 20"));
    // A failover under way between the two replies may have lost the
    // changes that ended term 10: a known limit, counted.
    let mut h = H::election();
    back(&mut h);
    h.fault(FaultKind::Failover, ms(100), ms(300), None);
    let r = h.check();
    assert!(election(&r).is_empty());
    assert_eq!(r.known_limits.get(ASYNC_REPLICATION), Some(&1));
}

#[test]
fn a_term_shown_again_after_another_state_is_caught() {
    let mut h = H::election();
    let steps = [
        ("aa", Some(("e1/a", 10))),
        ("00", None),
        ("aa", Some(("e1/a", 10))),
    ];
    let mut since = None;
    for (i, (version, leader)) in steps.into_iter().enumerate() {
        let t = ms(10 * i as u64);
        let wait = since.map(|_| 3000);
        h.op(
            7,
            t,
            t + ms(5),
            observe(since, wait),
            shows(version, leader),
        );
        since = Some(version);
    }
    let v = election(&h.check());
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].what.contains("had given way to another state"));
    // The same state twice in a row (another server's version after a
    // restart) is no step back.
    let mut h = H::election();
    for (i, version) in ["aa", "a2"].into_iter().enumerate() {
        let t = ms(10 * i as u64);
        h.op(
            7,
            t,
            t + ms(5),
            observe(None, None),
            shows(version, Some(("e1/a", 10))),
        );
    }
    assert!(election(&h.check()).is_empty());
}

/// Observer 8 is shown a's term at 1 ms, then waits from 5 ms for
/// `wait` ms and is told nil at `done`.
fn waits_in_a(h: &mut H, wait: u64, done: u64) -> u64 {
    two_terms(h);
    h.op(
        8,
        0,
        ms(1),
        observe(None, None),
        shows("aa", Some(("e1/a", 10))),
    );
    h.op(
        8,
        ms(5),
        done,
        observe(Some("aa"), Some(wait)),
        ok(Value::Nil),
    )
}

#[test]
fn a_wait_told_nil_while_another_leader_led_is_a_missed_change() {
    // 300 ms: the wait may have ended (no sooner than 305 ms) before a
    // resigned (400 ms) and b led.
    let mut h = H::election();
    waits_in_a(&mut h, 300, ms(306));
    assert!(election(&h.check()).is_empty());
    // 700 ms: it ended no sooner than 705 ms, in b's term, and b led
    // until after the nil came back: the observer missed b.
    let mut h = H::election();
    let nil = waits_in_a(&mut h, 700, ms(800));
    let v = election(&h.check());
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(
        v[0].what.contains("leader e2/b (op 2, term 20) led"),
        "{}",
        v[0].what
    );
    assert_eq!(v[0].ops, vec![2, nil - 1, nil]);
    // A CLIENT UNBLOCK of the observer answers nil: not judged.
    h.fault(FaultKind::ClientUnblock, ms(790), ms(791), Some(8));
    let r = h.check();
    assert!(election(&r).is_empty());
    assert_eq!(r.election.map(|s| s.waits_judged), Some(1));
}

#[test]
fn a_wait_told_nil_after_the_leader_it_saw_resigned_is_a_missed_change() {
    // 1 s: b resigned at 900 ms too (and nobody leads at 1005 ms), but a's
    // resignation (answered at 401 ms) already ended the state a showed.
    let mut h = H::election();
    let nil = waits_in_a(&mut h, 1000, ms(1006));
    let v = election(&h.check());
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(
        v[0].what
            .contains("leader e1/a (term 10) had resigned (op 3"),
        "{}",
        v[0].what
    );
    assert_eq!(v[0].ops, vec![3, nil - 1, nil]);
    // Shown b, waiting from 402 ms for 300 ms: b resigned only at 900 ms.
    let mut h = H::election();
    two_terms(&mut h);
    assert!(election(&h.check()).is_empty());
    // Observer 9, shown b at 402 ms and waiting from 403 ms for 600 ms,
    // no sooner than 1003 ms: b's resignation (901 ms) ended that state.
    let mut h = H::election();
    two_terms(&mut h);
    h.op(
        9,
        ms(400),
        ms(402),
        observe(None, None),
        shows("bb", Some(("e2/b", 20))),
    );
    h.op(
        9,
        ms(403),
        ms(1004),
        observe(Some("bb"), Some(600)),
        ok(Value::Nil),
    );
    let v = election(&h.check());
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(
        v[0].what.contains("leader e2/b (term 20) had resigned"),
        "{}",
        v[0].what
    );
    // Unless a failover under way since may have lost the resignation.
    h.fault(FaultKind::Failover, ms(950), ms(1200), None);
    assert!(election(&h.check()).is_empty());
}

#[test]
fn an_observer_told_nil_before_its_wait_is_a_liveness_violation() {
    let mut h = H::election();
    h.op(7, 0, ms(1), observe(None, None), shows("00", None));
    h.op(
        7,
        ms(2),
        ms(100),
        observe(Some("00"), Some(1000)),
        ok(Value::Nil),
    );
    let v = found(&h.check(), "liveness");
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].what.starts_with("observe WAIT 1000"), "{}", v[0].what);
}

#[test]
fn late_writes_are_counted_and_never_a_sink_violation() {
    let mut h = H::election();
    two_terms(&mut h);
    // a, paused past its lease, writes term 10 after b's term 20.
    h.events.push(Event::Write {
        t: ms(1100),
        client: 1,
        resource: "e0".into(),
        token: "e1/a".into(),
        fence: 10,
        accepted: false,
        highest: 20,
        late: true,
    });
    let r = h.check();
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    let s = r.election.expect("the election's figures");
    assert_eq!((s.late_refused, s.late_accepted), (1, 0));
    assert!(
        !r.gaps.iter().any(|g| g.contains("late write")),
        "{:?}",
        r.gaps
    );
}
