//! A capped hold (`max_hold`, the server's `MAXHOLD`): the server ends the
//! hold at its grant plus `max_hold` and refuses any renewal (or same-token
//! retry of the acquire) whose deadline would pass that. The client does not
//! know the grant's instant, only that it came after the acquire's first
//! attempt was sent: that send plus `max_hold` is the cap's floor, and every
//! command for the hold after the first asks for at most what is left to it
//! (less a margin for the command's way to the server and the server's
//! whole milliseconds), so the server never has a reason to refuse it. Once
//! the budget reaches the floor, renewal ends and the hold is lost at its
//! budget, with [`REACHED`] as its reason.
//!
//! A waiting acquire granted past its floor (a wait longer than
//! `max_hold`) would be born lost although the server's cap, counted from
//! the grant, is still ahead: its refresh asks for the whole ttl instead,
//! and the answer moves the floor (accepted: the cap is no earlier than
//! that lease's end; refused: the refusal says how long the hold may live).

use std::time::{Duration, Instant};

/// The loss reason of a guard whose budget ended at the cap's floor.
pub(crate) const REACHED: &str =
    "MAXHOLD the hold reached its cap (max_hold): it cannot be extended past its MAXHOLD";

/// The shortest ttl a command for a capped hold asks for: below it,
/// renewal ends.
const SHORTEST: Duration = Duration::from_millis(1);

/// The cap's floor of one hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cap {
    /// The first attempt's send plus `max_hold`: never later than the
    /// server's cap.
    floor: Instant,
    /// How far before the floor a command's deadline ends: a fiftieth of
    /// `max_hold`, 5 ms to 100 ms (the command's way to the server, and
    /// the server's clock in whole milliseconds).
    margin: Duration,
}

impl Cap {
    /// The cap of a hold whose acquire sent its first attempt at `first_send`.
    pub(crate) fn new(first_send: Instant, max_hold: Duration) -> Cap {
        Cap {
            floor: crate::limits::after(first_send, max_hold),
            margin: (max_hold / 50).clamp(Duration::from_millis(5), Duration::from_millis(100)),
        }
    }

    /// The ttl a command sent at `now` asks for in place of `ttl`: what is
    /// left to the floor less the margin, if shorter; None when that is
    /// under [`SHORTEST`] (no command is sent then).
    pub(crate) fn ttl(&self, ttl: Duration, now: Instant) -> Option<Duration> {
        let left = self
            .floor
            .saturating_duration_since(now)
            .saturating_sub(self.margin);
        Some(ttl.min(left)).filter(|t| *t >= SHORTEST)
    }

    /// The server's cap is known to come no earlier than `at`: the floor
    /// moves there if it was earlier.
    pub(crate) fn no_earlier_than(&mut self, at: Instant) {
        self.floor = self.floor.max(at);
    }

    /// True when a lease surely lasting until `valid_until` is as long as
    /// a renewal could make it: renewal ends.
    pub(crate) fn reached_by(&self, valid_until: Instant) -> bool {
        self.floor
            .saturating_duration_since(valid_until)
            .saturating_sub(self.margin)
            < SHORTEST
    }
}

/// How long the server said a hold may live from its answer on, from its
/// refusal at the cap (`MAXHOLD the hold may live N ms more: ...`).
pub(crate) fn left_to_cap(refusal: &str) -> Option<Duration> {
    let rest = refusal.split_once("may live ")?.1;
    let n = rest.split_once(" ms more")?.0;
    n.parse::<u64>().ok().map(Duration::from_millis)
}

/// The ttl a command for a hold with `cap` (if any) asks for at `now`.
pub(crate) fn capped(cap: Option<Cap>, ttl: Duration, now: Instant) -> Option<Duration> {
    match cap {
        Some(c) => c.ttl(ttl, now),
        None => Some(ttl),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_says_how_long_the_hold_may_live() {
        let r = "MAXHOLD the hold may live 5 ms more: it cannot be extended past its MAXHOLD";
        assert_eq!(left_to_cap(r), Some(Duration::from_millis(5)));
        assert_eq!(
            left_to_cap("MAXHOLD the hold may live 0 ms more"),
            Some(Duration::ZERO)
        );
        for other in [
            REACHED,
            "MAXHOLD may live x ms more",
            "MAXHOLD may live -1 ms more",
            "",
        ] {
            assert_eq!(left_to_cap(other), None, "{other}");
        }
    }

    const S: Duration = Duration::from_secs(1);
    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_command_asks_for_what_is_left_to_the_floor_less_the_margin() {
        let t0 = Instant::now();
        // max_hold 3 s: margin 60 ms, floor t0 + 3 s.
        let c = Cap::new(t0, 3 * S);
        assert_eq!(c.ttl(10 * S, t0 + S), Some(2 * S - 60 * MS));
        assert_eq!(c.ttl(S, t0 + S), Some(S), "a shorter ttl as it is");
        assert_eq!(c.ttl(10 * S, t0 + 3 * S - 61 * MS), Some(MS));
        assert_eq!(c.ttl(10 * S, t0 + 3 * S - 60 * MS), None);
        assert_eq!(c.ttl(10 * S, t0 + 4 * S), None, "past the floor");
        assert_eq!(capped(None, 10 * S, t0 + 4 * S), Some(10 * S));
        // The margin: 5 ms to 100 ms.
        assert_eq!(Cap::new(t0, 10 * MS).ttl(S, t0), Some(5 * MS));
        assert_eq!(
            Cap::new(t0, 3600 * S).ttl(3600 * S, t0),
            Some(3600 * S - 100 * MS)
        );
    }

    #[test]
    fn the_floor_is_reached_when_no_renewal_could_move_the_budget() {
        let t0 = Instant::now();
        let c = Cap::new(t0, 3 * S);
        assert!(!c.reached_by(t0 + S));
        assert!(!c.reached_by(t0 + 3 * S - 61 * MS));
        assert!(c.reached_by(t0 + 3 * S - 60 * MS));
        assert!(c.reached_by(t0 + 5 * S));
    }
}
