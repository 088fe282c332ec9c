//! Unit tests of `args`.
use super::*;

const MAX: &Limits = &Limits {
    max_token: 512,
    max_ttl: 0,
};

fn argv<'a>(parts: &[&'a str]) -> Vec<&'a [u8]> {
    parts.iter().map(|p| p.as_bytes()).collect()
}

#[test]
fn acquire_parses_token_and_ttl() {
    let a = acquire(&argv(&["DLOCK.ACQUIRE", "r", "tok", "30000"]), MAX).unwrap();
    assert_eq!(a.token, b"tok");
    assert_eq!(a.ttl_ms, 30000);
}

#[test]
fn acquire_arity() {
    assert_eq!(
        acquire(&argv(&["DLOCK.ACQUIRE", "r", "tok"]), MAX),
        Err(Error::WrongArity)
    );
    assert_eq!(
        acquire(&argv(&["DLOCK.ACQUIRE"]), MAX),
        Err(Error::WrongArity)
    );
}

#[test]
fn acquire_wait_option() {
    let a = acquire(&argv(&["A", "r", "t", "10", "WAIT", "250"]), MAX).unwrap();
    assert_eq!(a.wait_ms, Some(250));
    let a = acquire(&argv(&["A", "r", "t", "10", "wait", "0"]), MAX).unwrap();
    assert_eq!(a.wait_ms, Some(0), "case-insensitive, 0 = forever");
    assert_eq!(
        acquire(&argv(&["A", "r", "t", "10"]), MAX).unwrap().wait_ms,
        None
    );
    for bad in ["-1", "abc", "1.5", "", "140737488355329"] {
        let got = acquire(&argv(&["A", "r", "t", "10", "WAIT", bad]), MAX);
        assert!(
            matches!(
                got,
                Err(Error::InvalidInteger {
                    arg: "timeout_ms",
                    ..
                })
            ),
            "{bad:?}: {got:?}"
        );
    }
    assert_eq!(
        acquire(&argv(&["A", "r", "t", "10", "WAIT"]), MAX),
        Err(Error::Syntax),
        "missing value"
    );
    assert_eq!(
        acquire(&argv(&["A", "r", "t", "10", "WAIT", "1", "WAIT", "2"]), MAX),
        Err(Error::Syntax),
        "repeated"
    );
}

#[test]
fn acquire_kind_options_in_any_order_each_once() {
    let a = acquire(
        &argv(&["A", "r", "t", "10", "owner", "o", "WAIT", "5", "shared"]),
        MAX,
    )
    .unwrap();
    assert_eq!(
        (a.mode, a.owner, a.limit, a.wait_ms),
        (Mode::Shared, Some(&b"o"[..]), None, Some(5))
    );
    assert!(!a.is_plain());
    let a = acquire(&argv(&["A", "r", "t", "10", "LIMIT", "3"]), MAX).unwrap();
    assert_eq!(a.limit, Some(3));
    let a = acquire(&argv(&["A", "r", "t", "10", "LIMIT", "1"]), MAX).unwrap();
    assert!(a.is_plain(), "LIMIT 1 is the plain lock");
    for bad in [
        &["SHARED", "SHARED"][..],
        &["LIMIT", "2", "LIMIT", "2"],
        &["OWNER", "a", "OWNER", "a"],
        &["OWNER"],
        &["LIMIT"],
    ] {
        let mut v = vec!["A", "r", "t", "10"];
        v.extend_from_slice(bad);
        assert_eq!(acquire(&argv(&v), MAX), Err(Error::Syntax), "{bad:?}");
    }
    for bad in ["0", "1048577", "-1", "x"] {
        let got = acquire(&argv(&["A", "r", "t", "10", "LIMIT", bad]), MAX);
        assert!(
            matches!(got, Err(Error::InvalidInteger { arg: "LIMIT", .. })),
            "{bad}"
        );
    }
    assert!(acquire(&argv(&["A", "r", "t", "10", "LIMIT", "1048576"]), MAX).is_ok());
    assert_eq!(
        acquire(&argv(&["A", "r", "t", "10", "LIMIT", "2", "SHARED"]), MAX),
        Err(Error::SharedSemaphore)
    );
    assert_eq!(
        acquire(
            &argv(&["A", "r", "t", "10", "OWNER", "o", "LIMIT", "2"]),
            MAX
        ),
        Err(Error::OwnerSemaphore)
    );
    assert_eq!(
        acquire(&argv(&["A", "r", "t", "10", "OWNER", ""]), MAX),
        Err(Error::EmptyOwner)
    );
}

