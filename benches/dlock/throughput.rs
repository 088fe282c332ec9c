//! Throughput and latency: each comparison's two sides alternate, each on
//! a fresh server, and the ratio is the median of back-to-back pairs.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::cases::{self, Config, Op, Sizes};
use crate::load::Outcome;
use crate::stats::Summary;
use crate::{env_list, pass, progress, Goal, Verdict};

/// The throughput comparisons: (title, dlock side, baseline side, goal).
const PAIRS: &[(&str, Op, Op, Option<Goal>)] = &[
    (
        "ACQUIRE vs SET NX PX",
        Op::Acquire,
        Op::SetNx,
        Some(Goal::AtLeast(0.95)),
    ),
    (
        "RELEASE vs Lua unlock, owner",
        Op::ReleaseHit,
        Op::LuaReleaseHit,
        Some(Goal::AtLeast(1.5)),
    ),
    (
        "RELEASE vs Lua unlock, wrong token",
        Op::ReleaseMiss,
        Op::LuaReleaseMiss,
        Some(Goal::AtLeast(1.5)),
    ),
    (
        "RELEASE vs DEL, owner",
        Op::ReleaseHit,
        Op::DelHit,
        Some(Goal::AtLeast(0.9)),
    ),
    (
        "EXTEND vs Lua pexpire, owner",
        Op::ExtendHit,
        Op::LuaExtendHit,
        Some(Goal::AtLeast(2.0)),
    ),
    (
        "lock cycle: ACQUIRE + RELEASE vs SET NX PX + Lua unlock",
        Op::CycleDlock,
        Op::CycleLua,
        None,
    ),
];

const ALL_OPS: &[Op] = &[
    Op::Acquire,
    Op::SetNx,
    Op::ReleaseHit,
    Op::LuaReleaseHit,
    Op::DelHit,
    Op::ReleaseMiss,
    Op::LuaReleaseMiss,
    Op::ExtendHit,
    Op::LuaExtendHit,
    Op::CycleDlock,
    Op::CycleLua,
];

/// Every op at pipeline 1 and 16: the run with the median throughput.
pub type Results = HashMap<(Op, usize), Outcome>;
/// Every op at pipeline 1 and 16: ops/s of each repetition, in run order.
pub type Runs = HashMap<(Op, usize), Vec<f64>>;

pub fn run(config: &Config, sizes: &Sizes) -> (Results, Runs) {
    let mut all: HashMap<(Op, usize), Vec<Outcome>> = HashMap::new();
    for pipeline in [1usize, 16] {
        let total = if pipeline == 1 {
            sizes.ops_p1
        } else {
            sizes.ops_p16
        };
        // Sides interleaved and repeated: run i of one side is paired with
        // run i of the other, which saw nearly the same machine.
        for rep in 0..sizes.repeat {
            for op in selected_ops() {
                let t = Instant::now();
                let out = cases::measure(config, op, pipeline, total, sizes);
                progress(
                    &format!(
                        "{}: {} -P {pipeline} (run {}): {:.0} ops/s",
                        config.short,
                        op.label(),
                        rep + 1,
                        out.ops_per_sec()
                    ),
                    t.elapsed(),
                );
                all.entry((op, pipeline)).or_default().push(out);
            }
        }
    }
    let mut results = HashMap::new();
    let mut runs = HashMap::new();
    for (k, outs) in all {
        let v: Vec<f64> = outs.iter().map(Outcome::ops_per_sec).collect();
        let mid = median(&v);
        if let Some(o) = outs.into_iter().find(|o| o.ops_per_sec() == mid) {
            results.insert(k, o);
        }
        runs.insert(k, v);
    }
    (results, runs)
}

/// The middle value (the upper one of an even count).
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s.get(s.len() / 2).copied().unwrap_or(0.0)
}

/// dlock / baseline for each pair of runs made back to back; the median.
pub fn paired_ratio(d: &[f64], b: &[f64]) -> f64 {
    let r: Vec<f64> = d.iter().zip(b).map(|(d, b)| d / b.max(1e-9)).collect();
    median(&r)
}

