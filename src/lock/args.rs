//! Command arguments -> typed requests, or the error the client should see.
//!
//! Every argument arrives as raw bytes (tokens and resource names are
//! binary-safe). `argv[0]` is the command name and `argv[1]` the resource key;
//! the key itself is handled by the server layer, so it is only counted here.

use super::error::Error;
use super::holds::{Ask, Mode, MAX_LIMIT};
use super::lease::MAX_STORED_TOKEN;

/// 2^47 ms is about 4,460 years: long enough for any lease, and small enough
/// that `now + ttl` can never overflow a signed 64-bit millisecond deadline.
pub const MAX_TTL_MS: u64 = 1 << 47;

/// Operator limits from the module's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest token for a new grant or a new waiter. Lowering it must not
    /// lock out holders whose tokens were accepted before: their RELEASE,
    /// EXTEND and same-token ACQUIRE take any token a lock can store.
    pub max_token: usize,
    /// 0 means unlimited.
    pub max_ttl: u64,
}

impl Limits {
    fn ttl(&self, raw: &[u8]) -> Result<u64, Error> {
        let ttl = parse_ttl(raw)?;
        if self.max_ttl > 0 && ttl > self.max_ttl {
            return Err(Error::TtlAboveMax { max: self.max_ttl });
        }
        Ok(ttl)
    }
}

/// `DLOCK.ACQUIRE resource token ttl_ms [SHARED] [LIMIT n] [OWNER owner]
/// [WAIT timeout_ms]`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acquire<'a> {
    pub token: &'a [u8],
    pub ttl_ms: u64,
    /// Block until granted or `timeout_ms` passes; `Some(0)` waits forever.
    pub wait_ms: Option<u64>,
    /// `Limits::max_token` when the command arrived: the token may be longer
    /// (up to `MAX_STORED_TOKEN`) only to refresh its own hold.
    pub max_new_token: usize,
    /// `SHARED`: a read hold.
    pub mode: Mode,
    /// `LIMIT n` above 1: a semaphore (`LIMIT 1` is the plain lock: `None`).
    pub limit: Option<u32>,
    /// `OWNER owner`: holds of one owner never exclude each other.
    pub owner: Option<&'a [u8]>,
}

impl<'a> Acquire<'a> {
    /// A new grant or a new waiter needs a token (and owner) within today's
    /// limit.
    pub fn check_new_token(&self) -> Result<(), Error> {
        let longest = self.token.len().max(self.owner.map_or(0, <[u8]>::len));
        if longest > self.max_new_token {
            return Err(Error::TokenTooLong {
                max: self.max_new_token,
            });
        }
        Ok(())
    }

    /// No `SHARED`, `LIMIT` above 1 or `OWNER`: today's lock, with today's
    /// replies, effects and encoding.
    pub fn is_plain(&self) -> bool {
        self.mode == Mode::Exclusive && self.limit.is_none() && self.owner.is_none()
    }

    /// What the request asks of the resource's holds.
    pub fn ask(&self) -> Ask<'a> {
        Ask {
            token: self.token,
            owner: self.owner,
            mode: self.mode,
            limit: self.limit,
            ttl_ms: self.ttl_ms,
        }
    }
}

/// `WAIT` timeouts share the TTL's ceiling; 0 means no timeout.
pub const MAX_WAIT_MS: u64 = MAX_TTL_MS;

/// `DLOCK.RELEASE resource token`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release<'a> {
    pub token: &'a [u8],
}

/// `DLOCK.EXTEND resource token ttl_ms`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extend<'a> {
    pub token: &'a [u8],
    pub ttl_ms: u64,
}

/// `DLOCK.APPLY resource token fence deadline_ms [last_fence]`: the internal
/// effect. `deadline_ms` is an absolute unix time in ms; 0 leaves the key's
/// expiry as it is (the AOF rewrite emits the expiry as a separate
/// PEXPIREAT). `last_fence` is the sender's fence high-water mark, so the
/// mark travels with every effect and every rewritten lock; a fresh grant
/// leaves it out, because its fence is the mark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Apply<'a> {
    pub token: &'a [u8],
    pub fence: u64,
    pub deadline_ms: u64,
    pub last_fence: u64,
}

