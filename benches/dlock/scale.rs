//! Scale: ACQUIRE and owner RELEASE throughput (pipeline 16) with N other
//! locks live, against `SET NX PX` and the Lua unlock with N string keys.
//!
//! Every size gets its own server, all kept running, and the runs alternate
//! between them (10k, 1M, 10M, 10k, ...): a slow minute on the machine then
//! hits every size alike instead of one row. Each figure is the median of
//! its runs.
//!
//! With AOF on, the live set is loaded with `appendonly` switched off and
//! then back on (which rewrites the AOF from the dataset, as a restart
//! would): the same end state as a server that has been running a long
//! time, without timing a 10M-command AOF with its chain of rewrites. The
//! measurement itself runs with the configuration as given.

use std::time::Instant;

use crate::cases::{self, name, owner, stranger, Config, Sizes, TTL, UNLOCK};
use crate::common::Server;
use crate::load::{self, Rng, Shape};
use crate::throughput::median;
use crate::{info_u64, pass, progress, Goal, Verdict};

/// One server holding `live` locks (or string keys), ready for runs.
struct Loaded {
    server: Server,
    module: bool,
    live: u64,
    sha: String,
    rng: Rng,
    runs: usize,
    acquire: Vec<f64>,
    release: Vec<f64>,
    populate_secs: f64,
}

impl Loaded {
    fn new(config: &Config, module: bool, live: u64, keys: u64) -> Loaded {
        let t0 = Instant::now();
        let server = config.server(module);
        let mut c = server.conn();
        let aof = config.args.contains(&"--appendonly") && config.args.contains(&"yes");
        if aof {
            cases::set_config(&mut c, "appendonly", "no");
        }
        cases::populate(&server, module, b"live:", 0, live);
        // Acquire: random resources over `keys` others (`acq<r>:`); release:
        // each of `keys` owned locks (`lock:`) once, shuffled.
        cases::populate(&server, module, b"lock:", 0, keys);
        let loaded = t0.elapsed().as_secs_f64();
        if aof {
            cases::set_config(&mut c, "appendonly", "yes");
        }
        cases::settle(&mut c);
        let populate_secs = t0.elapsed().as_secs_f64();
        eprintln!(
            "bench:   {} live keys loaded in {loaded:.1} s, settled (AOF rewrite, rehash) in {:.1} s",
            live + keys,
            populate_secs - loaded
        );
        let sha = if module {
            String::new()
        } else {
            cases::script_sha(&server, UNLOCK)
        };
        Loaded {
            server,
            module,
            live,
            sha,
            rng: Rng::new(live),
            runs: 0,
            acquire: Vec::new(),
            release: Vec::new(),
            populate_secs,
        }
    }

    /// One ACQUIRE run on fresh resources (`acq<r>:`), then one RELEASE of
    /// every owned lock (re-populated after the first run).
    fn run(&mut self, sizes: &Sizes) {
        let shape = |total| Shape {
            conns: sizes.clients,
            pipeline: 16,
            total,
            latency: false,
        };
        let (module, keys, r) = (self.module, sizes.keys, self.runs);
        let prefix = [b'a', b'c', b'q', b'0' + (r % 10) as u8, b':'];
        let rng = &mut self.rng;
        let acq = load::run(self.server.port(), shape(sizes.scale_ops), |_, buf| {
            let k = name(&prefix, rng.below(keys));
            let t = stranger(rng);
            if module {
                load::command(buf, &[b"DLOCK.ACQUIRE", k.as_ref(), t.as_ref(), TTL]);
            } else {
                load::command(buf, &[b"SET", k.as_ref(), t.as_ref(), b"NX", b"PX", TTL]);
            }
        });
        cases::check(&acq, "scale acquire");
        if r > 0 {
            cases::populate(&self.server, module, b"lock:", 0, keys);
        }
        let mut perm: Vec<u64> = (0..keys).collect();
        self.rng.shuffle(&mut perm);
        let mut it = perm.iter().copied();
        let sha = self.sha.as_bytes();
        let rel = load::run(self.server.port(), shape(keys), |_, buf| {
            let i = it.next().unwrap();
            let (k, t) = (name(b"lock:", i), owner(i));
            if module {
                load::command(buf, &[b"DLOCK.RELEASE", k.as_ref(), t.as_ref()]);
            } else {
                load::command(buf, &[b"EVALSHA", sha, b"1", k.as_ref(), t.as_ref()]);
            }
        });
        cases::check(&rel, "scale release");
        assert_eq!(rel.positive, keys, "scale release: not every release hit");
        self.runs += 1;
        self.acquire.push(acq.ops_per_sec());
        self.release.push(rel.ops_per_sec());
    }

    fn check_intact(&self, config: &Config) {
        let mut c = self.server.conn();
        let dbsize: u64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
        assert!(
            dbsize >= self.live,
            "live keys lost: {dbsize} < {}",
            self.live
        );
        if config.args.contains(&"--appendonly") {
            assert_eq!(
                info_u64(&mut c, "persistence", "aof_enabled"),
                1,
                "AOF not back on"
            );
        }
    }
}

