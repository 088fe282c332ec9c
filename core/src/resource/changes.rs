//! The per-hold effects of a resource with several holds: what
//! the master sends replicas and the AOF when one hold is added, moved or
//! dropped, and how a replica applies it. Plain locks keep their own
//! effects (`DLOCK.APPLY`, `PEXPIREAT`, `DEL`).
//!
//! - `DLOCK.ADDHOLD key token owner fence mode limit deadline_ms last_fence
//!   [session | MAXHOLD cap_ms max_hold_ms]` (`mode` is `exclusive` or
//!   `shared`; `owner` equal to `token` when the request named none;
//!   `session` for a hold bound to one, whose deadline is then ignored;
//!   `MAXHOLD` for a capped hold: its cap, absolute unix ms, and the
//!   `MAXHOLD` it was granted with; written only for a capped hold, so a
//!   release without caps reads every other effect), then `PERMITS k` for
//!   a hold counting as k > 1 of a semaphore's permits (written only then)
//! - `DLOCK.MOVEHOLD key token deadline_ms`
//! - `DLOCK.DROPHOLD key token`
//! - `DLOCK.SETLIMIT key n`: `DLOCK.RESIZE`'s new limit (the holds marked
//!   resized), before the grants it made
//! - `DLOCK.SETHOLDS key value last_fence`: a whole value in the multi-hold
//!   layout (`layout.rs`), as an AOF rewrite writes it (one effect per key,
//!   so replaying a rewritten AOF is linear in the holds)
//!
//! Deadlines are absolute unix ms, so a replay never stretches a hold.

use crate::ask::Mode;
use crate::fence::MAX_FENCE;
use crate::limits::{MAX_LIMIT, MAX_STORED_TOKEN};
use crate::request::args::parse_u64;
use crate::resource::holds::{Hold, Holds};
use crate::Error;

/// One change to one hold, as the master made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Add {
        hold: Hold,
        limit: u32,
    },
    Move {
        token: Box<[u8]>,
        deadline_ms: u64,
    },
    Drop {
        token: Box<[u8]>,
    },
    /// `DLOCK.RESIZE`: the limit set, the holds marked resized.
    Limit {
        limit: u32,
    },
}

impl Change {
    /// Applies the change: what the master did, on any copy of its holds.
    pub fn apply(&self, holds: &mut Holds) {
        match self {
            Change::Add { hold, limit } => {
                if holds.is_empty() {
                    holds.limit = *limit;
                    holds.resized = false;
                }
                holds.put(hold.clone());
            }
            Change::Move { token, deadline_ms } => {
                holds.set_deadline(token, *deadline_ms);
            }
            Change::Drop { token } => {
                holds.release(token);
            }
            Change::Limit { limit } => holds.set_limit(*limit),
        }
    }
}

pub fn mode_name(mode: Mode) -> &'static [u8] {
    match mode {
        Mode::Exclusive => b"exclusive",
        Mode::Shared => b"shared",
    }
}

/// An added hold: `key token owner fence mode limit deadline_ms last_fence`.
/// Returns the change and the sender's fence high-water mark.
pub fn parse_add(argv: &[&[u8]]) -> Result<(Change, u64), Error> {
    // `PERMITS k` goes last, after whatever else the hold has (its
    // keyword never stands where a session, a last fence or a cap is).
    let (argv, permits) = match argv {
        [head @ .., keyword, k] if argv.len() >= 11 && keyword.eq_ignore_ascii_case(b"PERMITS") => {
            let k = parse_u64(k)
                .filter(|k| (2..=u64::from(MAX_LIMIT)).contains(k))
                .ok_or(Error::BadEffect("permits"))?;
            (head, k as u32)
        }
        _ => (argv, 1),
    };
    let (argv, session, cap) = match argv {
        [head @ .., session] if argv.len() == 10 => (head, Some(bytes(session, "session")?), None),
        [head @ .., keyword, at, ms] if argv.len() == 12 => {
            if !keyword.eq_ignore_ascii_case(b"MAXHOLD") {
                return Err(Error::BadEffect("MAXHOLD"));
            }
            (head, None, Some(parse_cap(at, ms)?))
        }
        _ => (argv, None, None),
    };
    let [_, _, token, owner, fence, mode, limit, deadline, last] = argv else {
        return Err(Error::WrongArity);
    };
    if session.is_some_and(|s| s.len() > crate::limits::MAX_SESSION_ID) {
        return Err(Error::BadEffect("session"));
    }
    let hold = Hold {
        token: bytes(token, "token")?.into(),
        owner: bytes(owner, "owner")?.into(),
        fence: parse_fence(fence).ok_or(Error::BadEffect("fence"))?,
        mode: match *mode {
            b"exclusive" => Mode::Exclusive,
            b"shared" => Mode::Shared,
            _ => return Err(Error::BadEffect("mode")),
        },
        deadline_ms: parse_deadline(deadline)?,
        session: session.map(Into::into),
        cap,
        permits,
    };
    // No hold outlives its cap, whatever the effect says.
    let hold = Hold {
        deadline_ms: cap.map_or(hold.deadline_ms, |c| hold.deadline_ms.min(c.at_ms)),
        ..hold
    };
    let limit = parse_u64(limit)
        .filter(|n| (1..=u64::from(MAX_LIMIT)).contains(n))
        .ok_or(Error::BadEffect("limit"))? as u32;
    if limit > 1 && (hold.mode == Mode::Shared || hold.owner != hold.token) {
        return Err(Error::BadEffect("semaphore hold"));
    }
    if permits > limit {
        return Err(Error::BadEffect("permits"));
    }
    let last = parse_fence(last).ok_or(Error::BadEffect("last_fence"))?;
    let mark = last.max(hold.fence);
    Ok((Change::Add { hold, limit }, mark))
}