/// Whether `DLOCK_BENCH_ONLY` (comma-separated words; unset: all) selects
/// the comparison called `title`.
pub fn wanted(title: &str) -> bool {
    let only = env_list("DLOCK_BENCH_ONLY", "");
    only.is_empty()
        || only
            .iter()
            .any(|w| title.to_lowercase().contains(&w.to_lowercase()))
}

/// The sides of the comparisons `DLOCK_BENCH_ONLY` selects, in run order.
fn selected_ops() -> Vec<Op> {
    ALL_OPS
        .iter()
        .copied()
        .filter(|op| {
            PAIRS
                .iter()
                .any(|&(title, d, b, _)| (d == *op || b == *op) && wanted(title))
        })
        .collect()
}

fn is_cycle(op: Op) -> bool {
    matches!(op, Op::CycleDlock | Op::CycleLua)
}

pub fn print(
    config: &Config,
    results: &Results,
    runs: &Runs,
    repeat: usize,
    verdicts: &mut Vec<Verdict>,
) {
    println!("### Throughput\n");
    println!(
        "ops/s, 50 clients, random resources; a lock cycle counts as one op (two commands). \
         \"hits\" is the share of positive replies (a grant, `OK`, 1) and shows what each side \
         really did. Each side ran {repeat} times, alternating with the other; ops/s is the \
         median run, the ratio the median of the {repeat} back-to-back pairs, and \"spread\" \
         how much faster the fastest run was than the slowest (the run-to-run noise on this \
         machine).\n"
    );
    println!("| comparison | pipeline | dlock ops/s | baseline ops/s | hits dlock / baseline | spread dlock / baseline | ratio | goal | result |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |");
    for &(title, d, b, goal) in PAIRS {
        for pipeline in [1usize, 16] {
            let (Some(dr), Some(br), Some(dv), Some(bv)) = (
                results.get(&(d, pipeline)),
                results.get(&(b, pipeline)),
                runs.get(&(d, pipeline)),
                runs.get(&(b, pipeline)),
            ) else {
                continue;
            };
            let div = if is_cycle(d) { 2.0 } else { 1.0 };
            let ratio = paired_ratio(dv, bv);
            let (goal_text, result) = match goal {
                Some(g) => {
                    verdicts.push(Verdict {
                        config: config.short,
                        what: format!("{title}, -P {pipeline}"),
                        ratio,
                        goal: g,
                    });
                    (g.text(), pass(g.met(ratio)).to_string())
                }
                None => ("-".into(), "-".into()),
            };
            let pct = |v: &[f64]| {
                let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = v.iter().copied().fold(0.0, f64::max);
                (hi / lo.max(1e-9) - 1.0) * 100.0
            };
            println!(
                "| {title} | {pipeline} | {:.0} | {:.0} | {:.0}% / {:.0}% | {:.0}% / {:.0}% | {ratio:.2}x | {goal_text} | {result} |",
                dr.ops_per_sec() / div,
                br.ops_per_sec() / div,
                dr.hit_rate() * 100.0,
                br.hit_rate() * 100.0,
                pct(dv),
                pct(bv),
            );
        }
    }
    println!();
}

pub fn print_latency(results: &Results) {
    println!("### Latency at pipeline 1\n");
    println!(
        "Per command, 50 clients in a closed loop (so it includes queueing behind the other \
         49); ms. For the lock cycles, per command (acquire or release).\n"
    );
    println!("| command | p50 ms | p99 ms | p99.9 ms | max ms |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    for &op in ALL_OPS {
        let Some(r) = results.get(&(op, 1)) else {
            continue;
        };
        let s = Summary::of(
            r.latencies_ns
                .iter()
                .map(|&n| Duration::from_nanos(n))
                .collect(),
        );
        println!(
            "| {} | {} | {} | {} | {} |",
            op.label(),
            s.ms(0.5),
            s.ms(0.99),
            s.ms(0.999),
            s.ms(1.0)
        );
    }
    println!();
}