pub fn acquire<'a>(argv: &[&'a [u8]], limits: &Limits) -> Result<Acquire<'a>, Error> {
    let [_, _, token, ttl, options @ ..] = argv else {
        return Err(Error::WrongArity);
    };
    // Checked against `max_token` only where a new grant or waiter would
    // result (`check_new_token`).
    let token = parse_token(token, MAX_STORED_TOKEN)?;
    let ttl_ms = limits.ttl(ttl)?;
    let mut req = Acquire {
        token,
        ttl_ms,
        wait_ms: None,
        max_new_token: limits.max_token,
        mode: Mode::Exclusive,
        limit: None,
        owner: None,
    };
    let (mut shared, mut limit) = (false, None);
    let mut rest = options;
    // Anything unknown, repeated or missing its value is refused rather than
    // silently ignored.
    while let [name, tail @ ..] = rest {
        let is = |option: &[u8]| name.eq_ignore_ascii_case(option);
        rest = match tail {
            _ if is(b"SHARED") && !shared => {
                shared = true;
                tail
            }
            [value, tail @ ..] if is(b"WAIT") && req.wait_ms.is_none() => {
                req.wait_ms = Some(parse_wait(value)?);
                tail
            }
            [value, tail @ ..] if is(b"LIMIT") && limit.is_none() => {
                limit = Some(parse_limit(value)?);
                tail
            }
            [value, tail @ ..] if is(b"OWNER") && req.owner.is_none() => {
                req.owner = Some(parse_owner(value)?);
                tail
            }
            _ => return Err(Error::Syntax),
        };
    }
    if shared {
        req.mode = Mode::Shared;
    }
    // `LIMIT 1` is the plain lock.
    req.limit = limit.filter(|n| *n > 1);
    if req.limit.is_some() && shared {
        return Err(Error::SharedSemaphore);
    }
    if req.limit.is_some() && req.owner.is_some() {
        return Err(Error::OwnerSemaphore);
    }
    Ok(req)
}

fn parse_limit(raw: &[u8]) -> Result<u32, Error> {
    parse_u64(raw)
        .filter(|n| (1..=u64::from(MAX_LIMIT)).contains(n))
        .map(|n| n as u32)
        .ok_or(Error::InvalidInteger {
            arg: "LIMIT",
            min: 1,
            max: MAX_LIMIT as u64,
        })
}

/// Owners are opaque bytes, like tokens; `max_token` applies to new holds.
fn parse_owner(raw: &[u8]) -> Result<&[u8], Error> {
    if raw.is_empty() {
        return Err(Error::EmptyOwner);
    }
    parse_token(raw, MAX_STORED_TOKEN)
}

fn parse_wait(raw: &[u8]) -> Result<u64, Error> {
    parse_u64(raw)
        .filter(|t| *t <= MAX_WAIT_MS)
        .ok_or(Error::InvalidInteger {
            arg: "timeout_ms",
            min: 0,
            max: MAX_WAIT_MS,
        })
}

/// Any token a lock can hold: `max_token` limits new grants only.
pub fn release<'a>(argv: &[&'a [u8]], _limits: &Limits) -> Result<Release<'a>, Error> {
    let [_, _, token] = argv else {
        return Err(Error::WrongArity);
    };
    Ok(Release {
        token: parse_token(token, MAX_STORED_TOKEN)?,
    })
}

/// Any token a lock can hold: `max_token` limits new grants only.
pub fn extend<'a>(argv: &[&'a [u8]], limits: &Limits) -> Result<Extend<'a>, Error> {
    let [_, _, token, ttl] = argv else {
        return Err(Error::WrongArity);
    };
    Ok(Extend {
        token: parse_token(token, MAX_STORED_TOKEN)?,
        ttl_ms: limits.ttl(ttl)?,
    })
}

pub fn info(argv: &[&[u8]]) -> Result<(), Error> {
    match argv {
        [_, _] => Ok(()),
        _ => Err(Error::WrongArity),
    }
}

