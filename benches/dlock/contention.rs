//! The `contention` section: C clients, each on its own connection, loop
//! "lock -> critical section of S µs -> unlock" for a fixed time on one
//! resource, then on R resources drawn at random, under each scheme of
//! contention_schemes.rs. Reported per scheme and setting: critical sections
//! per second, time from "wants the lock" to "holds it", fairness (grants
//! per client), server CPU per critical section (`INFO cpu` deltas) and the
//! overlaps an in-process checker saw (must be 0).
//!
//! Each scheme gets a fresh server per configuration (dlock's with the
//! module, the others without), used for all its settings; every run has
//! its own key names. Only critical sections that began inside the window
//! count; clients still waiting at its end finish (acquire and release
//! uncounted) so that no wake-up chain is cut, and their wait up to the end
//! of the window counts towards "max wait".

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use crate::cases::Config;
use crate::common::Server;
use crate::contention_schemes::{Client, Names, Scheme};
use crate::load::Rng;
use crate::stats::Summary;

/// Sizes of the section, from the environment (see main.rs).
#[derive(Clone, Debug)]
pub struct Settings {
    pub secs: f64,
    pub clients: Vec<usize>,
    pub cs_us: Vec<u64>,
    pub resources: Vec<usize>,
    pub schemes: Vec<Scheme>,
    pub handoff_rounds: usize,
}

impl Settings {
    pub fn from_env(quick: bool) -> Settings {
        let secs = std::env::var("DLOCK_BENCH_CONTENTION_SECS")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(if quick { 0.5 } else { 5.0 });
        let nums = |name: &str, default: &str| -> Vec<u64> {
            crate::env_list(name, default)
                .iter()
                .filter_map(|s| s.parse().ok())
                .collect()
        };
        let wanted = crate::env_list(
            "DLOCK_BENCH_CONTENTION_SCHEMES",
            "dlock,poll200,poll10,pubsub,blpop",
        );
        Settings {
            secs,
            clients: nums("DLOCK_BENCH_CONTENTION_CLIENTS", "2,8,32,128")
                .into_iter()
                .map(|c| c.max(1) as usize)
                .collect(),
            cs_us: nums("DLOCK_BENCH_CONTENTION_CS_US", "0,1000"),
            resources: nums("DLOCK_BENCH_CONTENTION_RESOURCES", "1,100")
                .into_iter()
                .map(|r| r.max(1) as usize)
                .collect(),
            schemes: Scheme::all()
                .into_iter()
                .filter(|s| wanted.iter().any(|w| w == s.short()))
                .collect(),
            handoff_rounds: crate::env_u64("DLOCK_BENCH_ROUNDS", if quick { 200 } else { 2000 })
                as usize,
        }
    }
}

/// One scheme at one setting.
pub struct Row {
    pub scheme: Scheme,
    pub clients: usize,
    pub cs_us: u64,
    pub resources: usize,
    /// Critical sections per second.
    pub rate: f64,
    pub waits: Summary,
    /// Longest wait, including waits still open when the window closed.
    pub max_wait: Duration,
    pub grants: Vec<u64>,
    /// Grants to another client than the resource's previous holder.
    pub handoffs: u64,
    /// Server CPU (user + sys) per critical section, µs.
    pub cpu_us: f64,
    pub overlaps: u64,
    /// Releases that found another token (expired locks): must be 0.
    pub lost: u64,
}

impl Row {
    pub fn total(&self) -> u64 {
        self.grants.iter().sum()
    }
    /// Critical sections per second that changed hands.
    pub fn handoff_rate(&self) -> f64 {
        self.rate * self.handoffs as f64 / self.total().max(1) as f64
    }
    pub fn starved(&self) -> usize {
        self.grants.iter().filter(|&&g| g == 0).count()
    }
    /// Largest distance of a client's grant count from the mean, as a
    /// fraction of the mean.
    pub fn worst_deviation(&self) -> f64 {
        let mean = self.total() as f64 / self.grants.len().max(1) as f64;
        if mean == 0.0 {
            return f64::INFINITY;
        }
        self.grants
            .iter()
            .map(|&g| (g as f64 - mean).abs() / mean)
            .fold(0.0, f64::max)
    }
    pub fn max_min(&self) -> String {
        let max = self.grants.iter().copied().max().unwrap_or(0);
        match self.grants.iter().copied().min().unwrap_or(0) {
            0 => format!("{max}/0"),
            min => format!("{:.2}", max as f64 / min as f64),
        }
    }
}

