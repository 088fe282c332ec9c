//! Arguments, and the two ways in: run a workload then check its history,
//! or check a saved history.
use crate::{check, history, workload};
use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;

const USAGE: &str = "usage: check-history run [--secs N] [--seed S] [--clients C] [--out FILE] [--workload locks,election,sessions,guard,priority,handover,permits]\n       check-history check FILE";

/// Runs the command line; returns how many violations and coverage gaps
/// the report counted.
pub fn main(args: Vec<String>) -> Result<u64, String> {
    let mut args = args.into_iter();
    let events = match args.next().as_deref() {
        Some("run") => {
            let cfg = run_config(args)?;
            println!(
                "check-history: {} s, workloads {}, {} clients, seed {}, history in {}",
                cfg.secs,
                cfg.workloads.names().join(","),
                cfg.clients,
                cfg.seed,
                cfg.out.display()
            );
            workload::run(&cfg)?
        }
        Some("check") => {
            let path = args.next().ok_or(USAGE)?;
            if args.next().is_some() {
                return Err(USAGE.into());
            }
            let f = File::open(&path).map_err(|e| format!("{path}: {e}"))?;
            history::read(BufReader::new(f)).map_err(|e| format!("{path}: {e}"))?
        }
        _ => return Err(USAGE.into()),
    };
    let started = std::time::Instant::now();
    let report = check::check(&events);
    report.print(&events, started.elapsed());
    Ok(report.failures())
}

fn run_config(mut args: impl Iterator<Item = String>) -> Result<workload::Config, String> {
    let mut cfg = workload::Config {
        secs: 60,
        seed: random_seed(),
        clients: 16,
        out: PathBuf::from("target/history/history.jsonl"),
        workloads: workload::Workloads {
            locks: true,
            election: true,
            sessions: true,
            guard: true,
            priority: true,
            handover: true,
            permits: true,
        },
    };
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        let number = || {
            value
                .parse::<u64>()
                .map_err(|_| format!("{flag}: not a number: {value}"))
        };
        match flag.as_str() {
            "--secs" => {
                cfg.secs = Some(number()?)
                    .filter(|&s| s >= 1)
                    .ok_or_else(|| format!("--secs: at least 1, not {value}"))?
            }
            "--seed" => cfg.seed = number()?,
            "--clients" => {
                cfg.clients = u32::try_from(number()?)
                    .ok()
                    .filter(|c| (2..=256).contains(c))
                    .ok_or_else(|| format!("--clients: 2 ..= 256, not {value}"))?
            }
            "--out" => cfg.out = PathBuf::from(&value),
            "--workload" => cfg.workloads = workloads(&value)?,
            _ => return Err(format!("unknown option {flag}\n{USAGE}")),
        }
    }
    Ok(cfg)
}

/// `locks`, `election`, `sessions`, `guard`, `priority`, `handover`,
/// `permits`, comma-separated (`all`: every one).
fn workloads(value: &str) -> Result<workload::Workloads, String> {
    let mut w = workload::Workloads {
        locks: false,
        election: false,
        sessions: false,
        guard: false,
        priority: false,
        handover: false,
        permits: false,
    };
    for name in value.split(',') {
        match name {
            "locks" => w.locks = true,
            "election" => w.election = true,
            "sessions" => w.sessions = true,
            "guard" => w.guard = true,
            "priority" => w.priority = true,
            "handover" => w.handover = true,
            "permits" => w.permits = true,
            "all" => {
                (w.locks, w.election, w.sessions, w.guard, w.priority) =
                    (true, true, true, true, true);
                (w.handover, w.permits) = (true, true);
            }
            _ => {
                return Err(format!(
                    "--workload: locks, election, sessions, guard, priority, handover, permits (comma-separated), not {value}"
                ))
            }
        }
    }
    Ok(w)
}

/// A seed from the clock and the process id: printed, so any run can be
/// repeated.
fn random_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    (nanos ^ (u64::from(std::process::id()) << 32)) % 1_000_000_000
}

#[cfg(test)]
mod tests {
    fn err(args: &[&str]) -> String {
        match super::run_config(args.iter().map(|a| a.to_string())) {
            Ok(_) => panic!("{args:?} accepted"),
            Err(e) => e,
        }
    }

    #[test]
    fn bad_run_options_are_errors() {
        assert_eq!(err(&["--secs", "abc"]), "--secs: not a number: abc");
        assert_eq!(err(&["--secs", "0"]), "--secs: at least 1, not 0");
        assert_eq!(err(&["--clients", "1"]), "--clients: 2 ..= 256, not 1");
        assert!(err(&["--seed"]).starts_with("--seed needs a value"));
        assert!(err(&["--frob", "1"]).starts_with("unknown option --frob"));
        assert!(err(&["--workload", "locks,votes"]).starts_with("--workload: locks, election"));
        let only = super::run_config(["--workload", "election"].map(String::from).into_iter());
        assert_eq!(
            only.map(|c| c.workloads.names()).ok(),
            Some(vec!["election".to_string()])
        );
        let guard = super::run_config(["--workload", "guard"].map(String::from).into_iter());
        assert_eq!(
            guard.map(|c| c.workloads.names()).ok(),
            Some(vec!["guard".to_string()])
        );
        let priority = super::run_config(["--workload", "priority"].map(String::from).into_iter());
        assert_eq!(
            priority.map(|c| c.workloads.names()).ok(),
            Some(vec!["priority".to_string()])
        );
        let two = super::run_config(
            ["--workload", "handover,permits"]
                .map(String::from)
                .into_iter(),
        );
        assert_eq!(
            two.map(|c| c.workloads.names()).ok(),
            Some(vec!["handover".to_string(), "permits".to_string()])
        );
        let all = super::run_config(std::iter::empty()).map(|c| c.workloads.names());
        assert_eq!(
            all.ok(),
            Some(
                ["locks", "election", "sessions", "guard", "priority", "handover", "permits"]
                    .map(String::from)
                    .to_vec()
            )
        );
        let ok = super::run_config(
            ["--secs", "5", "--clients", "2"]
                .map(String::from)
                .into_iter(),
        );
        assert_eq!(ok.map(|c| (c.secs, c.clients)).ok(), Some((5, 2)));
    }
}
