//! Speed goals in absolute time, judged on the run's own measurements and
//! reported PASS/MISS like the ratio goals. The tests check what happens
//! (a waiter is granted, with a higher fence, before a deadline on the
//! wait); how fast it happens is a goal here, where a loaded machine turns
//! a slow run into a MISS to read rather than into a failed test.

use std::time::Duration;

use crate::handoff;
use crate::pass;

/// One goal on a measured time: it must be at most `limit`.
pub struct TimingGoal {
    pub what: &'static str,
    pub measured: Duration,
    pub limit: Duration,
}

impl TimingGoal {
    pub fn met(&self) -> bool {
        self.measured <= self.limit
    }
}

/// The goals on the handoff section's figures: the median time from the
/// holder's `RELEASE` to the queued `ACQUIRE ... WAIT`'s grant reply.
pub fn handoff(r: &handoff::Results) -> Vec<TimingGoal> {
    vec![TimingGoal {
        what: "`ACQUIRE ... WAIT` handoff after `RELEASE`, median",
        measured: r.dlock.quantile(0.5),
        limit: Duration::from_millis(10),
    }]
}

pub fn print(goals: &[TimingGoal]) {
    if goals.is_empty() {
        return;
    }
    println!("### Timing goals\n");
    println!("| goal | measured ms | limit ms | result |");
    println!("| --- | ---: | ---: | --- |");
    for g in goals {
        println!(
            "| {} | {:.3} | {:.3} | {} |",
            g.what,
            g.measured.as_secs_f64() * 1e3,
            g.limit.as_secs_f64() * 1e3,
            pass(g.met())
        );
    }
    println!();
}