/// The section's results for one configuration.
pub struct Report {
    pub rows: Vec<Row>,
    /// dlock's handoff latency (median), measured on the dlock server.
    pub handoff: Option<Duration>,
    pub secs: f64,
}

impl Report {
    pub fn find(&self, scheme: Scheme, clients: usize, cs_us: u64, res: usize) -> Option<&Row> {
        self.rows.iter().find(|r| {
            r.scheme == scheme && r.clients == clients && r.cs_us == cs_us && r.resources == res
        })
    }
}

pub fn run(config: &Config, set: &Settings) -> Report {
    let mut rows = Vec::new();
    let mut handoff = None;
    let mut run_id = 0;
    for &scheme in &set.schemes {
        let t = Instant::now();
        let server = config.server(scheme.module());
        if scheme == Scheme::Dlock && set.handoff_rounds > 0 {
            let s = crate::handoff::dlock_wait(&server, set.handoff_rounds);
            handoff = Some(s.quantile(0.5));
        }
        for &res in &set.resources {
            for &cs in &set.cs_us {
                for &clients in &set.clients {
                    run_id += 1;
                    rows.push(one_run(&server, scheme, clients, cs, res, set.secs, run_id));
                }
            }
        }
        crate::progress(
            &format!("{}: contention, {}", config.short, scheme.short()),
            t.elapsed(),
        );
    }
    Report {
        rows,
        handoff,
        secs: set.secs,
    }
}

#[derive(Default)]
struct ClientOut {
    grants: u64,
    handoffs: u64,
    waits: Vec<Duration>,
    open: Duration,
    lost: u64,
}

fn cpu_seconds(c: &mut redis::Connection) -> f64 {
    ["used_cpu_sys", "used_cpu_user"]
        .iter()
        .filter_map(|f| crate::common::info_field(c, "cpu", f))
        .filter_map(|v| v.parse::<f64>().ok())
        .sum()
}

