//! The queue parts of the `scale-kinds` section (scale_kinds.rs defines what
//! each operation is): waiters on one resource beside the server's own
//! `BLPOP` on one list, and a component of queued sets; each size's queue
//! (scale_kinds_queue.rs) loaded first, then the runs alternating between
//! them.

use std::time::Instant;

use crate::cases::Config;
use crate::priorities::Spread;
use crate::scale_kinds::{median, num, order, vs, Fill, Goals, Settings};
use crate::scale_kinds_pool::raise_nofile;
use crate::scale_kinds_queue::{Kind, Queue};
use crate::{progress, Goal};

/// What one size's queue measured, once its server and connections are
/// gone.
pub struct Measured {
    pub w: u64,
    pub fill: Fill,
    /// Ops per second of each run: enqueue, handoff, leave.
    pub rates: [Vec<f64>; 3],
    /// Server µs per call of each run: the freeing command, CLIENT UNBLOCK.
    pub us: [Vec<f64>; 2],
    pub error: Option<String>,
}

impl Measured {
    pub fn rate(&self, op: usize) -> f64 {
        median(&self.rates[op])
    }
}

pub const OPS: [&str; 3] = ["enqueue", "handoff", "leave"];

/// Waiters on one resource, then (`reference`) the same sizes of `BLPOP`
/// waiters on one list measured the same way: a resource with 10,000 waiters also means
/// 10,000 blocked clients, whose cost is the server's. The two parts run one
/// after the other (each alternating between its sizes): both of their
/// largest queues at once would need more open files than this machine's
/// hard limit of 20,000.
pub fn waiters(config: &Config, set: &Settings, reference: bool, goals: &mut Goals) {
    let dlock = measure(config, set, Kind::Waiters, Spread::Fifo);
    table(
        "Waiters on one resource",
        "waiters",
        "RELEASE / CLIENT UNBLOCK",
        &dlock,
    );
    if !reference {
        judge(set, "waiters", &dlock, None, Goal::AtLeast(0.7), goals);
        return;
    }
    let blpop = measure(config, set, Kind::Blpop, Spread::Fifo);
    table(
        "Reference: the server's own blocking pop, BLPOP on one list (no module)",
        "waiters",
        "LPUSH / CLIENT UNBLOCK",
        &blpop,
    );
    println!(
        "The reference's handoff is {} `LPUSH`es pipelined, each serving the longest-waiting \
         `BLPOP` within the command (as `RELEASE` grants the head within it; inside a script the \
         list's waiters would be served only after the script); its other operations are those \
         of the waiters above. \"BLPOP\" below is the reference's ratio at the same sizes: the \
         part of the decline that the server itself shows with that many blocked clients.\n",
        set.batch
    );
    judge(
        set,
        "waiters",
        &dlock,
        Some(&blpop),
        Goal::AtLeast(0.7),
        goals,
    );
}

/// A component of queued sets.
pub fn sets(config: &Config, set: &Settings, goals: &mut Goals) {
    let sets = measure(config, set, Kind::Sets, Spread::Fifo);
    table(
        "A component of queued sets",
        "queued sets",
        "MRELEASE / CLIENT UNBLOCK",
        &sets,
    );
    judge(set, "queued sets", &sets, None, Goal::AtLeast(0.5), goals);
}

/// Loads every size's queue of `kind` (its waiters asking with the
/// priorities of `spread`), then runs them in turn.
pub fn measure(config: &Config, set: &Settings, kind: Kind, spread: Spread) -> Vec<Measured> {
    let sizes = if kind == Kind::Sets {
        &set.sets
    } else {
        &set.waiters
    };
    let what = match kind {
        Kind::Waiters => spread.waiters(),
        Kind::Sets => "sets",
        Kind::Blpop => "BLPOP waiters",
    };
    let needed = sizes.iter().sum::<u64>() + (sizes.len() * set.batch) as u64 + 512;
    let limit = raise_nofile(needed);
    let mut queues: Vec<Queue> = Vec::new();
    for &w in sizes {
        let t = Instant::now();
        let mut q = Queue::with_spread(config, kind, w, set, spread);
        if let Err(e) = &limit {
            q.fill.error.get_or_insert_with(|| e.clone());
        }
        progress(
            &format!(
                "{}: scale-kinds {w} {what} queued: {} in {:.1} s{}",
                config.short,
                q.fill.done,
                q.fill.secs,
                q.fill
                    .error
                    .as_deref()
                    .map_or(String::new(), |e| format!(": {e}"))
            ),
            t.elapsed(),
        );
        queues.push(q);
    }
    for rep in 0..set.repeat {
        for i in order(queues.len(), rep) {
            let q = &mut queues[i];
            if !q.fill.complete || q.error.is_some() {
                continue;
            }
            let t = Instant::now();
            if let Err(e) = q.run(set) {
                q.error = Some(e);
            }
            let last = |v: &[f64]| v.last().copied().unwrap_or(0.0);
            progress(
                &format!(
                    "{}: scale-kinds {} {what} (run {}): enqueue {:.0}, handoff {:.0}, leave {:.0}/s{}",
                    config.short,
                    q.w,
                    rep + 1,
                    last(&q.rates[0]),
                    last(&q.rates[1]),
                    last(&q.rates[2]),
                    q.error.as_deref().map_or(String::new(), |e| format!(": {e}"))
                ),
                t.elapsed(),
            );
        }
    }
    queues.into_iter().map(Queue::measured).collect()
}