/// A cap as an effect carries it: `cap_ms max_hold_ms`, both in range.
fn parse_cap(at: &[u8], ms: &[u8]) -> Result<crate::ask::Cap, Error> {
    let at_ms = parse_deadline(at).map_err(|_| Error::BadEffect("cap"))?;
    let ms = parse_u64(ms)
        .filter(|m| (1..=crate::limits::MAX_TTL_MS).contains(m))
        .ok_or(Error::BadEffect("max_hold"))?;
    Ok(crate::ask::Cap { at_ms, ms })
}

/// A whole value: `key value last_fence`. Returns the holds and the
/// sender's fence high-water mark.
pub fn parse_set(argv: &[&[u8]]) -> Result<(Holds, u64), Error> {
    let [_, _, value, last] = argv else {
        return Err(Error::WrongArity);
    };
    if !crate::resource::layout::is_multi(value) {
        return Err(Error::BadEffect("value"));
    }
    let holds = crate::resource::layout::decode(value).map_err(|_| Error::BadEffect("value"))?;
    let last = parse_fence(last).ok_or(Error::BadEffect("last_fence"))?;
    let mark = last.max(holds.max_fence());
    Ok((holds, mark))
}

/// A resized limit: `key n`, n from 2 to `MAX_LIMIT`.
pub fn parse_limit(argv: &[&[u8]]) -> Result<Change, Error> {
    let [_, _, n] = argv else {
        return Err(Error::WrongArity);
    };
    let limit = parse_u64(n)
        .filter(|n| (2..=u64::from(MAX_LIMIT)).contains(n))
        .ok_or(Error::BadEffect("limit"))? as u32;
    Ok(Change::Limit { limit })
}

/// A moved deadline: `key token deadline_ms`.
pub fn parse_move(argv: &[&[u8]]) -> Result<Change, Error> {
    let [_, _, token, deadline] = argv else {
        return Err(Error::WrongArity);
    };
    Ok(Change::Move {
        token: bytes(token, "token")?.into(),
        deadline_ms: parse_deadline(deadline)?,
    })
}

/// A dropped hold: `key token`.
pub fn parse_drop(argv: &[&[u8]]) -> Result<Change, Error> {
    let [_, _, token] = argv else {
        return Err(Error::WrongArity);
    };
    Ok(Change::Drop {
        token: bytes(token, "token")?.into(),
    })
}

fn bytes<'a>(raw: &'a [u8], what: &'static str) -> Result<&'a [u8], Error> {
    if raw.is_empty() || raw.len() > MAX_STORED_TOKEN {
        return Err(Error::BadEffect(what));
    }
    Ok(raw)
}

fn parse_fence(raw: &[u8]) -> Option<u64> {
    parse_u64(raw).filter(|f| (1..=MAX_FENCE).contains(f))
}

