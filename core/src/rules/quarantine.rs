//! Restart quarantine: Redlock's "delayed restart", built in.
//!
//! Grants acknowledged just before a crash can be lost with their deadlines
//! (everysec or RDB-only persistence, a rewrite without fsync, a promoted
//! replica that missed the last writes). Their holders still believe they
//! hold them, but none of those leases ends later than the moment of loss
//! plus the longest TTL ever granted. Refusing new grants for that long after
//! such a loss makes the lost grants harmless.

use crate::request::args::parse_u64;
use crate::Error;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    Off,
    /// max(longest TTL persisted, `dlock.max-ttl` when set).
    Auto,
    Fixed(u64),
}

impl Setting {
    pub fn parse(raw: &[u8]) -> Result<Setting, Error> {
        if raw.eq_ignore_ascii_case(b"off") {
            Ok(Setting::Off)
        } else if raw.eq_ignore_ascii_case(b"auto") {
            Ok(Setting::Auto)
        } else {
            parse_u64(raw)
                .filter(|ms| *ms <= crate::limits::MAX_TTL_MS)
                .map(Setting::Fixed)
                .ok_or(Error::BadConfig(
                    "restart-quarantine must be off, auto or milliseconds (0 to 2^47)",
                ))
        }
    }
}

impl std::fmt::Display for Setting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Setting::Off => write!(f, "off"),
            Setting::Auto => write!(f, "auto"),
            Setting::Fixed(ms) => write!(f, "{ms}"),
        }
    }
}

/// How the previous run on this data directory ended, from the module's
/// state file: written "running" at start, "clean" at a clean shutdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreviousRun {
    /// No state file: dlock never ran on this directory.
    None,
    Clean,
    Crashed,
    /// A clean shutdown that did not persist every write (no AOF, and
    /// changes since the last RDB save): its grants are lost as in a crash.
    Unsaved,
}

impl PreviousRun {
    pub fn from_state_file(contents: Option<&str>) -> PreviousRun {
        match contents.map(str::trim) {
            None => PreviousRun::None,
            Some("clean") => PreviousRun::Clean,
            Some("unsaved") => PreviousRun::Unsaved,
            Some(_) => PreviousRun::Crashed,
        }
    }
}

/// What the loaded data says about the run that wrote it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Persisted {
    /// Longest TTL ever granted (ms); 0 when nothing was persisted.
    pub longest_ttl: u64,
    /// Whether that run could lose acknowledged writes; `None` if unknown.
    pub lossy: Option<bool>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    None,
    For(u64),
    /// A loss was possible but nothing bounds it (auto, nothing persisted,
    /// no `dlock.max-ttl`): warn loudly instead of guessing.
    Unbounded,
}

/// After loading from disk at startup.
pub fn after_restart(
    setting: Setting,
    prev: PreviousRun,
    data: Persisted,
    max_ttl: u64,
) -> Verdict {
    match prev {
        PreviousRun::None | PreviousRun::Clean => Verdict::None,
        // Judged by the persistence of the run that crashed, not the new one.
        PreviousRun::Crashed if data.lossy == Some(false) => Verdict::None,
        PreviousRun::Crashed | PreviousRun::Unsaved => bound(setting, data.longest_ttl, max_ttl),
    }
}

/// After this replica became a master. A coordinated failover keeps the
/// link to the old master up until the switch; an unplanned one does not,
/// and the old master's last grants may never have arrived.
pub fn after_promotion(
    setting: Setting,
    link_was_up: bool,
    longest_ttl: u64,
    max_ttl: u64,
) -> Verdict {
    if link_was_up {
        Verdict::None
    } else {
        bound(setting, longest_ttl, max_ttl)
    }
}

fn bound(setting: Setting, longest_ttl: u64, max_ttl: u64) -> Verdict {
    match setting {
        Setting::Off => Verdict::None,
        Setting::Fixed(0) => Verdict::None,
        Setting::Fixed(ms) => Verdict::For(ms),
        Setting::Auto => match longest_ttl.max(max_ttl) {
            0 => Verdict::Unbounded,
            ms => Verdict::For(ms),
        },
    }
}

