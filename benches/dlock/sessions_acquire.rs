//! `DLOCK.ACQUIRE ... SESSION` against plain `DLOCK.ACQUIRE` at pipeline
//! 16 (the `sessions` section), as the throughput section measures
//! `ACQUIRE` (cases.rs): 50 connections, random resources, each side on a
//! fresh server with the same configuration, the sides alternating, the
//! ratio the median of the back-to-back pairs. Two workloads:
//!
//! - acquire only, on an empty database (the throughput section's
//!   `DLOCK.ACQUIRE` run: grants at first, refusals as the resources fill);
//! - lock cycles: per connection a batch of 16 acquisitions of random
//!   resources with fresh tokens, then the batch of their releases.
//!
//! The session side opens one session (ttl one hour) first; every
//! acquisition is `DLOCK.ACQUIRE res tok 0 SESSION <id>` against `res tok
//! 30000`.

use std::time::Instant;

use crate::cases::{self, cycle_step, name, stranger, Config, Sizes, TTL};
use crate::load::{self, Outcome, Rng, Shape};
use crate::throughput::{median, paired_ratio};
use crate::{pass, progress, Goal, Verdict};

const PIPELINE: usize = 16;
const SESSION: &[u8] = b"bench-acquire";

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    AcquireOnly,
    Cycle,
}

impl Workload {
    const ALL: [Workload; 2] = [Workload::AcquireOnly, Workload::Cycle];
    fn label(self) -> &'static str {
        match self {
            Workload::AcquireOnly => "acquire only",
            Workload::Cycle => "lock cycle (ACQUIRE + RELEASE)",
        }
    }
}

/// Per workload: ops/s of the plain and the session runs, in run order,
/// and their hit rates.
pub struct Runs {
    pub workload: Workload,
    pub plain: Vec<f64>,
    pub session: Vec<f64>,
    pub hits: [f64; 2],
}

pub fn run(config: &Config, sizes: &Sizes) -> Vec<Runs> {
    let mut out: Vec<Runs> = Workload::ALL
        .iter()
        .map(|&workload| Runs {
            workload,
            plain: vec![],
            session: vec![],
            hits: [0.0; 2],
        })
        .collect();
    for rep in 0..sizes.repeat {
        for r in out.iter_mut() {
            let order = if rep % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            for session in order {
                let t = Instant::now();
                let o = measure(config, sizes, r.workload, session);
                progress(
                    &format!(
                        "{}: sessions, {}{} -P {PIPELINE} (run {}): {:.0} ops/s",
                        config.short,
                        r.workload.label(),
                        if session { " SESSION" } else { "" },
                        rep + 1,
                        o.ops_per_sec()
                    ),
                    t.elapsed(),
                );
                r.hits[usize::from(session)] = o.hit_rate();
                if session {
                    r.session.push(o.ops_per_sec());
                } else {
                    r.plain.push(o.ops_per_sec());
                }
            }
        }
    }
    out
}

fn measure(config: &Config, sizes: &Sizes, workload: Workload, session: bool) -> Outcome {
    let server = config.server(true);
    if session {
        let _: i64 = redis::cmd("DLOCK.SESSION")
            .arg("OPEN")
            .arg(SESSION)
            .arg(3_600_000)
            .query(&mut server.conn())
            .expect("SESSION OPEN");
    }
    let keys = sizes.keys;
    let mut rng = Rng::new(0x5eed ^ PIPELINE as u64);
    let mut held: Vec<Vec<(u64, u64)>> = vec![vec![(0, 0); PIPELINE]; sizes.clients];
    let mut count = vec![0usize; sizes.clients];
    let total = match workload {
        Workload::AcquireOnly => sizes.ops_p16,
        Workload::Cycle => sizes.ops_p16.div_ceil(2 * PIPELINE as u64) * 2 * PIPELINE as u64,
    };
    let shape = Shape {
        conns: sizes.clients,
        pipeline: PIPELINE,
        total,
        latency: false,
    };
    let acquire = |buf: &mut Vec<u8>, k: &[u8], t: &[u8]| {
        if session {
            load::command(buf, &[b"DLOCK.ACQUIRE", k, t, b"0", b"SESSION", SESSION]);
        } else {
            load::command(buf, &[b"DLOCK.ACQUIRE", k, t, TTL]);
        }
    };
    let out = load::run(server.port(), shape, |conn, buf| match workload {
        Workload::AcquireOnly => {
            let k = name(b"lock:", rng.below(keys));
            let t = stranger(&mut rng);
            acquire(buf, k.as_ref(), t.as_ref());
        }
        Workload::Cycle => {
            let (acquiring, k, t) =
                cycle_step(&mut count[conn], &mut held[conn], PIPELINE, &mut rng, keys);
            if acquiring {
                acquire(buf, k.as_ref(), t.as_ref());
            } else {
                load::command(buf, &[b"DLOCK.RELEASE", k.as_ref(), t.as_ref()]);
            }
        }
    });
    cases::check(&out, workload.label());
    out
}

/// Prints the table; returns each workload's (what, ratio, goal).
pub fn print(
    config: &Config,
    sizes: &Sizes,
    runs: &[Runs],
    verdicts: &mut Vec<Verdict>,
) -> Vec<(String, f64, Goal)> {
    println!("#### `ACQUIRE ... SESSION` vs plain `ACQUIRE`\n");
    println!(
        "{} connections, pipeline {PIPELINE}, random resources among {}, {} commands per run \
         (a lock cycle counts each command), each run on a fresh server; the sides \
         alternate, {} runs each; ops/s is the median run, the ratio the median of the \
         back-to-back pairs. Session side: `DLOCK.ACQUIRE res tok 0 SESSION id` (one \
         session, opened first), plain side: `DLOCK.ACQUIRE res tok 30000`; releases are \
         `DLOCK.RELEASE` on both.\n",
        sizes.clients, sizes.keys, sizes.ops_p16, sizes.repeat
    );
    println!("| workload | plain ops/s | `SESSION` ops/s | hits plain / `SESSION` | runs plain | runs `SESSION` | ratio | goal | result |");
    println!("| --- | ---: | ---: | ---: | --- | --- | ---: | ---: | --- |");
    let goal = Goal::AtLeast(0.95);
    let list = |v: &[f64]| {
        v.iter()
            .map(|r| format!("{r:.0}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut judged = Vec::new();
    for r in runs {
        let ratio = paired_ratio(&r.session, &r.plain);
        println!(
            "| {} | {:.0} | {:.0} | {:.0}% / {:.0}% | {} | {} | {ratio:.2}x | {} | {} |",
            r.workload.label(),
            median(&r.plain),
            median(&r.session),
            r.hits[0] * 100.0,
            r.hits[1] * 100.0,
            list(&r.plain),
            list(&r.session),
            goal.text(),
            pass(goal.met(ratio))
        );
        let what = format!(
            "ACQUIRE ... SESSION vs plain ACQUIRE, {}, -P {PIPELINE}",
            r.workload.label()
        );
        verdicts.push(Verdict {
            config: config.short,
            what: what.clone(),
            ratio,
            goal,
        });
        judged.push((what, ratio, goal));
    }
    println!();
    judged
}
