//! The data type's RDB aux data: the fence clock's high-water mark, so that
//! fences keep rising across a restart with every lock key gone, and what a
//! restart quarantine needs to know about the run that wrote the data. A
//! sequence of unsigned words, by encoding version (`lease.rs`):
//!
//! ```text
//! 1: last_fence
//! 2: last_fence, longest_ttl_ms, flags [, quarantine_until_ms]
//!    flags: bit 0 = the writer could lose acknowledged writes (lossy),
//!           bit 1 = a quarantine's end (unix ms) follows,
//!           bit 2 = the sessions follow, after the words, as one string
//!                   (`sessions::encoding`)
//! 3: last_fence, longest_ttl_ms, lossy (0 | 1), quarantine_until_ms
//! ```
//!
//! Version 2 with bit 1 clear is exactly what releases that know no running
//! quarantine write and read: this build writes it whenever no quarantine
//! runs. With a quarantine running, bit 1 makes such a release refuse the
//! data (its check `flags <= 1`) instead of loading it and forgetting the
//! quarantine. Version 3 is read, never written. The server checks that the
//! loader reads exactly as many words as were saved, so the decoder takes
//! them one at a time and reads the optional end only when told it follows.

use crate::fence::MAX_FENCE;
use crate::limits::MAX_TTL_MS;

const LOSSY: u64 = 1;
const UNTIL_FOLLOWS: u64 = 2;
const SESSIONS_FOLLOW: u64 = 4;

/// The aux data of one RDB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Aux {
    pub last_fence: u64,
    /// `None` in version 1, which carried only the mark.
    pub quarantine: Option<QuarantineFacts>,
    /// The sessions follow the words (a release that knows no sessions
    /// refuses the flag rather than load holds that nothing would end).
    pub sessions: bool,
}

/// What the restart quarantine learns from the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuarantineFacts {
    pub longest_ttl: u64,
    pub lossy: bool,
    /// The end (unix ms) of the quarantine running when the data was
    /// written; 0 = none.
    pub until: u64,
}

/// Why aux data was refused; the server then fails the load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuxError {
    UnknownVersion(i32),
    /// The word source ran dry (a short read).
    Short,
    OutOfRange(&'static str, u64),
}

impl std::fmt::Display for AuxError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AuxError::UnknownVersion(v) => write!(f, "unknown encoding version {v}"),
            AuxError::Short => write!(f, "short read"),
            AuxError::OutOfRange(what, v) => write!(f, "{what} {v} out of range"),
        }
    }
}

/// The words to save, in the version this build writes (2).
pub fn encode(aux: &Aux) -> Vec<u64> {
    let q = aux.quarantine.unwrap_or(QuarantineFacts {
        longest_ttl: 0,
        lossy: false,
        until: 0,
    });
    let mut flags = if q.lossy { LOSSY } else { 0 };
    if q.until != 0 {
        flags |= UNTIL_FOLLOWS;
    }
    if aux.sessions {
        flags |= SESSIONS_FOLLOW;
    }
    let mut out = vec![aux.last_fence, q.longest_ttl, flags];
    if q.until != 0 {
        out.push(q.until);
    }
    out
}

