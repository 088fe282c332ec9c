use super::args::{check, guard, MAX_BATCH};
use super::inner::{flag, refusal, saves_keys, Facts, Saved, Size};
use super::{holder, Proof};
use crate::ask::Mode;
use crate::error::Error;
use crate::resource::holds::{HoldRef, NEVER};

fn hold<'a>(
    token: &'a [u8],
    fence: u64,
    deadline_ms: u64,
    session: Option<&'a [u8]>,
) -> HoldRef<'a> {
    HoldRef {
        token,
        owner: token,
        fence,
        mode: Mode::Exclusive,
        deadline_ms,
        session,
        cap: None,
        permits: 1,
    }
}

fn live(_: &[u8]) -> bool {
    true
}

#[test]
fn a_live_hold_proves_by_token_or_fence() {
    let holds = [hold(b"a", 7, 1000, None), hold(b"b", 8, 2000, None)];
    assert!(holder(Proof::Token(b"a"), holds, 1000, live));
    assert!(holder(Proof::Fence(8), holds, 1500, live));
    assert!(!holder(Proof::Token(b"c"), holds, 10, live));
    assert!(!holder(Proof::Fence(9), holds, 10, live));
}

#[test]
fn a_hold_past_its_deadline_proves_nothing() {
    let holds = [hold(b"a", 7, 1000, None)];
    assert!(!holder(Proof::Token(b"a"), holds, 1001, live));
    assert!(!holder(Proof::Fence(7), holds, 1001, live));
}

#[test]
fn a_bound_hold_proves_while_its_session_lives() {
    let holds = [hold(b"a", 7, NEVER, Some(b"s1"))];
    assert!(holder(Proof::Token(b"a"), holds, 5, |s| s == b"s1"));
    assert!(!holder(Proof::Token(b"a"), holds, 5, |_| false));
}

#[test]
fn a_lock_delayed_hold_is_held_by_nobody() {
    // Its session ended: it keeps the id and a finite deadline.
    let holds = [hold(b"a", 7, 5000, Some(b"s1"))];
    assert!(!holder(Proof::Token(b"a"), holds, 5, live));
    assert!(!holder(Proof::Fence(7), holds, 5, live));
}

