//! The `observe` section: what observers cost the clients of the resource
//! they watch, and how soon they hear of a change.
//!
//! - Critical sections per second on one contended resource: C clients,
//!   each on its own connection with a fresh token per acquisition, loop
//!   `DLOCK.ACQUIRE res tok 30000 WAIT 30000` -> a critical section of S µs
//!   -> `DLOCK.RELEASE` for a fixed time, with no observer and with N
//!   observers following the resource (each observes again with the
//!   version of every answer: observe_followers.rs). One server; the two
//!   sides take turns (ABBA), and the ratio is the median of the pairs'
//!   ratios. Goal: >= 0.9x.
//! - The delay from a change (a `RELEASE`) to an observer's reply, against
//!   the delay to a `SUBSCRIBE`d keyspace notification of the same change
//!   (`__keyspace@0__:<res>` with `notify-keyspace-events Kd`: the module
//!   publishes `dlock.released`): observe_latency.rs.

use std::sync::{Arc, Barrier, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use crate::cases::Config;
use crate::common::{self, Server};
use crate::contention_schemes::{Client, Names, Scheme};
use crate::load::Rng;
use crate::observe_followers::Followers;
use crate::observe_latency;
use crate::{pass, progress, Goal, Verdict};

/// Sizes of the section, from the environment (see main.rs).
#[derive(Clone, Debug)]
pub struct Settings {
    pub observers: usize,
    pub clients: usize,
    pub cs_us: u64,
    pub secs: f64,
    pub repeat: usize,
    pub rounds: usize,
}

impl Settings {
    pub fn from_env(quick: bool) -> Settings {
        let q = |full: u64, small: u64| if quick { small } else { full };
        Settings {
            observers: crate::env_u64("DLOCK_BENCH_OBSERVE_OBSERVERS", 1000) as usize,
            clients: crate::env_u64("DLOCK_BENCH_OBSERVE_CLIENTS", 8).max(1) as usize,
            cs_us: crate::env_u64("DLOCK_BENCH_OBSERVE_CS_US", 0),
            secs: std::env::var("DLOCK_BENCH_OBSERVE_SECS")
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(if quick { 0.5 } else { 2.0 }),
            repeat: crate::env_u64("DLOCK_BENCH_OBSERVE_REPEAT", q(5, 2)).max(1) as usize,
            rounds: crate::env_u64("DLOCK_BENCH_OBSERVE_ROUNDS", q(2000, 200)) as usize,
        }
    }
}

/// One timed window of the contending clients.
struct Run {
    /// Critical sections per second.
    rate: f64,
    /// Server CPU (user + sys) per critical section, µs.
    cpu_us: f64,
    /// Observers' answers per second.
    answers: f64,
}

#[derive(Default)]
struct Throughput {
    without: Vec<Run>,
    with: Vec<Run>,
    /// with / without, per back-to-back pair.
    ratios: Vec<f64>,
    /// Observer replies that were not a state (must be 0).
    odd: u64,
}

pub fn run(config: &Config, set: &Settings, verdicts: &mut Vec<Verdict>) {
    let t = Instant::now();
    let needed = (set.observers + set.clients) as u64 * 2 + 512;
    let limit = crate::scale_kinds_pool::raise_nofile(needed);
    let server = config.server(true);
    let measured = limit.and_then(|()| throughput(&server, set));
    drop(server);
    progress(
        &format!("{}: observe, throughput", config.short),
        t.elapsed(),
    );
    // A fresh server: the throughput runs fill the AOF, whose rewrite (a
    // fork) would show in the latencies' tails.
    let t = Instant::now();
    let server = config.server(true);
    let (observer, notified) = observe_latency::measure(&server, set.rounds);
    progress(&format!("{}: observe, latency", config.short), t.elapsed());
    print_throughput(config, set, &measured, verdicts);
    observe_latency::print(set.rounds, &observer, &notified);
}

/// The contended resource's runs, without and with the followers.
fn throughput(server: &Server, set: &Settings) -> Result<Throughput, String> {
    let names = Arc::new(Names::new(0, 0));
    let followers = Followers::connect(server.port(), &names.key, set.observers)?;
    let mut probe = server.conn();
    let mut out = Throughput::default();
    for rep in 0..set.repeat {
        let order = if rep % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        let mut pair = [0.0; 2];
        for with in order {
            if with {
                followers.follow();
                wait_observers(&mut probe, set.observers, "every observer blocked")?;
            }
            let r = window(server, &names, set, &followers);
            if with {
                stop(&followers, &mut probe, &names.key)?;
            }
            pair[usize::from(with)] = r.rate;
            if with {
                out.with.push(r);
            } else {
                out.without.push(r);
            }
        }
        out.ratios.push(pair[1] / pair[0].max(1e-9));
    }
    out.odd = followers.odd();
    Ok(out)
}

fn observers(c: &mut redis::Connection) -> usize {
    crate::info_u64(c, "dlock", "dlock_observers") as usize
}

fn wait_observers(c: &mut redis::Connection, n: usize, what: &str) -> Result<(), String> {
    let end = Instant::now() + Duration::from_secs(60);
    while observers(c) != n {
        if Instant::now() >= end {
            return Err(format!("{what}: {} of {n} after 60 s", observers(c)));
        }
        thread::sleep(Duration::from_millis(2));
    }
    Ok(())
}

/// The followers stop: every one still waiting is answered by a change
/// (taken and released again) and observes no more.
fn stop(followers: &Followers, probe: &mut redis::Connection, key: &str) -> Result<(), String> {
    followers.stop();
    let end = Instant::now() + Duration::from_secs(60);
    while followers.outstanding() > 0 {
        // A command sent just before the stop may block after a change:
        // another change answers it.
        let _: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
            .arg(key)
            .arg("bench-stop")
            .arg(30_000)
            .query(probe)
            .map_err(|e| e.to_string())?;
        let _: i64 = redis::cmd("DLOCK.RELEASE")
            .arg(key)
            .arg("bench-stop")
            .query(probe)
            .map_err(|e| e.to_string())?;
        if followers.wait_idle(Duration::from_millis(200)).is_ok() {
            break;
        }
        if Instant::now() >= end {
            return Err(format!(
                "{} observers never answered",
                followers.outstanding()
            ));
        }
    }
    wait_observers(probe, 0, "observers gone")
}

fn cpu_seconds(c: &mut redis::Connection) -> f64 {
    ["used_cpu_sys", "used_cpu_user"]
        .iter()
        .filter_map(|f| common::info_field(c, "cpu", f))
        .filter_map(|v| v.parse::<f64>().ok())
        .sum()
}

/// C clients loop lock -> S µs -> unlock on `names.key` for `set.secs`;
/// critical sections begun inside the window count, and the observers'
/// answers that arrived during it.
fn window(server: &Server, names: &Arc<Names>, set: &Settings, followers: &Followers) -> Run {
    let barrier = Arc::new(Barrier::new(set.clients + 1));
    let start: Arc<OnceLock<Instant>> = Arc::new(OnceLock::new());
    let length = Duration::from_secs_f64(set.secs);
    let cs = Duration::from_micros(set.cs_us);
    let handles: Vec<_> = (0..set.clients)
        .map(|i| {
            let mut client = Client::new(Scheme::Dlock, server);
            let (names, barrier, start) = (names.clone(), barrier.clone(), start.clone());
            thread::spawn(move || {
                let mut rng = Rng::new(i as u64 + 1);
                let mut done = 0u64;
                barrier.wait();
                let end = *start.get().expect("window set") + length;
                for n in 0u64.. {
                    if Instant::now() >= end {
                        break;
                    }
                    let token = format!("c{i}-{n}");
                    client.acquire(&names, &token, &mut rng);
                    let got = Instant::now();
                    if !cs.is_zero() {
                        thread::sleep(cs);
                    }
                    client.release(&names, &token);
                    done += u64::from(got < end);
                }
                assert_eq!(client.lost, 0, "a release found another holder");
                done
            })
        })
        .collect();
    let mut probe = server.conn();
    let cpu0 = cpu_seconds(&mut probe);
    let answers0 = followers.answers();
    start.set(Instant::now()).expect("window once");
    barrier.wait();
    thread::sleep(length);
    let answers1 = followers.answers();
    let cpu1 = cpu_seconds(&mut probe);
    let total: u64 = handles
        .into_iter()
        .map(|h| h.join().expect("contending client"))
        .sum();
    Run {
        rate: total as f64 / set.secs,
        cpu_us: (cpu1 - cpu0) * 1e6 / total.max(1) as f64,
        answers: (answers1 - answers0) as f64 / set.secs,
    }
}

fn median(v: &[f64]) -> f64 {
    crate::throughput::median(v)
}

fn print_throughput(
    config: &Config,
    set: &Settings,
    m: &Result<Throughput, String>,
    verdicts: &mut Vec<Verdict>,
) {
    println!("### Observers' cost (`observe`)\n");
    println!(
        "{} clients, each on its own connection with a fresh token per acquisition, loop \
         `DLOCK.ACQUIRE res tok 30000 WAIT 30000` -> critical section of {} µs -> \
         `DLOCK.RELEASE` on one resource for {:.1} s per run, with no observer and with {} \
         observers following it (each, once answered, observes again with the version it was \
         given; all driven by one client thread). One server; {} runs per side, the sides \
         taking turns; the ratio is the median of the back-to-back pairs. Server busy: its \
         CPU time over the window's (main thread on core 0; clients and observers share \
         core 1).\n",
        set.clients, set.cs_us, set.secs, set.observers, set.repeat
    );
    let m = match m {
        Ok(m) => m,
        Err(e) => {
            println!("Not measured: {e}.\n");
            return;
        }
    };
    println!(
        "| observers | cs/s (median) | runs | server CPU µs/cs | server busy | observers' answers/s | answers per cs |"
    );
    println!("| ---: | ---: | --- | ---: | ---: | ---: | ---: |");
    for (n, runs) in [(0, &m.without), (set.observers, &m.with)] {
        let rates: Vec<f64> = runs.iter().map(|r| r.rate).collect();
        let shown: Vec<String> = rates.iter().map(|r| format!("{r:.0}")).collect();
        let rate = median(&rates);
        let answers = median(&runs.iter().map(|r| r.answers).collect::<Vec<_>>());
        let cpu_us = median(&runs.iter().map(|r| r.cpu_us).collect::<Vec<_>>());
        println!(
            "| {n} | {rate:.0} | {} | {cpu_us:.1} | {:.0}% | {answers:.0} | {:.1} |",
            shown.join(", "),
            cpu_us * rate / 1e4,
            answers / rate.max(1e-9),
        );
    }
    let ratio = median(&m.ratios);
    let goal = Goal::AtLeast(0.9);
    println!(
        "\nWith {} observers / without: {ratio:.2}x (pairs: {}); goal {}: {}.{}\n",
        set.observers,
        m.ratios
            .iter()
            .map(|r| format!("{r:.2}"))
            .collect::<Vec<_>>()
            .join(", "),
        goal.text(),
        pass(goal.met(ratio)),
        if m.odd > 0 {
            format!(" {} observer replies were not a state.", m.odd)
        } else {
            String::new()
        }
    );
    verdicts.push(Verdict {
        config: config.short,
        what: format!(
            "cs/s on one resource, {} following observers vs none",
            set.observers
        ),
        ratio,
        goal,
    });
}
