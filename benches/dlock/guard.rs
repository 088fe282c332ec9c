//! Guarded writes: a write that only the lock's holder may make, as
//! `DLOCK.GUARD` against the Lua script clients run on plain Redis today
//! and against an unguarded `SET` (guard_lua.rs has what each side sends
//! and their checks).
//!
//! - **single**: one `SET` per command, `DLOCK.GUARD res FENCE f SET k v`
//!   and `... TOKEN tok SET k v` against `EVALSHA` of the `GET`-compare-
//!   `SET` script (the lock a `SET NX PX` key) and a plain `SET k v`, at
//!   pipeline 1 and 16;
//! - **batches**: b `SET`s per command, `DLOCK.GUARD res FENCE f BATCH b
//!   ...` against one `EVALSHA` of a script doing the `GET` check and the b
//!   `SET`s, for each b of `DLOCK_BENCH_GUARD_BATCHES` at pipeline 16.
//!
//! Every command is the holder's own write to a random resource of the
//! populated ones (each side on a fresh server, the same resources and
//! values on every side). After each run, every reply must have been a
//! write (no nil, no error) and the server's `SET` count must have grown by
//! exactly the writes sent.

use std::time::Instant;

use crate::cases::{self, Config, Sizes};
use crate::guard_lua::{self, Side, Write, LUA_BATCH, LUA_SET};
use crate::load::{self, Outcome, Rng, Shape};
use crate::sets_lua::cpu_us;
use crate::throughput::{median, paired_ratio, wanted};
use crate::{env_list, pass, progress, Goal, Verdict};

const SINGLE_SIDES: [Side; 4] = [Side::Fence, Side::Token, Side::Lua, Side::Set];
const BATCH_SIDES: [Side; 2] = [Side::Fence, Side::Lua];
/// The goal of a guarded `SET` against the Lua script, judged at pipeline 16.
const GOAL: Goal = Goal::AtLeast(1.5);

/// What a row times: the single form at a pipeline, or batches of `b`
/// writes (pipeline 16).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Row {
    Single(usize),
    Batch(usize),
}

impl Row {
    fn title(self) -> String {
        match self {
            Row::Single(_) => "guarded SET".into(),
            Row::Batch(b) => format!("guarded BATCH of {b}"),
        }
    }
    fn pipeline(self) -> usize {
        match self {
            Row::Single(p) => p,
            Row::Batch(_) => 16,
        }
    }
    /// Writes per command.
    fn writes(self) -> u64 {
        match self {
            Row::Single(_) => 1,
            Row::Batch(b) => b as u64,
        }
    }
    fn sides(self) -> &'static [Side] {
        match self {
            Row::Single(_) => &SINGLE_SIDES,
            Row::Batch(_) => &BATCH_SIDES,
        }
    }
}

/// One run: the timed part (ops are commands) and the server CPU it took, µs.
struct Run {
    out: Outcome,
    cpu_us: u64,
}

/// Sizes of the batch rows, from `DLOCK_BENCH_GUARD_BATCHES`.
pub fn batches() -> Vec<usize> {
    env_list("DLOCK_BENCH_GUARD_BATCHES", "1,10,100")
        .iter()
        .filter_map(|s| s.parse().ok())
        .filter(|&b: &usize| b > 0)
        .collect()
}

fn measure(config: &Config, side: Side, row: Row, writes: u64, sizes: &Sizes) -> Run {
    let server = config.server(side.module());
    let sha = if side == Side::Lua {
        [LUA_SET, LUA_BATCH].map(|s| cases::script_sha(&server, s))
    } else {
        Default::default()
    };
    let fences = guard_lua::populate(&server, side.module(), sizes.keys);
    let mut c = server.conn();
    let (sets, cpu) = (guard_lua::set_calls(&mut c), cpu_us(&mut c));
    let batch = match row {
        Row::Single(_) => 0,
        Row::Batch(b) => b,
    };
    let commands = writes / row.writes();
    // The same seed on every side: the same resources and values.
    let mut rng = Rng::new(0x6a2d ^ row.pipeline() as u64 ^ (batch as u64) << 8);
    let mut value = b"v:000000000000".to_vec();
    let out = load::run(
        server.port(),
        Shape {
            conns: sizes.clients,
            pipeline: row.pipeline(),
            total: commands,
            latency: false,
        },
        |_, buf| {
            let n = rng.below(sizes.keys);
            let v = rng.below(1_000_000_000_000);
            value.truncate(2);
            value.extend_from_slice(&format!("{v:012}").into_bytes());
            let fence: &[u8] = fences.get(n as usize).map_or(b"0", |f| f);
            let w = Write {
                n,
                fence,
                value: &value,
            };
            guard_lua::write(buf, side, batch, &w, &sha);
        },
    );
    let cpu_us = cpu_us(&mut c) - cpu;
    let what = format!("{} {}", row.title(), side.label());
    cases::check(&out, &what);
    assert_eq!(out.negative, 0, "{what}: every write is the holder's");
    let sent = guard_lua::set_calls(&mut c) - sets;
    assert_eq!(
        sent,
        commands * row.writes(),
        "{what}: SET calls on the server against writes sent"
    );
    Run { out, cpu_us }
}

