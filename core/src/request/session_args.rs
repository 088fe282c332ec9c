//! `DLOCK.SESSION` subcommands' arguments, parsed. `argv[0]` is the
//! command and `argv[1]` the subcommand, as the server passes them.

use crate::error::Error;
use crate::limits::MAX_LOCK_DELAY_MS;
use crate::request::args::{parse_session_id, parse_u64, Limits};
use crate::sessions::Settings;

/// The page size `LIST` and `HOLDS` use when none is given, and the most
/// they accept.
pub const DEFAULT_COUNT: usize = 100;
pub const MAX_COUNT: usize = 1000;

/// `OPEN id ttl_ms [BIND] [LOCKDELAY ms]`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Open<'a> {
    pub id: &'a [u8],
    pub settings: Settings,
    pub bind: bool,
}

/// `LIST [AFTER id] [MATCH pattern] [COUNT n]`
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct List<'a> {
    pub after: Option<&'a [u8]>,
    pub pattern: Option<&'a [u8]>,
    pub count: usize,
}

/// `HOLDS id [AFTER cursor] [COUNT n]`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HoldsPage<'a> {
    pub id: &'a [u8],
    pub after: u64,
    pub count: usize,
}

pub fn open<'a>(argv: &[&'a [u8]], limits: &Limits) -> Result<Open<'a>, Error> {
    let [_, _, id, ttl, options @ ..] = argv else {
        return Err(Error::WrongArity);
    };
    let mut open = Open {
        id: parse_session_id(id)?,
        settings: Settings {
            ttl_ms: limits.ttl(ttl)?,
            lock_delay_ms: 0,
        },
        bind: false,
    };
    let mut delay = None;
    let mut rest = options;
    while let [name, tail @ ..] = rest {
        let is = |option: &[u8]| name.eq_ignore_ascii_case(option);
        rest = match tail {
            _ if is(b"BIND") && !open.bind => {
                open.bind = true;
                tail
            }
            [value, tail @ ..] if is(b"LOCKDELAY") && delay.is_none() => {
                delay = Some(
                    parse_u64(value)
                        .filter(|d| *d <= MAX_LOCK_DELAY_MS)
                        .ok_or(Error::LockDelay)?,
                );
                tail
            }
            _ => return Err(Error::Syntax),
        };
    }
    open.settings.lock_delay_ms = delay.unwrap_or(0);
    Ok(open)
}

/// `KEEPALIVE id [ttl_ms]`
pub fn keep_alive<'a>(
    argv: &[&'a [u8]],
    limits: &Limits,
) -> Result<(&'a [u8], Option<u64>), Error> {
    match argv {
        [_, _, id] => Ok((parse_session_id(id)?, None)),
        [_, _, id, ttl] => Ok((parse_session_id(id)?, Some(limits.ttl(ttl)?))),
        _ => Err(Error::WrongArity),
    }
}

/// `CLOSE id`, `KILL id`, `INFO id`
pub fn id<'a>(argv: &[&'a [u8]]) -> Result<&'a [u8], Error> {
    let [_, _, id] = argv else {
        return Err(Error::WrongArity);
    };
    parse_session_id(id)
}

fn count(raw: &[u8]) -> Result<usize, Error> {
    parse_u64(raw)
        .filter(|n| (1..=MAX_COUNT as u64).contains(n))
        .map(|n| n as usize)
        .ok_or(Error::InvalidInteger {
            arg: "COUNT",
            min: 1,
            max: MAX_COUNT as u64,
        })
}

pub fn list<'a>(argv: &[&'a [u8]]) -> Result<List<'a>, Error> {
    let [_, _, options @ ..] = argv else {
        return Err(Error::WrongArity);
    };
    let mut list = List::default();
    let mut n = None;
    let mut rest = options;
    while let [name, value, tail @ ..] = rest {
        let is = |option: &[u8]| name.eq_ignore_ascii_case(option);
        if is(b"AFTER") && list.after.is_none() {
            list.after = Some(parse_session_id(value)?);
        } else if is(b"MATCH") && list.pattern.is_none() {
            list.pattern = Some(value);
        } else if is(b"COUNT") && n.is_none() {
            n = Some(count(value)?);
        } else {
            return Err(Error::Syntax);
        }
        rest = tail;
    }
    if !rest.is_empty() {
        return Err(Error::Syntax);
    }
    list.count = n.unwrap_or(DEFAULT_COUNT);
    Ok(list)
}

