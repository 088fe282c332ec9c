//! Scale within one resource (`scale-kinds`): how the cost of one command
//! grows with the size of the resource it acts on (the `scale` section grows
//! the keyspace instead). Every judged figure is a rate at the largest size
//! over the rate at the smallest, each size on a server of its own; all of a
//! part's servers are loaded first, then the runs alternate between them
//! (small, large, large, small, ...: a slow minute on the shared machine
//! hits every size alike), and each figure is the median of its runs.
//!
//! What is measured; a *round* is `DLOCK_BENCH_SCALE_KINDS_BATCH` (k)
//! operations, the same k at every size:
//!
//! - **Holds** (scale_kinds_holds.rs). One resource `sem` holding N permits
//!   (`LIMIT 100000` at every size, so that only N differs) or N shared
//!   holds (`SHARED`), tokens `tok:<12 digits>`, leases of an hour.
//!   - *acquire + release*: per connection, pairs of `DLOCK.ACQUIRE sem
//!     <fresh token> 30000 LIMIT 100000` (or `SHARED`) and `DLOCK.RELEASE
//!     sem <that token>`, 16 pairs per batch, up to 50 connections (see
//!     `chunked`): a pair's two commands run back to back, so the resource
//!     holds N or N + 1.
//!   - *extend*: `DLOCK.EXTEND sem <token of a random holder> 3600000`.
//!
//!   Rate: commands per second as the load generator sees them (load.rs);
//!   beside it the server's own µs per call of each command (`INFO
//!   commandstats`), which leaves out the fixed cost of reading, parsing and
//!   answering a command and so shows growth that the rate dilutes.
//!   - *fill*: the N holds acquired one at a time (pipelined, the order of
//!     their tokens), against plain `DLOCK.ACQUIRE lock:<n>` of N distinct
//!     resources on a fresh server filled just before, in the same way.
//!   - *memory*: `used_memory` growth over the fill (settled, cases.rs) per
//!     hold, against `ZADD zsem <deadline ms> tok:<n>` of the same N tokens
//!     on a fresh server without the module (Redisson's expirable semaphore
//!     keeps its permits so). Judged at the largest size only: at small ones
//!     the key and the server's own buffers dominate both sides.
//! - **Queues** (scale_kinds_waiters.rs, scale_kinds_queue.rs). A held resource with W waiters, each
//!   blocked on a connection of its own in `DLOCK.ACQUIRE q w<n> 3600000
//!   WAIT 3600000`; or a *component* of S sets, `DLOCK.MACQUIRE 2 {c}:hub
//!   {c}:o<n> s<n> 3600000 WAIT 3600000`, all queued on the hub, which a set
//!   holds. Each cycle runs four rounds: enqueue, handoff, enqueue, leave, so
//!   the queue stays between W and W + k.
//!   - *enqueue*: k idle connections each send that command (a new waiter
//!     joining the tail of the queue); the time from the first write until
//!     `INFO clients` on a control connection, polled back to back, counts
//!     all k blocked (the load generator's k writes are part of it).
//!   - *handoff*: one `EVALSHA` that k times releases the holder
//!     (`DLOCK.RELEASE q <holder>`, or `DLOCK.MRELEASE 2 {c}:hub {c}:o<n>
//!     s<n>`), each release granting the head of the queue inside the
//!     command, and reads the new holder's token with `DLOCK.INFO`; the time
//!     is the script's round trip. Beside it: the server's µs per `RELEASE`
//!     / `MRELEASE` call.
//!   - *leave*: k `CLIENT UNBLOCK <id>` pipelined on the control connection,
//!     each of a waiter at a random position in the queue, which leaves it
//!     and is answered nil; the time is the pipeline's round trip. Beside
//!     it: the server's µs per `CLIENT UNBLOCK` (Redis times the command
//!     itself only: what the module does for the leaver outside it, as in a
//!     callback once the client is unblocked, is in the round trip only).
//!
//!   The rate of each is k over its time, summed over the run's rounds.
//! - **The reference** (part `blpop`, scale_kinds_queue_blpop.rs): what a
//!   user would otherwise use, the server's own blocking pop, at the same
//!   sizes and measured the same way on a server without the module: W
//!   clients blocked in `BLPOP qlist 3600`; *enqueue*: k more `BLPOP`s;
//!   *handoff*: k `LPUSH qlist x` pipelined, each of which serves the
//!   longest-waiting client within its own command, as `RELEASE` grants the
//!   head within its own (inside a script a list's waiters are served only
//!   after the script, so one script of k pushes would not be the same
//!   operation); the time is the pipeline's round trip; *leave*: k `CLIENT
//!   UNBLOCK` pipelined. Not judged: its ratios are printed beside dlock's,
//!   the part of the decline that comes with 10,000 blocked clients whoever
//!   blocked them. It runs after the waiters (each part alternating between
//!   its sizes): both largest queues at once would need more open files
//!   than the machine's hard limit of 20,000.
//!
//! Goals, judged on the rates (the server µs explain them): ACQUIRE +
//! RELEASE and EXTEND at the largest N >= 0.7x the smallest, for permits and
//! for shared holds; the fill of the largest N permits >= 0.5x the plain
//! fill; memory per hold at the largest N <= 1.5x a sorted-set member (for
//! both kinds); enqueue, handoff and leave with the most waiters >= 0.7x
//! the fewest, and in the largest component of sets >= 0.5x the smallest.
//!
//! Fills have a time budget each (`DLOCK_BENCH_SCALE_KINDS_BUDGET_SECS`):
//! a fill that does not finish stops there, its size is not measured, and
//! its goals are listed as MISS with how far the fill got and at what rate.