#[test]
fn a_long_owner_gets_no_new_hold() {
    let long = "o".repeat(600);
    let a = acquire(&argv(&["A", "r", "t", "10", "OWNER", &long]), MAX).unwrap();
    assert_eq!(a.check_new_token(), Err(Error::TokenTooLong { max: 512 }));
}

#[test]
fn acquire_unknown_option_is_syntax_error() {
    assert_eq!(
        acquire(&argv(&["DLOCK.ACQUIRE", "r", "tok", "10", "NOPE"]), MAX),
        Err(Error::Syntax)
    );
}

#[test]
fn ttl_must_be_plain_integer_in_range() {
    for bad in [
        "abc",
        "0",
        "-5",
        "1.5",
        "",
        " 5",
        "+5",
        "5e3",
        "140737488355329",
    ] {
        let got = acquire(&argv(&["DLOCK.ACQUIRE", "r", "t", bad]), MAX);
        assert_eq!(got, Err(Error::ttl()), "ttl {bad:?}");
    }
    assert_eq!(
        parse_ttl(b"99999999999999999999999"),
        Err(Error::ttl()),
        "overflow"
    );
    assert_eq!(parse_ttl(b"140737488355328"), Ok(MAX_TTL_MS));
    assert_eq!(parse_ttl(b"1"), Ok(1));
    assert!(Error::ttl().to_string().contains("ttl_ms"));
}

#[test]
fn tokens_are_binary_and_bounded() {
    let bin: &[u8] = b"\x00\xff\r\n";
    let a = acquire(&[b"A", b"r", bin, b"5"], MAX).unwrap();
    assert_eq!(a.token, bin);
    assert_eq!(
        release(&argv(&["DLOCK.RELEASE", "r", ""]), MAX),
        Err(Error::EmptyToken)
    );
    let stored_max = vec![b'x'; MAX_STORED_TOKEN];
    let too_long = vec![b'x'; MAX_STORED_TOKEN + 1];
    for t in [&stored_max, &too_long] {
        let want = (t.len() > MAX_STORED_TOKEN).then_some(Error::TokenTooLong {
            max: MAX_STORED_TOKEN,
        });
        assert_eq!(release(&[b"R", b"r", t], MAX).err(), want);
        assert_eq!(extend(&[b"E", b"r", t, b"5"], MAX).err(), want);
        assert_eq!(acquire(&[b"A", b"r", t, b"5"], MAX).err(), want);
    }
}

#[test]
fn max_token_limits_new_grants_and_waiters_only() {
    let small = Limits {
        max_token: 3,
        max_ttl: 0,
    };
    let long = [b'x'; 4];
    // Holders with longer tokens can still release and extend.
    assert_eq!(release(&[b"R", b"r", &long], &small).unwrap().token, long);
    assert_eq!(
        extend(&[b"E", b"r", &long, b"5"], &small).unwrap().token,
        long
    );
    // ACQUIRE parses; a new grant or waiter is then refused.
    let a = acquire(&[b"A", b"r", &long, b"5"], &small).unwrap();
    assert_eq!(a.check_new_token(), Err(Error::TokenTooLong { max: 3 }));
    let a = acquire(&[b"A", b"r", &long[..3], b"5"], &small).unwrap();
    assert_eq!(a.check_new_token(), Ok(()));
}

