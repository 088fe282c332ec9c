//! A session (`DLOCK.SESSION`): one liveness lease for every guard bound to
//! it, as a state machine without I/O. The blocking and async shells send
//! `OPEN`, `KEEPALIVE` and `CLOSE` and tell it what came back and when; it
//! answers with what to do next and what the bound guards' budget is.
//!
//! The rules it carries, the lease core's: the session's budget counts
//! from when the `OPEN` or the last `KEEPALIVE` was sent; a keep-alive is
//! due a third of the ttl after that send ([`Schedule`]); a failed one is
//! retried after a pause while the budget lasts; a `NOSESSION` reply, a
//! passed budget, a broken connection of a `BIND` session or a close ends
//! it for good, and a session that ended is never revived (a new one, with
//! a new id, takes its place).

use super::budget::Budget;
use super::renewal::{Schedule, Wake};
use crate::error::Error;
use std::time::{Duration, Instant};

/// Where a session is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Not opened yet: the first bound acquire opens it.
    New,
    /// Opened; the budget says until when it surely lasts.
    Live,
    /// Ended (see [`End`]): its guards are lost; never revived.
    Ended(End),
}

/// How a session ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum End {
    /// The server answered `NOSESSION`: it ended (ttl, `KILL`, its `BIND`
    /// connection closed) and released its holds.
    Gone,
    /// The budget passed before a keep-alive came back.
    Expired,
    /// The connection a `BIND` session was opened on broke: the server
    /// ends the session when it sees the close.
    Unbound,
    /// Closed by the client (`CLOSE` is due).
    Closed,
}

/// What the keep-alive thread or task does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// Nothing until this instant, or until the session changes.
    Sleep(Instant),
    /// Send `KEEPALIVE` now; `under` is the deadline it is sent under (for
    /// [`SessionCore::failed`]).
    KeepAlive { under: Instant },
    /// The budget has passed: the session is over, tell the guards.
    Expired,
    /// Not open yet: wait for the open (or the close).
    Idle,
    /// Ended: stop.
    Stop,
}

/// One session: its ttl, its phase, its budget and its keep-alive schedule.
#[derive(Debug)]
pub(crate) struct SessionCore {
    ttl: Duration,
    phase: Phase,
    budget: Budget,
    schedule: Schedule,
}

impl SessionCore {
    pub(crate) fn new(ttl: Duration, now: Instant) -> SessionCore {
        SessionCore {
            ttl,
            phase: Phase::New,
            // Passed at once: nothing is bound before the open.
            budget: Budget::new(ttl, now),
            schedule: Schedule::new(true),
        }
    }

    pub(crate) fn ttl(&self) -> Duration {
        self.ttl
    }

    pub(crate) fn phase(&self) -> Phase {
        self.phase
    }

    /// Until when the session surely lasts (meaningful once live).
    pub(crate) fn valid_until(&self) -> Instant {
        self.budget.valid_until()
    }

    /// A guard may be bound to the session at `now`: it is live and its
    /// budget has not passed. Then the guard's budget is the session's.
    pub(crate) fn bindable(&self, now: Instant) -> Option<Instant> {
        (self.phase == Phase::Live && !self.budget.is_over(now)).then(|| self.budget.valid_until())
    }

    /// An `OPEN` sent at `sent` was answered (1 or 0: the session is live
    /// for the ttl from then). Ignored unless the session was new.
    pub(crate) fn opened(&mut self, sent: Instant) {
        if self.phase == Phase::New {
            self.phase = Phase::Live;
            self.budget = Budget::new(self.ttl, sent + self.ttl);
            self.schedule.renewed();
        }
    }

    /// What to do at `now`.
    pub(crate) fn next(&self, now: Instant) -> Next {
        match self.phase {
            Phase::New => Next::Idle,
            Phase::Ended(_) => Next::Stop,
            Phase::Live => match self.schedule.next(&self.budget, false, now) {
                Wake::Sleep(t) => Next::Sleep(t),
                Wake::Renew { under, .. } => Next::KeepAlive { under },
                Wake::Lost => Next::Expired,
                Wake::Stop => Next::Stop,
            },
        }
    }

