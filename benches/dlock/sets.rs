//! Several resources at once: a set of 3 resources under one hash
//! tag (`{set:<n>}:a`, `:b`, `:c`) locked and released by three sides, in
//! the same run, with the same load generator, connections and pipeline:
//!
//! - **set**: `DLOCK.MACQUIRE 3 ... tok 30000`, `DLOCK.MRELEASE 3 ... tok`;
//! - **singles**: 3 pipelined `DLOCK.ACQUIRE`s, 3 pipelined
//!   `DLOCK.RELEASE`s (cheap but not all or nothing: a client that gets
//!   two members of three holds a partial set);
//! - **Lua**: `EVALSHA` of sets_lua.rs's all-or-nothing script over 3
//!   `SET NX PX` keys, and its compare-and-delete release (plain Redis,
//!   no module).
//!
//! Pipeline P means P sets per batch on every side (3P commands for the
//! singles). Two workloads: lock cycles (per connection, a batch of P
//! random sets with fresh tokens, then the batch of their releases; the
//! same sequence on every side), and the two halves alone (every set of a
//! shuffled walk acquired once on an empty server, then every one released
//! once, each half timed on its own). After each run the server's counters
//! must show every grant released by its owner (sets_lua.rs, `Counters`).

use std::time::Instant;

use crate::cases::{self, Config, Sizes};
use crate::load::{self, Outcome, Rng, Shape};
use crate::sets_lua::{self, write, Counters, Side, MEMBERS, SET_ACQUIRE, SET_RELEASE, SIDES};
use crate::throughput::{median, paired_ratio, wanted};
use crate::{pass, progress, Goal, Verdict};

/// The rows: what is timed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Row {
    Cycle,
    Acquire,
    Release,
}

impl Row {
    fn title(self) -> &'static str {
        match self {
            Row::Cycle => "set of 3: MACQUIRE + MRELEASE cycle",
            Row::Acquire => "set of 3: MACQUIRE alone",
            Row::Release => "set of 3: MRELEASE alone",
        }
    }
}

/// One side's run on a fresh server: the timed parts (one for a cycle
/// run; acquire and release for the other), ops counted in sets, and the
/// server CPU each part took, µs.
struct Run {
    outcomes: Vec<Outcome>,
    cpu_us: Vec<u64>,
}

/// Counts ops in sets (or cycles) instead of commands.
fn in_sets(mut o: Outcome, commands: usize) -> Outcome {
    o.ops /= commands as u64;
    o
}

