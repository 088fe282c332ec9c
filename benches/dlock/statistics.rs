//! What `DLOCK.STATS` costs the hot path: ACQUIRE and owner RELEASE at pipeline 16 with
//! the statistics on (`dlock.stats yes`, the default) against the same
//! build with them off, interleaved on two servers up at once (as
//! baseline.rs compares two builds). Goal: >= 0.97x at pipeline 16, where
//! the server's work per command shows.

use std::time::Instant;

use crate::cases::{Config, Sizes};
use crate::interleave::{self, Cmd};
use crate::throughput::wanted;
use crate::{paired, progress, Goal, Verdict};

const GOAL: Goal = Goal::AtLeast(0.97);

const OPS: &[(&str, Cmd)] = &[("ACQUIRE", Cmd::Acquire), ("RELEASE, owner", Cmd::Release)];

pub fn run(config: &Config, sizes: &Sizes, verdicts: &mut Vec<Verdict>) {
    let mut off = config.clone();
    off.args.extend(["--dlock.stats", "no"]);
    let t = Instant::now();
    let mut rows = Vec::new();
    for &(title, op) in OPS.iter().filter(|(t, _)| wanted(t)) {
        {
            let (pipeline, total) = (16usize, sizes.ops_p16);
            let mut runs = paired::Runs::default();
            for rep in 1..=sizes.repeat {
                let blocks = interleave::run(
                    (config, op),
                    (&off, op),
                    pipeline,
                    total,
                    sizes.clients,
                    sizes.keys,
                    rep,
                );
                runs.d.push(blocks.this);
                runs.b.push(blocks.other);
                runs.ratios.extend(blocks.ratios);
            }
            rows.push((title, pipeline, runs));
        }
    }
    progress(
        &format!("{}: statistics on and off", config.short),
        t.elapsed(),
    );
    println!("### Statistics on and off\n");
    println!(
        "The same build on two servers up at once, one with `dlock.stats yes` (the default), \
         one with `dlock.stats no`; the throughput table's workloads; {} pairs, each run cut \
         into {} blocks alternating between the sides (ABBA); the ratio (on / off) is the \
         median of the blocks' ratios. Goal at pipeline 16: {}.\n",
        sizes.repeat,
        interleave::BLOCKS,
        GOAL.text()
    );
    paired::header("stats on", "stats off");
    for (title, pipeline, runs) in &rows {
        let what = format!("{title}, statistics on vs off");
        paired::row(config.short, &what, *pipeline, 1.0, GOAL, runs, verdicts);
    }
    println!();
}
