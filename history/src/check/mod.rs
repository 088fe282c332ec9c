//! Decides whether a history could have happened: each checker reads the
//! events and returns the violations it found (docs/history.md, "What the
//! checker decides").
//!
//! - `prep`: events in time order, operations paired, faults as intervals
//! - `believe`: every grant, and the holds each client believed it had
//! - `mutex`, `fences`, `sink`, `lost`, `liveness` (+ `fifo`): the checkers
//! - `priority`: the longest wait of priority 0 against the aging's bound
//! - `session_bounds`, `sessions`: bound holds believed, and the sessions' rules
//! - `guard`: the guarded sink's writes against the holds' lives
//! - `linear`: linearizability of the `lin` group against each kind's model
//! - `coverage`: counts and coverage gaps; `print`: the report
use crate::history::{Command, Event, FaultKind, Mode};
use std::collections::BTreeMap;

mod believe;
mod coverage;
mod election;
mod fences;
mod fifo;
mod guard;
mod hold_lives;
mod limits;
mod linear;
mod liveness;
mod lost;
mod mutex;
mod prep;
mod print;
mod priority;
mod session_bounds;
mod sessions;
mod shown;
mod sink;
#[cfg(test)]
mod tests;

/// Known limits, counted instead of reported
/// (docs/history.md#known-limits-counted-named-not-violations).
pub const ASYNC_REPLICATION: &str =
    "asynchronous replication: a grant only the master acknowledged is lost in a failover or an everysec crash";
pub const CLOSING_CONNECTION: &str = "a reply written to a closing connection";
pub const DROPPED_REPLY: &str = "a reply dropped after the command ran";
pub const SERVER_DIED: &str = "a grant whose reply was lost when its server died";

/// Something the history shows that the manual says cannot happen
/// (docs/safety.md#what-dlock-guarantees).
#[derive(Clone, Debug)]
pub struct Violation {
    /// The checker that found it, e.g. `mutex`, `fences`, `sink`.
    pub checker: &'static str,
    pub what: String,
    /// The operations involved (their `id`s), earliest first.
    pub ops: Vec<u64>,
}

/// The figures and findings of one history.
#[derive(Debug, Default)]
pub struct Report {
    pub seed: u64,
    pub ops: u64,
    /// Operations by command and outcome, e.g. "acquire wait" -> ok/nil/fail/info.
    pub by_op: BTreeMap<String, BTreeMap<String, u64>>,
    pub faults: BTreeMap<FaultKind, u64>,
    /// Documented limits the history ran into: counted, not violations.
    pub known_limits: BTreeMap<&'static str, u64>,
    pub violations: Vec<Violation>,
    /// What the workload should have exercised and did not.
    pub gaps: Vec<String>,
    /// The linearizability search, per `lin` resource.
    pub linear: Vec<linear::Stats>,
    /// Pairs of waiters the FIFO rule judged, per plain resource.
    pub fifo_judged: BTreeMap<String, u64>,
    /// Passes the priorities' bound allowed, seen happening, per resource
    /// where requests named priorities.
    pub fifo_passes: BTreeMap<String, u64>,
    /// Waits of priority 0 against their bound, per resource where
    /// requests named priorities.
    pub priority: priority::Stats,
    /// What the election's checks saw, when the election ran.
    pub election: Option<election::Stats>,
    /// What the sessions' rules saw, when the sessions workload ran.
    pub sessions: Option<sessions::Stats>,
    /// What the guarded sink's rule saw, when there were guarded writes.
    pub guard: Option<guard::Stats>,
}