#[test]
fn release_extend_info_arity() {
    assert_eq!(
        release(&argv(&["R", "r", "t", "x"]), MAX),
        Err(Error::WrongArity)
    );
    assert_eq!(extend(&argv(&["E", "r", "t"]), MAX), Err(Error::WrongArity));
    assert_eq!(info(&argv(&["I"])), Err(Error::WrongArity));
    assert_eq!(info(&argv(&["I", "r"])), Ok(()));
    let e = extend(&argv(&["E", "r", "t", "77"]), MAX).unwrap();
    assert_eq!((e.token, e.ttl_ms, e.wanted), (&b"t"[..], 77, false));
}

#[test]
fn release_takes_to_once_naming_another_token() {
    let r = release(&argv(&["R", "r", "t"]), MAX).unwrap();
    assert_eq!((r.token, r.to), (&b"t"[..], None));
    for to in ["TO", "to", "To"] {
        let r = release(&argv(&["R", "r", "t", to, "w"]), MAX).unwrap();
        assert_eq!((r.token, r.to), (&b"t"[..], Some(&b"w"[..])));
    }
    assert_eq!(
        release(&argv(&["R", "r", "t", "TOO", "w"]), MAX),
        Err(Error::Syntax)
    );
    assert_eq!(
        release(&argv(&["R", "r", "t", "TO"]), MAX),
        Err(Error::WrongArity)
    );
    assert_eq!(
        release(&argv(&["R", "r", "t", "TO", "w", "TO"]), MAX),
        Err(Error::WrongArity)
    );
    assert_eq!(
        release(&argv(&["R", "r", "t", "TO", ""]), MAX),
        Err(Error::EmptyToken)
    );
    assert_eq!(
        release(&argv(&["R", "r", "t", "TO", "t"]), MAX),
        Err(Error::HandoverToSelf)
    );
    let too_long = vec![b'x'; MAX_STORED_TOKEN + 1];
    assert_eq!(
        release(&[b"R", b"r", b"t", b"TO", &too_long], MAX),
        Err(Error::TokenTooLong {
            max: MAX_STORED_TOKEN
        })
    );
}

#[test]
fn extend_takes_wanted_once_and_nothing_else() {
    for w in ["WANTED", "wanted", "Wanted"] {
        let e = extend(&argv(&["E", "r", "t", "77", w]), MAX).unwrap();
        assert_eq!((e.token, e.ttl_ms, e.wanted), (&b"t"[..], 77, true));
    }
    for bad in [
        &["x"][..],
        &["WANTED", "WANTED"],
        &["WANTED", "1"],
        &["WANTEDX"],
        &[""],
    ] {
        let mut v = vec!["E", "r", "t", "5"];
        v.extend_from_slice(bad);
        assert_eq!(extend(&argv(&v), MAX), Err(Error::Syntax), "{v:?}");
    }
    // The ttl is judged first, as without the option.
    assert!(matches!(
        extend(&argv(&["E", "r", "t", "0", "WANTED"]), MAX),
        Err(Error::InvalidInteger { .. })
    ));
}

#[test]
fn queued_takes_at_most_one_pattern() {
    assert_eq!(queued(&argv(&["Q"])), Ok(None));
    assert_eq!(queued(&argv(&["Q", "job:*"])), Ok(Some(&b"job:*"[..])));
    assert_eq!(queued(&argv(&["Q", ""])), Ok(Some(&b""[..])));
    assert_eq!(queued(&argv(&["Q", "a", "b"])), Err(Error::WrongArity));
}

#[test]
fn apply_validates_everything() {
    let ok = apply(&argv(&["A", "r", "t", "12", "1700000000000", "99"])).unwrap();
    assert_eq!(
        (ok.fence, ok.deadline_ms, ok.last_fence),
        (12, 1_700_000_000_000, 99)
    );
    assert!(apply(&argv(&["A", "r", "t", "0", "5", "5"])).is_err());
    assert!(apply(&argv(&["A", "r", "t", "9223372036854775808", "5", "5"])).is_err());
    assert!(apply(&argv(&["A", "r", "", "1", "5", "5"])).is_err());
    assert!(apply(&argv(&["A", "r", "t", "1", "-1", "5"])).is_err());
    assert!(apply(&argv(&["A", "r", "t", "1", "5", "0"])).is_err());
    assert_eq!(apply(&argv(&["A", "r", "t", "1"])), Err(Error::WrongArity));
    assert_eq!(
        apply(&argv(&["A", "r", "t", "1", "5", "5", "5"])),
        Err(Error::WrongArity)
    );
}