fn argv<'a>(s: &'a [&'a str]) -> Vec<&'a [u8]> {
    s.iter().map(|a| a.as_bytes()).collect()
}

#[test]
fn one_command_is_the_rest_of_the_arguments() {
    let a = argv(&["DLOCK.GUARD", "r", "TOKEN", "t", "SET", "k", "v"]);
    let g = guard(&a).unwrap();
    assert_eq!(g.proof, Proof::Token(b"t"));
    assert_eq!(g.commands.first(), Some(&(4..7)));
    assert_eq!(g.commands.len(), 1);
    assert!(!g.batch);
    let a = argv(&["DLOCK.GUARD", "r", "fence", "42", "INCR", "k"]);
    assert_eq!(guard(&a).unwrap().proof, Proof::Fence(42));
}

#[test]
fn a_batch_is_counted_commands_each_with_its_argc() {
    let a = argv(&[
        "DLOCK.GUARD",
        "r",
        "FENCE",
        "3",
        "batch",
        "2",
        "3",
        "SET",
        "k",
        "v",
        "2",
        "INCR",
        "n",
    ]);
    let g = guard(&a).unwrap();
    assert!(g.batch);
    assert_eq!(g.commands, [7..10, 11..13]);
}

#[test]
fn bad_guards_are_refused() {
    let cases: &[(&[&str], Error)] = &[
        (&["DLOCK.GUARD", "r", "TOKEN", "t"], Error::WrongArity),
        (&["DLOCK.GUARD", "r", "TOKEN"], Error::WrongArity),
        (
            &["DLOCK.GUARD", "r", "OWNER", "t", "SET", "k", "v"],
            Error::Syntax,
        ),
        (
            &["DLOCK.GUARD", "r", "TOKEN", "", "SET", "k", "v"],
            Error::EmptyToken,
        ),
        (
            &["DLOCK.GUARD", "r", "FENCE", "0", "SET", "k", "v"],
            Error::InvalidInteger {
                arg: "fence",
                min: 1,
                max: crate::fence::MAX_FENCE,
            },
        ),
        (
            &["DLOCK.GUARD", "r", "FENCE", "-1", "SET", "k", "v"],
            Error::InvalidInteger {
                arg: "fence",
                min: 1,
                max: crate::fence::MAX_FENCE,
            },
        ),
        (
            &["DLOCK.GUARD", "r", "TOKEN", "t", "BATCH"],
            Error::WrongArity,
        ),
        (
            &["DLOCK.GUARD", "r", "TOKEN", "t", "BATCH", "0"],
            Error::InvalidInteger {
                arg: "count",
                min: 1,
                max: MAX_BATCH as u64,
            },
        ),
        (
            &[
                "DLOCK.GUARD",
                "r",
                "TOKEN",
                "t",
                "BATCH",
                "1001",
                "1",
                "PING",
            ],
            Error::InvalidInteger {
                arg: "count",
                min: 1,
                max: MAX_BATCH as u64,
            },
        ),
        (
            &["DLOCK.GUARD", "r", "TOKEN", "t", "BATCH", "1", "0"],
            Error::BatchArgc,
        ),
        (
            &[
                "DLOCK.GUARD",
                "r",
                "TOKEN",
                "t",
                "BATCH",
                "1",
                "3",
                "SET",
                "k",
            ],
            Error::BatchArgc,
        ),
        (
            &["DLOCK.GUARD", "r", "TOKEN", "t", "BATCH", "1", "x", "SET"],
            Error::BatchArgc,
        ),
        (
            &["DLOCK.GUARD", "r", "TOKEN", "t", "BATCH", "2", "1", "PING"],
            Error::WrongArity,
        ),
        (
            &[
                "DLOCK.GUARD",
                "r",
                "TOKEN",
                "t",
                "BATCH",
                "1",
                "1",
                "PING",
                "extra",
            ],
            Error::BatchArgc,
        ),
    ];
    for (a, want) in cases {
        assert_eq!(guard(&argv(a)).as_ref().err(), Some(want), "{a:?}");
    }
}

#[test]
fn check_takes_the_proof_alone() {
    assert_eq!(
        check(&argv(&["DLOCK.CHECK", "r", "FENCE", "9"])),
        Ok(Proof::Fence(9))
    );
    assert_eq!(
        check(&argv(&["DLOCK.CHECK", "r", "FENCE"])),
        Err(Error::WrongArity)
    );
    assert_eq!(
        check(&argv(&["DLOCK.CHECK", "r", "FENCE", "9", "x"])),
        Err(Error::WrongArity)
    );
}

const SET: Facts = Facts {
    arity: -3,
    flags: flag::WRITE | flag::DENY_OOM,
};
const GET: Facts = Facts { arity: 2, flags: 0 };

#[test]
fn inner_commands_refused_and_allowed() {
    let blpop = Facts {
        arity: -3,
        flags: flag::WRITE | flag::BLOCKING,
    };
    let multi = Facts {
        arity: 1,
        flags: flag::NO_SCRIPT,
    };
    let flush = Facts {
        arity: -1,
        flags: flag::WRITE,
    };
    let publish = Facts {
        arity: 3,
        flags: flag::PUBSUB,
    };
    // (command, its facts, its keys, in a batch, allowed)
    type Case<'a> = (&'a [&'a str], Option<&'a Facts>, usize, bool, bool);
    let cases: &[Case] = &[
        (&["SET", "k", "v"], Some(&SET), 1, false, true),
        (&["set", "k", "v"], Some(&SET), 1, true, true),
        (&["GET", "k"], Some(&GET), 1, true, true),
        (&["NOPE", "k"], None, 0, false, false),
        (&["DLOCK.RELEASE", "r", "t"], Some(&SET), 1, false, false),
        (
            &["dlock.acquire", "r", "t", "10"],
            Some(&SET),
            1,
            false,
            false,
        ),
        (&["BLPOP", "k", "0"], Some(&blpop), 1, false, false),
        (&["MULTI"], Some(&multi), 0, false, false),
        (&["FLUSHALL"], Some(&flush), 0, false, false),
        (&["SELECT", "1"], Some(&GET), 0, false, false),
        (&["MOVE", "k", "1"], Some(&SET), 1, false, false),
        (&["COPY", "a", "b", "DB", "1"], Some(&SET), 2, false, false),
        (&["COPY", "a", "b", "REPLACE"], Some(&SET), 2, false, true),
        (&["PUBLISH", "c", "m"], Some(&publish), 0, false, true),
        (&["PUBLISH", "c", "m"], Some(&publish), 0, true, false),
        (&["SET", "k"], Some(&SET), 1, false, false),
        (&["GET", "k", "x"], Some(&GET), 1, false, false),
        (
            &["MIGRATE", "h", "1", "k", "0", "5"],
            Some(&SET),
            1,
            false,
            false,
        ),
        (
            &["RESTORE", "k", "0", "payload"],
            Some(&SET),
            1,
            false,
            false,
        ),
        (&["CLUSTER", "DELSLOTS", "1"], Some(&GET), 0, false, false),
        (&["SLOWLOG", "RESET"], Some(&GET), 0, false, false),
        (
            &["PFSELFTEST"],
            Some(&Facts {
                arity: 1,
                flags: flag::ADMIN,
            }),
            0,
            false,
            false,
        ),
    ];
    for (a, facts, keys, batch, allowed) in cases {
        let got = refusal(&argv(a), *facts, *keys, *batch);
        assert_eq!(got.is_none(), *allowed, "{a:?}: {got:?}");
    }
}

#[test]
fn an_inner_command_takes_at_most_256_arguments() {
    let mut args: Vec<&[u8]> = vec![b"MSET"];
    args.extend(std::iter::repeat_n(&b"k"[..], 256));
    assert_eq!(refusal(&args, Some(&SET), 128, false), None);
    args.push(b"k");
    assert!(refusal(&args, Some(&SET), 128, false).is_some());
    assert!(refusal(&args, None, 0, false)
        .unwrap()
        .contains("more than 256"));
}

#[test]
fn a_batch_saves_what_a_later_failure_must_undo() {
    assert!(saves_keys(true, 0, 2, &SET));
    assert!(
        !saves_keys(true, 1, 2, &SET),
        "the last command changes nothing when it fails"
    );
    assert!(!saves_keys(false, 0, 1, &SET));
    assert!(
        !saves_keys(true, 0, 2, &GET),
        "a read writes nothing to undo"
    );
}

#[test]
fn saved_copies_are_bounded() {
    let bytes = |bytes| Some(Size { bytes, elements: 0 });
    let elements = |elements| Some(Size { bytes: 0, elements });
    let mut saved = Saved::default();
    assert!(saved.admit(bytes(crate::limits::MAX_SAVED_BYTES - 1)));
    assert!(!saved.admit(bytes(2)));
    assert!(saved.admit(bytes(1)));
    assert!(saved.admit(elements(crate::limits::MAX_SAVED_ELEMENTS)));
    assert!(!saved.admit(elements(1)));
    let mut keys = Saved::default();
    for _ in 0..crate::limits::MAX_SAVED_KEYS {
        assert!(keys.admit(None));
    }
    assert!(!keys.admit(None), "a key that does not exist counts too");
}