use std::time::Instant;

use crate::load::{self, Outcome, Shape};
use crate::{env_list, env_u64, Goal, Unmeasured, Verdict};

pub const CONNS: usize = 50;
pub const PIPELINE: usize = 16;
/// Each chunk of a budgeted run should take about this long.
const CHUNK_SECS: f64 = 0.25;

/// The section's sizes, from the environment (see main.rs).
#[derive(Clone, Debug)]
pub struct Settings {
    /// Which parts run: `holds`, `waiters`, `blpop` (the waiters'
    /// reference, run with them), `sets`.
    pub parts: Vec<String>,
    pub sizes: Vec<u64>,
    pub waiters: Vec<u64>,
    pub sets: Vec<u64>,
    pub budget_secs: f64,
    pub run_secs: f64,
    pub run_ops: u64,
    pub repeat: usize,
    pub batch: usize,
}

impl Settings {
    pub fn from_env(quick: bool) -> Settings {
        let nums = |name: &str, full: &str, small: &str| -> Vec<u64> {
            let mut v: Vec<u64> = env_list(name, if quick { small } else { full })
                .iter()
                .filter_map(|s| s.replace('_', "").parse().ok())
                .filter(|&n| n > 0)
                .collect();
            v.dedup();
            v
        };
        let secs = |name: &str, full: f64, small: f64| -> f64 {
            std::env::var(name)
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(if quick { small } else { full })
        };
        Settings {
            parts: env_list("DLOCK_BENCH_SCALE_KINDS_PARTS", "holds,waiters,blpop,sets"),
            sizes: nums("DLOCK_BENCH_SCALE_KINDS_SIZES", "10,1000,100000", "10,1000"),
            waiters: nums("DLOCK_BENCH_SCALE_KINDS_WAITERS", "10,10000", "10,500"),
            sets: nums("DLOCK_BENCH_SCALE_KINDS_SETS", "10,1000", "10,100"),
            budget_secs: secs("DLOCK_BENCH_SCALE_KINDS_BUDGET_SECS", 120.0, 20.0),
            run_secs: secs("DLOCK_BENCH_SCALE_KINDS_RUN_SECS", 1.0, 0.3),
            run_ops: env_u64(
                "DLOCK_BENCH_SCALE_KINDS_OPS",
                if quick { 50_000 } else { 400_000 },
            ),
            repeat: env_u64("DLOCK_BENCH_SCALE_KINDS_REPEAT", if quick { 3 } else { 5 }).max(1)
                as usize,
            batch: env_u64("DLOCK_BENCH_SCALE_KINDS_BATCH", 10).max(1) as usize,
        }
    }
}

