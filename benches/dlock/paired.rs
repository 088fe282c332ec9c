//! Paired runs for the comparisons outside the main throughput table
//! (holds.rs; baseline.rs prints its interleaved runs, interleave.rs,
//! through the same table). As in throughput.rs, the two sides alternate,
//! each run on a fresh server, and the ratio is the median of the
//! back-to-back pairs; here the side that goes first also alternates from
//! pair to pair, so that a drift on the machine (another job, a warming
//! cache) does not always favour the same side.

use crate::load::Outcome;
use crate::throughput::{median, paired_ratio};
use crate::{pass, Goal, Verdict};

/// The runs of both sides; `d` is empty when that side was skipped.
#[derive(Default)]
pub struct Runs {
    pub d: Vec<Outcome>,
    pub b: Vec<Outcome>,
    /// Ratios measured side by side within the runs (interleave.rs); when
    /// there are any, the row's ratio is their median rather than the
    /// median of the runs' ratios.
    pub ratios: Vec<f64>,
}

/// `repeat` pairs of `run(true, i)` (the dlock side, or this build) and
/// `run(false, i)` (the other side), i = 1..=repeat; with `both` false only
/// the other side runs.
pub fn alternate(repeat: usize, both: bool, mut run: impl FnMut(bool, usize) -> Outcome) -> Runs {
    let mut r = Runs::default();
    for rep in 0..repeat {
        let order: &[bool] = if rep % 2 == 0 {
            &[true, false]
        } else {
            &[false, true]
        };
        for &d in order {
            if d && both {
                r.d.push(run(true, rep + 1));
            } else if !d {
                r.b.push(run(false, rep + 1));
            }
        }
    }
    r
}

fn ops(v: &[Outcome]) -> Vec<f64> {
    v.iter().map(Outcome::ops_per_sec).collect()
}

/// How much faster the fastest run was than the slowest, in percent.
fn spread(v: &[f64]) -> f64 {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(0.0, f64::max);
    (hi / lo.max(1e-9) - 1.0) * 100.0
}

/// Share of positive replies over every run of a side, in percent.
fn hits(v: &[Outcome]) -> f64 {
    let pos: u64 = v.iter().map(|o| o.positive).sum();
    let neg: u64 = v.iter().map(|o| o.negative).sum();
    pos as f64 * 100.0 / (pos + neg).max(1) as f64
}

/// The table's header, with the two sides' names.
pub fn header(d: &str, b: &str) {
    println!(
        "| comparison | pipeline | {d} ops/s | {b} ops/s | hits {d} / {b} | spread {d} / {b} \
         | ratio | goal | result |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |");
}

/// One table row; a judged ratio also goes to `verdicts`. `commands` is
/// the number of commands that make one op (2 for a lock cycle).
pub fn row(
    config: &'static str,
    title: &str,
    pipeline: usize,
    commands: f64,
    goal: Goal,
    runs: &Runs,
    verdicts: &mut Vec<Verdict>,
) {
    let (dv, bv) = (ops(&runs.d), ops(&runs.b));
    let b_ops = median(&bv) / commands;
    if dv.is_empty() {
        println!(
            "| {title} | {pipeline} | skipped | {b_ops:.0} | - / {:.0}% | - / {:.0}% | - | {} | SKIP |",
            hits(&runs.b),
            spread(&bv),
            goal.text()
        );
        return;
    }
    let ratio = if runs.ratios.is_empty() {
        paired_ratio(&dv, &bv)
    } else {
        median(&runs.ratios)
    };
    verdicts.push(Verdict {
        config,
        what: format!("{title}, -P {pipeline}"),
        ratio,
        goal,
    });
    println!(
        "| {title} | {pipeline} | {:.0} | {b_ops:.0} | {:.0}% / {:.0}% | {:.0}% / {:.0}% | {ratio:.2}x | {} | {} |",
        median(&dv) / commands,
        hits(&runs.d),
        hits(&runs.b),
        spread(&dv),
        spread(&bv),
        goal.text(),
        pass(goal.met(ratio))
    );
}
