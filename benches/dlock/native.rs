//! dlock against the server's own lease primitives, on the same server
//! build: `ACQUIRE` vs `SET NX PX`, `RELEASE` vs `DELEX key IFEQ v` (Redis
//! 8.4+) or `DELIFEQ key v` (Valkey 9), `EXTEND` vs `SET key v IFEQ v PX`.
//! These are what a user of a 2026 server picks for a plain lease instead
//! of Lua, and they do less than dlock (no fence, no waiting, no kinds), so
//! the goal is that dlock costs about the same per command: >= 0.95x at
//! pipeline 16, where the server's work per command shows (at pipeline 1
//! the round trip dominates; those rows are printed without a goal).
//!
//! Both sides run interleaved (interleave.rs): the dlock side on a server
//! with the module, the native side on one without it (the module's
//! keyspace-event subscription would tax `DEL` on that side). When the
//! configured server has neither compare-and-delete command, the section
//! runs on each server build that has one (`DLOCK_BENCH_NATIVE_SERVERS`,
//! by default the team's builds in ../shared/servers/), so a plain `make
//! bench` compares against Redis 8.6 and Valkey 9; with none, it prints a
//! note.

use std::time::Instant;

use crate::cases::{Config, Sizes};
use crate::interleave::{self, Cmd};
use crate::throughput::{median, wanted};
use crate::{pass, progress, Goal, Verdict};

const GOAL: Goal = Goal::AtLeast(0.95);

/// The server's compare-and-delete: (owner, wrong value) commands and its
/// name for the titles; `None` when it has neither (or no `SET IFEQ`).
fn flavour(config: &Config) -> Option<(Cmd, Cmd, &'static str)> {
    let found = primitives(config);
    if !found.set_ifeq {
        return None;
    }
    found.delete
}