/// The section: holds, then queues, then sets.
pub fn run(
    config: &crate::cases::Config,
    set: &Settings,
    verdicts: &mut Vec<Verdict>,
    unmeasured: &mut Vec<Unmeasured>,
) {
    let t = Instant::now();
    println!("### Scale within one resource: permits, shared holds, waiters, sets\n");
    println!(
        "How the cost of one command grows with the size of the resource it acts on; \
         `benches/dlock/scale_kinds.rs` defines each operation. Each size has its own server, \
         all loaded first; the {} runs (at most {} s or {} commands each) then alternate \
         between the sizes, and each figure is the median of its runs. \"vs first\" is \
         relative to the first row of the same kind. Server µs/call: `INFO commandstats`. \
         Memory per hold is judged at the largest size only (at small ones the key and the \
         server's own buffers dominate both sides). Every fill has a budget of {} s; a fill \
         that runs out stops, its size is not measured and its goals are MISS.\n",
        set.repeat, set.run_secs, set.run_ops, set.budget_secs
    );
    let mut goals = Goals {
        config: config.short,
        verdicts,
        unmeasured,
    };
    let part = |p: &str| set.parts.iter().any(|x| x == p);
    if part("holds") {
        crate::scale_kinds_holds::run(config, set, &mut goals);
    }
    if part("waiters") {
        crate::scale_kinds_waiters::waiters(config, set, part("blpop"), &mut goals);
    }
    if part("sets") {
        crate::scale_kinds_waiters::sets(config, set, &mut goals);
    }
    crate::progress(&format!("{}: scale-kinds", config.short), t.elapsed());
}

/// Where the parts put their goals: a measured ratio, or why there is none.
pub struct Goals<'a> {
    pub config: &'static str,
    pub verdicts: &'a mut Vec<Verdict>,
    pub unmeasured: &'a mut Vec<Unmeasured>,
}

impl Goals<'_> {
    /// Judges `ratio` (or records why it is missing) and prints the line.
    pub fn judge(&mut self, what: String, goal: Goal, ratio: Result<f64, String>, detail: &str) {
        match ratio {
            Ok(r) => {
                println!(
                    "- {what}: {r:.2}x{detail}, goal {}: {}",
                    goal.text(),
                    crate::pass(goal.met(r))
                );
                self.verdicts.push(Verdict {
                    config: self.config,
                    what,
                    ratio: r,
                    goal,
                });
            }
            Err(why) => {
                println!("- {what}: not measured ({why}), goal {}: MISS", goal.text());
                self.unmeasured.push(Unmeasured {
                    config: self.config,
                    what,
                    goal,
                    why,
                });
            }
        }
    }
}

/// How a fill went.
#[derive(Clone, Debug, Default)]
pub struct Fill {
    pub wanted: u64,
    pub done: u64,
    pub secs: f64,
    pub complete: bool,
    /// The first error reply, or what stopped the fill early.
    pub error: Option<String>,
}

impl Fill {
    pub fn rate(&self) -> f64 {
        self.done as f64 / self.secs.max(1e-9)
    }
    /// Why the size cannot be measured, if it cannot.
    pub fn shortfall(&self, budget: f64) -> Option<String> {
        if self.complete {
            return None;
        }
        Some(match &self.error {
            Some(e) => format!("fill of {} failed after {}: {e}", self.wanted, self.done),
            None => format!(
                "fill stopped at {} of {} after the {budget:.0} s budget, at {:.0}/s",
                self.done,
                self.wanted,
                self.rate()
            ),
        })
    }
    pub fn cell(&self) -> String {
        if self.complete {
            format!("{:.1}", self.secs)
        } else {
            format!("MISS: {} of {} in {:.1}", self.done, self.wanted, self.secs)
        }
    }
}