/// Loads every size on both sides, alternates the runs, prints the table.
pub fn run(config: &Config, sizes: &Sizes, verdicts: &mut Vec<Verdict>) {
    let mut servers: Vec<Loaded> = Vec::new();
    for &live in &sizes.scale {
        for module in [true, false] {
            if !module && !sizes.scale_baseline {
                continue;
            }
            let t = Instant::now();
            servers.push(Loaded::new(config, module, live, sizes.keys));
            progress(
                &format!("{}: scale {live} {} loaded", config.short, side(module)),
                t.elapsed(),
            );
        }
    }
    for rep in 0..sizes.scale_repeat {
        for s in servers.iter_mut() {
            let t = Instant::now();
            s.run(sizes);
            progress(
                &format!(
                    "{}: scale {} {} (run {}): acquire {:.0}, release {:.0} ops/s",
                    config.short,
                    s.live,
                    side(s.module),
                    rep + 1,
                    s.acquire.last().copied().unwrap_or(0.0),
                    s.release.last().copied().unwrap_or(0.0),
                ),
                t.elapsed(),
            );
        }
    }
    for s in &servers {
        s.check_intact(config);
    }
    report(config, sizes, &servers, verdicts);
}

fn side(module: bool) -> &'static str {
    if module {
        "dlock"
    } else {
        "baseline"
    }
}

fn report(config: &Config, sizes: &Sizes, servers: &[Loaded], verdicts: &mut Vec<Verdict>) {
    let figure = |module: bool, live: u64, release: bool| {
        servers
            .iter()
            .find(|s| s.module == module && s.live == live)
            .map(|s| median(if release { &s.release } else { &s.acquire }))
    };
    let column = |module: bool, release: bool| -> Vec<f64> {
        sizes
            .scale
            .iter()
            .filter_map(|&l| figure(module, l, release))
            .collect()
    };
    println!("### Scale: throughput with many live locks\n");
    println!(
        "Pipeline 16, 50 clients, with N other locks (or, for plain Redis, `SET NX PX` string \
         keys) live. ACQUIRE / `SET NX PX`: {} commands on random resources outside the live \
         set; RELEASE / Lua unlock: each of {} owned locks once, shuffled. Every size has its \
         own server, all loaded first; the {} runs then alternate between the servers, and \
         each figure is the median of its runs. \"vs first\" is relative to the first row of \
         the same column. Goal (dlock): flat within 10%, i.e. the slowest row >= 0.9x of the \
         fastest. With AOF, the live set is loaded with `appendonly` off, then switched on \
         (which rewrites the AOF from the dataset) before measuring.\n",
        sizes.scale_ops, sizes.keys, sizes.scale_repeat
    );
    println!(
        "| live keys | dlock ACQUIRE ops/s | vs first | `SET NX PX` ops/s | vs first | \
         dlock RELEASE ops/s | vs first | Lua unlock ops/s | vs first | populate s dlock / plain |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    let first = |module, release| column(module, release).first().copied();
    let cell = |v: Option<f64>, base: Option<f64>| match (v, base) {
        (Some(v), Some(b)) => (format!("{v:.0}"), format!("{:.2}x", v / b)),
        _ => ("-".to_string(), "-".to_string()),
    };
    for &live in &sizes.scale {
        let (da, dar) = cell(figure(true, live, false), first(true, false));
        let (ba, bar) = cell(figure(false, live, false), first(false, false));
        let (dr, drr) = cell(figure(true, live, true), first(true, true));
        let (br, brr) = cell(figure(false, live, true), first(false, true));
        let secs = |module| {
            servers
                .iter()
                .find(|s| s.module == module && s.live == live)
                .map_or("-".to_string(), |s| format!("{:.0}", s.populate_secs))
        };
        println!(
            "| {live} | {da} | {dar} | {ba} | {bar} | {dr} | {drr} | {br} | {brr} | {} / {} |",
            secs(true),
            secs(false)
        );
    }
    println!();
    let goal = Goal::AtLeast(0.9);
    let (Some(lo), Some(hi)) = (sizes.scale.first(), sizes.scale.last()) else {
        return;
    };
    let flatness = |v: &[f64]| {
        v.iter().copied().fold(f64::MAX, f64::min) / v.iter().copied().fold(f64::MIN, f64::max)
    };
    for (what, release) in [("ACQUIRE", false), ("RELEASE", true)] {
        let ratio = flatness(&column(true, release));
        let (ours, base) = (column(true, release), column(false, release));
        // What dlock adds at each size: if only the keyspace itself slows
        // down with size, this stays level while both columns fall.
        let plain = if base.len() == ours.len() && !base.is_empty() {
            let per_size: Vec<String> = ours
                .iter()
                .zip(&base)
                .map(|(d, b)| format!("{:.2}x", d / b))
                .collect();
            format!(
                " (plain Redis: {:.2}x; dlock / plain Redis at each size: {})",
                flatness(&base),
                per_size.join(", ")
            )
        } else {
            String::new()
        };
        println!(
            "- {what}: slowest / fastest = {ratio:.2}x{plain}, goal {}: {}",
            goal.text(),
            pass(goal.met(ratio))
        );
        verdicts.push(Verdict {
            config: config.short,
            what: format!("{what} flat, {lo} to {hi} live locks (slowest / fastest)"),
            ratio,
            goal,
        });
    }
    println!();
}