/// The lease primitives a server build has besides `SET NX PX`.
pub struct Primitives {
    /// Its compare-and-delete: (owner, wrong value) commands and its name.
    pub delete: Option<(Cmd, Cmd, &'static str)>,
    /// Whether `SET ... IFEQ` works.
    pub set_ifeq: bool,
}

/// Asks a fresh server (`DLOCK_SERVER`, without the module) what it has.
pub fn primitives(config: &Config) -> Primitives {
    let server = config.server(false);
    let mut c = server.conn();
    let known = |c: &mut redis::Connection, name: &str| {
        let info: redis::Value = redis::cmd("COMMAND")
            .arg("INFO")
            .arg(name)
            .query(c)
            .unwrap_or(redis::Value::Nil);
        matches!(info, redis::Value::Array(ref v) if v.first().is_some_and(|e| *e != redis::Value::Nil))
    };
    let set_ifeq = redis::cmd("SET")
        .arg("bench:probe")
        .arg("v")
        .arg("IFEQ")
        .arg("v")
        .query::<Option<String>>(&mut c)
        .is_ok();
    let delete = if known(&mut c, "DELEX") {
        Some((Cmd::Delex, Cmd::DelexMiss, "DELEX IFEQ"))
    } else if known(&mut c, "DELIFEQ") {
        Some((Cmd::Delifeq, Cmd::DelifeqMiss, "DELIFEQ"))
    } else {
        None
    };
    Primitives { delete, set_ifeq }
}

/// One comparison: the pairs' blocks' ratios and each side's pooled rate.
struct Row {
    title: String,
    pipeline: usize,
    dlock: f64,
    native: f64,
    hits: (f64, f64),
    ratio: f64,
}

/// The section on the configured server when it has the primitives; else
/// on each build that has them among `DLOCK_BENCH_NATIVE_SERVERS` (folders
/// as for `make SERVER=...`; default: every folder in ../shared/servers/).
pub fn run(config: &Config, sizes: &Sizes, verdicts: &mut Vec<Verdict>) {
    if flavour(config).is_some() {
        return run_on(config, sizes, verdicts, None);
    }
    let ran = on_builds(config, |name| run_on(config, sizes, verdicts, Some(name)));
    if !ran {
        println!(
            "### dlock against the server's own primitives\n\nSkipped: this server has no \
             `DELEX ... IFEQ` (Redis 8.4+) or `DELIFEQ` (Valkey 9), or no `SET ... IFEQ`, and \
             no build in `DLOCK_BENCH_NATIVE_SERVERS` (default ../shared/servers/) has them.\n"
        );
    }
}

/// Calls `each` with the name of every build among
/// `DLOCK_BENCH_NATIVE_SERVERS` that has the primitives, `DLOCK_SERVER`
/// (and its cli and benchmark) pointing at it meanwhile; whether there
/// was any.
pub fn on_builds(config: &Config, mut each: impl FnMut(String)) -> bool {
    let folders: Vec<std::path::PathBuf> = match std::env::var("DLOCK_BENCH_NATIVE_SERVERS") {
        Ok(list) => list
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(|s| s.trim().into())
            .collect(),
        Err(_) => {
            let mut v: Vec<_> = std::fs::read_dir("../shared/servers")
                .into_iter()
                .flatten()
                .filter_map(|e| Some(e.ok()?.path()))
                .collect();
            v.sort();
            v
        }
    };
    let saved: Vec<(&str, Option<std::ffi::OsString>)> =
        ["DLOCK_SERVER", "DLOCK_CLI", "DLOCK_BENCHMARK"]
            .into_iter()
            .map(|k| (k, std::env::var_os(k)))
            .collect();
    let mut ran = false;
    for dir in folders {
        let prefix = if dir.join("valkey-server").exists() {
            "valkey-"
        } else {
            "redis-"
        };
        if !dir.join(format!("{prefix}server")).exists() {
            continue;
        }
        for (var, bin) in [
            ("DLOCK_SERVER", "server"),
            ("DLOCK_CLI", "cli"),
            ("DLOCK_BENCHMARK", "benchmark"),
        ] {
            std::env::set_var(var, dir.join(format!("{prefix}{bin}")));
        }
        if flavour(config).is_some() {
            let name = dir.file_name().map(|n| n.to_string_lossy().into_owned());
            each(name.unwrap_or_default());
            ran = true;
        }
    }
    for (k, v) in saved {
        match v {
            Some(v) => std::env::set_var(k, v),
            None => std::env::remove_var(k),
        }
    }
    ran
}

/// The section on the server `DLOCK_SERVER` names (`on`: its name for the
/// titles, when it is not the configured one).
fn run_on(config: &Config, sizes: &Sizes, verdicts: &mut Vec<Verdict>, on: Option<String>) {
    let Some((delete, delete_miss, name)) = flavour(config) else {
        return;
    };
    let on = on.map(|n| format!(" on {n}")).unwrap_or_default();
    let pairs: Vec<(String, Cmd, Cmd)> = vec![
        ("ACQUIRE vs SET NX PX".into(), Cmd::Acquire, Cmd::SetNx),
        (format!("RELEASE vs {name}, owner"), Cmd::Release, delete),
        (
            format!("RELEASE vs {name}, wrong token"),
            Cmd::ReleaseMiss,
            delete_miss,
        ),
        (
            "EXTEND vs SET IFEQ PX, owner".into(),
            Cmd::Extend,
            Cmd::SetIfeq,
        ),
    ];
    let t = Instant::now();
    let mut rows = Vec::new();
    for (title, dlock, native) in pairs.into_iter().filter(|(t, ..)| wanted(t)) {
        for pipeline in [1usize, 16] {
            let total = if pipeline == 1 {
                sizes.ops_p1
            } else {
                sizes.ops_p16
            };
            let (mut ratios, mut d, mut n, mut hits) =
                (Vec::new(), Vec::new(), Vec::new(), (0.0, 0.0));
            for rep in 1..=sizes.repeat {
                let t = Instant::now();
                let b = interleave::run(
                    (config, dlock),
                    (config, native),
                    pipeline,
                    total,
                    sizes.clients,
                    sizes.keys,
                    rep,
                );
                progress(
                    &format!(
                        "{}: {} vs {} -P {pipeline} (pair {rep}): {:.0} vs {:.0} ops/s",
                        config.short,
                        dlock.label(),
                        native.label(),
                        b.this.ops_per_sec(),
                        b.other.ops_per_sec()
                    ),
                    t.elapsed(),
                );
                d.push(b.this.ops_per_sec());
                n.push(b.other.ops_per_sec());
                hits = (b.this.hit_rate(), b.other.hit_rate());
                ratios.extend(b.ratios);
            }
            rows.push(Row {
                title: title.clone(),
                pipeline,
                dlock: median(&d),
                native: median(&n),
                hits,
                ratio: median(&ratios),
            });
        }
    }
    progress(&format!("{}: native primitives", config.short), t.elapsed());
    println!("### dlock against the server's own primitives{on}\n");
    println!(
        "The same server build, the native side without the module; {} pairs per row, both \
         servers up at once, each run cut into {} blocks alternating between them (ABBA) with \
         the same resources on both; ops/s is the median pair, the ratio (dlock / native) the \
         median of the ratios of all blocks. Goal {} at pipeline 16 (native.rs says why).\n",
        sizes.repeat,
        interleave::BLOCKS,
        GOAL.text()
    );
    println!("| comparison | pipeline | dlock ops/s | native ops/s | hits dlock / native | ratio | goal | result |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |");
    for r in rows {
        let judged = r.pipeline == 16;
        println!(
            "| {} | {} | {:.0} | {:.0} | {:.0}% / {:.0}% | {:.2}x | {} | {} |",
            r.title,
            r.pipeline,
            r.dlock,
            r.native,
            r.hits.0 * 100.0,
            r.hits.1 * 100.0,
            r.ratio,
            if judged { GOAL.text() } else { "-".into() },
            if judged { pass(GOAL.met(r.ratio)) } else { "-" }
        );
        if judged {
            verdicts.push(Verdict {
                config: config.short,
                what: format!("{}{on}, -P 16", r.title),
                ratio: r.ratio,
                goal: GOAL,
            });
        }
    }
    println!();
}