pub fn table(title: &str, unit: &str, us_of: &str, queues: &[Measured]) {
    println!("#### {title}\n");
    println!(
        "| {unit} | fill s | fill/s | enqueue/s | vs first | handoff/s | vs first | leave/s | \
         vs first | server µs/call {us_of} |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    let first: Vec<f64> = queues
        .first()
        .map_or(vec![f64::NAN; 3], |q| (0..3).map(|op| q.rate(op)).collect());
    for q in queues {
        let r: Vec<f64> = (0..3).map(|op| q.rate(op)).collect();
        let us: Vec<String> = q.us.iter().map(|v| num(median(v), 2)).collect();
        println!(
            "| {} | {} | {:.0} | {} | {} | {} | {} | {} | {} | {} |",
            q.w,
            q.fill.cell(),
            q.fill.rate(),
            num(r[0], 0),
            vs(r[0], first[0]),
            num(r[1], 0),
            vs(r[1], first[1]),
            num(r[2], 0),
            vs(r[2], first[2]),
            us.join(" / ")
        );
    }
    println!();
    for q in queues {
        if let Some(e) = &q.error {
            println!("- {} {unit}: runs stopped: {e}", q.w);
        }
    }
}

/// The largest size's rate of `op` over the smallest's, or why there is none.
pub fn ratio(set: &Settings, unit: &str, queues: &[Measured], op: usize) -> Result<f64, String> {
    let (Some(a), Some(b)) = (queues.first(), queues.last()) else {
        return Err("no size".into());
    };
    let measured = |q: &Measured| -> Result<(), String> {
        if let Some(why) = q.fill.shortfall(set.budget_secs) {
            return Err(format!("{} {unit}: {why}", q.w));
        }
        match (&q.error, q.rates[op].is_empty()) {
            (Some(e), _) => Err(format!("{} {unit}: {e}", q.w)),
            (None, true) => Err(format!("{} {unit}: no run", q.w)),
            (None, false) => Ok(()),
        }
    };
    measured(a)?;
    measured(b)?;
    Ok(b.rate(op) / a.rate(op))
}

/// The goal lines: each operation's ratio, with the server's µs per call
/// and, when there is one, the reference's ratio beside it.
fn judge(
    set: &Settings,
    unit: &str,
    queues: &[Measured],
    reference: Option<&[Measured]>,
    goal: Goal,
    goals: &mut Goals,
) {
    let (Some(a), Some(b)) = (queues.first(), queues.last()) else {
        return;
    };
    for (op, name) in OPS.iter().enumerate() {
        let mut detail = Vec::new();
        if op > 0 {
            detail.push(format!(
                "server µs/call {} -> {}",
                num(median(&a.us[op - 1]), 2),
                num(median(&b.us[op - 1]), 2)
            ));
        }
        if let Some(r) = reference {
            detail.push(match ratio(set, unit, r, op) {
                Ok(x) => format!("BLPOP {x:.2}x"),
                Err(why) => format!("BLPOP not measured: {why}"),
            });
        }
        let detail = if detail.is_empty() {
            String::new()
        } else {
            format!(" ({})", detail.join("; "))
        };
        goals.judge(
            format!("{unit}: {name}, {} vs {} {unit}", b.w, a.w),
            goal,
            ratio(set, unit, queues, op),
            &detail,
        );
    }
    println!();
}