/// The section: the single rows at pipeline 1 and 16, the batch rows at 16.
pub fn run(config: &Config, sizes: &Sizes, verdicts: &mut Vec<Verdict>) {
    let rows: Vec<Row> = [Row::Single(1), Row::Single(16)]
        .into_iter()
        .chain(batches().into_iter().map(Row::Batch))
        .filter(|r| wanted(&r.title()))
        .collect();
    if rows.is_empty() {
        return;
    }
    let t = Instant::now();
    guard_lua::self_check(&config.server(false));
    let support = guard_lua::probe(&config.server(true));
    let mut results = Vec::new();
    for &row in &rows {
        let writes = if row.pipeline() == 1 {
            sizes.ops_p1
        } else {
            sizes.ops_p16
        };
        let sides = row.sides();
        let mut all: Vec<Vec<Run>> = sides.iter().map(|_| Vec::new()).collect();
        for rep in 0..sizes.repeat {
            let mut order: Vec<usize> = (0..sides.len()).collect();
            order.rotate_left(rep % sides.len());
            if rep % 2 == 1 {
                order.reverse();
            }
            for i in order {
                let side = sides[i];
                if side.module() && support.is_err() {
                    continue;
                }
                let t = Instant::now();
                let r = measure(config, side, row, writes, sizes);
                progress(
                    &format!(
                        "{}: {} {} -P {} (run {}): {:.0} commands/s",
                        config.short,
                        row.title(),
                        side.label(),
                        row.pipeline(),
                        rep + 1,
                        r.out.ops_per_sec()
                    ),
                    t.elapsed(),
                );
                all[i].push(r);
            }
        }
        results.push((row, all));
    }
    progress(&format!("{}: guard", config.short), t.elapsed());
    print(config, sizes, &support, &results, verdicts);
}

fn ops(runs: &[Run]) -> Vec<f64> {
    runs.iter().map(|r| r.out.ops_per_sec()).collect()
}

fn shown(v: &[f64], digits: usize) -> String {
    if v.is_empty() {
        "-".into()
    } else {
        format!("{:.*}", digits, median(v))
    }
}

/// Server CPU per command, µs, of every run.
fn cpu(runs: &[Run]) -> Vec<f64> {
    runs.iter()
        .map(|r| r.cpu_us as f64 / r.out.ops.max(1) as f64)
        .collect()
}

fn ratio(d: &[Run], b: &[Run]) -> Option<f64> {
    (!d.is_empty() && !b.is_empty()).then(|| paired_ratio(&ops(d), &ops(b)))
}

fn text(r: Option<f64>) -> String {
    r.map_or("-".into(), |r| format!("{r:.2}x"))
}

