//! Weighted permits (`LIMIT n PERMITS k`): admission, the holds' count of
//! permits, the layout that stores them (layout 4, fixture bytes) and the
//! `ADDHOLD ... PERMITS k` effect.

use crate::ask::{Ask, Mode};
use crate::resource::admission::Admission;
use crate::resource::changes::{parse_add, Change};
use crate::resource::holds::{Hold, Holds, QueueGrant};
use crate::resource::layout::{decode, encode};
use crate::Error;

const DEADLINE: u64 = 1_700_000_000_000;

fn permits(token: &'static str, limit: u32, k: u32) -> Ask<'static> {
    Ask {
        token: token.as_bytes(),
        limit: Some(limit),
        ttl_ms: 1000,
        permits: Some(k).filter(|k| *k > 1),
        ..Ask::default()
    }
}

fn held(limit: u32, holds: &[(&'static str, u32)]) -> Holds {
    let mut h = Holds::new(limit);
    for (i, (token, k)) in holds.iter().enumerate() {
        h.add(&permits(token, limit, *k), 10 + i as u64, DEADLINE, 0);
    }
    h
}

#[test]
fn a_request_fits_only_with_all_of_its_permits() {
    let h = held(5, &[("a", 3)]);
    assert_eq!(h.used_permits(), 3);
    assert_eq!(h.len(), 1);
    let new = Ok(Admission::New { owner_fence: None });
    assert_eq!(h.admit(&permits("b", 5, 2), false), new, "3 + 2 of 5");
    assert_eq!(
        h.admit(&permits("b", 5, 3), false),
        Ok(Admission::Busy),
        "3 + 3 of 5: never some now, the rest later"
    );
    let h = held(5, &[("a", 3), ("b", 2)]);
    assert_eq!(h.used_permits(), 5);
    assert_eq!(h.admit(&permits("c", 5, 1), false), Ok(Admission::Busy));
    let mut h = h;
    assert!(h.release(b"a"));
    assert_eq!(h.used_permits(), 2);
    assert_eq!(h.admit(&permits("c", 5, 3), false), new);
    assert!(h.is_consistent());
}

#[test]
fn a_retry_names_the_same_permits() {
    let h = held(4, &[("a", 3)]);
    assert_eq!(
        h.admit(&permits("a", 4, 3), false),
        Ok(Admission::Retry { fence: 10 })
    );
    for k in [1, 2, 4] {
        assert_eq!(
            h.admit(&permits("a", 4, k), false),
            Err(Error::PermitsMismatch),
            "PERMITS {k}"
        );
    }
    let one = held(4, &[("a", 1)]);
    assert_eq!(
        one.admit(&permits("a", 4, 2), false),
        Err(Error::PermitsMismatch)
    );
}

#[test]
fn a_big_request_at_the_head_is_not_passed_by_small_ones() {
    // 2 of 4 permits held: the head asks 3 and waits; the 1s behind it
    // would fit, but nobody passes a waiting request on a semaphore.
    let h = held(4, &[("x", 2)]);
    let queue = [
        permits("big", 4, 3),
        permits("s1", 4, 1),
        permits("s2", 4, 1),
    ];
    assert_eq!(h.admit_queue(&queue), vec![]);
    // Once the holds drain, the big one goes first, then what fits after.
    let mut h = h;
    h.release(b"x");
    assert_eq!(
        h.admit_queue(&queue),
        vec![(0, Ok(QueueGrant::Fresh)), (1, Ok(QueueGrant::Fresh))]
    );
}

#[test]
fn the_count_of_permits_follows_every_change() {
    let mut h = held(6, &[("a", 2), ("b", 1), ("c", 3)]);
    assert_eq!(h.used_permits(), 6);
    let (c, seq) = h.take(b"c").unwrap();
    assert_eq!(c.permits, 3);
    assert_eq!(h.used_permits(), 3);
    h.restore(c, seq);
    assert_eq!(h.used_permits(), 6);
    assert_eq!(h.hold_of(b"c").map(|x| x.permits), Some(3));
    assert!(h.extend(b"c", DEADLINE + 5, DEADLINE));
    assert_eq!(h.hold_of(b"c").map(|x| x.permits), Some(3));
    h.release(b"a");
    h.release(b"b");
    h.release(b"c");
    assert_eq!(h.used_permits(), 0);
    assert!(!h.is_weighted());
    // Summed permits past the limit are not holds any command makes.
    let mut over = held(3, &[("a", 2)]);
    assert!(over.push(Hold {
        token: b"b"[..].into(),
        owner: b"b"[..].into(),
        fence: 11,
        mode: Mode::Exclusive,
        deadline_ms: DEADLINE,
        session: None,
        cap: None,
        permits: 2,
    }));
    assert!(!over.is_consistent());
}

/// LIMIT 4, the hold `w` (fence 7) counting as 3 permits: layout 4 with
/// only the permits flag.
const LAYOUT_4_FIXTURE: [u8; 48] = [
    0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 0, 0, 0, 1, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 104, 229, 207,
    139, 1, 0, 0, 0, 1, 0, 0, 0, 119, 0, 0, 0, 0, 3, 0, 0, 0,
];

/// The same with one permit: layout 1, as a release without `PERMITS`
/// writes it.
const LAYOUT_1_FIXTURE: [u8; 43] = [
    0, 0, 0, 0, 0, 0, 0, 0, 1, 4, 0, 0, 0, 1, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 104, 229, 207,
    139, 1, 0, 0, 0, 1, 0, 0, 0, 119, 0, 0, 0, 0,
];

fn one_hold(k: u32) -> Holds {
    let mut h = Holds::new(4);
    h.add(&permits("w", 4, k), 7, DEADLINE, 0);
    h
}

#[test]
fn layout_4_is_written_only_for_weighted_holds_and_reads_back() {
    assert_eq!(encode(&one_hold(3)), LAYOUT_4_FIXTURE);
    assert_eq!(decode(&LAYOUT_4_FIXTURE), Ok(one_hold(3)));
    assert_eq!(
        decode(&LAYOUT_4_FIXTURE)
            .unwrap()
            .hold_of(b"w")
            .map(|h| h.permits),
        Some(3)
    );
    assert_eq!(
        encode(&one_hold(1)),
        LAYOUT_1_FIXTURE,
        "k = 1: the old bytes"
    );
    assert_eq!(decode(&LAYOUT_1_FIXTURE), Ok(one_hold(1)));
    for n in 0..LAYOUT_4_FIXTURE.len() {
        assert!(decode(&LAYOUT_4_FIXTURE[..n]).is_err(), "truncated to {n}");
    }
}

#[test]
fn layout_4_refuses_unknown_flags_and_permits_out_of_range() {
    let with = |at: usize, v: u8| {
        let mut b = LAYOUT_4_FIXTURE;
        b[at] = v;
        decode(&b)
    };
    for bit in 4..8 {
        assert!(with(9, 4 | 1 << bit).is_err(), "flag bit {bit}");
    }
    assert!(with(44, 0).is_err(), "permits 0");
    assert!(with(44, 5).is_err(), "permits above the limit");
    assert!(with(8, 5).is_err(), "layout 5");
    // Two holds of 3 permits each on LIMIT 4.
    let mut two = one_hold(3);
    two.push(Hold {
        token: b"v"[..].into(),
        owner: b"v"[..].into(),
        fence: 8,
        mode: Mode::Exclusive,
        deadline_ms: DEADLINE,
        session: None,
        cap: None,
        permits: 3,
    });
    assert!(decode(&encode(&two)).is_err());
}

#[test]
fn layout_4_carries_sessions_and_caps_beside_permits() {
    let mut h = Holds::new(5);
    h.push(Hold {
        token: b"s"[..].into(),
        owner: b"s"[..].into(),
        fence: 3,
        mode: Mode::Exclusive,
        deadline_ms: crate::limits::NEVER,
        session: Some(b"sess"[..].into()),
        cap: None,
        permits: 2,
    });
    h.push(Hold {
        token: b"c"[..].into(),
        owner: b"c"[..].into(),
        fence: 4,
        mode: Mode::Exclusive,
        deadline_ms: DEADLINE,
        session: None,
        cap: Some(crate::ask::Cap {
            at_ms: DEADLINE + 10,
            ms: 500,
        }),
        permits: 3,
    });
    let bytes = encode(&h);
    assert_eq!((bytes[8], bytes[9]), (4, 0b111));
    assert_eq!(decode(&bytes), Ok(h));
}

#[test]
fn addhold_carries_permits_only_above_one() {
    let base: Vec<&[u8]> = vec![
        b"DLOCK.ADDHOLD",
        b"k",
        b"t",
        b"t",
        b"5",
        b"exclusive",
        b"4",
        b"1000",
        b"5",
    ];
    let add = |tail: &[&'static [u8]]| {
        let mut argv = base.clone();
        argv.extend_from_slice(tail);
        parse_add(&argv)
    };
    let permits_of = |r: Result<(Change, u64), Error>| match r {
        Ok((Change::Add { hold, .. }, _)) => Ok((hold.permits, hold.session, hold.cap)),
        Ok(other) => panic!("{other:?}"),
        Err(e) => Err(e),
    };
    assert_eq!(permits_of(add(&[])), Ok((1, None, None)));
    assert_eq!(permits_of(add(&[b"PERMITS", b"3"])), Ok((3, None, None)));
    assert_eq!(
        permits_of(add(&[b"sess", b"permits", b"2"])),
        Ok((2, Some(b"sess"[..].into()), None))
    );
    let capped = permits_of(add(&[b"MAXHOLD", b"1500", b"600", b"PERMITS", b"4"]));
    assert_eq!(
        capped.map(|(k, _, c)| (k, c.map(|c| c.ms))),
        Ok((4, Some(600)))
    );
    for bad in [&b"1"[..], b"0", b"5", b"x"] {
        assert_eq!(
            permits_of(add(&[b"PERMITS", bad])),
            Err(Error::BadEffect("permits")),
            "{bad:?}"
        );
    }
}

#[test]
fn a_resized_value_is_written_in_layout_4_and_may_pass_its_limit() {
    let mut h = held(4, &[("a", 1), ("b", 1), ("c", 1)]);
    assert_eq!(encode(&h)[8], 1, "not resized: layout 1");
    h.set_limit(2);
    assert!(h.is_consistent(), "3 holds past a lowered limit of 2 stay");
    let bytes = encode(&h);
    assert_eq!((bytes[8], bytes[9]), (4, 0b1000));
    assert_eq!(decode(&bytes), Ok(h.clone()));
    assert!(decode(&bytes).unwrap().resized);
    // Without the mark the same holds are refused.
    let mut unmarked = bytes.clone();
    unmarked[9] = 0;
    assert!(decode(&unmarked).is_err());
    // One hold of more permits than the lowered limit reads back too.
    let mut one = one_hold(4);
    one.set_limit(2);
    assert_eq!(decode(&encode(&one)), Ok(one.clone()));
    // Forgotten once the holds are gone and a hold starts them again.
    for t in [&b"a"[..], b"b", b"c"] {
        h.release(t);
    }
    h.add(&permits("d", 3, 1), 20, DEADLINE, 0);
    assert_eq!((h.limit, h.resized), (3, false));
    // Admission on a resized semaphore: any LIMIT above 1 joins, LIMIT 1
    // does not, PERMITS count against the new limit.
    let mut r = held(2, &[("a", 1)]);
    r.set_limit(4);
    let new = Ok(Admission::New { owner_fence: None });
    assert_eq!(r.admit(&permits("b", 2, 2), false), new);
    assert_eq!(r.admit(&permits("b", 9, 3), false), new);
    assert_eq!(r.admit(&permits("b", 9, 4), false), Ok(Admission::Busy));
    assert_eq!(
        r.admit(
            &Ask {
                limit: None,
                ..permits("b", 2, 1)
            },
            false
        ),
        Err(Error::LimitMismatch { limit: 4 })
    );
    assert_eq!(
        r.admit(&permits("a", 7, 1), false),
        Ok(Admission::Retry { fence: 10 })
    );
}