/// Up to `total` commands from `gen` in chunks of about CHUNK_SECS each,
/// stopping between chunks once `secs` have passed. A chunk starts at one
/// connection's batch (PIPELINE units of `unit` commands, never split) and
/// then follows the rate so far, up to CONNS connections: a chunk is sent
/// all at once, and on a resource where each command is slow a full one
/// would outlast load.rs's 10 s wait for a reply. `chunk` carries the size
/// reached from one run to the next on the same workload. The outcome's
/// elapsed time leaves out connecting between chunks.
pub fn chunked(
    port: u16,
    total: u64,
    secs: f64,
    unit: usize,
    chunk: &mut u64,
    mut gen: impl FnMut(usize, &mut Vec<u8>),
) -> (Outcome, bool) {
    let batch = (PIPELINE * unit) as u64;
    let total = total / unit as u64 * unit as u64;
    let start = Instant::now();
    let mut out = Outcome::default();
    *chunk = (*chunk).max(batch);
    while out.ops < total && start.elapsed().as_secs_f64() < secs {
        let n = (*chunk).min(total - out.ops);
        let conns = (n.div_ceil(batch) as usize).clamp(1, CONNS);
        let shape = Shape {
            conns,
            pipeline: batch as usize,
            total: n,
            latency: false,
        };
        let o = load::run(port, shape, &mut gen);
        let took = o.elapsed.as_secs_f64().max(1e-6);
        out.absorb(o);
        if out.errors > 0 {
            break;
        }
        let next = (n as f64 / took * CHUNK_SECS) as u64;
        *chunk = next.clamp(batch, n.max(batch) * 4).div_ceil(batch) * batch;
    }
    let complete = out.ops >= total && out.errors == 0;
    (out, complete)
}

/// A fill of `wanted` commands, each of which must answer positively.
pub fn fill(port: u16, wanted: u64, budget: f64, gen: impl FnMut(usize, &mut Vec<u8>)) -> Fill {
    let t = Instant::now();
    let mut chunk = 0;
    let (out, complete) = chunked(port, wanted, budget, 1, &mut chunk, gen);
    Fill {
        wanted,
        done: out.positive,
        secs: t.elapsed().as_secs_f64(),
        complete: complete && out.positive == wanted,
        error: out
            .first_error
            .or_else(|| (out.negative > 0).then(|| format!("{} refused (nil or 0)", out.negative))),
    }
}

/// Calls and µs so far of one command in `INFO commandstats` (`dlock.acquire`,
/// `client|unblock`); zeros when absent.
pub fn cmdstat(c: &mut redis::Connection, name: &str) -> (u64, u64) {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(c)
        .unwrap_or_default();
    let prefix = format!("cmdstat_{name}:");
    let Some(line) = info.lines().find_map(|l| l.strip_prefix(&prefix)) else {
        return (0, 0);
    };
    let field = |f: &str| -> u64 {
        line.split(',')
            .find_map(|kv| kv.strip_prefix(f))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    (field("calls="), field("usec="))
}

/// µs per call between two `cmdstat` readings; NaN without calls.
pub fn per_call(before: (u64, u64), after: (u64, u64)) -> f64 {
    let calls = after.0.saturating_sub(before.0);
    if calls == 0 {
        return f64::NAN;
    }
    after.1.saturating_sub(before.1) as f64 / calls as f64
}

/// The median, ignoring NaN; NaN when nothing is left.
pub fn median(v: &[f64]) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| !x.is_nan()).collect();
    s.sort_by(f64::total_cmp);
    s.get(s.len() / 2).copied().unwrap_or(f64::NAN)
}

/// A number for a table cell ("-" for NaN).
pub fn num(v: f64, decimals: usize) -> String {
    if v.is_nan() {
        "-".into()
    } else {
        format!("{v:.decimals$}")
    }
}

/// `v / first` as "0.95x", "-" when either is missing.
pub fn vs(v: f64, first: f64) -> String {
    if v.is_nan() || first.is_nan() || first == 0.0 {
        "-".into()
    } else {
        format!("{:.2}x", v / first)
    }
}

/// The order in which run `rep` visits `n` sizes: forward, then backward.
pub fn order(n: usize, rep: usize) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    if rep % 2 == 1 {
        v.reverse();
    }
    v
}
