//! `make bench`: dlock against the plain-Redis equivalents, printed as
//! Markdown, with a chart written to `docs/bench.svg`. A benchmark, not a
//! test: goals are marked PASS/MISS for information and the exit status is
//! 0 regardless.
//!
//! Two server configurations, each reported in full: `appendonly yes` +
//! `appendfsync everysec` (production-like; the goals are judged there) and
//! no persistence at all. Every throughput figure comes from a fresh server
//! per side with the same configuration; the plain-Redis side runs without
//! the module.
//!
//! Sizes come from the environment (defaults in brackets):
//!
//! | variable | meaning |
//! | --- | --- |
//! | `DLOCK_BENCH_QUICK=1` | small sizes everywhere (a smoke run of ~1 min); explicit variables still win |
//! | `DLOCK_BENCH_CONFIGS` | `aof,none` - which configurations, in order |
//! | `DLOCK_BENCH_SECTIONS` | `throughput,native,statistics,floor,holds,sets,memory,baseline,scale,scale-kinds,crosscheck,handoff,contention,observe,sessions,guard,priorities` - which sections (`statistics`: ACQUIRE and RELEASE with `dlock.stats` on vs off, statistics.rs; `native`: ACQUIRE, RELEASE, EXTEND vs the server's `SET NX PX`, `DELEX IFEQ`/`DELIFEQ`, `SET IFEQ PX`, on servers that have them, native.rs; `floor`: ACQUIRE, RELEASE, EXTEND and those primitives vs `FLOOR.CHECK`, the least a module command on a lock does, floor.rs; `holds`: SHARED and LIMIT vs Lua, holds.rs; `sets`: MACQUIRE/MRELEASE of 3 vs 3 single locks and vs Lua, sets.rs; `baseline`: this build vs `BASELINE`, baseline.rs; `scale-kinds`: one command's cost against the size of its resource, scale_kinds.rs; `contention`: lock schemes under contention, contention.rs; `observe`: a contended resource's critical sections per second with and without observers following it, and the delay from a change to an observer vs to a keyspace notification, observe.rs; `sessions`: a session's renewal cost against a per-lock watchdog, `kill -9` of a holder to the next grant, ending a session of 100,000 holds, `ACQUIRE ... SESSION` vs plain `ACQUIRE`, sessions.rs; `guard`: a guarded `SET` (`DLOCK.GUARD ... FENCE` and `TOKEN`) vs the Lua `GET`-compare-`SET` script and vs a plain `SET`, and guarded batches vs one script, guard.rs; `priorities`: a queue's enqueue, handoff and leave with waiters at one priority and at random ones vs plain FIFO at the scale-kinds waiters' sizes, BLPOP beside, and the longest wait of priority 0 under a stream of higher ones vs its bound, priorities.rs) |
//! | `DLOCK_BENCH_NATIVE_SERVERS` | every folder in `../shared/servers/` - server builds (folders as for `make SERVER=...`) the `native` section runs on when the configured server lacks `DELEX`/`DELIFEQ` or `SET IFEQ`; those without them are passed over |
//! | `DLOCK_BENCH_FLOOR_CONFIGS` | `aof,none` - configurations that run the `floor` section (on the configured server and, when it lacks the primitives, on the `DLOCK_BENCH_NATIVE_SERVERS` builds that have them) |
//! | `DLOCK_BENCH_FLOOR_MODULE` | `target/release/libdlock_floor.so` (built by `make bench`) - the floor module (benches/floor/); missing, the `floor` section is skipped with a note |
//! | `DLOCK_BENCH_CLIENTS` | `50` - connections per throughput run |
//! | `DLOCK_BENCH_KEYS` | `100000` - resources the random keys are drawn from |
//! | `DLOCK_BENCH_OPS_P1` | `150000` - commands per throughput run at pipeline 1 |
//! | `DLOCK_BENCH_OPS_P16` | `800000` - commands per throughput run at pipeline 16 |
//! | `DLOCK_BENCH_REPEAT` | `5` - runs per throughput figure, sides alternating; medians count (also the `baseline` section's handoff pairs) |
//! | `DLOCK_BENCH_MEMORY_LOCKS` | `1000000` - locks (and string keys) for the memory comparison |
//! | `DLOCK_BENCH_SCALE` | `10000,1000000,10000000` - live locks for the scale runs |
//! | `DLOCK_BENCH_SCALE_CONFIGS` | `aof` - configurations that run the scale section |
//! | `DLOCK_BENCH_SCALE_BASELINE` | `1` - also run plain Redis (`SET NX PX`, Lua unlock) at each scale; `0` halves the section's time |
//! | `DLOCK_BENCH_SCALE_REPEAT` | `3` - runs per scale figure, alternating between the sizes' servers; medians count |
//! | `DLOCK_BENCH_SCALE_OPS` | `1000000` - ACQUIRE commands per scale run |
//! | `DLOCK_BENCH_SCALE_KINDS_CONFIGS` | `aof` - configurations that run the scale-kinds section |
//! | `DLOCK_BENCH_SCALE_KINDS_PARTS` | `holds,waiters,blpop,sets` - which parts of the scale-kinds section run (`blpop`: the waiters' reference, the same sizes of `BLPOP` waiters on one list, run and printed with `waiters`) |
//! | `DLOCK_BENCH_SCALE_KINDS_SIZES` | `10,1000,100000` (quick: `10,1000`) - permits (`LIMIT 100000`) and shared holds on one resource; goals compare the last size with the first |
//! | `DLOCK_BENCH_SCALE_KINDS_WAITERS` | `10,10000` (quick: `10,500`) - clients queued with `WAIT` on one resource, a connection each (the open-file limit is raised to fit, the server started with `--maxclients` to match) |
//! | `DLOCK_BENCH_SCALE_KINDS_SETS` | `10,1000` (quick: `10,100`) - queued sets in one component |
//! | `DLOCK_BENCH_SCALE_KINDS_BUDGET_SECS` | `120` (quick: `20`) - time for each fill; a fill that runs out stops, and its size's goals are MISS |
//! | `DLOCK_BENCH_SCALE_KINDS_RUN_SECS` | `1` (quick: `0.3`) - seconds per scale-kinds run (at most `DLOCK_BENCH_SCALE_KINDS_OPS`, `400000`, quick `50000`, commands) |
//! | `DLOCK_BENCH_SCALE_KINDS_REPEAT` | `5` (quick: `3`) - runs per scale-kinds figure, alternating between the sizes; medians count |
//! | `DLOCK_BENCH_SCALE_KINDS_BATCH` | `10` - queue operations per round (enqueues, handoffs or leaves) |
//! | `DLOCK_BENCH_ROUNDS` | `2000` - handoff rounds per scheme (also the contention section's dlock handoff latency, its limit; and per side and pair in the `baseline` section) |
//! | `DLOCK_BENCH_POLL_ROUNDS` | `100` - handoff rounds for the (slow) polling scheme |
//! | `DLOCK_BENCH_CONTENTION_SECS` | `5` (quick: `0.5`) - seconds per contention run |
//! | `DLOCK_BENCH_CONTENTION_CLIENTS` | `2,8,32,128` - clients per contention run |
//! | `DLOCK_BENCH_CONTENTION_CS_US` | `0,1000` - critical-section lengths, µs |
//! | `DLOCK_BENCH_CONTENTION_RESOURCES` | `1,100` - resources the clients contend for |
//! | `DLOCK_BENCH_CONTENTION_SCHEMES` | `dlock,poll200,poll10,pubsub,blpop` - schemes (contention_schemes.rs) |
//! | `DLOCK_BENCH_OBSERVE_CONFIGS` | `aof` - configurations that run the observe section |
//! | `DLOCK_BENCH_OBSERVE_OBSERVERS` | `1000` - observers following the contended resource, a connection each, driven by one thread |
//! | `DLOCK_BENCH_OBSERVE_CLIENTS` | `8` - clients contending for it (`ACQUIRE ... WAIT` / `RELEASE` loops) |
//! | `DLOCK_BENCH_OBSERVE_CS_US` | `0` - critical-section length, µs (a sleep) |
//! | `DLOCK_BENCH_OBSERVE_SECS` | `2` (quick: `0.5`) - seconds per run |
//! | `DLOCK_BENCH_OBSERVE_REPEAT` | `5` (quick: `2`) - runs per side (without, with observers), the sides taking turns; the ratio is the median of the pairs' |
//! | `DLOCK_BENCH_OBSERVE_ROUNDS` | `2000` (quick: `200`) - releases timed for each listener (an observer's reply, a keyspace notification), alternating |
//! | `DLOCK_BENCH_SESSIONS_CONFIGS` | `aof` - configurations that run the sessions section |
//! | `DLOCK_BENCH_SESSIONS_LOCKS` | `1,100,10000` - locks one client keeps, per renewal run; the goal compares the last size with the first |
//! | `DLOCK_BENCH_SESSIONS_RENEW_SECS` | `0.5` (quick: `0.2`) - seconds of renewal rounds per run (at least 3 rounds) |
//! | `DLOCK_BENCH_SESSIONS_REPEAT` | `5` (quick: `2`) - renewal runs per size and scheme, taking turns; medians count |
//! | `DLOCK_BENCH_SESSIONS_KILL_ROUNDS` | `5` (quick: `2`) - `kill -9` rounds per way to hold (connection-bound session, ttl-bound session, lease) |
//! | `DLOCK_BENCH_SESSIONS_KILL_TTL_MS` | `1000` - ttl of the ttl-bound session and of the lease in the `kill -9` rounds |
//! | `DLOCK_BENCH_SESSIONS_END_HOLDS` | `100000` (quick: `20000`) - holds of the session ended in the stall rounds |
//! | `DLOCK_BENCH_SESSIONS_END_ROUNDS` | `3` (quick: `1`) - sessions ended, a fresh server each; the stall goal takes the median round |
//! | `DLOCK_BENCH_SESSIONS_FIFO` | `1` - the stall rounds run the server's main thread and the pinger `SCHED_FIFO` (if allowed), so that other work on the machine does not preempt them; `0`: normal scheduling |
//! | `DLOCK_BENCH_PRIORITIES_CONFIGS` | `aof` - configurations that run the priorities section (its sizes are `DLOCK_BENCH_SCALE_KINDS_WAITERS`, its runs those of the scale-kinds section) |
//! | `DLOCK_BENCH_GUARD_CONFIGS` | `aof,none` - configurations that run the guard section |
//! | `DLOCK_BENCH_GUARD_BATCHES` | `1,10,100` - writes per command of the guard section's batch rows (pipeline 16) |
//! | `DLOCK_BENCH_ONLY` | all - throughput, native, floor, holds, sets and baseline comparisons whose title contains one of these comma-separated words (e.g. `ACQUIRE,EXTEND`; `handoff` and `memory` for the baseline's handoff and memory rows) |
//! | `BASELINE` | unset - another build of the module, as a path (`BASELINE=/path/to/libdlock.so`): the `baseline` section compares this build with it (ACQUIRE, owner RELEASE and EXTEND throughput at pipeline 1 and 16, `ACQUIRE ... WAIT` handoff latency, memory per lock); unset, the section is skipped with a note. `make bench BASELINE=<git commit-ish>` builds that commit's module first (.ci/baseline-module.sh, into `target/baseline/`, reused by later runs) and passes its path here |
//! | `DLOCK_BENCH_BASELINE_CONFIGS` | `aof` - configurations that run the `baseline` section |
//! | `DLOCK_BENCH_PIN` | `1` - server and client on separate cores (see pin.rs); `0` leaves placement to the scheduler |
//! | `DLOCK_BENCH_SVG` | `docs/bench.svg` - where the chart goes (empty: no chart); the contention chart goes beside it as `bench-contention.svg`; a run with nothing for the main chart (no handoff section, no goal) leaves it alone |