fn print(
    config: &Config,
    sizes: &Sizes,
    support: &Result<(), String>,
    results: &[(Row, Vec<Vec<Run>>)],
    verdicts: &mut Vec<Verdict>,
) {
    println!("### Guarded writes (`guard`)\n");
    println!(
        "A write that only the lock's holder may make, to a random resource of {} held ones, \
         every write the holder's own. FENCE / TOKEN: `DLOCK.GUARD {{g:<n>}} FENCE f SET \
         {{g:<n>}}:0 v` / `... TOKEN tok SET ...`; Lua: `EVALSHA` of `if redis.call('GET', \
         KEYS[1]) == ARGV[1] then return redis.call('SET', KEYS[2], ARGV[2]) end` with the lock \
         a `SET NX PX` key (plain Redis); SET: `SET {{g:<n>}}:0 v` with no check (plain Redis). \
         A batch of b: `DLOCK.GUARD ... FENCE f BATCH b 3 SET k v ...` against one `EVALSHA` of \
         the `GET` check and b `SET`s (`benches/dlock/guard_lua.rs`; the scripts self-checked \
         on this server). Each side ran {} times on a fresh server, the order rotating; ops/s \
         is the median run, the ratios the medians of the runs made back to back. Server CPU: \
         growth of `used_cpu_user + used_cpu_sys` over the run, per command. After every run \
         each reply was a write and the server's `SET` calls grew by exactly the writes sent. \
         The goal ({}) is judged at pipeline 16.\n",
        sizes.keys,
        sizes.repeat,
        GOAL.text()
    );
    println!(
        "| comparison | pipeline | FENCE ops/s | TOKEN ops/s | Lua ops/s | SET ops/s | server CPU \
         µs/op, FENCE / TOKEN / Lua / SET | FENCE / Lua | TOKEN / Lua | FENCE / SET | goal | result |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |");
    for (row, all) in results {
        let Row::Single(pipeline) = *row else {
            continue;
        };
        let [fence, token, lua, set] = &all[..] else {
            continue;
        };
        let (fl, tl) = (ratio(fence, lua), ratio(token, lua));
        let judged = pipeline == 16;
        let mut result = if judged { "" } else { "-" }.to_string();
        if judged {
            let mut each = Vec::new();
            for (form, r) in [("FENCE", fl), ("TOKEN", tl)] {
                let Some(r) = r else { continue };
                verdicts.push(Verdict {
                    config: config.short,
                    what: format!("guarded SET ({form}) vs Lua, -P {pipeline}"),
                    ratio: r,
                    goal: GOAL,
                });
                each.push(format!("{form} {}", pass(GOAL.met(r))));
            }
            result = if each.is_empty() {
                "SKIP".into()
            } else {
                each.join(", ")
            };
        }
        println!(
            "| guarded SET | {pipeline} | {} | {} | {} | {} | {} / {} / {} / {} | {} | {} | {} | {} | {result} |",
            shown(&ops(fence), 0),
            shown(&ops(token), 0),
            shown(&ops(lua), 0),
            shown(&ops(set), 0),
            shown(&cpu(fence), 1),
            shown(&cpu(token), 1),
            shown(&cpu(lua), 1),
            shown(&cpu(set), 1),
            text(fl),
            text(tl),
            text(ratio(fence, set)),
            if judged { GOAL.text() } else { "-".into() },
        );
    }
    println!();
    let batches: Vec<_> = results
        .iter()
        .filter(|(r, _)| matches!(r, Row::Batch(_)))
        .collect();
    if !batches.is_empty() {
        println!(
            "Batches at pipeline 16 (16 commands of b writes per batch and connection); ops are \
             commands, writes/s = ops/s x b; CPU per write = server CPU per command / b.\n"
        );
        println!(
            "| comparison | writes per command | guard ops/s | Lua ops/s | guard writes/s | Lua \
             writes/s | server CPU µs/op, guard / Lua | server CPU µs/write, guard / Lua | guard \
             / Lua |"
        );
        println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
        for (row, all) in batches {
            let [guard, lua] = &all[..] else { continue };
            let b = row.writes() as f64;
            let per_write =
                |runs: &[Run]| -> Vec<f64> { cpu(runs).iter().map(|c| c / b).collect() };
            let writes = |runs: &[Run]| -> Vec<f64> { ops(runs).iter().map(|o| o * b).collect() };
            println!(
                "| {} | {b} | {} | {} | {} | {} | {} / {} | {} / {} | {} |",
                row.title(),
                shown(&ops(guard), 0),
                shown(&ops(lua), 0),
                shown(&writes(guard), 0),
                shown(&writes(lua), 0),
                shown(&cpu(guard), 1),
                shown(&cpu(lua), 1),
                shown(&per_write(guard), 2),
                shown(&per_write(lua), 2),
                text(ratio(guard, lua)),
            );
        }
        println!();
    }
    if let Err(why) = support {
        println!("- FENCE and TOKEN sides skipped: {why}.\n");
    }
}
