//! The durations callers hand the library, and the instants computed from
//! them. Every `Duration` a public method accepts is valid, `Duration::MAX`
//! ("forever") included: waits and timeouts beyond the server's range (2^47
//! ms, about 4,460 years) count as that range, and no instant is ever
//! computed by an addition that could overflow.

use crate::error::{millis, Error, Result};
use std::time::{Duration, Instant};

/// The server's largest ttl and wait: 2^47 ms.
pub(crate) const MAX_MS: u64 = 1 << 47;

/// The longest duration the library computes with.
pub(crate) const LONGEST: Duration = Duration::from_millis(MAX_MS);

/// `d`, at most [`LONGEST`].
pub(crate) fn clamp(d: Duration) -> Duration {
    d.min(LONGEST)
}

/// `t + d`, saturating: `d` is clamped to [`LONGEST`], and should even that
/// not fit the platform's clock, a year stands for it.
pub(crate) fn after(t: Instant, d: Duration) -> Instant {
    t.checked_add(clamp(d))
        .or_else(|| t.checked_add(Duration::from_secs(365 * 24 * 3600)))
        .unwrap_or(t)
}

/// A ttl the server accepts: 1 ms to 2^47 ms, in whole milliseconds.
pub(crate) fn check_ttl(ttl: Duration) -> Result<()> {
    match millis(ttl) {
        0 => Err(Error::Invalid("ttl must be at least 1 ms".into())),
        ms if ms > MAX_MS => Err(Error::Invalid(format!(
            "ttl must be at most 2^47 ms ({MAX_MS} ms)"
        ))),
        _ => Ok(()),
    }
}

/// The lease a ttl buys, as the server counts it: whole milliseconds (the
/// command carries `millis(ttl)`, so the budget must not count the
/// fraction the server never got).
pub(crate) fn lease(ttl: Duration) -> Duration {
    Duration::from_millis(millis(ttl))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forever_saturates_and_never_panics() {
        let now = Instant::now();
        assert!(after(now, Duration::MAX) > now + Duration::from_secs(1_000_000));
        assert_eq!(after(now, Duration::ZERO), now);
        assert_eq!(clamp(Duration::MAX), LONGEST);
        assert!(check_ttl(Duration::MAX).is_err());
        assert!(check_ttl(Duration::from_micros(999)).is_err());
        assert!(check_ttl(LONGEST).is_ok());
        assert!(check_ttl(LONGEST + Duration::from_millis(1)).is_err());
    }

    #[test]
    fn the_lease_drops_the_fraction_the_server_never_gets() {
        assert_eq!(lease(Duration::from_micros(1900)), Duration::from_millis(1));
        assert_eq!(lease(Duration::from_secs(3)), Duration::from_secs(3));
    }
}