    /// A `KEEPALIVE` sent at `sent` was answered at `now` with the time
    /// left (`left`). `Some(until)`: the session (and each of its guards)
    /// now lasts until then. `None`: it came back after the budget passed
    /// (or after the session ended): the session is over, and the caller
    /// tells the guards (once: see [`SessionCore::end`]).
    pub(crate) fn kept_alive(
        &mut self,
        sent: Instant,
        left: Duration,
        now: Instant,
    ) -> Option<Instant> {
        if self.phase != Phase::Live {
            return None;
        }
        let until = sent + left.min(self.ttl);
        if !self.budget.renewed(until, self.ttl, now) {
            self.end(End::Expired);
            return None;
        }
        self.schedule.renewed();
        Some(until)
    }

    /// A keep-alive sent under the deadline `under` got no answer at `now`:
    /// retried after a pause while the budget lasts.
    pub(crate) fn failed(&mut self, under: Instant, now: Instant) {
        self.schedule.failed(under, self.ttl, now);
    }

    /// Ends the session: the phase it ended from the first time (whoever
    /// gets it tells the guards, and sends `CLOSE` if it was
    /// [`Phase::Live`] and the client closes it), None after.
    pub(crate) fn end(&mut self, how: End) -> Option<Phase> {
        if matches!(self.phase, Phase::Ended(_)) {
            return None;
        }
        let from = std::mem::replace(&mut self.phase, Phase::Ended(how));
        let _ = self.budget.lose();
        Some(from)
    }
}

/// The server does not know sessions: `DLOCK.SESSION` is an unknown
/// command there (a dlock without sessions; the client's error for an
/// unknown `DLOCK.*` command is [`Error::ModuleMissing`]), or an unknown
/// subcommand, or the user's ACL denies it. The client then holds its
/// locks with a watchdog per guard.
pub(crate) fn lacks_sessions(e: &Error) -> bool {
    match e {
        Error::ModuleMissing(_) => true,
        Error::Denied { detail, .. } => detail.starts_with("NOPERM"),
        Error::Server(m) => {
            let m = m.to_ascii_lowercase();
            m.starts_with("err unknown command") || m.starts_with("err unknown subcommand")
        }
        _ => false,
    }
}

/// A `NOSESSION` error reply (the session ended, or a redirect took the
/// command to a server where it never existed).
pub(crate) fn is_no_session(e: &Error) -> bool {
    matches!(e, Error::Server(m) if m.starts_with("NOSESSION"))
}

