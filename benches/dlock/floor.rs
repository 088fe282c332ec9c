//! dlock against the floor: the least a module command on a lock costs on
//! this server. `FLOOR.CHECK key token` (benches/floor/, a bench-only
//! module) reads its token argument, opens the key for reading and writing
//! through the raw key API, checks that it holds the module's own type,
//! reads the stored token, compares it and replies an integer: what every
//! dlock command must do at least, and nothing more. `ACQUIRE`, owner
//! `RELEASE` and owner `EXTEND` are measured against it at pipeline 16, the
//! goal >= 0.95x, beside the server's own lease primitives a user would
//! pick instead (`SET NX PX`, `DELEX IFEQ`/`DELIFEQ`, `SET IFEQ PX`) against
//! the same floor, or "n/a" where the server lacks them.
//!
//! Every row runs its sides interleaved (interleave.rs): the floor, dlock
//! and the native primitive each on its own fresh server, all up at once,
//! each run cut into blocks that take turns (ABC CBA BCA ...); a ratio is
//! the median over the blocks of all pairs of that side's rate over the
//! floor's rate in the same block. The floor and dlock sides run a server
//! with both modules loaded (the floor values in dlock's plain-lock layout,
//! `FLOOR.SET` populating them untimed); the native side runs without
//! modules, as in native.rs. A first row runs the floor against itself on
//! a second server: its ratio is the noise of this run (A/A).
//!
//! The section runs on the configured server and, when that lacks the
//! compare-and-delete or `SET IFEQ`, on each build that has them
//! (`DLOCK_BENCH_NATIVE_SERVERS`, native.rs), on the configurations in
//! `DLOCK_BENCH_FLOOR_CONFIGS` (main.rs). It needs the floor module
//! (`target/release/libdlock_floor.so`, built by `make bench`, or
//! `DLOCK_BENCH_FLOOR_MODULE`); without it the section is skipped with a
//! note. docs/performance.md#the-floor-floor has figures and what dlock adds.

use std::path::PathBuf;
use std::time::Instant;

use crate::cases::{check, name, owner, Config, Sizes};
use crate::common::{workspace_root, Server};
use crate::interleave::{self, block_ratios, Cmd};
use crate::load::{self, Outcome, Shape};
use crate::native::{self, primitives};
use crate::throughput::{median, wanted};
use crate::{pass, progress, Goal, Verdict};

const GOAL: Goal = Goal::AtLeast(0.95);
const PIPELINE: usize = 16;
/// TTL of the populated floor values: nothing may expire during a run.
const LONG_TTL: &[u8] = b"3600000";

/// The floor module, if built.
fn module() -> Option<PathBuf> {
    let path = std::env::var_os("DLOCK_BENCH_FLOOR_MODULE")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target/release/libdlock_floor.so"));
    path.is_file().then_some(path)
}

/// Stores floor values `lock:<n>` owned by `owner(n)` for n < `keys`.
pub fn populate(server: &Server, keys: u64) {
    let mut n = 0u64;
    let out = load::run(
        server.port(),
        Shape {
            conns: 50,
            pipeline: 128,
            total: keys,
            latency: false,
        },
        |_, buf| {
            let (k, t) = (name(b"lock:", n), owner(n));
            n += 1;
            load::command(buf, &[b"FLOOR.SET", k.as_ref(), t.as_ref(), LONG_TTL]);
        },
    );
    check(&out, "populate the floor");
    assert_eq!(out.positive, keys, "populate the floor: not every key");
}

/// `config` with the floor module loaded beside dlock.
fn with_floor(config: &Config, floor: &std::path::Path) -> Config {
    let path: &'static str = Box::leak(floor.display().to_string().into_boxed_str());
    let mut args = config.args.clone();
    args.extend(["--loadmodule", path]);
    Config {
        args,
        ..config.clone()
    }
}