pub fn holds<'a>(argv: &[&'a [u8]]) -> Result<HoldsPage<'a>, Error> {
    let [_, _, id, options @ ..] = argv else {
        return Err(Error::WrongArity);
    };
    let mut page = HoldsPage {
        id: parse_session_id(id)?,
        after: 0,
        count: DEFAULT_COUNT,
    };
    let (mut after, mut n) = (None, None);
    let mut rest = options;
    while let [name, value, tail @ ..] = rest {
        let is = |option: &[u8]| name.eq_ignore_ascii_case(option);
        if is(b"AFTER") && after.is_none() {
            after = Some(parse_u64(value).ok_or(Error::InvalidInteger {
                arg: "AFTER",
                min: 0,
                max: u64::MAX,
            })?);
        } else if is(b"COUNT") && n.is_none() {
            n = Some(count(value)?);
        } else {
            return Err(Error::Syntax);
        }
        rest = tail;
    }
    if !rest.is_empty() {
        return Err(Error::Syntax);
    }
    page.after = after.unwrap_or(0);
    page.count = n.unwrap_or(DEFAULT_COUNT);
    Ok(page)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            max_token: 1024,
            max_ttl: 0,
        }
    }

    #[test]
    fn open_takes_its_options_once_each() {
        let o = open(
            &[b"x", b"open", b"s", b"100", b"bind", b"LOCKDELAY", b"5"],
            &limits(),
        )
        .unwrap();
        assert_eq!(
            (o.id, o.bind, o.settings.ttl_ms, o.settings.lock_delay_ms),
            (&b"s"[..], true, 100, 5)
        );
        for bad in [
            &[&b"x"[..], b"open", b"s"][..],
            &[b"x", b"open", b"s", b"0"],
            &[b"x", b"open", b"", b"10"],
            &[b"x", b"open", b"s", b"10", b"BIND", b"BIND"],
            &[b"x", b"open", b"s", b"10", b"LOCKDELAY"],
            &[b"x", b"open", b"s", b"10", b"LOCKDELAY", b"60001"],
            &[b"x", b"open", b"s", b"10", b"NOPE"],
        ] {
            assert!(open(bad, &limits()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn pages_parse_and_refuse_nonsense() {
        let l = list(&[
            b"x", b"list", b"MATCH", b"w*", b"COUNT", b"5", b"AFTER", b"a",
        ])
        .unwrap();
        assert_eq!(
            (l.after, l.pattern, l.count),
            (Some(&b"a"[..]), Some(&b"w*"[..]), 5)
        );
        assert_eq!(list(&[b"x", b"list"]).unwrap().count, DEFAULT_COUNT);
        assert!(list(&[b"x", b"list", b"COUNT", b"0"]).is_err());
        assert!(list(&[b"x", b"list", b"COUNT"]).is_err());
        assert!(list(&[b"x", b"list", b"COUNT", b"1001"]).is_err());
        let h = holds(&[b"x", b"holds", b"s", b"AFTER", b"7"]).unwrap();
        assert_eq!((h.after, h.count), (7, DEFAULT_COUNT));
        assert!(holds(&[b"x", b"holds"]).is_err());
        assert!(holds(&[b"x", b"holds", b"s", b"AFTER", b"-1"]).is_err());
        assert_eq!(
            keep_alive(&[b"x", b"k", b"s"], &limits()),
            Ok((&b"s"[..], None))
        );
        assert!(keep_alive(&[b"x", b"k", b"s", b"0"], &limits()).is_err());
        assert_eq!(id(&[b"x", b"close", b"s"]), Ok(&b"s"[..]));
        assert!(id(&[b"x", b"close", b"s", b"t"]).is_err());
    }
}