fn one_run(
    server: &Server,
    scheme: Scheme,
    clients: usize,
    cs_us: u64,
    resources: usize,
    secs: f64,
    run_id: usize,
) -> Row {
    let names: Arc<Vec<Names>> = Arc::new((0..resources).map(|r| Names::new(run_id, r)).collect());
    let held: Arc<Vec<AtomicBool>> =
        Arc::new((0..resources).map(|_| AtomicBool::new(false)).collect());
    let overlaps = Arc::new(AtomicU64::new(0));
    let last: Arc<Vec<AtomicUsize>> = Arc::new(
        (0..resources)
            .map(|_| AtomicUsize::new(usize::MAX))
            .collect(),
    );
    let barrier = Arc::new(Barrier::new(clients + 1));
    let window: Arc<OnceLock<Instant>> = Arc::new(OnceLock::new());
    let length = Duration::from_secs_f64(secs);
    let handles: Vec<_> = (0..clients)
        .map(|i| {
            let mut client = Client::new(scheme, server);
            let (names, held, overlaps) = (names.clone(), held.clone(), overlaps.clone());
            let last = last.clone();
            let (barrier, window) = (barrier.clone(), window.clone());
            thread::spawn(move || {
                let mut rng = Rng::new(((run_id as u64) << 20) | (i as u64 + 1));
                let mut out = ClientOut::default();
                barrier.wait();
                let end = *window.get().expect("window set") + length;
                loop {
                    let want = Instant::now();
                    if want >= end {
                        break;
                    }
                    let r = rng.below(resources as u64) as usize;
                    let token = format!("{:016x}{:016x}", rng.next(), rng.next());
                    client.acquire(&names[r], &token, &mut rng);
                    let got = Instant::now();
                    if held[r].swap(true, Ordering::SeqCst) {
                        overlaps.fetch_add(1, Ordering::Relaxed);
                    }
                    let moved = last[r].swap(i, Ordering::Relaxed) != i;
                    if cs_us > 0 {
                        thread::sleep(Duration::from_micros(cs_us));
                    }
                    held[r].store(false, Ordering::SeqCst);
                    client.release(&names[r], &token);
                    if got < end {
                        out.grants += 1;
                        out.handoffs += u64::from(moved);
                        out.waits.push(got - want);
                    } else {
                        out.open = out.open.max(end.saturating_duration_since(want));
                    }
                }
                out.lost = client.lost;
                out
            })
        })
        .collect();
    let mut probe = server.conn();
    let cpu0 = cpu_seconds(&mut probe);
    let start = Instant::now();
    window.set(start).expect("window once");
    barrier.wait();
    thread::sleep(length);
    let cpu1 = cpu_seconds(&mut probe);
    let took = start.elapsed().as_secs_f64().min(secs).max(1e-9);
    let outs: Vec<ClientOut> = handles
        .into_iter()
        .map(|h| h.join().expect("contention client"))
        .collect();
    let grants: Vec<u64> = outs.iter().map(|o| o.grants).collect();
    let total: u64 = grants.iter().sum();
    let open = outs.iter().map(|o| o.open).max().unwrap_or_default();
    let lost = outs.iter().map(|o| o.lost).sum();
    let handoffs = outs.iter().map(|o| o.handoffs).sum();
    let waits = Summary::of(outs.into_iter().flat_map(|o| o.waits).collect());
    Row {
        scheme,
        clients,
        cs_us,
        resources,
        rate: total as f64 / took,
        max_wait: waits.quantile(1.0).max(open),
        waits,
        grants,
        handoffs,
        cpu_us: if total == 0 {
            f64::NAN
        } else {
            (cpu1 - cpu0) * 1e6 / total as f64
        },
        overlaps: overlaps.load(Ordering::Relaxed),
        lost,
    }
}

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1000.0)
}

pub fn print(r: &Report, label: &str) {
    println!("### Contention ({label})\n");
    println!(
        "C clients, each on its own connection with a random token per acquisition, loop \
         lock -> critical section of S µs (a sleep) -> unlock for {:.1} s per run, on one \
         resource or on R drawn at random. Wait: from wanting the lock to holding it. \
         Fairness: max/min grants per client, the worst client's distance from the mean, \
         clients with no grant. CPU: the server's `used_cpu_user + used_cpu_sys` delta over \
         the window per critical section. Overlaps: two holders of one resource seen by the \
         in-process checker (must be 0). Changed hands: the share of critical sections whose \
         holder is not the resource's previous holder (a client that re-takes the lock it \
         just released did not hand it off).\n",
        r.secs
    );
    if let Some(h) = r.handoff {
        println!(
            "dlock handoff latency (release to the waiter holding, median): {} ms, so at most \
             {:.0} handoffs/s on one resource.\n",
            ms(h),
            1.0 / h.as_secs_f64()
        );
    }
    println!(
        "| scheme | C | S µs | R | cs/s | changed hands | wait p50 ms | p99 ms | max ms | max/min grants | \
         worst vs mean | starved | server CPU µs/cs | overlaps |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for row in &r.rows {
        let lost = if row.lost > 0 {
            format!(" ({} lost releases)", row.lost)
        } else {
            String::new()
        };
        println!(
            "| {} | {} | {} | {} | {:.0} | {:.0}% | {} | {} | {} | {} | {:.0}% | {} | {:.1} | {}{lost} |",
            row.scheme.title(),
            row.clients,
            row.cs_us,
            row.resources,
            row.rate,
            row.handoffs as f64 * 100.0 / row.total().max(1) as f64,
            row.waits.ms(0.5),
            row.waits.ms(0.99),
            ms(row.max_wait),
            row.max_min(),
            row.worst_deviation() * 100.0,
            row.starved(),
            row.cpu_us,
            row.overlaps,
        );
    }
    println!();
    crate::contention_goals::print(r);
}