fn measure(
    config: &Config,
    side: Side,
    cycle: bool,
    pipeline: usize,
    sets: u64,
    sizes: &Sizes,
) -> Run {
    let server = config.server(side != Side::Lua);
    let sha = if side == Side::Lua {
        [SET_ACQUIRE, SET_RELEASE].map(|s| cases::script_sha(&server, s))
    } else {
        Default::default()
    };
    let mut c = server.conn();
    let before = Counters::read(&mut c);
    let per = side.per_set();
    let shape = |sets: u64| Shape {
        conns: sizes.clients,
        pipeline: pipeline * per,
        total: sets * per as u64,
        latency: false,
    };
    let (mut outcomes, mut cpu_us) = (Vec::new(), Vec::new());
    if cycle {
        let cpu = sets_lua::cpu_us(&mut c);
        // The same seed on every side: the same sets and tokens.
        let mut rng = Rng::new(0x5e75 ^ pipeline as u64);
        let keys = sizes.keys;
        let mut held: Vec<Vec<(u64, u64)>> = vec![vec![(0, 0); pipeline]; sizes.clients];
        let mut count = vec![0usize; sizes.clients];
        let batches = sets.div_ceil(pipeline as u64).div_ceil(2) * 2;
        let out = load::run(
            server.port(),
            shape(batches * pipeline as u64 * 2),
            |conn, buf| {
                let i = count[conn];
                count[conn] += 1;
                let (step, m) = (i / per, i % per);
                let acquiring = (step / pipeline).is_multiple_of(2);
                let slot = &mut held[conn][step % pipeline];
                if acquiring && m == 0 {
                    *slot = (
                        rng.below(keys),
                        100_000_000_000 + rng.below(900_000_000_000),
                    );
                }
                write(buf, side, acquiring, m, slot.0, slot.1, &sha);
            },
        );
        cases::check(&out, Row::Cycle.title());
        outcomes.push(in_sets(out, 2 * per));
        cpu_us.push(sets_lua::cpu_us(&mut c) - cpu);
        // A connection whose last batch acquired still holds it: release
        // it (untimed) so that the counters must balance.
        let left: Vec<(usize, u64, u64)> = held
            .iter()
            .zip(&count)
            .filter(|(_, &n)| (n / per / pipeline) % 2 == 1)
            .flat_map(|(slots, _)| {
                slots
                    .iter()
                    .flat_map(|&(n, t)| (0..per).map(move |m| (m, n, t)))
            })
            .collect();
        let mut it = left.iter();
        let cleanup = load::run(
            server.port(),
            Shape {
                conns: 1,
                pipeline: 1024,
                total: left.len() as u64,
                latency: false,
            },
            |_, buf| {
                let &(m, n, t) = it.next().expect("cleanup");
                write(buf, side, false, m, n, t, &sha);
            },
        );
        cases::check(&cleanup, "cleanup");
    } else {
        let mut rng = Rng::new(0xa10e ^ pipeline as u64);
        let mut perm: Vec<u64> = (0..sizes.keys).collect();
        let mut halves = [Outcome::default(), Outcome::default()];
        let mut cpu = [0u64; 2];
        let mut left = sets;
        while left > 0 {
            rng.shuffle(&mut perm);
            let n = left.min(sizes.keys) as usize;
            let round = &mut perm[..n];
            for (half, acquiring) in [true, false].into_iter().enumerate() {
                let start = sets_lua::cpu_us(&mut c);
                let mut at = vec![(0usize, 0u64); sizes.clients];
                let mut next = round.iter().copied();
                let out = load::run(server.port(), shape(n as u64), |conn, buf| {
                    let (i, set) = &mut at[conn];
                    if *i % per == 0 {
                        *set = next.next().expect("walk exhausted");
                    }
                    write(buf, side, acquiring, *i % per, *set, *set, &sha);
                    *i += 1;
                });
                let row = if acquiring {
                    Row::Acquire
                } else {
                    Row::Release
                };
                cases::check(&out, row.title());
                assert_eq!(
                    out.negative, 0,
                    "{side:?}: every set of the walk is free, then held"
                );
                cpu[half] += sets_lua::cpu_us(&mut c) - start;
                halves[half].absorb(in_sets(out, per));
                rng.shuffle(round);
            }
            left -= n as u64;
        }
        outcomes.extend(halves);
        cpu_us.extend(cpu);
    }
    let after = Counters::read(&mut c);
    let releases_per_grant = if side == Side::Set { MEMBERS } else { 1 };
    before.check(
        after,
        &mut c,
        releases_per_grant as u64,
        &format!("{side:?} sets"),
    );
    Run { outcomes, cpu_us }
}

/// Every run of each side (indexed by `Side`) at one pipeline, for one
/// workload.
type Side3 = [Vec<Run>; 3];

/// The section: a table of every row at pipeline 1 and 16.
pub fn run(config: &Config, sizes: &Sizes, verdicts: &mut Vec<Verdict>) {
    let rows: Vec<Row> = [Row::Cycle, Row::Acquire, Row::Release]
        .into_iter()
        .filter(|r| wanted(r.title()))
        .collect();
    if rows.is_empty() {
        return;
    }
    let t = Instant::now();
    sets_lua::self_check(&config.server(false));
    let support = sets_lua::probe(&config.server(true));
    let mut results = Vec::new();
    for pipeline in [1usize, 16] {
        let total = if pipeline == 1 {
            sizes.ops_p1
        } else {
            sizes.ops_p16
        };
        // Sets (or cycles) per run: half the commands of a throughput run,
        // whose lock cycle of a single lock is two commands.
        let sets = total / 2;
        let alone = rows.iter().any(|&r| r != Row::Cycle);
        for (cycle, on) in [(true, rows.contains(&Row::Cycle)), (false, alone)] {
            if !on {
                continue;
            }
            let mut all = Side3::default();
            for rep in 0..sizes.repeat {
                let mut order = SIDES;
                order.rotate_left(rep % 3);
                if rep % 2 == 1 {
                    order.reverse();
                }
                for side in order {
                    if side == Side::Set && support.is_err() {
                        continue;
                    }
                    let t = Instant::now();
                    let r = measure(config, side, cycle, pipeline, sets, sizes);
                    let shown: Vec<String> = r
                        .outcomes
                        .iter()
                        .map(|o| format!("{:.0}", o.ops_per_sec()))
                        .collect();
                    progress(
                        &format!(
                            "{}: sets {side:?} {} -P {pipeline} (run {}): {} sets/s",
                            config.short,
                            if cycle { "cycle" } else { "acquire, release" },
                            rep + 1,
                            shown.join(", ")
                        ),
                        t.elapsed(),
                    );
                    all[side as usize].push(r);
                }
            }
            results.push((cycle, pipeline, all));
        }
    }
    progress(&format!("{}: sets", config.short), t.elapsed());
    print(config, sizes, &rows, &support, &results, verdicts);
}

