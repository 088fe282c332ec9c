//! Arguments of the set commands: `DLOCK.MACQUIRE numkeys
//! resource [resource ...] token ttl_ms [SHARED] [WAIT timeout_ms]`,
//! `DLOCK.MRELEASE numkeys resource [resource ...] token` and
//! `DLOCK.MEXTEND numkeys resource [resource ...] token ttl_ms [WANTED]`.
//!
//! Resources are keys the server layer opens; here they are only counted,
//! checked distinct and handed back as indexes into argv.

use crate::ask::Mode;
use crate::error::Error;
use crate::limits::MAX_STORED_TOKEN;
use crate::request::args::{self, parse_u64, Limits, MAX_WAIT_MS};

/// Most resources one set may name: a set is granted in one step, inside
/// one event-loop turn, so it stays small.
pub const MAX_SET: usize = 64;

pub use crate::request::args::{Acquire, Members};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetRelease<'a> {
    pub members: Members,
    pub token: &'a [u8],
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetExtend<'a> {
    pub members: Members,
    pub token: &'a [u8],
    pub ttl_ms: u64,
    /// `WANTED`, as `DLOCK.EXTEND`'s: the waiters of every member.
    pub wanted: bool,
}

/// `numkeys` and the distinct resources after it; returns them and the
/// arguments that follow.
fn members<'v, 'a>(argv: &'v [&'a [u8]]) -> Result<(Members, &'v [&'a [u8]]), Error> {
    let [_, numkeys, rest @ ..] = argv else {
        return Err(Error::WrongArity);
    };
    let count = numkeys_of(numkeys).ok_or(Error::InvalidInteger {
        arg: "numkeys",
        min: 1,
        max: MAX_SET as u64,
    })?;
    let (keys, after) = rest.split_at_checked(count).ok_or(Error::WrongArity)?;
    let mut sorted: Vec<&[u8]> = keys.to_vec();
    sorted.sort_unstable();
    if sorted.windows(2).any(|w| w.first() == w.get(1)) {
        return Err(Error::DuplicateResource);
    }
    Ok((Members { first: 2, count }, after))
}

/// Where a set command's resources are, for the server's own key lookup
/// (cluster routing, which asks a module command itself): the
/// `numkeys` arguments after `numkeys`, when it is in range and they are
/// all there. Nothing else is checked; the command refuses a malformed call
/// itself.
pub fn key_positions(argv: &[&[u8]]) -> Option<Members> {
    let count = numkeys_of(argv.get(1)?)?;
    (argv.len() >= 2 + count).then_some(Members { first: 2, count })
}

/// `numkeys`, 1 ..= `MAX_SET`, written the one way the server's key-spec
/// parser reads it too (no leading zero): the keys ACL patterns check and
/// the keys the command locks are always the same ones.
fn numkeys_of(raw: &[u8]) -> Option<usize> {
    if raw.len() > 1 && raw.first() == Some(&b'0') {
        return None;
    }
    let n = parse_u64(raw).filter(|n| (1..=MAX_SET as u64).contains(n))?;
    usize::try_from(n).ok()
}

fn token(raw: &[u8]) -> Result<&[u8], Error> {
    if raw.is_empty() {
        Err(Error::EmptyToken)
    } else if raw.len() > MAX_STORED_TOKEN {
        Err(Error::TokenTooLong {
            max: MAX_STORED_TOKEN,
        })
    } else {
        Ok(raw)
    }
}

