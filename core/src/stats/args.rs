//! `DLOCK.STATS` arguments.

use super::{HotBy, HOT_ENTRIES};
use crate::request::args::parse_u64;
use crate::Error;

/// What a `DLOCK.STATS` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatsCommand {
    Show,
    Hot { by: HotBy, count: usize },
    Reset,
}

/// `DLOCK.STATS [HOT [BY contended|wait|expired] [COUNT n] | RESET]`, the
/// arguments after the command's name.
pub fn parse(args: &[&[u8]]) -> Result<StatsCommand, Error> {
    let Some((sub, rest)) = args.split_first() else {
        return Ok(StatsCommand::Show);
    };
    match sub.to_ascii_lowercase().as_slice() {
        b"reset" if rest.is_empty() => Ok(StatsCommand::Reset),
        b"hot" => hot(rest),
        _ => Err(Error::Syntax),
    }
}

fn hot(mut rest: &[&[u8]]) -> Result<StatsCommand, Error> {
    let (mut by, mut count) = (None, None);
    while let [name, value, tail @ ..] = rest {
        match name.to_ascii_lowercase().as_slice() {
            b"by" if by.is_none() => {
                by = Some(match value.to_ascii_lowercase().as_slice() {
                    b"contended" => HotBy::Contended,
                    b"wait" => HotBy::Wait,
                    b"expired" => HotBy::Expired,
                    _ => {
                        return Err(Error::NotOneOf {
                            arg: "BY",
                            words: "contended, wait or expired",
                        })
                    }
                });
            }
            b"count" if count.is_none() => {
                let n = parse_u64(value)
                    .filter(|n| (1..=HOT_ENTRIES as u64).contains(n))
                    .ok_or(Error::InvalidInteger {
                        arg: "COUNT",
                        min: 1,
                        max: HOT_ENTRIES as u64,
                    })?;
                count = Some(n as usize);
            }
            _ => return Err(Error::Syntax),
        }
        rest = tail;
    }
    if !rest.is_empty() {
        return Err(Error::Syntax);
    }
    Ok(StatsCommand::Hot {
        by: by.unwrap_or(HotBy::Contended),
        count: count.unwrap_or(10),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<StatsCommand, Error> {
        let words: Vec<&[u8]> = s.split_whitespace().map(str::as_bytes).collect();
        parse(&words)
    }

    #[test]
    fn the_forms_and_their_refusals() {
        assert_eq!(p(""), Ok(StatsCommand::Show));
        assert_eq!(p("reset"), Ok(StatsCommand::Reset));
        assert_eq!(
            p("HOT"),
            Ok(StatsCommand::Hot {
                by: HotBy::Contended,
                count: 10
            })
        );
        assert_eq!(
            p("hot count 32 by EXPIRED"),
            Ok(StatsCommand::Hot {
                by: HotBy::Expired,
                count: 32
            })
        );
        for bad in [
            "reset now",
            "hot by",
            "hot by wait by wait",
            "hot x 1",
            "top",
        ] {
            assert_eq!(p(bad), Err(Error::Syntax), "{bad}");
        }
        for bad in ["hot count 0", "hot count 33", "hot count -1", "hot count x"] {
            assert!(matches!(p(bad), Err(Error::InvalidInteger { .. })), "{bad}");
        }
        assert!(matches!(p("hot by waits"), Err(Error::NotOneOf { .. })));
    }
}
