//! The queue parts of the `scale-kinds` section (scale_kinds.rs defines what
//! each operation is): waiters on one resource, and a component of queued
//! sets; each size's queue (scale_kinds_queue.rs) loaded first, then the
//! runs alternating between them.

use std::time::Instant;

use crate::cases::Config;
use crate::scale_kinds::{median, num, order, vs, Goals, Settings};
use crate::scale_kinds_pool::raise_nofile;
use crate::scale_kinds_queue::Queue;
use crate::{progress, Goal};

pub fn run(config: &Config, set: &Settings, sets: bool, goals: &mut Goals) {
    let sizes = if sets { &set.sets } else { &set.waiters };
    let what = if sets { "sets" } else { "waiters" };
    let needed = sizes.iter().max().copied().unwrap_or(0) + set.batch as u64 + 512;
    let limit = raise_nofile(needed);
    let mut queues: Vec<Queue> = Vec::new();
    for &w in sizes {
        let t = Instant::now();
        let mut q = Queue::new(config, sets, w, set);
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
    report(set, sets, &queues, goals);
}

fn report(set: &Settings, sets: bool, queues: &[Queue], goals: &mut Goals) {
    let (title, unit, release) = if sets {
        ("A component of queued sets", "queued sets", "MRELEASE")
    } else {
        ("Waiters on one resource", "waiters", "RELEASE")
    };
    println!("#### {title}\n");
    println!(
        "| {unit} | fill s | fill/s | enqueue/s | vs first | handoff/s | vs first | leave/s | \
         vs first | server µs/call {release} / CLIENT UNBLOCK |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    let first: Vec<f64> = queues.first().map_or(vec![f64::NAN; 3], |q| {
        q.rates.iter().map(|v| median(v)).collect()
    });
    for q in queues {
        let r: Vec<f64> = q.rates.iter().map(|v| median(v)).collect();
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
    let (Some(a), Some(b)) = (queues.first(), queues.last()) else {
        return;
    };
    let measured = |q: &Queue| -> Result<(), String> {
        if let Some(why) = q.fill.shortfall(set.budget_secs) {
            return Err(format!("{} {unit}: {why}", q.w));
        }
        match (&q.error, q.rates[0].is_empty()) {
            (Some(e), _) => Err(format!("{} {unit}: {e}", q.w)),
            (None, true) => Err(format!("{} {unit}: no run", q.w)),
            (None, false) => Ok(()),
        }
    };
    let goal = Goal::AtLeast(if sets { 0.5 } else { 0.7 });
    for (op, name) in ["enqueue", "handoff", "leave"].iter().enumerate() {
        let ratio = measured(a)
            .and_then(|_| measured(b))
            .map(|_| median(&b.rates[op]) / median(&a.rates[op]));
        let detail = match op {
            1 | 2 => format!(
                " (server µs/call {} -> {})",
                num(median(&a.us[op - 1]), 2),
                num(median(&b.us[op - 1]), 2)
            ),
            _ => String::new(),
        };
        goals.judge(
            format!("{unit}: {name}, {} vs {} {unit}", b.w, a.w),
            goal,
            ratio,
            &detail,
        );
    }
    println!();
}