/// `DLOCK.MACQUIRE`: the same request as `DLOCK.ACQUIRE`'s, on every member.
pub fn acquire<'a>(argv: &[&'a [u8]], limits: &Limits) -> Result<Acquire<'a>, Error> {
    let (members, rest) = members(argv)?;
    let [tok, ttl, options @ ..] = rest else {
        return Err(Error::WrongArity);
    };
    let mut req = Acquire {
        members,
        token: token(tok)?,
        ttl_ms: 0,
        mode: Mode::Exclusive,
        wait_ms: None,
        max_new_token: limits.max_token,
        limit: None,
        owner: None,
        session: None,
        max_hold_ms: None,
        permits: None,
        priority: None,
    };
    let mut rest = options;
    while let [name, tail @ ..] = rest {
        let is = |option: &[u8]| name.eq_ignore_ascii_case(option);
        rest = match tail {
            _ if is(b"SHARED") && req.mode == Mode::Exclusive => {
                req.mode = Mode::Shared;
                tail
            }
            [value, tail @ ..] if is(b"WAIT") && req.wait_ms.is_none() => {
                req.wait_ms = Some(parse_u64(value).filter(|t| *t <= MAX_WAIT_MS).ok_or(
                    Error::InvalidInteger {
                        arg: "timeout_ms",
                        min: 0,
                        max: MAX_WAIT_MS,
                    },
                )?);
                tail
            }
            [value, tail @ ..] if is(b"SESSION") && req.session.is_none() => {
                req.session = Some(args::parse_session_id(value)?);
                tail
            }
            [value, tail @ ..] if is(b"MAXHOLD") && req.max_hold_ms.is_none() => {
                req.max_hold_ms = Some(args::parse_max_hold(value)?);
                tail
            }
            [value, tail @ ..] if is(b"PRIORITY") && req.priority.is_none() => {
                req.priority = Some(args::parse_priority(value)?);
                tail
            }
            _ => return Err(Error::Syntax),
        };
    }
    req.ttl_ms = args::hold_ttl(ttl, req.session.is_some(), limits)?;
    args::check_max_hold(req.max_hold_ms, req.session)?;
    Ok(req)
}

pub fn release<'a>(argv: &[&'a [u8]]) -> Result<SetRelease<'a>, Error> {
    let (members, rest) = members(argv)?;
    let [tok] = rest else {
        return Err(Error::WrongArity);
    };
    Ok(SetRelease {
        members,
        token: token(tok)?,
    })
}