fn parse_deadline(raw: &[u8]) -> Result<u64, Error> {
    parse_u64(raw)
        .filter(|d| *d <= i64::MAX as u64)
        .ok_or(Error::BadEffect("deadline"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv<'a>(parts: &[&'a str]) -> Vec<&'a [u8]> {
        parts.iter().map(|p| p.as_bytes()).collect()
    }

    #[test]
    fn effects_parse_and_apply() {
        let (add, last) = parse_add(&argv(&[
            "X", "k", "t", "A", "7", "shared", "1", "1000", "9",
        ]))
        .unwrap();
        assert_eq!(last, 9);
        let mut h = Holds::new(1);
        add.apply(&mut h);
        add.apply(&mut h);
        assert_eq!(h.len(), 1, "a replayed add replaces, never doubles");
        let held = h.hold_of(b"t").unwrap();
        assert_eq!((held.owner, held.mode), (&b"A"[..], Mode::Shared));
        parse_move(&argv(&["X", "k", "t", "2000"]))
            .unwrap()
            .apply(&mut h);
        assert_eq!(h.deadline_ms(), Some(2000));
        parse_drop(&argv(&["X", "k", "t"])).unwrap().apply(&mut h);
        assert!(h.is_empty());
    }

    #[test]
    fn a_capped_hold_carries_its_cap_and_nonsense_is_refused() {
        let add = |extra: &[&str]| {
            let mut v = vec!["X", "k", "t", "t", "7", "exclusive", "1", "1000", "9"];
            v.extend_from_slice(extra);
            parse_add(&argv(&v)).map(|(c, _)| c)
        };
        let Ok(Change::Add { hold, .. }) = add(&["MAXHOLD", "1500", "600"]) else {
            panic!("a capped hold");
        };
        let cap = crate::ask::Cap {
            at_ms: 1500,
            ms: 600,
        };
        assert_eq!((hold.cap, hold.deadline_ms), (Some(cap), 1000));
        let Ok(Change::Add { hold, .. }) = add(&["maxhold", "800", "600"]) else {
            panic!("a capped hold");
        };
        assert_eq!(hold.deadline_ms, 800, "never past its cap");
        let mut h = Holds::new(1);
        add(&["MAXHOLD", "1500", "600"]).unwrap().apply(&mut h);
        assert_eq!(h.hold_of(b"t").and_then(|x| x.cap), Some(cap));
        for bad in [
            &["MAXHOLD", "1500", "0"][..],
            &["MAXHOLD", "-1", "600"],
            &["MAXHOLD", "1500", "140737488355329"],
            &["NOPE", "1500", "600"],
            &["MAXHOLD", "1500"],
        ] {
            assert!(add(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_whole_value_parses_and_nonsense_is_refused() {
        let mut h = Holds::new(3);
        h.push(Hold {
            token: b"p"[..].into(),
            owner: b"p"[..].into(),
            fence: 5,
            mode: Mode::Exclusive,
            deadline_ms: 1000,
            session: None,
            cap: None,
            permits: 1,
        });
        let bytes = crate::resource::layout::encode(&h);
        let argv: Vec<&[u8]> = vec![b"X", b"k", &bytes, b"3"];
        assert_eq!(parse_set(&argv), Ok((h, 5)));
        let truncated = &bytes[..bytes.len() - 1];
        for bad in [
            &argv[..3],
            &[b"X", b"k", truncated, b"3"],
            &[b"X", b"k", b"plain", b"3"],
        ] {
            assert!(parse_set(bad).is_err(), "{bad:?}");
        }
        assert!(parse_set(&[b"X", b"k", &bytes, b"0"]).is_err());
    }

    #[test]
    fn malformed_effects_are_refused() {
        let good = ["X", "k", "t", "A", "7", "shared", "1", "1000", "9"];
        for (i, bad) in [
            (2, ""),
            (3, ""),
            (4, "0"),
            (4, "9223372036854775808"),
            (5, "read"),
            (6, "0"),
            (6, "1048577"),
            (7, "9223372036854775808"),
            (8, "x"),
        ] {
            let mut v = good;
            v[i] = bad;
            assert!(parse_add(&argv(&v)).is_err(), "{i}: {bad:?}");
        }
        let mut v = good;
        v[6] = "3";
        assert_eq!(
            parse_add(&argv(&v)),
            Err(Error::BadEffect("semaphore hold")),
            "a shared permit"
        );
        assert_eq!(parse_add(&argv(&good[..8])), Err(Error::WrongArity));
        assert!(parse_move(&argv(&["X", "k", "t", "-1"])).is_err());
        assert_eq!(parse_drop(&argv(&["X", "k"])), Err(Error::WrongArity));
    }
}
