//! `BASELINE=/path/to/libdlock.so make bench`: this build of the module
//! against another build of it (the main branch before a change, an older
//! release) on the plain lock: `ACQUIRE`, owner `RELEASE` and owner
//! `EXTEND` throughput (the throughput table's workloads, cases.rs) and
//! memory per lock. Both sides run with a module loaded, each run on a
//! fresh server with the same configuration; the sides alternate and the
//! ratio is the median of the back-to-back pairs (paired.rs). A change that
//! adds features must leave the plain lock as it was: ratio >= 0.97 (no
//! slower beyond the noise) and the same memory per lock.
//!
//! Without `BASELINE` the section is skipped with a one-line note. Against
//! a byte-identical build (an A/A run) the ratios show this machine's noise.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::cases::{self, Config, Op, Sizes};
use crate::common::{module_path, Server};
use crate::paired;
use crate::throughput::wanted;
use crate::{pass, progress, Goal, Verdict};

/// The compared commands: (title, workload).
const OPS: &[(&str, Op)] = &[
    ("ACQUIRE", Op::Acquire),
    ("RELEASE, owner", Op::ReleaseHit),
    ("EXTEND, owner", Op::ExtendHit),
];

/// Throughput goal: this build / the baseline build.
const SPEED: Goal = Goal::AtLeast(0.97);
/// Memory goal: the same bytes per lock (0.5% for the measurement's own
/// rounding: `used_memory` also moves with the server's own buffers).
const MEMORY: Goal = Goal::AtMost(1.005);

/// The other build, from `BASELINE`; `Err` with a one-line note when it is
/// unset, missing or does not load.
pub fn build() -> Result<PathBuf, String> {
    let skipped = "Baseline build comparison skipped";
    let Some(path) = std::env::var_os("BASELINE").filter(|p| !p.is_empty()) else {
        return Err(format!(
            "{skipped}: set `BASELINE=/path/to/libdlock.so` to compare this build with another \
             (README, Performance)."
        ));
    };
    let path = PathBuf::from(path);
    if !path.is_file() {
        return Err(format!(
            "{skipped}: `BASELINE={}` is not a file.",
            path.display()
        ));
    }
    let loads = Server::builder()
        .without_module()
        .arg("--loadmodule")
        .arg(path.display().to_string())
        .try_start();
    if let Err(log) = loads {
        let why = log.lines().find(|l| l.contains("Module")).unwrap_or("");
        return Err(format!(
            "{skipped}: `BASELINE={}` does not load: {}",
            path.display(),
            why.trim()
        ));
    }
    Ok(path)
}

fn describe(path: &Path) -> String {
    let len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    format!("`{}` ({len} bytes)", path.display())
}

pub fn run(config: &Config, sizes: &Sizes, verdicts: &mut Vec<Verdict>) {
    let Ok(other) = build() else {
        return;
    };
    let base = Config {
        module: Some(other.clone()),
        ..config.clone()
    };
    let t = Instant::now();
    let ops: Vec<(&str, Op)> = OPS.iter().copied().filter(|(t, _)| wanted(t)).collect();
    let mut rows = Vec::new();
    for &(title, op) in &ops {
        for pipeline in [1usize, 16] {
            let total = if pipeline == 1 {
                sizes.ops_p1
            } else {
                sizes.ops_p16
            };
            let runs = paired::alternate(sizes.repeat, true, |this, rep| {
                let t = Instant::now();
                let out = cases::measure(
                    if this { config } else { &base },
                    op,
                    pipeline,
                    total,
                    sizes,
                );
                let side = if this { "this build" } else { "baseline build" };
                progress(
                    &format!(
                        "{}: {} ({side}) -P {pipeline} (run {rep}): {:.0} ops/s",
                        config.short,
                        op.label(),
                        out.ops_per_sec()
                    ),
                    t.elapsed(),
                );
                out
            });
            rows.push((title, pipeline, runs));
        }
    }
    let memory = wanted("memory").then(|| {
        let this = cases::memory_per_key(config, true, sizes.memory_locks);
        let base = cases::memory_per_key(&base, true, sizes.memory_locks);
        (this, base)
    });
    progress(&format!("{}: baseline build", config.short), t.elapsed());

    let this = module_path();
    let same = std::fs::read(&this).ok() == std::fs::read(&other).ok();
    println!("### This build against the baseline build\n");
    println!(
        "This build: {}; baseline (`BASELINE`): {}{}. Both sides run the module; the workloads \
         are the throughput table's (random resources out of {}; owner RELEASE and EXTEND on \
         populated locks), each run on a fresh server; {} runs per side, alternating, and the \
         side that goes first alternates too; the ratio (this / baseline) is the median of the \
         back-to-back pairs.\n",
        describe(&this),
        describe(&other),
        if same {
            " (byte-identical: an A/A run, the ratios show the noise)"
        } else {
            ""
        },
        sizes.keys,
        sizes.repeat
    );
    if !rows.is_empty() {
        paired::header("this build", "baseline");
        for (title, pipeline, runs) in &rows {
            let what = format!("{title}, this build vs baseline build");
            paired::row(config.short, &what, *pipeline, 1.0, SPEED, runs, verdicts);
        }
        println!();
    }
    if let Some((this, base)) = memory {
        let ratio = this / base;
        println!("| keys | this build bytes/lock | baseline bytes/lock | ratio | goal | result |");
        println!("| ---: | ---: | ---: | ---: | ---: | --- |");
        println!(
            "| {} | {this:.1} | {base:.1} | {ratio:.3}x | {} | {} |\n",
            sizes.memory_locks,
            MEMORY.text(),
            pass(MEMORY.met(ratio))
        );
        verdicts.push(Verdict {
            config: config.short,
            what: format!(
                "memory per lock, this build vs baseline build, {} keys",
                sizes.memory_locks
            ),
            ratio,
            goal: MEMORY,
        });
    }
}