/// ops/s of outcome `k` of every run.
fn ops(runs: &[Run], k: usize) -> Vec<f64> {
    runs.iter().map(|r| r.outcomes[k].ops_per_sec()).collect()
}

fn hits(runs: &[Run], k: usize) -> String {
    if runs.is_empty() {
        return "-".into();
    }
    let (p, n) = runs.iter().fold((0, 0), |(p, n), r| {
        (p + r.outcomes[k].positive, n + r.outcomes[k].negative)
    });
    format!("{:.0}%", p as f64 * 100.0 / (p + n).max(1) as f64)
}

/// Server CPU per set (or cycle) of part `k`, µs, median over the runs.
fn cpu(runs: &[Run], k: usize) -> String {
    if runs.is_empty() {
        return "-".into();
    }
    let v: Vec<f64> = runs
        .iter()
        .map(|r| r.cpu_us[k] as f64 / r.outcomes[k].ops.max(1) as f64)
        .collect();
    format!("{:.1}", median(&v))
}

fn print(
    config: &Config,
    sizes: &Sizes,
    rows: &[Row],
    support: &Result<(), String>,
    results: &[(bool, usize, Side3)],
    verdicts: &mut Vec<Verdict>,
) {
    println!("### Several resources at once: sets of 3\n");
    println!(
        "Sets of 3 resources under one hash tag (`{{set:<n>}}:a`, `:b`, `:c`), n out of {}; \
         \"set\" is `DLOCK.MACQUIRE 3 ... tok 30000` / `DLOCK.MRELEASE 3 ... tok`, \"singles\" \
         3 pipelined `DLOCK.ACQUIRE`s / `DLOCK.RELEASE`s (not all or nothing), \"Lua\" \
         `EVALSHA` of an all-or-nothing script over 3 `SET NX PX` keys / a compare-and-delete of \
         each (`benches/dlock/sets_lua.rs`, self-checked on this server; plain Redis). Pipeline \
         P = P sets per batch on every side (3P commands for the singles). Cycle: per \
         connection, a batch of P random sets with fresh tokens, then the batch of their \
         releases, the same sequence on every side. Alone: every set of a shuffled walk \
         acquired once on an empty server, then every one released once, each half timed \
         apart. Ops are sets (a cycle counts once). Each side ran {} times, the order rotating; \
         ops/s is the median run, the ratios the medians of the runs made back to back. Server \
         CPU: growth of `used_cpu_user + used_cpu_sys` over the timed part, per set (or cycle). After \
         every run the counters balanced: each dlock grant released member by member, one \
         script `DEL` per script `SET`, nothing expired, an empty database.\n",
        sizes.keys, sizes.repeat
    );
    println!(
        "| comparison | pipeline | set ops/s | Lua ops/s | singles ops/s | hits set / Lua / singles \
         | server CPU µs/set, set / Lua / singles | set / Lua | set / singles | goal | result |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |");
    for &(cycle, pipeline, ref all) in results {
        let row_kinds: &[(Row, usize)] = if cycle {
            &[(Row::Cycle, 0)]
        } else {
            &[(Row::Acquire, 0), (Row::Release, 1)]
        };
        for &(row, k) in row_kinds {
            if !rows.contains(&row) {
                continue;
            }
            let [s, singles, lua] = all;
            let (sv, pv, lv) = (ops(s, k), ops(singles, k), ops(lua, k));
            let goal = Goal::AtLeast(1.5);
            let (vs_lua, vs_singles, result) = if sv.is_empty() {
                ("-".into(), "-".into(), "SKIP")
            } else {
                let r = paired_ratio(&sv, &lv);
                verdicts.push(Verdict {
                    config: config.short,
                    what: format!("{} vs Lua, -P {pipeline}", row.title()),
                    ratio: r,
                    goal,
                });
                let rs = paired_ratio(&sv, &pv);
                (format!("{r:.2}x"), format!("{rs:.2}x"), pass(goal.met(r)))
            };
            let m = |v: &[f64]| {
                if v.is_empty() {
                    "-".into()
                } else {
                    format!("{:.0}", median(v))
                }
            };
            println!(
                "| {} | {pipeline} | {} | {} | {} | {} / {} / {} | {} / {} / {} | {vs_lua} | \
                 {vs_singles} | {} | {result} |",
                row.title(),
                m(&sv),
                m(&lv),
                m(&pv),
                hits(s, k),
                hits(lua, k),
                hits(singles, k),
                cpu(s, k),
                cpu(lua, k),
                cpu(singles, k),
                goal.text(),
            );
        }
    }
    println!();
    if let Err(why) = support {
        println!("- set side skipped: {why}.\n");
    }
}