mod baseline;
mod cases;
mod chart;
#[path = "../../tests/common/mod.rs"]
mod common;
mod contention;
mod contention_chart;
mod contention_goals;
mod contention_schemes;
mod floor;
mod guard;
mod guard_lua;
mod handoff;
mod holds;
mod holds_lua;
mod interleave;
mod load;
mod native;
mod observe;
mod observe_followers;
mod observe_latency;
mod paired;
mod pin;
mod priorities;
mod priorities_wait;
mod scale;
mod scale_kinds;
mod scale_kinds_holds;
mod scale_kinds_pool;
mod scale_kinds_queue;
mod scale_kinds_waiters;
mod sessions;
mod sessions_acquire;
mod sessions_crash;
mod sessions_end;
mod sets;
mod sets_lua;
mod statistics;
mod stats;
mod throughput;
mod timing_goals;

use std::time::{Duration, Instant};

use cases::{Config, Sizes};

/// Reads an INFO field as a number (0 when absent).
fn info_u64(c: &mut redis::Connection, section: &str, field: &str) -> u64 {
    common::info_field(c, section, field)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// A goal on a ratio dlock / baseline.
#[derive(Clone, Copy, Debug)]
pub enum Goal {
    AtLeast(f64),
    AtMost(f64),
}

impl Goal {
    pub fn met(self, ratio: f64) -> bool {
        match self {
            Goal::AtLeast(g) => ratio >= g,
            Goal::AtMost(g) => ratio <= g,
        }
    }
    pub fn value(self) -> f64 {
        match self {
            Goal::AtLeast(g) | Goal::AtMost(g) => g,
        }
    }
    pub fn text(self) -> String {
        match self {
            Goal::AtLeast(g) => format!(">= {g}x"),
            Goal::AtMost(g) => format!("<= {g}x"),
        }
    }
}

/// A goal that has no ratio because its measurement could not be made (a
/// fill that ran out of time): listed as MISS in the summary, with why.
#[derive(Clone, Debug)]
pub struct Unmeasured {
    pub config: &'static str,
    pub what: String,
    pub goal: Goal,
    pub why: String,
}

/// One judged ratio, for the summary and the chart.
#[derive(Clone, Debug)]
pub struct Verdict {
    pub config: &'static str,
    pub what: String,
    pub ratio: f64,
    pub goal: Goal,
}

fn main() {
    // The `sessions` section's holder child (sessions_crash.rs): hold a
    // lock until killed, nothing else.
    if let Ok(spec) = std::env::var(sessions_crash::HOLDER_ENV) {
        sessions_crash::hold(&spec);
        return;
    }
    let started = Instant::now();
    let quick = std::env::var("DLOCK_BENCH_QUICK").is_ok_and(|v| v == "1");
    let q = |full: u64, small: u64| if quick { small } else { full };
    let sizes = Sizes {
        clients: env_u64("DLOCK_BENCH_CLIENTS", 50) as usize,
        keys: env_u64("DLOCK_BENCH_KEYS", q(100_000, 20_000)),
        ops_p1: env_u64("DLOCK_BENCH_OPS_P1", q(150_000, 20_000)),
        ops_p16: env_u64("DLOCK_BENCH_OPS_P16", q(800_000, 100_000)),
        memory_locks: env_u64("DLOCK_BENCH_MEMORY_LOCKS", q(1_000_000, 100_000)),
        scale: env_list(
            "DLOCK_BENCH_SCALE",
            if quick {
                "10000,100000"
            } else {
                "10000,1000000,10000000"
            },
        )
        .iter()
        .filter_map(|s| s.parse().ok())
        .collect(),
        scale_ops: env_u64("DLOCK_BENCH_SCALE_OPS", q(1_000_000, 100_000)),
        scale_baseline: env_u64("DLOCK_BENCH_SCALE_BASELINE", 1) == 1,
        repeat: env_u64("DLOCK_BENCH_REPEAT", q(5, 1)).max(1) as usize,
        scale_repeat: env_u64("DLOCK_BENCH_SCALE_REPEAT", q(3, 1)).max(1) as usize,
    };
    let rounds = env_u64("DLOCK_BENCH_ROUNDS", q(2000, 200)) as usize;
    let polling_rounds = env_u64("DLOCK_BENCH_POLL_ROUNDS", q(100, 10)) as usize;
    let sections = env_list(
        "DLOCK_BENCH_SECTIONS",
        "throughput,native,statistics,floor,holds,sets,memory,baseline,scale,scale-kinds,crosscheck,handoff,contention,observe,sessions,guard,priorities",
    );
    let scale_kinds_set = scale_kinds::Settings::from_env(quick);
    let contention_set = contention::Settings::from_env(quick);
    let observe_set = observe::Settings::from_env(quick);
    let sessions_set = sessions::Settings::from_env(quick);
    let on = |s: &str| sections.iter().any(|x| x == s);
    let scale_configs = env_list("DLOCK_BENCH_SCALE_CONFIGS", "aof");
    let scale_kinds_configs = env_list("DLOCK_BENCH_SCALE_KINDS_CONFIGS", "aof");
    let baseline_configs = env_list("DLOCK_BENCH_BASELINE_CONFIGS", "aof");
    let observe_configs = env_list("DLOCK_BENCH_OBSERVE_CONFIGS", "aof");
    let sessions_configs = env_list("DLOCK_BENCH_SESSIONS_CONFIGS", "aof");
    let floor_configs = env_list("DLOCK_BENCH_FLOOR_CONFIGS", "aof,none");
    let guard_configs = env_list("DLOCK_BENCH_GUARD_CONFIGS", "aof,none");
    let priorities_configs = env_list("DLOCK_BENCH_PRIORITIES_CONFIGS", "aof");
    let configs: Vec<Config> = env_list("DLOCK_BENCH_CONFIGS", "aof,none")
        .iter()
        .filter_map(|c| match c.as_str() {
            "aof" => Some(Config {
                label: "appendonly yes, appendfsync everysec",
                short: "aof",
                args: vec!["--appendonly", "yes", "--appendfsync", "everysec"],
                module: None,
            }),
            "none" => Some(Config {
                label: "no persistence",
                short: "none",
                args: vec![],
                module: None,
            }),
            _ => None,
        })
        .collect();

    let placement = pin::setup();
    println!("# dlock benchmark\n");
    println!("Machine: {}; {placement}.\n", machine());
    println!(
        "Sizes: {} clients, {} resources; {} commands per run at pipeline 1, {} at pipeline 16, \
         median of {} alternating runs; memory: {} keys; scale: {:?} live locks ({} ACQUIREs \
         each){}.\n",
        sizes.clients,
        sizes.keys,
        sizes.ops_p1,
        sizes.ops_p16,
        sizes.repeat,
        sizes.memory_locks,
        sizes.scale,
        sizes.scale_ops,
        if quick { "; DLOCK_BENCH_QUICK=1" } else { "" }
    );
    println!(
        "Every throughput figure is from a fresh `redis-server` per side with the same \
         configuration; the plain-Redis side runs without the module. The load generator is \
         one client thread multiplexing all connections (like redis-benchmark), on the same \
         machine as the server. Goals are judged on the `appendonly yes` configuration; \
         PASS/MISS is informational.\n"
    );
    if on("baseline") {
        if let Err(note) = baseline::build() {
            println!("{note}\n");
        }
    }

    let mut verdicts: Vec<Verdict> = Vec::new();
    let mut unmeasured: Vec<Unmeasured> = Vec::new();
    let mut aof_handoff: Option<(&str, handoff::Results)> = None;
    let mut contended: Option<(&str, contention::Report)> = None;
    for config in &configs {
        let judged = config.short == "aof";
        println!(
            "## {}{}\n",
            config.label,
            if judged { " (goals judged here)" } else { "" }
        );
        if on("throughput") {
            let (results, runs) = throughput::run(config, &sizes);
            throughput::print(config, &results, &runs, sizes.repeat, &mut verdicts);
            throughput::print_latency(&results);
        }
        if on("native") {
            native::run(config, &sizes, &mut verdicts);
        }
        if on("statistics") {
            statistics::run(config, &sizes, &mut verdicts);
        }
        if on("floor") && floor_configs.iter().any(|c| c == config.short) {
            floor::run(config, &sizes, &mut verdicts);
        }
        if on("holds") {
            holds::run(config, &sizes, &mut verdicts);
        }
        if on("sets") {
            sets::run(config, &sizes, &mut verdicts);
        }
        if on("memory") {
            memory(config, &sizes, &mut verdicts);
        }
        if on("baseline") && baseline_configs.iter().any(|c| c == config.short) {
            baseline::run(config, &sizes, rounds, &mut verdicts);
        }
        if on("scale") && scale_configs.iter().any(|c| c == config.short) {
            scale::run(config, &sizes, &mut verdicts);
        }
        if on("scale-kinds") && scale_kinds_configs.iter().any(|c| c == config.short) {
            scale_kinds::run(config, &scale_kinds_set, &mut verdicts, &mut unmeasured);
        }
        if on("crosscheck") {
            crosscheck(config, &sizes);
        }
        if on("handoff") {
            let t = Instant::now();
            let server = config.server(true);
            let r = handoff::run(&server, rounds, polling_rounds);
            progress(&format!("{}: handoff", config.short), t.elapsed());
            handoff::print(&r);
            timing_goals::print(&timing_goals::handoff(&r));
            if judged || aof_handoff.is_none() {
                aof_handoff = Some((config.label, r));
            }
        }
        if on("contention") {
            let r = contention::run(config, &contention_set);
            contention::print(&r, config.label);
            if judged || contended.is_none() {
                contended = Some((config.label, r));
            }
        }
        if on("observe") && observe_configs.iter().any(|c| c == config.short) {
            observe::run(config, &observe_set, &mut verdicts);
        }
        if on("sessions") && sessions_configs.iter().any(|c| c == config.short) {
            sessions::run(config, &sessions_set, &sizes, &mut verdicts);
        }
        if on("guard") && guard_configs.iter().any(|c| c == config.short) {
            guard::run(config, &sizes, &mut verdicts);
        }
        if on("priorities") && priorities_configs.iter().any(|c| c == config.short) {
            priorities::run(config, &scale_kinds_set, &mut verdicts, &mut unmeasured);
        }
    }

    if !verdicts.is_empty() || !unmeasured.is_empty() {
        println!("## Goals\n");
        println!("| configuration | comparison | ratio | goal | result |");
        println!("| --- | --- | ---: | ---: | --- |");
        for v in &verdicts {
            println!(
                "| {} | {} | {:.2}x | {} | {} |",
                v.config,
                v.what,
                v.ratio,
                v.goal.text(),
                pass(v.goal.met(v.ratio))
            );
        }
        for u in &unmeasured {
            println!(
                "| {} | {} | - | {} | MISS (not measured: {}) |",
                u.config,
                u.what,
                u.goal.text(),
                u.why
            );
        }
        println!();
    }
    let svg = std::env::var("DLOCK_BENCH_SVG")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/docs/bench.svg").to_string());
    if !svg.is_empty() {
        if let Some((label, r)) = &contended {
            let path = std::path::Path::new(&svg).with_file_name("bench-contention.svg");
            write_chart(&path, &contention_chart::render(r, label, &machine()));
        }
    }
    if !svg.is_empty() && (aof_handoff.is_some() || !verdicts.is_empty()) {
        let text = chart::render(
            aof_handoff.as_ref().map(|(label, r)| (*label, r)),
            &verdicts,
            &machine(),
        );
        write_chart(std::path::Path::new(&svg), &text);
    }
    println!(
        "Total benchmark time: {:.0} s.",
        started.elapsed().as_secs_f64()
    );
}

pub fn progress(what: &str, took: Duration) {
    eprintln!("bench: {what} ({:.1} s)", took.as_secs_f64());
}

pub fn pass(ok: bool) -> &'static str {
    if ok {
        "PASS"
    } else {
        "MISS"
    }
}