/// A quarantine that was running when the loaded data (or the master's
/// last `DLOCK.META`) was written ends at `persisted_until` (unix ms, 0 =
/// none). The lost grants it protects against are still believed until
/// then, whatever a restart or promotion decides now: if that end is later
/// than both `now_ms` and the end just decided (`decided_until`, 0 = none),
/// the quarantine must last until it. `off` (and a fixed 0) resume nothing,
/// as `CONFIG SET dlock.restart-quarantine off` lifts a running quarantine.
pub fn resume(
    setting: Setting,
    decided_until: u64,
    persisted_until: u64,
    now_ms: u64,
) -> Option<u64> {
    let disabled = matches!(setting, Setting::Off | Setting::Fixed(0));
    (!disabled && persisted_until > now_ms && persisted_until > decided_until)
        .then_some(persisted_until)
}

/// The longest TTL after an operator lowers it to `asked` (`CONFIG SET
/// dlock.longest-ttl`), from `current`, when the live holds on the node
/// have at most `live_ms` left. A grant a later crash loses was either made
/// before the lowering, and then it was live then and ends within `live_ms`
/// of it, or after it, and then its own TTL raised the longest TTL again
/// (as every grant does). So the value never goes below `live_ms`. It
/// never rises either: raising it could only make a quarantine longer, and
/// a value in the configuration file (read before the data loads) must not
/// be a floor that outlives the data.
pub fn lowered_longest_ttl(current: u64, asked: u64, live_ms: u64) -> u64 {
    current.min(asked.max(live_ms))
}