pub fn check(events: &[Event]) -> Report {
    let p = prep::Prepared::new(events);
    let mut report = Report {
        seed: p.seed,
        ..Report::default()
    };
    coverage::count(&p, &mut report);
    let mut limits = BTreeMap::new();
    let mut v = mutex::check(&p);
    v.extend(fences::check(&p));
    v.extend(sink::check(&p));
    v.extend(lost::check(&p, &mut limits));
    v.extend(liveness::check(&p, &mut limits));
    let fifo = fifo::check(&p);
    v.extend(fifo.violations);
    if p.ran("locks") && fifo.judged.values().sum::<u64>() == 0 {
        report
            .gaps
            .push("the FIFO rule judged no pair of waiters".to_string());
    }
    report.fifo_judged = fifo.judged;
    let (starved, waits) = priority::check(&p);
    v.extend(starved);
    let prioritized = p.ran("priority") || !fifo.passes.is_empty();
    if prioritized && fifo.passes.values().sum::<u64>() == 0 {
        report.gaps.push(
            "priorities were used, but no request of a higher priority was seen passing an earlier one within its window".to_string(),
        );
    }
    if prioritized && waits.values().map(|w| w.granted).sum::<u64>() == 0 {
        report.gaps.push(
            "priorities were used, but no wait of priority 0 was granted clear of faults"
                .to_string(),
        );
    }
    report.fifo_passes = fifo.passes;
    report.priority = waits;
    v.extend(shown::check(&p));
    if p.ran("election") {
        let (found, stats) = election::check(&p, &mut limits);
        v.extend(found);
        report.gaps.extend(election::gaps(&stats));
        report.election = Some(stats);
    }
    if p.ran("sessions") || !p.session_recs.is_empty() {
        let (found, stats) = sessions::check(&p, &mut limits);
        v.extend(found);
        if p.ran("sessions") {
            report.gaps.extend(sessions::gaps(&stats));
        }
        report.sessions = Some(stats);
    }
    let guarded = p.ops.iter().any(|o| o.op.command == Command::Guard);
    if p.ran("guard") || guarded {
        let (found, stats) = guard::check(&p, &mut limits);
        v.extend(found);
        if p.ran("guard") {
            let read = p.ops.iter().any(|o| o.op.command == Command::SinkRead);
            report.gaps.extend(guard::gaps(&stats, read));
        }
        report.guard = Some(stats);
    }
    report.gaps.extend(coverage::handover_permits_gaps(&p));
    let (linearizability, stats) = linear::check_with_stats(events);
    v.extend(linearizability);
    report.linear = stats;
    report.violations = v;
    report.known_limits = limits;
    report
}

impl Report {
    /// Violations plus coverage gaps: non-zero fails the run.
    pub fn failures(&self) -> u64 {
        (self.violations.len() + self.gaps.len()) as u64
    }
}

pub fn command_name(c: Command) -> &'static str {
    match c {
        Command::Acquire => "acquire",
        Command::Release => "release",
        Command::Extend => "extend",
        Command::Info => "info",
        Command::Macquire => "macquire",
        Command::Mrelease => "mrelease",
        Command::Mextend => "mextend",
        Command::Observe => "observe",
        Command::SessionOpen => "session open",
        Command::SessionKeepalive => "session keepalive",
        Command::SessionClose => "session close",
        Command::SessionKill => "session kill",
        Command::Disconnect => "disconnect",
        Command::Guard => "guard",
        Command::SinkRead => "sink read",
        Command::Resize => "resize",
    }
}

pub fn fault_name(k: FaultKind) -> &'static str {
    match k {
        FaultKind::Kill9Always => "kill9_always",
        FaultKind::Kill9Everysec => "kill9_everysec",
        FaultKind::Failover => "failover",
        FaultKind::FailoverStale => "failover_stale",
        FaultKind::LostReply => "lost_reply",
        FaultKind::ClientPause => "client_pause",
        FaultKind::SlowScript => "slow_script",
        FaultKind::ClientKill => "client_kill",
        FaultKind::ClientUnblock => "client_unblock",
        FaultKind::DebugSleep => "debug_sleep",
    }
}

pub fn mode_name(m: Mode) -> &'static str {
    match m {
        Mode::Exclusive => "exclusive",
        Mode::Shared => "shared",
    }
}