/// A fresh session id: a UUID, as the contract advises (unique, so a retry
/// after a lost reply is the same session).
pub(crate) fn new_session_id() -> String {
    uuid::Uuid::new_v4().hyphenated().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);
    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_new_session_binds_nothing_and_waits_for_its_open() {
        let t0 = Instant::now();
        let s = SessionCore::new(3 * S, t0);
        assert_eq!(s.phase(), Phase::New);
        assert_eq!(s.bindable(t0), None);
        assert_eq!(s.next(t0 + S), Next::Idle);
    }

    #[test]
    fn the_keep_alive_is_due_a_third_of_the_ttl_after_the_open_was_sent() {
        let t0 = Instant::now();
        let mut s = SessionCore::new(3 * S, t0);
        s.opened(t0);
        assert_eq!(s.bindable(t0 + MS), Some(t0 + 3 * S));
        assert_eq!(s.next(t0), Next::Sleep(t0 + S));
        assert_eq!(s.next(t0 + S), Next::KeepAlive { under: t0 + 3 * S });
        // Answered at 1.2 s for a send at 1 s with 3 s left: until 4 s, the
        // next one due at 2 s (a third after the send).
        assert_eq!(
            s.kept_alive(t0 + S, 3 * S, t0 + 1200 * MS),
            Some(t0 + 4 * S)
        );
        assert_eq!(s.bindable(t0 + 3 * S), Some(t0 + 4 * S));
        assert_eq!(s.next(t0 + 1200 * MS), Next::Sleep(t0 + 2 * S));
    }

    #[test]
    fn the_budget_counts_the_time_left_the_server_answered_at_most_the_ttl() {
        let t0 = Instant::now();
        let mut s = SessionCore::new(3 * S, t0);
        s.opened(t0);
        // A server that clamps (dlock.max-ttl): the shorter time counts.
        assert_eq!(s.kept_alive(t0 + S, S, t0 + S), Some(t0 + 2 * S));
        // Never more than the ttl asked for.
        assert_eq!(s.kept_alive(t0 + S, 9 * S, t0 + S), Some(t0 + 4 * S));
    }

    #[test]
    fn a_keep_alive_after_the_budget_passed_ends_the_session_for_good() {
        let t0 = Instant::now();
        let mut s = SessionCore::new(3 * S, t0);
        s.opened(t0);
        assert_eq!(s.next(t0 + 3 * S), Next::Expired);
        assert_eq!(s.kept_alive(t0 + 2 * S, 3 * S, t0 + 3 * S), None);
        assert_eq!(s.phase(), Phase::Ended(End::Expired));
        assert_eq!(s.bindable(t0 + 3 * S), None);
        assert_eq!(s.next(t0 + 3 * S), Next::Stop);
        // Nothing revives it: neither a late reply nor an open.
        assert_eq!(s.kept_alive(t0 + 3 * S, 3 * S, t0 + 3 * S), None);
        s.opened(t0 + 4 * S);
        assert_eq!(s.bindable(t0 + 4 * S), None);
        assert_eq!(s.end(End::Gone), None, "ended once");
    }

    #[test]
    fn a_failed_keep_alive_is_retried_after_a_pause_within_the_budget() {
        let t0 = Instant::now();
        let mut s = SessionCore::new(3 * S, t0);
        s.opened(t0);
        s.failed(t0 + 3 * S, t0 + S);
        // ttl/20 = 150 ms.
        assert_eq!(s.next(t0 + S), Next::Sleep(t0 + S + 150 * MS));
        assert_eq!(
            s.next(t0 + S + 150 * MS),
            Next::KeepAlive { under: t0 + 3 * S }
        );
        assert_eq!(s.next(t0 + 3 * S), Next::Expired);
    }

    #[test]
    fn every_end_is_final_and_told_once() {
        for how in [End::Gone, End::Expired, End::Unbound, End::Closed] {
            let t0 = Instant::now();
            let mut s = SessionCore::new(3 * S, t0);
            s.opened(t0);
            assert_eq!(s.end(how), Some(Phase::Live));
            assert_eq!(s.end(End::Gone), None);
            assert_eq!(s.phase(), Phase::Ended(how));
            assert_eq!(s.next(t0), Next::Stop);
            assert_eq!(s.bindable(t0), None);
        }
        // A session never opened needs no CLOSE.
        let mut s = SessionCore::new(S, Instant::now());
        assert_eq!(s.end(End::Closed), Some(Phase::New));
    }

    #[test]
    fn servers_without_sessions_are_recognised_by_their_error() {
        let server = |m: &str| Error::Server(m.into());
        assert!(lacks_sessions(&Error::ModuleMissing("127.0.0.1:1".into())));
        assert!(lacks_sessions(&server(
            "ERR unknown subcommand 'OPEN'. Try DLOCK.SESSION HELP."
        )));
        assert!(lacks_sessions(&server(
            "ERR unknown command 'DLOCK.SESSION'"
        )));
        assert!(lacks_sessions(&Error::Denied {
            addr: String::new(),
            detail: "NOPERM User app has no permissions to run the 'dlock.session' command".into()
        }));
        assert!(!lacks_sessions(&Error::Denied {
            addr: String::new(),
            detail: "authentication failed".into()
        }));
        assert!(!lacks_sessions(&server(
            "ERR ttl_ms is above dlock.max-ttl (1000)"
        )));
        assert!(!lacks_sessions(&Error::Unavailable("refused".into())));
        assert!(is_no_session(&server(
            "NOSESSION no such session (it ended or was never opened): its holds are released"
        )));
        assert!(!is_no_session(&server("ERR no")));
    }

    #[test]
    fn session_ids_are_distinct_uuids() {
        let (a, b) = (new_session_id(), new_session_id());
        assert_eq!(a.len(), 36);
        assert_ne!(a, b);
    }
}