#[test]
fn apply_without_last_fence_takes_the_grant_as_the_mark() {
    let ok = apply(&argv(&["A", "r", "t", "12", "1700000000000"])).unwrap();
    assert_eq!(
        (ok.fence, ok.deadline_ms, ok.last_fence),
        (12, 1_700_000_000_000, 12)
    );
    assert!(apply(&argv(&["A", "r", "t", "0", "5"])).is_err());
}

#[test]
fn max_ttl_caps_acquire_and_extend() {
    let capped = Limits {
        max_token: 512,
        max_ttl: 1000,
    };
    assert!(acquire(&argv(&["A", "r", "t", "1000"]), &capped).is_ok());
    assert_eq!(
        acquire(&argv(&["A", "r", "t", "1001"]), &capped),
        Err(Error::TtlAboveMax { max: 1000 })
    );
    assert_eq!(
        extend(&argv(&["E", "r", "t", "1001"]), &capped),
        Err(Error::TtlAboveMax { max: 1000 })
    );
}

#[test]
fn meta_effect() {
    let m = |longest_ttl, lossy, quarantine_until| Meta {
        longest_ttl,
        lossy,
        quarantine_until,
    };
    // Two arguments: no quarantine running (what every writer sends then,
    // and all that releases without the argument sent).
    assert_eq!(meta(&argv(&["M", "30000", "1"])), Ok(m(30_000, true, 0)));
    assert_eq!(meta(&argv(&["M", "0", "0"])), Ok(m(0, false, 0)));
    assert_eq!(
        meta(&argv(&["M", "30000", "0", "1700000000000"])),
        Ok(m(30_000, false, 1_700_000_000_000))
    );
    assert_eq!(meta(&argv(&["M", "5", "1", "0"])), Ok(m(5, true, 0)));
    assert!(meta(&argv(&["M", "-1", "0"])).is_err());
    assert!(meta(&argv(&["M", "5", "2"])).is_err());
    assert!(meta(&argv(&["M", "5", "0", "-1"])).is_err());
    assert!(meta(&argv(&["M", "5", "0", "9223372036854775808"])).is_err());
    assert_eq!(meta(&argv(&["M", "5"])), Err(Error::WrongArity));
    assert_eq!(
        meta(&argv(&["M", "5", "0", "0", "0"])),
        Err(Error::WrongArity)
    );
}

#[test]
fn parse_u64_edges() {
    assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
    assert_eq!(parse_u64(b"18446744073709551616"), None);
    assert_eq!(parse_u64(b"007"), Some(7));
}

#[test]
fn observe_takes_since_and_wait_once_each_in_any_order() {
    use crate::observe::Observe;
    let v = b"00000000000000ff";
    let ok = |argv: &[&[u8]]| observe(argv);
    assert_eq!(
        ok(&[b"DLOCK.OBSERVE", b"r"]),
        Ok(Observe {
            since: None,
            wait_ms: None
        })
    );
    assert_eq!(
        ok(&[b"DLOCK.OBSERVE", b"r", b"wait", b"100", b"SINCE", v]),
        Ok(Observe {
            since: Some(255),
            wait_ms: Some(100)
        })
    );
    assert_eq!(ok(&[b"DLOCK.OBSERVE"]), Err(Error::WrongArity));
    assert_eq!(ok(&[b"DLOCK.OBSERVE", b"r", b"SINCE"]), Err(Error::Syntax));
    assert_eq!(
        ok(&[b"DLOCK.OBSERVE", b"r", b"SINCE", v, b"SINCE", v]),
        Err(Error::Syntax)
    );
    assert_eq!(
        ok(&[b"DLOCK.OBSERVE", b"r", b"NOW", b"1"]),
        Err(Error::Syntax)
    );
    assert_eq!(
        ok(&[b"DLOCK.OBSERVE", b"r", b"SINCE", b"ff"]),
        Err(Error::BadVersion)
    );
    assert!(matches!(
        ok(&[b"DLOCK.OBSERVE", b"r", b"WAIT", b"-1"]),
        Err(Error::InvalidInteger { .. })
    ));
}