/// Reads aux data of `version`, one word at a time from `next` (`None`: a
/// short read), and never more words than that version's writer saved.
pub fn decode(version: i32, mut next: impl FnMut() -> Option<u64>) -> Result<Aux, AuxError> {
    let mut word = || next().ok_or(AuxError::Short);
    let last_fence = word()?;
    if last_fence > MAX_FENCE {
        return Err(AuxError::OutOfRange("fence high-water mark", last_fence));
    }
    let mut sessions = false;
    let quarantine = match version {
        1 => None,
        2 | 3 => {
            let longest_ttl = word()?;
            if longest_ttl > MAX_TTL_MS {
                return Err(AuxError::OutOfRange("longest TTL", longest_ttl));
            }
            let flags = word()?;
            let (lossy, follows) = match version {
                2 if flags <= (LOSSY | UNTIL_FOLLOWS | SESSIONS_FOLLOW) => {
                    sessions = flags & SESSIONS_FOLLOW != 0;
                    (flags & LOSSY != 0, flags & UNTIL_FOLLOWS != 0)
                }
                3 if flags <= LOSSY => (flags == LOSSY, true),
                _ => return Err(AuxError::OutOfRange("lossy flags", flags)),
            };
            let until = if follows { word()? } else { 0 };
            if until > i64::MAX as u64 {
                return Err(AuxError::OutOfRange("quarantine end", until));
            }
            Some(QuarantineFacts {
                longest_ttl,
                lossy,
                until,
            })
        }
        v => return Err(AuxError::UnknownVersion(v)),
    };
    Ok(Aux {
        last_fence,
        quarantine,
        sessions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes `words`, and checks that exactly all of them were read.
    fn read(version: i32, words: &[u64]) -> Result<Aux, AuxError> {
        let mut at = 0;
        let aux = decode(version, || {
            let w = words.get(at).copied();
            at += 1;
            w
        })?;
        assert_eq!(at, words.len(), "read {at} of {} words", words.len());
        Ok(aux)
    }

    fn facts(longest_ttl: u64, lossy: bool, until: u64) -> Option<QuarantineFacts> {
        Some(QuarantineFacts {
            longest_ttl,
            lossy,
            until,
        })
    }

    #[test]
    fn every_version_written_so_far_loads() {
        // Version 1: the mark only.
        assert_eq!(
            read(1, &[42]),
            Ok(Aux {
                last_fence: 42,
                quarantine: None,
                sessions: false,
            })
        );
        // Version 2 as releases without a persisted quarantine wrote it.
        let v2 = read(2, &[42, 30_000, 1]).unwrap();
        assert_eq!(v2.quarantine, facts(30_000, true, 0));
        assert_eq!(read(2, &[42, 0, 0]).unwrap().quarantine, facts(0, false, 0));
        // Version 3: the end is always there (0 = none).
        let v3 = read(3, &[42, 30_000, 0, 1_800_000_000_000]).unwrap();
        assert_eq!(v3.quarantine, facts(30_000, false, 1_800_000_000_000));
        assert_eq!(
            read(3, &[42, 5, 1, 0]).unwrap().quarantine,
            facts(5, true, 0)
        );
    }

    #[test]
    fn without_a_running_quarantine_this_build_writes_the_old_version_2() {
        let aux = Aux {
            last_fence: 7,
            quarantine: facts(60_000, true, 0),
            sessions: false,
        };
        assert_eq!(encode(&aux), [7, 60_000, 1], "what every release reads");
        assert_eq!(read(2, &encode(&aux)), Ok(aux));
    }

    #[test]
    fn a_running_quarantine_follows_a_flag_an_old_release_refuses() {
        for lossy in [false, true] {
            let aux = Aux {
                last_fence: 7,
                quarantine: facts(60_000, lossy, 1_800_000_000_000),
                sessions: false,
            };
            let words = encode(&aux);
            assert_eq!(words.len(), 4);
            assert!(words[2] > 1, "a reader that allows only 0 | 1 refuses it");
            assert_eq!(read(2, &words), Ok(aux));
        }
    }

    #[test]
    fn sessions_follow_a_flag_an_old_release_refuses() {
        let aux = Aux {
            last_fence: 7,
            quarantine: facts(60_000, false, 0),
            sessions: true,
        };
        let words = encode(&aux);
        assert_eq!(words, [7, 60_000, 4]);
        assert_eq!(read(2, &words), Ok(aux));
    }

    #[test]
    fn nonsense_is_refused() {
        assert_eq!(read(4, &[1]), Err(AuxError::UnknownVersion(4)));
        assert_eq!(read(0, &[1]), Err(AuxError::UnknownVersion(0)));
        assert_eq!(read(2, &[1, 2]), Err(AuxError::Short));
        assert_eq!(read(2, &[1, 2, 2]), Err(AuxError::Short));
        assert_eq!(read(3, &[1, 2, 0]), Err(AuxError::Short));
        assert!(matches!(read(2, &[1, 2, 8]), Err(AuxError::OutOfRange(..))));
        assert!(matches!(
            read(3, &[1, 2, 2, 0]),
            Err(AuxError::OutOfRange(..))
        ));
        assert!(matches!(
            read(2, &[MAX_FENCE + 1, 0, 0]),
            Err(AuxError::OutOfRange(..))
        ));
        assert!(matches!(
            read(2, &[1, MAX_TTL_MS + 1, 0]),
            Err(AuxError::OutOfRange(..))
        ));
        assert!(matches!(
            read(2, &[1, 0, 2, u64::MAX]),
            Err(AuxError::OutOfRange(..))
        ));
    }
}