/// Only an fsync per write, also during rewrites, loses nothing that was
/// acknowledged.
pub fn lossless(appendonly: bool, appendfsync: &str, no_fsync_on_rewrite: bool) -> bool {
    appendonly && appendfsync.eq_ignore_ascii_case("always") && !no_fsync_on_rewrite
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOSSY: Persisted = Persisted {
        longest_ttl: 30_000,
        lossy: Some(true),
    };

    #[test]
    fn parses_settings() {
        assert_eq!(Setting::parse(b"OFF"), Ok(Setting::Off));
        assert_eq!(Setting::parse(b"auto"), Ok(Setting::Auto));
        assert_eq!(Setting::parse(b"1500"), Ok(Setting::Fixed(1500)));
        for bad in [&b"-1"[..], b"", b"soon", b"1.5", b"140737488355329"] {
            assert!(Setting::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(Setting::Fixed(7).to_string(), "7");
    }

    #[test]
    fn crash_of_a_lossy_run_quarantines_for_the_longest_ttl() {
        let prev = PreviousRun::Crashed;
        assert_eq!(
            after_restart(Setting::Auto, prev, LOSSY, 0),
            Verdict::For(30_000)
        );
        assert_eq!(
            after_restart(Setting::Auto, prev, LOSSY, 60_000),
            Verdict::For(60_000)
        );
        assert_eq!(
            after_restart(Setting::Fixed(500), prev, LOSSY, 0),
            Verdict::For(500)
        );
        assert_eq!(after_restart(Setting::Off, prev, LOSSY, 0), Verdict::None);
    }

    #[test]
    fn no_quarantine_after_clean_shutdown_lossless_run_or_first_start() {
        let lossless = Persisted {
            longest_ttl: 30_000,
            lossy: Some(false),
        };
        for s in [Setting::Auto, Setting::Fixed(500)] {
            assert_eq!(
                after_restart(s, PreviousRun::Clean, LOSSY, 0),
                Verdict::None
            );
            assert_eq!(after_restart(s, PreviousRun::None, LOSSY, 0), Verdict::None);
            assert_eq!(
                after_restart(s, PreviousRun::Crashed, lossless, 0),
                Verdict::None
            );
        }
    }

    #[test]
    fn a_shutdown_that_saved_nothing_quarantines_even_a_lossless_run() {
        // The loaded data may even say `always`: the writes of the run that
        // shut down without saving never reached it.
        let lossless = Persisted {
            longest_ttl: 30_000,
            lossy: Some(false),
        };
        assert_eq!(
            after_restart(Setting::Auto, PreviousRun::Unsaved, lossless, 0),
            Verdict::For(30_000)
        );
        assert_eq!(
            after_restart(Setting::Off, PreviousRun::Unsaved, lossless, 0),
            Verdict::None
        );
    }

    #[test]
    fn unknown_durability_counts_as_lossy_and_may_be_unbounded() {
        let nothing = Persisted::default();
        let prev = PreviousRun::Crashed;
        assert_eq!(
            after_restart(Setting::Auto, prev, nothing, 0),
            Verdict::Unbounded
        );
        assert_eq!(
            after_restart(Setting::Auto, prev, nothing, 9),
            Verdict::For(9)
        );
    }

    #[test]
    fn only_unplanned_promotions_quarantine() {
        assert_eq!(
            after_promotion(Setting::Auto, true, 5_000, 0),
            Verdict::None
        );
        assert_eq!(
            after_promotion(Setting::Auto, false, 5_000, 0),
            Verdict::For(5_000)
        );
        assert_eq!(
            after_promotion(Setting::Off, false, 5_000, 0),
            Verdict::None
        );
    }

    #[test]
    fn a_persisted_quarantine_outlasts_the_new_decision() {
        let now = 1_000_000;
        // A lossless crash or a clean shutdown decides nothing: the running
        // quarantine resumes until its end.
        assert_eq!(
            resume(Setting::Auto, 0, now + 2_000, now),
            Some(now + 2_000)
        );
        assert_eq!(
            resume(Setting::Fixed(500), now + 500, now + 2_000, now),
            Some(now + 2_000)
        );
        // A later end decided now wins; a past or absent end resumes nothing.
        assert_eq!(resume(Setting::Auto, now + 3_000, now + 2_000, now), None);
        assert_eq!(resume(Setting::Auto, 0, now, now), None);
        assert_eq!(resume(Setting::Auto, 0, now - 1, now), None);
        assert_eq!(resume(Setting::Auto, 0, 0, now), None);
        // `off` lifts quarantines, persisted ones too.
        assert_eq!(resume(Setting::Off, 0, now + 2_000, now), None);
        assert_eq!(resume(Setting::Fixed(0), 0, now + 2_000, now), None);
    }

    #[test]
    fn the_longest_ttl_is_lowered_only_as_far_as_live_holds_allow() {
        let year = 31_536_000_000;
        assert_eq!(lowered_longest_ttl(year, 0, 0), 0, "nothing live");
        assert_eq!(lowered_longest_ttl(year, 0, 45_000), 45_000);
        assert_eq!(lowered_longest_ttl(year, 60_000, 45_000), 60_000);
        assert_eq!(lowered_longest_ttl(year, 30_000, 45_000), 45_000);
        assert_eq!(lowered_longest_ttl(30_000, year, 0), 30_000, "never raised");
        assert_eq!(lowered_longest_ttl(30_000, 0, 45_000), 30_000);
        assert_eq!(
            lowered_longest_ttl(0, 60_000, 0),
            0,
            "before the data loads"
        );
    }

    #[test]
    fn state_file_and_durability() {
        assert_eq!(PreviousRun::from_state_file(None), PreviousRun::None);
        assert_eq!(
            PreviousRun::from_state_file(Some("clean\n")),
            PreviousRun::Clean
        );
        assert_eq!(
            PreviousRun::from_state_file(Some("running")),
            PreviousRun::Crashed
        );
        assert_eq!(
            PreviousRun::from_state_file(Some("unsaved")),
            PreviousRun::Unsaved
        );
        assert!(lossless(true, "always", false));
        assert!(!lossless(true, "everysec", false));
        assert!(!lossless(true, "always", true));
        assert!(!lossless(false, "always", false));
    }
}