fn memory(config: &Config, sizes: &Sizes, verdicts: &mut Vec<Verdict>) {
    let t = Instant::now();
    let dlock = cases::memory_per_key(config, true, sizes.memory_locks);
    let plain = cases::memory_per_key(config, false, sizes.memory_locks);
    progress(&format!("{}: memory", config.short), t.elapsed());
    let ratio = dlock / plain;
    let goal = Goal::AtMost(1.2);
    println!("### Memory per held lock\n");
    println!(
        "`used_memory` growth divided by the number of keys, {} keys `lock:<12 digits>` with \
         tokens `tok:<12 digits>` and a TTL, each side on a fresh server.\n",
        sizes.memory_locks
    );
    println!("| keys | dlock bytes/lock | `SET NX PX` bytes/key | ratio | goal | result |");
    println!("| ---: | ---: | ---: | ---: | ---: | --- |");
    println!(
        "| {} | {dlock:.1} | {plain:.1} | {ratio:.2}x | {} | {} |\n",
        sizes.memory_locks,
        goal.text(),
        pass(goal.met(ratio))
    );
    verdicts.push(Verdict {
        config: config.short,
        what: format!("memory per lock, {} keys", sizes.memory_locks),
        ratio,
        goal,
    });
}

fn crosscheck(config: &Config, sizes: &Sizes) {
    let t = Instant::now();
    println!("### Cross-check with redis-benchmark\n");
    println!(
        "`redis-benchmark -c {} -r {} -P <p> --csv DLOCK.ACQUIRE lock:__rand_int__ \
         tok:__rand_int__ 30000` and the `SET ... NX PX 30000` equivalent (each \
         `__rand_int__` is drawn independently, so key and token are unrelated: fine for \
         ACQUIRE, useless for owner hits). Its `--csv` has p50/p95/p99 but no p99.9.\n",
        sizes.clients, sizes.keys
    );
    println!("| pipeline | dlock ops/s | `SET NX PX` ops/s | ratio | dlock p50 / p99 ms | `SET NX PX` p50 / p99 ms |");
    println!("| ---: | ---: | ---: | ---: | ---: | ---: |");
    for pipeline in [1usize, 16] {
        let total = if pipeline == 1 {
            sizes.ops_p1
        } else {
            sizes.ops_p16
        };
        let d = cases::redis_benchmark(config, true, pipeline, total, sizes);
        let b = cases::redis_benchmark(config, false, pipeline, total, sizes);
        match (d, b) {
            (Some(d), Some(b)) => println!(
                "| {pipeline} | {:.0} | {:.0} | {:.2}x | {:.3} / {:.3} | {:.3} / {:.3} |",
                d.0,
                b.0,
                d.0 / b.0,
                d.1,
                d.2,
                b.1,
                b.2
            ),
            _ => println!("| {pipeline} | redis-benchmark unavailable | | | | |"),
        }
    }
    println!();
    progress(
        &format!("{}: redis-benchmark cross-check", config.short),
        t.elapsed(),
    );
}

/// Writes a chart, creating its folder, and names it in the report.
fn write_chart(path: &std::path::Path, text: &str) {
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let full = path.display().to_string();
    match std::fs::write(path, text) {
        Ok(()) => {
            let shown = full
                .strip_prefix(concat!(env!("CARGO_MANIFEST_DIR"), "/"))
                .unwrap_or(&full);
            println!("Chart: `{shown}`.\n")
        }
        Err(e) => eprintln!("cannot write {full}: {e}"),
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().replace('_', "").parse().ok())
        .unwrap_or(default)
}

fn env_list(name: &str, default: &str) -> Vec<String> {
    std::env::var(name)
        .unwrap_or_else(|_| default.to_string())
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    // Online cores, not this process's affinity (pinning narrows that to 1).
    let cores = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    let redis = std::process::Command::new(crate::common::server_binary())
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    format!("{cpu}, {cores} cores; {redis}")
}
