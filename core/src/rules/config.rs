//! The module's numeric configs: name, range and default in one place.
//!
//! The server checks `CONFIG SET` and config-file values against the range a
//! config was registered with, but not the default it is given, and
//! `loadmodule` arguments become that default. So the same ranges are
//! registered with the server and checked here for `loadmodule` arguments.

use std::ffi::CStr;

use crate::limits::{MAX_STORED_TOKEN, MAX_TTL_MS};
use crate::request::args::parse_u64;
use crate::Error;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NumericConfig {
    /// Without the `dlock.` prefix, as registered and as a loadmodule argument.
    pub name: &'static CStr,
    pub min: u64,
    pub max: u64,
    pub default: u64,
}

/// `dlock.max-ttl`: longest `ttl_ms` commands accept; 0 = unlimited.
pub const MAX_TTL: NumericConfig = NumericConfig {
    name: c"max-ttl",
    min: 0,
    max: MAX_TTL_MS,
    default: 0,
};

/// `dlock.max-token-length`: longest token commands accept. Above the
/// loader's limit a granted lock could not be loaded back from the RDB.
pub const MAX_TOKEN_LENGTH: NumericConfig = NumericConfig {
    name: c"max-token-length",
    min: 1,
    max: MAX_STORED_TOKEN as u64,
    default: 512,
};

/// `dlock.observe-rate`: answers per second, at most, to the waiting
/// observers of one resource together (`observe_pace`); 0 = unpaced.
pub const OBSERVE_RATE: NumericConfig = NumericConfig {
    name: c"observe-rate",
    min: 0,
    max: 1_000_000,
    default: 2000,
};

/// `dlock.longest-ttl`: the longest TTL the restart quarantine uses (what
/// `INFO dlock` shows as `dlock_longest_ttl`); setting it only lowers it,
/// as far as the live locks allow (`quarantine::lowered_longest_ttl`).
pub const LONGEST_TTL: NumericConfig = NumericConfig {
    name: c"longest-ttl",
    min: 0,
    max: MAX_TTL_MS,
    default: 0,
};

/// `dlock.priority-aging-ms`: how many ms of waiting are worth one level
/// of `PRIORITY` (`crate::queue::Rank`); read when a request queues.
pub const PRIORITY_AGING_MS: NumericConfig = NumericConfig {
    name: c"priority-aging-ms",
    min: 1,
    max: crate::queue::MAX_AGING_MS,
    default: 1000,
};

/// `dlock.slowlog-hold-ms`: holds that last at least this long are logged
/// (`DLOCK.SLOWLOG`); 0 logs none.
pub const SLOWLOG_HOLD_MS: NumericConfig = NumericConfig {
    name: c"slowlog-hold-ms",
    min: 0,
    max: MAX_TTL_MS,
    default: 10_000,
};

/// `dlock.slowlog-wait-ms`: waits that last at least this long are logged;
/// 0 logs none.
pub const SLOWLOG_WAIT_MS: NumericConfig = NumericConfig {
    name: c"slowlog-wait-ms",
    min: 0,
    max: MAX_TTL_MS,
    default: 1000,
};

/// `dlock.slowlog-max-len`: entries the slow-lock log keeps, the newest.
pub const SLOWLOG_MAX_LEN: NumericConfig = NumericConfig {
    name: c"slowlog-max-len",
    min: 0,
    max: crate::stats::slowlog::MAX_LEN,
    default: 128,
};

impl NumericConfig {
    pub fn name(&self) -> &'static str {
        self.name.to_str().unwrap_or("config")
    }

    /// A value given as text (a `loadmodule` argument), within the range.
    pub fn parse(&self, raw: &[u8]) -> Result<u64, Error> {
        parse_u64(raw)
            .filter(|v| (self.min..=self.max).contains(v))
            .ok_or(Error::InvalidInteger {
                arg: self.name(),
                min: self.min,
                max: self.max,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loadmodule_values_are_range_checked() {
        assert_eq!(MAX_TOKEN_LENGTH.parse(b"1"), Ok(1));
        assert_eq!(MAX_TOKEN_LENGTH.parse(b"1048576"), Ok(1 << 20));
        for bad in [&b"0"[..], b"1048577", b"2000000", b"-1", b"", b"12a"] {
            let e = MAX_TOKEN_LENGTH.parse(bad).unwrap_err();
            assert_eq!(
                e.to_string(),
                "ERR max-token-length must be an integer from 1 to 1048576"
            );
        }
        assert_eq!(MAX_TTL.parse(b"0"), Ok(0));
        assert_eq!(MAX_TTL.parse(b"140737488355328"), Ok(1 << 47));
        assert!(MAX_TTL.parse(b"140737488355329").is_err());
        assert!(MAX_TTL.parse(b"99999999999999999999999").is_err());
    }

    #[test]
    fn defaults_are_in_range() {
        for c in [MAX_TTL, MAX_TOKEN_LENGTH, OBSERVE_RATE] {
            assert!((c.min..=c.max).contains(&c.default), "{}", c.name());
        }
    }
}
