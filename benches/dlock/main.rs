//! `make bench`: dlock against the plain-Redis equivalents, side by side on
//! the same server in the same run, printed as Markdown. A benchmark, not a
//! test: nothing here passes or fails on timing.

#[path = "../../tests/common/mod.rs"]
mod common;
mod handoff;
mod stats;

use common::Server;

/// Reads an INFO field as a number (0 when absent).
fn info_u64(c: &mut redis::Connection, section: &str, field: &str) -> u64 {
    common::info_field(c, section, field)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn main() {
    let rounds = env_usize("DLOCK_BENCH_ROUNDS", 2000);
    let polling_rounds = env_usize("DLOCK_BENCH_POLL_ROUNDS", 100);
    println!("# dlock benchmark\n");
    println!("Machine: {}\n", machine());
    for (label, args) in [
        ("persistence off", vec![]),
        (
            "appendonly yes, appendfsync everysec",
            vec!["--appendonly", "yes", "--appendfsync", "everysec"],
        ),
    ] {
        let mut b = Server::builder();
        for a in args {
            b = b.arg(a);
        }
        let server = b.start();
        let r = handoff::run(&server, rounds, polling_rounds);
        println!("## Handoff latency ({label})\n");
        println!("Time from the holder's release to the waiter holding the lock.\n");
        println!("| scheme | rounds | p50 ms | p99 ms | max ms |");
        println!("| --- | ---: | ---: | ---: | ---: |");
        for (name, s) in [
            ("plain command round trip (PING), for scale", &r.plain_rtt),
            (
                "Redis's own BLPOP wake-up by LPUSH, for scale",
                &r.core_wakeup,
            ),
            ("dlock `ACQUIRE ... WAIT` (direct handoff)", &r.dlock),
            ("BLPOP signal list (python-redis-lock)", &r.blpop),
            (
                "polling `SET NX PX` every 200 ms + 0-100 ms jitter (node-redlock)",
                &r.polling,
            ),
        ] {
            println!(
                "| {name} | {} | {} | {} | {} |",
                s.count(),
                s.ms(0.5),
                s.ms(0.99),
                s.ms(1.0)
            );
        }
        println!();
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
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
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let redis = std::process::Command::new("redis-server")
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    format!("{cpu}, {cores} cores; {redis}")
}
