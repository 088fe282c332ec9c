//! The `priorities` section: what `PRIORITY` costs a queue, and how long a
//! request of priority 0 waits under a stream of higher ones
//! (docs/waiting.md#priorities, docs/performance.md#priorities).
//!
//! - **Queue cost.** The `scale-kinds` section's waiters
//!   (scale_kinds_queue.rs: rounds of enqueue, handoff, enqueue, leave on
//!   one resource with W waiters, at `DLOCK_BENCH_SCALE_KINDS_WAITERS`,
//!   10 and 10,000 by default), run three times: plain FIFO (no
//!   `PRIORITY`), every waiter at one priority (`PRIORITY 5`: each new
//!   waiter still goes to the tail, the append path), and each at a random
//!   priority from 0 to 10 (the inserts land inside the queue, the ordered
//!   index's path); beside them `BLPOP` waiters at the same sizes, the
//!   server's own blocked clients. Goals: each prioritized rate >= 0.9x
//!   plain FIFO's at the same size, and its 10,000 rate >= 0.7x its 10
//!   rate or >= BLPOP's own ratio (the part of the decline the server shows
//!   with that many blocked clients, whoever blocked them).
//! - **Starvation bound** (priorities_wait.rs).

use crate::cases::Config;
use crate::priorities_wait;
use crate::scale_kinds::{Goals, Settings};
use crate::scale_kinds_queue::Kind;
use crate::scale_kinds_waiters::{measure, ratio, table, Measured, OPS};
use crate::{Goal, Unmeasured, Verdict};
use std::time::Instant;

/// The priorities a queue's waiters ask with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spread {
    /// No `PRIORITY`.
    Fifo,
    /// `PRIORITY p` for every waiter.
    One(u16),
    /// `PRIORITY` drawn from 0 to `top`, a hash of the request's serial.
    Random(u16),
}

impl Spread {
    /// The priority of the waiter numbered `serial`.
    pub fn of(self, serial: u64) -> Option<u16> {
        match self {
            Spread::Fifo => None,
            Spread::One(p) => Some(p),
            Spread::Random(top) => {
                let h = serial.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32;
                Some((h % (u64::from(top) + 1)) as u16)
            }
        }
    }

    pub fn waiters(self) -> &'static str {
        match self {
            Spread::Fifo => "waiters",
            Spread::One(_) => "waiters at one priority",
            Spread::Random(_) => "waiters at random priorities",
        }
    }

    fn title(self) -> String {
        match self {
            Spread::Fifo => "Plain FIFO: no PRIORITY".into(),
            Spread::One(p) => format!("Every waiter at PRIORITY {p} (appended at the tail)"),
            Spread::Random(top) => {
                format!(
                    "Each waiter at a random PRIORITY from 0 to {top} (inserted inside the queue)"
                )
            }
        }
    }
}

pub fn run(
    config: &Config,
    set: &Settings,
    verdicts: &mut Vec<Verdict>,
    unmeasured: &mut Vec<Unmeasured>,
) {
    let t = Instant::now();
    println!("### Priorities\n");
    println!(
        "The queue of one resource as in the scale-kinds section (rounds of {} enqueues, \
         handoffs, enqueues and leaves; {} runs of at most {} s per size, alternating, medians), \
         with the waiters asking for no priority, one priority, or random ones; then \
         `BLPOP` waiters at the same sizes. `benches/dlock/priorities.rs` says what each is.\n",
        set.batch, set.repeat, set.run_secs
    );
    let mut goals = Goals {
        config: config.short,
        verdicts,
        unmeasured,
    };
    let spreads = [Spread::Fifo, Spread::One(5), Spread::Random(10)];
    let mut measured: Vec<Vec<Measured>> = Vec::new();
    for s in spreads {
        let m = measure(config, set, Kind::Waiters, s);
        table(&s.title(), "waiters", "RELEASE / CLIENT UNBLOCK", &m);
        measured.push(m);
    }
    let blpop = measure(config, set, Kind::Blpop, Spread::Fifo);
    table(
        "Reference: BLPOP on one list (no module)",
        "waiters",
        "LPUSH / CLIENT UNBLOCK",
        &blpop,
    );
    for (i, s) in spreads.iter().enumerate().skip(1) {
        let name = s.waiters();
        // Against plain FIFO at each size.
        for (k, q) in measured[i].iter().enumerate() {
            let plain = measured[0].get(k);
            for (op, opname) in OPS.iter().enumerate() {
                let r = match plain {
                    Some(f)
                        if q.error.is_none()
                            && f.error.is_none()
                            && !q.rates[op].is_empty()
                            && !f.rates[op].is_empty() =>
                    {
                        Ok(q.rate(op) / f.rate(op))
                    }
                    _ => Err("a run stopped or a fill ran out".to_string()),
                };
                goals.judge(
                    format!("priorities: {opname}, {} {name} vs plain FIFO", q.w),
                    Goal::AtLeast(0.9),
                    r,
                    "",
                );
            }
        }
        // Its largest size against its smallest, beside BLPOP's.
        let (Some(a), Some(b)) = (measured[i].first(), measured[i].last()) else {
            continue;
        };
        for (op, opname) in OPS.iter().enumerate() {
            let reference = ratio(set, "waiters", &blpop, op);
            let (goal, detail) = match &reference {
                Ok(x) => (
                    Goal::AtLeast(((0.7f64).min(*x) * 100.0).floor() / 100.0),
                    format!(" (BLPOP {x:.2}x; goal 0.7x or BLPOP's, the lower)"),
                ),
                Err(why) => (Goal::AtLeast(0.7), format!(" (BLPOP not measured: {why})")),
            };
            goals.judge(
                format!("priorities: {opname}, {} vs {} {name}", b.w, a.w),
                goal,
                ratio(set, "waiters", &measured[i], op),
                &detail,
            );
        }
    }
    println!();
    priorities_wait::run(config, &mut goals);
    crate::progress(&format!("{}: priorities", config.short), t.elapsed());
}
