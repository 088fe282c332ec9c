//! Decides whether a history could have happened: each checker reads the
//! events and returns the violations it found.
mod linear;
use crate::history::{Event, FaultKind};
use std::collections::BTreeMap;

/// Something the history shows that the README says cannot happen.
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
}

pub fn check(events: &[Event]) -> Report {
    let _ = events;
    Report::default()
}

impl Report {
    /// Prints the breakdown, the first violations, and last the summary line.
    pub fn print(&self, events: &[Event], took: std::time::Duration) {
        let _ = (events, took);
        let faults: u64 = self.faults.values().sum();
        println!(
            "history: {} ops, {} faults, {} violations, seed {}",
            self.ops,
            faults,
            self.violations.len(),
            self.seed
        );
    }

    /// Violations plus coverage gaps: non-zero fails the run.
    pub fn failures(&self) -> u64 {
        self.violations.len() as u64
    }
}