pub fn extend<'a>(argv: &[&'a [u8]], limits: &Limits) -> Result<SetExtend<'a>, Error> {
    let (members, rest) = members(argv)?;
    let [tok, ttl, options @ ..] = rest else {
        return Err(Error::WrongArity);
    };
    Ok(SetExtend {
        members,
        token: token(tok)?,
        ttl_ms: limits.ttl(ttl)?,
        wanted: args::parse_wanted(options)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: &Limits = &Limits {
        max_token: 512,
        max_ttl: 0,
    };

    fn argv<'a>(parts: &[&'a str]) -> Vec<&'a [u8]> {
        parts.iter().map(|p| p.as_bytes()).collect()
    }

    #[test]
    fn macquire_parses_members_token_ttl_and_options() {
        let a = acquire(
            &argv(&["M", "2", "a", "b", "t", "100", "wait", "5", "SHARED"]),
            L,
        );
        let a = a.unwrap();
        assert_eq!(a.members.indexes(), 2..4);
        assert_eq!((a.token, a.ttl_ms), (&b"t"[..], 100));
        assert_eq!((a.mode, a.wait_ms), (Mode::Shared, Some(5)));
        let a = acquire(&argv(&["M", "1", "a", "t", "100"]), L).unwrap();
        assert_eq!(
            (a.members.count, a.mode, a.wait_ms),
            (1, Mode::Exclusive, None)
        );
    }

    #[test]
    fn macquire_takes_max_hold_for_every_member() {
        let a = acquire(&argv(&["M", "2", "a", "b", "t", "100", "MAXHOLD", "50"]), L).unwrap();
        assert_eq!(a.max_hold_ms, Some(50));
        assert_eq!(a.ask().max_hold_ms, Some(50));
        assert!(matches!(
            acquire(&argv(&["M", "1", "a", "t", "100", "MAXHOLD", "0"]), L),
            Err(Error::InvalidInteger { arg: "MAXHOLD", .. })
        ));
        assert_eq!(
            acquire(
                &argv(&["M", "1", "a", "t", "100", "SESSION", "s", "MAXHOLD", "5"]),
                L
            ),
            Err(Error::MaxHoldSession)
        );
    }

    #[test]
    fn bad_sets_are_refused() {
        for bad in ["0", "65", "-1", "x", ""] {
            assert!(
                matches!(
                    acquire(&argv(&["M", bad, "a", "t", "100"]), L),
                    Err(Error::InvalidInteger { arg: "numkeys", .. })
                ),
                "{bad}"
            );
        }
        assert_eq!(
            acquire(&argv(&["M", "2", "a", "a", "t", "100"]), L),
            Err(Error::DuplicateResource)
        );
        assert_eq!(
            acquire(&argv(&["M", "3", "a", "b", "t", "100"]), L),
            Err(Error::WrongArity)
        );
        assert_eq!(
            acquire(&argv(&["M", "2", "a", "b", "t"]), L),
            Err(Error::WrongArity)
        );
        for opts in [
            &["OWNER", "o"][..],
            &["SHARED", "SHARED"],
            &["WAIT"],
            &["LIMIT", "2"],
        ] {
            let mut v = vec!["M", "1", "a", "t", "100"];
            v.extend_from_slice(opts);
            assert_eq!(acquire(&argv(&v), L), Err(Error::Syntax), "{opts:?}");
        }
        assert_eq!(
            acquire(&argv(&["M", "1", "a", "", "100"]), L),
            Err(Error::EmptyToken)
        );
        assert_eq!(
            acquire(&argv(&["M", "1", "a", "t", "0"]), L),
            Err(Error::ttl())
        );
    }

    #[test]
    fn numkeys_is_judged_before_what_follows_it() {
        // Too few arguments for any valid call: `numkeys` is still the
        // error named.
        for argv_ in [&["M", "0", "t", "10"][..], &["M", "0"], &["M", "x", "t"]] {
            let numkeys = |r: Result<(), Error>| {
                matches!(r, Err(Error::InvalidInteger { arg: "numkeys", .. }))
            };
            assert!(numkeys(extend(&argv(argv_), L).map(drop)), "{argv_:?}");
            assert!(numkeys(release(&argv(argv_)).map(drop)), "{argv_:?}");
            assert!(numkeys(acquire(&argv(argv_), L).map(drop)), "{argv_:?}");
        }
        assert_eq!(extend(&argv(&["M"]), L), Err(Error::WrongArity));
        assert_eq!(extend(&argv(&["M", "1"]), L), Err(Error::WrongArity));
    }

    #[test]
    fn mrelease_and_mextend() {
        let r = release(&argv(&["M", "2", "a", "b", "t"])).unwrap();
        assert_eq!((r.members.indexes(), r.token), (2..4, &b"t"[..]));
        assert_eq!(
            release(&argv(&["M", "2", "a", "b"])),
            Err(Error::WrongArity)
        );
        assert_eq!(
            release(&argv(&["M", "2", "a", "b", "t", "x"])),
            Err(Error::WrongArity)
        );
        let e = extend(&argv(&["M", "1", "a", "t", "9"]), L).unwrap();
        assert_eq!((e.members.count, e.ttl_ms, e.wanted), (1, 9, false));
        let e = extend(&argv(&["M", "2", "a", "b", "t", "9", "wanted"]), L).unwrap();
        assert_eq!((e.members.count, e.ttl_ms, e.wanted), (2, 9, true));
        for bad in [&["WANTED", "WANTED"][..], &["x"], &["WANTED", "1"]] {
            let mut v = vec!["M", "1", "a", "t", "9"];
            v.extend_from_slice(bad);
            assert_eq!(extend(&argv(&v), L), Err(Error::Syntax), "{v:?}");
        }
        assert_eq!(
            extend(&argv(&["M", "1", "a", "t"]), L),
            Err(Error::WrongArity)
        );
    }

    #[test]
    fn numkeys_is_read_only_in_the_servers_own_form() {
        // The server's key-spec parser refuses "01": so must we, or an ACL
        // key check would see no keys while the command locks one.
        for bad in ["01", "002", "+1", " 1", "1 "] {
            let a = acquire(&argv(&["M", bad, "a", "b", "t", "100"]), L);
            assert!(matches!(a, Err(Error::InvalidInteger { .. })), "{bad}");
            assert!(key_positions(&argv(&["M", bad, "a", "b", "t"])).is_none());
        }
    }

    #[test]
    fn key_positions_are_the_numkeys_resources() {
        let at = |v: &[&str]| key_positions(&argv(v)).map(|m| m.indexes());
        assert_eq!(at(&["M", "3", "a", "b", "c", "t", "1"]), Some(2..5));
        assert_eq!(
            at(&["M", "2", "a", "b"]),
            Some(2..4),
            "keys only: still routed"
        );
        for bad in [
            &["M", "0", "a"][..],
            &["M", "4", "a", "b", "c"],
            &["M", "x", "a"],
            &["M", "65", "a"],
            &["M"],
        ] {
            assert_eq!(at(bad), None, "{bad:?}");
        }
    }
}