/// The floor answers as it should (owner 1, another token 0, a string
/// WRONGTYPE) before anything is timed against it.
fn sanity(config: &Config) {
    let server = config.server(true);
    let mut c = server.conn();
    let q = |c: &mut redis::Connection, args: &[&str]| {
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query::<redis::Value>(c)
    };
    let ok = q(&mut c, &["FLOOR.SET", "k", "t", "60000"]).is_ok()
        && q(&mut c, &["FLOOR.CHECK", "k", "t"]).ok() == Some(redis::Value::Int(1))
        && q(&mut c, &["FLOOR.CHECK", "k", "u"]).ok() == Some(redis::Value::Int(0))
        && q(&mut c, &["SET", "s", "t"]).is_ok()
        && q(&mut c, &["FLOOR.CHECK", "s", "t"]).is_err();
    assert!(ok, "the floor module does not answer as floor.rs expects");
}

/// The native side of a row.
enum Native {
    /// None: the A/A row.
    Nothing,
    /// This command, under this name.
    Cmd(Cmd, &'static str),
    /// The server lacks it: "n/a (...)".
    Lacking(String),
}

/// One row: the sides' pooled rates and each side's block ratios to the
/// floor (the first side).
struct Row {
    title: String,
    floor: f64,
    /// ops/s, ratio to the floor, share of positive replies.
    dlock: (f64, f64, f64),
    /// Its name (or why there is none), ops/s, ratio, positive replies.
    native: Option<(String, f64, f64, f64)>,
}

pub fn run(config: &Config, sizes: &Sizes, verdicts: &mut Vec<Verdict>) {
    let Some(floor) = module() else {
        println!(
            "### dlock against the floor\n\nSkipped: no floor module (`make bench` builds \
             `target/release/libdlock_floor.so`; or set `DLOCK_BENCH_FLOOR_MODULE`).\n"
        );
        return;
    };
    let here = server_name();
    run_on(config, &floor, sizes, verdicts, &here);
    let found = primitives(config);
    if found.delete.is_none() || !found.set_ifeq {
        native::on_builds(config, |name| {
            run_on(config, &floor, sizes, verdicts, &name)
        });
    }
}

/// The configured server's name and version, for the titles.
fn server_name() -> String {
    let out = std::process::Command::new(crate::common::server_binary())
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let version = out
        .split_whitespace()
        .find_map(|w| w.strip_prefix("v="))
        .unwrap_or("?");
    let kind = if out.to_lowercase().contains("valkey") {
        "valkey"
    } else {
        "redis"
    };
    format!("{kind}-{version} (configured)")
}

fn run_on(config: &Config, floor: &std::path::Path, sizes: &Sizes, v: &mut Vec<Verdict>, on: &str) {
    let fc = with_floor(config, floor);
    sanity(&fc);
    let found = primitives(config);
    let na = |what: &str| format!("n/a (no {what})");
    let rows: Vec<(&str, Cmd, Native)> = vec![
        ("A/A: floor vs floor", Cmd::Floor, Native::Nothing),
        (
            "ACQUIRE",
            Cmd::Acquire,
            Native::Cmd(Cmd::SetNx, "SET NX PX"),
        ),
        (
            "RELEASE, owner",
            Cmd::Release,
            match found.delete {
                Some((owner, _, name)) => Native::Cmd(owner, name),
                None => Native::Lacking(na("DELEX IFEQ / DELIFEQ")),
            },
        ),
        (
            "EXTEND, owner",
            Cmd::Extend,
            if found.set_ifeq {
                Native::Cmd(Cmd::SetIfeq, "SET IFEQ PX")
            } else {
                Native::Lacking(na("SET IFEQ"))
            },
        ),
    ];
    let t = Instant::now();
    let mut out = Vec::new();
    for (title, dlock, native) in rows.into_iter().filter(|(t, ..)| wanted(t)) {
        let mut sides = vec![(&fc, Cmd::Floor), (&fc, dlock)];
        if let Native::Cmd(cmd, _) = native {
            sides.push((config, cmd));
        }
        let (mut rates, mut ratios) =
            (vec![Vec::new(); sides.len()], vec![Vec::new(); sides.len()]);
        let mut pooled: Vec<Outcome> = sides.iter().map(|_| Outcome::default()).collect();
        for rep in 1..=sizes.repeat {
            let t = Instant::now();
            let m = interleave::run_sides(
                &sides,
                PIPELINE,
                sizes.ops_p16,
                sizes.clients,
                sizes.keys,
                rep,
            );
            for (i, side) in m.iter().enumerate() {
                rates[i].push(side.out.ops_per_sec());
                ratios[i].extend(block_ratios(side, &m[0]));
            }
            let each: Vec<String> = m
                .iter()
                .map(|s| format!("{:.0}", s.out.ops_per_sec()))
                .collect();
            for (all, side) in pooled.iter_mut().zip(m) {
                all.absorb(side.out);
            }
            progress(
                &format!(
                    "{}: floor on {on}: {title} (pair {rep}): {} ops/s",
                    config.short,
                    each.join(" / ")
                ),
                t.elapsed(),
            );
        }
        let native = match native {
            Native::Cmd(_, name) => Some((
                name.to_string(),
                median(&rates[2]),
                median(&ratios[2]),
                pooled[2].hit_rate(),
            )),
            Native::Nothing => None,
            Native::Lacking(why) => Some((why, f64::NAN, f64::NAN, f64::NAN)),
        };
        out.push(Row {
            title: title.to_string(),
            floor: median(&rates[0]),
            dlock: (median(&rates[1]), median(&ratios[1]), pooled[1].hit_rate()),
            native,
        });
    }
    progress(&format!("{}: floor on {on}", config.short), t.elapsed());
    print(config, sizes, on, &out, v);
}

fn print(config: &Config, sizes: &Sizes, on: &str, rows: &[Row], v: &mut Vec<Verdict>) {
    println!("### dlock against the floor on {on}\n");
    println!(
        "`FLOOR.CHECK key token` (benches/floor/): open the key through the raw key API, check \
         its type, read and compare the token, reply; the least any dlock command does. \
         Pipeline {PIPELINE}, {} clients, random resources out of {}; {} pairs per row, the \
         sides on their own fresh servers, all up at once, every run cut into {} blocks that \
         take turns; ops/s is the median run, a ratio the median over all blocks of the \
         side's rate over the floor's in the same block. Floor and dlock run on servers with \
         both modules loaded, the native primitive on one without modules. The A/A row is \
         the floor against itself on a second server: this run's noise. In brackets: the \
         share of positive replies (ACQUIRE granted, RELEASE or EXTEND by the owner).\n",
        sizes.clients,
        sizes.keys,
        sizes.repeat,
        interleave::BLOCKS
    );
    println!(
        "| command | floor ops/s | dlock ops/s | dlock / floor | goal | result | native \
         | native ops/s | native / floor |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: |");
    for r in rows {
        let (ops, ratio, hits) = r.dlock;
        let native = match &r.native {
            Some((name, ops, ratio, hits)) if ops.is_finite() => {
                format!("`{name}` | {ops:.0} ({:.0}%) | {ratio:.2}x", hits * 100.0)
            }
            Some((why, ..)) => format!("{why} | - | -"),
            None => "- | - | -".into(),
        };
        if r.native.is_none() {
            // The A/A row: informational, no goal.
            println!(
                "| {} | {:.0} | {ops:.0} | {ratio:.2}x | - | - | {native} |",
                r.title, r.floor
            );
            continue;
        }
        println!(
            "| {} | {:.0} | {ops:.0} ({:.0}%) | {ratio:.2}x | {} | {} | {native} |",
            r.title,
            r.floor,
            hits * 100.0,
            GOAL.text(),
            pass(GOAL.met(ratio))
        );
        v.push(Verdict {
            config: config.short,
            what: format!("{} vs floor on {on}, -P {PIPELINE}", r.title),
            ratio,
            goal: GOAL,
        });
    }
    println!();
}