/// Effects come from our own master or AOF, but a damaged file or a forged
/// stream must still not be able to store nonsense.
pub fn apply<'a>(argv: &[&'a [u8]]) -> Result<Apply<'a>, Error> {
    let (token, fence, deadline, last_fence) = match argv {
        [_, _, token, fence, deadline] => (token, fence, deadline, None),
        [_, _, token, fence, deadline, last] => (token, fence, deadline, Some(last)),
        _ => return Err(Error::WrongArity),
    };
    if token.is_empty() || token.len() > super::lease::MAX_STORED_TOKEN {
        return Err(Error::BadEffect("token length"));
    }
    let fence = parse_fence(fence).ok_or(Error::BadEffect("fence"))?;
    let last_fence = match last_fence {
        Some(raw) => parse_fence(raw).ok_or(Error::BadEffect("last_fence"))?,
        None => fence,
    };
    let deadline_ms = parse_u64(deadline)
        .filter(|d| *d <= i64::MAX as u64)
        .ok_or(Error::BadEffect("deadline"))?;
    Ok(Apply {
        token,
        fence,
        deadline_ms,
        last_fence,
    })
}

/// `DLOCK.META longest_ttl_ms lossy` -> (longest TTL, lossy).
pub fn meta(argv: &[&[u8]]) -> Result<(u64, bool), Error> {
    let [_, longest, lossy] = argv else {
        return Err(Error::WrongArity);
    };
    let longest = parse_u64(longest)
        .filter(|t| *t <= MAX_TTL_MS)
        .ok_or(Error::BadEffect("longest_ttl"))?;
    match *lossy {
        b"0" => Ok((longest, false)),
        b"1" => Ok((longest, true)),
        _ => Err(Error::BadEffect("lossy")),
    }
}

fn parse_fence(raw: &[u8]) -> Option<u64> {
    parse_u64(raw).filter(|f| (1..=super::fence::MAX_FENCE).contains(f))
}

fn parse_token(token: &[u8], max: usize) -> Result<&[u8], Error> {
    if token.is_empty() {
        Err(Error::EmptyToken)
    } else if token.len() > max {
        Err(Error::TokenTooLong { max })
    } else {
        Ok(token)
    }
}

fn parse_ttl(raw: &[u8]) -> Result<u64, Error> {
    parse_u64(raw)
        .filter(|ttl| (1..=MAX_TTL_MS).contains(ttl))
        .ok_or_else(Error::ttl)
}

/// Plain decimal digits only: no sign, no spaces, no exponent, no fraction,
/// so "1.5", "-5", " 5" and "5e3" are all refused rather than guessed at.
pub fn parse_u64(raw: &[u8]) -> Option<u64> {
    if raw.is_empty() || raw.len() > 20 {
        return None;
    }
    raw.iter().try_fold(0u64, |acc, &b| {
        if b.is_ascii_digit() {
            acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))
        } else {
            None
        }
    })
}

#[cfg(test)]
mod tests {
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
        assert_eq!(
            extend(&argv(&["E", "r", "t", "5", "x"]), MAX),
            Err(Error::WrongArity)
        );
        assert_eq!(info(&argv(&["I"])), Err(Error::WrongArity));
        assert_eq!(info(&argv(&["I", "r"])), Ok(()));
        let e = extend(&argv(&["E", "r", "t", "77"]), MAX).unwrap();
        assert_eq!((e.token, e.ttl_ms), (&b"t"[..], 77));
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
        assert_eq!(meta(&argv(&["M", "30000", "1"])), Ok((30_000, true)));
        assert_eq!(meta(&argv(&["M", "0", "0"])), Ok((0, false)));
        assert!(meta(&argv(&["M", "-1", "0"])).is_err());
        assert!(meta(&argv(&["M", "5", "2"])).is_err());
        assert_eq!(meta(&argv(&["M", "5"])), Err(Error::WrongArity));
    }

    #[test]
    fn parse_u64_edges() {
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_u64(b"007"), Some(7));
    }
}