#[test]
fn max_hold_parses_once_in_range_and_never_with_a_session() {
    let a = acquire(&argv(&["A", "r", "t", "10", "maxhold", "5000"]), MAX).unwrap();
    assert_eq!(a.max_hold_ms, Some(5000));
    assert!(!a.is_plain(), "a capped hold is not the plain lock");
    assert_eq!(a.ask().max_hold_ms, Some(5000));
    let a = acquire(
        &argv(&["A", "r", "t", "10", "MAXHOLD", "140737488355328"]),
        MAX,
    )
    .unwrap();
    assert_eq!(a.max_hold_ms, Some(MAX_TTL_MS));
    for bad in ["0", "-1", "1.5", "x", "", "140737488355329"] {
        let got = acquire(&argv(&["A", "r", "t", "10", "MAXHOLD", bad]), MAX);
        assert!(
            matches!(got, Err(Error::InvalidInteger { arg: "MAXHOLD", .. })),
            "{bad:?}: {got:?}"
        );
    }
    for bad in [&["MAXHOLD"][..], &["MAXHOLD", "5", "MAXHOLD", "5"]] {
        let mut v = vec!["A", "r", "t", "10"];
        v.extend_from_slice(bad);
        assert_eq!(acquire(&argv(&v), MAX), Err(Error::Syntax), "{bad:?}");
    }
    assert_eq!(
        acquire(
            &argv(&["A", "r", "t", "10", "MAXHOLD", "5", "SESSION", "s"]),
            MAX
        ),
        Err(Error::MaxHoldSession)
    );
    // Not held to dlock.max-ttl: the lease is the smaller of the two.
    let capped = Limits {
        max_token: 512,
        max_ttl: 1000,
    };
    assert!(acquire(&argv(&["A", "r", "t", "10", "MAXHOLD", "5000"]), &capped).is_ok());
}

#[test]
fn permits_need_a_limit_above_one_and_stay_within_it() {
    let parse = |opts: &[&str]| {
        let mut v = vec!["A", "r", "t", "10"];
        v.extend_from_slice(opts);
        acquire(&argv(&v), MAX).map(|a| (a.limit, a.permits))
    };
    assert_eq!(
        parse(&["LIMIT", "5", "PERMITS", "3"]),
        Ok((Some(5), Some(3)))
    );
    assert_eq!(
        parse(&["permits", "5", "limit", "5"]),
        Ok((Some(5), Some(5)))
    );
    assert_eq!(parse(&["LIMIT", "5", "PERMITS", "1"]), Ok((Some(5), None)));
    assert_eq!(parse(&["PERMITS", "2"]), Err(Error::PermitsNeedLimit));
    assert_eq!(
        parse(&["LIMIT", "1", "PERMITS", "1"]),
        Err(Error::PermitsNeedLimit)
    );
    for bad in ["0", "6", "-1", "x", "99999999999"] {
        assert_eq!(
            parse(&["LIMIT", "5", "PERMITS", bad]),
            Err(Error::PermitsRange),
            "{bad}"
        );
    }
    assert_eq!(
        parse(&["LIMIT", "5", "PERMITS", "2", "PERMITS", "2"]),
        Err(Error::Syntax)
    );
    assert_eq!(parse(&["LIMIT", "5", "PERMITS"]), Err(Error::Syntax));
    assert_eq!(
        Error::PermitsNeedLimit.to_string(),
        "ERR PERMITS needs LIMIT above 1"
    );
    assert_eq!(
        Error::PermitsRange.to_string(),
        "ERR PERMITS must be an integer from 1 to LIMIT"
    );
}
