//! The arguments of the commands that read a wait queue:
//! `DLOCK.POSITION resource token` and
//! `DLOCK.WAITERS resource [OFFSET k] [COUNT n]`.

use crate::error::Error;
use crate::limits::MAX_STORED_TOKEN;
use crate::request::args::parse_u64;

/// The waiters `DLOCK.WAITERS` lists when no `COUNT` is given, and the
/// most it lists at once: a reply stays small and its cost bounded.
pub const DEFAULT_COUNT: usize = 10;
pub const MAX_COUNT: usize = 1000;
/// The largest `OFFSET`, Redis's own integer range.
pub const MAX_OFFSET: u64 = i64::MAX as u64;

/// `DLOCK.POSITION resource token` -> the token. Any token a request can
/// wait with is accepted; an empty one waits nowhere and is refused.
pub fn position<'a>(argv: &[&'a [u8]]) -> Result<&'a [u8], Error> {
    let [_, _, token] = argv else {
        return Err(Error::WrongArity);
    };
    if token.is_empty() {
        Err(Error::EmptyToken)
    } else if token.len() > MAX_STORED_TOKEN {
        Err(Error::TokenTooLong {
            max: MAX_STORED_TOKEN,
        })
    } else {
        Ok(token)
    }
}

/// A parsed `DLOCK.WAITERS`: the waiters from position `offset + 1` on,
/// at most `count` of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waiters {
    pub offset: u64,
    pub count: usize,
}

/// `DLOCK.WAITERS resource [OFFSET k] [COUNT n]`, options in any order,
/// each at most once.
pub fn waiters(argv: &[&[u8]]) -> Result<Waiters, Error> {
    let [_, _, options @ ..] = argv else {
        return Err(Error::WrongArity);
    };
    let (mut offset, mut count) = (None, None);
    let mut rest = options;
    while let [name, value, tail @ ..] = rest {
        let is = |option: &[u8]| name.eq_ignore_ascii_case(option);
        if is(b"OFFSET") && offset.is_none() {
            offset = Some(parse_u64(value).filter(|k| *k <= MAX_OFFSET).ok_or(
                Error::InvalidInteger {
                    arg: "OFFSET",
                    min: 0,
                    max: MAX_OFFSET,
                },
            )?);
        } else if is(b"COUNT") && count.is_none() {
            count = Some(
                parse_u64(value)
                    .filter(|n| (1..=MAX_COUNT as u64).contains(n))
                    .ok_or(Error::InvalidInteger {
                        arg: "COUNT",
                        min: 1,
                        max: MAX_COUNT as u64,
                    })? as usize,
            );
        } else {
            return Err(Error::Syntax);
        }
        rest = tail;
    }
    if !rest.is_empty() {
        return Err(Error::Syntax);
    }
    Ok(Waiters {
        offset: offset.unwrap_or(0),
        count: count.unwrap_or(DEFAULT_COUNT),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn position_takes_one_token() {
        assert_eq!(position(&[b"p", b"r", b"t"]), Ok(&b"t"[..]));
        assert_eq!(position(&[b"p", b"r", b""]), Err(Error::EmptyToken));
        let long = vec![b'x'; MAX_STORED_TOKEN + 1];
        assert!(matches!(
            position(&[b"p", b"r", &long]),
            Err(Error::TokenTooLong { .. })
        ));
        assert_eq!(position(&[b"p", b"r"]), Err(Error::WrongArity));
        assert_eq!(position(&[b"p", b"r", b"t", b"u"]), Err(Error::WrongArity));
    }

    #[test]
    fn waiters_options() {
        let w = |args: &[&[u8]]| {
            let mut argv: Vec<&[u8]> = vec![b"w", b"r"];
            argv.extend_from_slice(args);
            waiters(&argv)
        };
        assert_eq!(
            w(&[]),
            Ok(Waiters {
                offset: 0,
                count: DEFAULT_COUNT
            })
        );
        assert_eq!(
            w(&[b"count", b"1000", b"OFFSET", b"9223372036854775807"]),
            Ok(Waiters {
                offset: MAX_OFFSET,
                count: 1000
            })
        );
        let count_error = Err(Error::InvalidInteger {
            arg: "COUNT",
            min: 1,
            max: 1000,
        });
        for bad in [&b"0"[..], b"1001", b"-1", b"1.5", b"", b" 5"] {
            assert_eq!(w(&[b"COUNT", bad]), count_error);
        }
        for bad in [&b"-1"[..], b"9223372036854775808", b"x"] {
            assert!(matches!(
                w(&[b"OFFSET", bad]),
                Err(Error::InvalidInteger { arg: "OFFSET", .. })
            ));
        }
        assert_eq!(w(&[b"COUNT", b"1", b"COUNT", b"2"]), Err(Error::Syntax));
        assert_eq!(w(&[b"OFFSET", b"1", b"OFFSET", b"2"]), Err(Error::Syntax));
        assert_eq!(w(&[b"COUNT"]), Err(Error::Syntax));
        assert_eq!(w(&[b"LIMIT", b"2"]), Err(Error::Syntax));
        assert_eq!(waiters(&[b"w"]), Err(Error::WrongArity));
    }
}
