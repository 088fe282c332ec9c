//! The `sessions` section: what a session (`DLOCK.SESSION`, docs/sessions.md)
//! saves and costs, each against its goal.
//!
//! - Renewal cost for a client holding 1, 100 and 10,000 locks (this file):
//!   a per-lock watchdog (one `DLOCK.EXTEND` per lock per round, pipelined)
//!   against one session (one `DLOCK.SESSION KEEPALIVE` per round), rounds
//!   back to back on one connection. Every size and scheme holds its locks
//!   on the same server, and the runs take turns, so each repetition
//!   compares them on nearly the same machine. Server CPU is `INFO cpu`'s
//!   `used_cpu_user` + `used_cpu_sys` over the run. Goal: with a session,
//!   CPU per round at the largest size within 1.1x of that at the smallest
//!   (the median of the repetitions' ratios); the watchdog's ratio beside it.
//! - From `kill -9` of a holder process to the next waiter's grant:
//!   sessions_crash.rs.
//! - Ending a session of 100,000 holds, the longest event-loop stall seen
//!   from outside and the total time: sessions_end.rs.
//! - `ACQUIRE ... SESSION` against plain `ACQUIRE` at pipeline 16:
//!   sessions_acquire.rs.

use std::time::{Duration, Instant};

use crate::cases::{self, name, owner, Config, Sizes};
use crate::load::{self, Shape};
use crate::timing_goals::TimingGoal;
use crate::{info_u64, pass, progress, Goal, Verdict};

/// Sizes of the section, from the environment (see main.rs).
#[derive(Clone, Debug)]
pub struct Settings {
    pub locks: Vec<u64>,
    pub renew_secs: f64,
    pub repeat: usize,
    pub kill_rounds: usize,
    pub kill_ttl_ms: u64,
    pub end_holds: u64,
    pub end_rounds: usize,
    /// Whether the stall rounds run the server's main thread and the
    /// pinger `SCHED_FIFO` (sessions_end.rs).
    pub end_fifo: bool,
}

impl Settings {
    pub fn from_env(quick: bool) -> Settings {
        let q = |full: u64, small: u64| if quick { small } else { full };
        let mut locks: Vec<u64> = crate::env_list("DLOCK_BENCH_SESSIONS_LOCKS", "1,100,10000")
            .iter()
            .filter_map(|s| s.parse().ok())
            .filter(|&n| n > 0)
            .collect();
        locks.sort_unstable();
        locks.dedup();
        Settings {
            locks,
            renew_secs: std::env::var("DLOCK_BENCH_SESSIONS_RENEW_SECS")
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(if quick { 0.2 } else { 0.5 }),
            repeat: crate::env_u64("DLOCK_BENCH_SESSIONS_REPEAT", q(5, 2)).max(1) as usize,
            kill_rounds: crate::env_u64("DLOCK_BENCH_SESSIONS_KILL_ROUNDS", q(5, 2)).max(1)
                as usize,
            kill_ttl_ms: crate::env_u64("DLOCK_BENCH_SESSIONS_KILL_TTL_MS", 1000).max(10),
            end_holds: crate::env_u64("DLOCK_BENCH_SESSIONS_END_HOLDS", q(100_000, 20_000)).max(1),
            end_rounds: crate::env_u64("DLOCK_BENCH_SESSIONS_END_ROUNDS", q(3, 1)).max(1) as usize,
            end_fifo: crate::env_u64("DLOCK_BENCH_SESSIONS_FIFO", 1) == 1,
        }
    }
}

/// How a client keeps its locks.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Scheme {
    /// One `DLOCK.EXTEND` per lock per round, pipelined.
    Watchdog,
    /// One `DLOCK.SESSION KEEPALIVE` per round.
    Session,
}

impl Scheme {
    fn label(self) -> &'static str {
        match self {
            Scheme::Watchdog => "per-lock watchdog (`EXTEND` each)",
            Scheme::Session => "one session (`KEEPALIVE`)",
        }
    }
}

/// One run of renewal rounds.
struct Renewal {
    rounds: u64,
    commands: u64,
    elapsed: Duration,
    cpu_s: f64,
}

impl Renewal {
    fn cpu_us_per_round(&self) -> f64 {
        self.cpu_s * 1e6 / self.rounds.max(1) as f64
    }
    fn commands_per_sec(&self) -> f64 {
        self.commands as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Lock names and the session of one size.
fn prefix(scheme: Scheme, locks: u64) -> Vec<u8> {
    match scheme {
        Scheme::Watchdog => format!("wd{locks}:").into_bytes(),
        Scheme::Session => format!("ss{locks}:").into_bytes(),
    }
}

fn session_id(locks: u64) -> String {
    format!("bench-renew-{locks}")
}

/// A long ttl: nothing ends during the section.
const LONG_MS: &[u8] = b"3600000";

pub fn run(config: &Config, set: &Settings, sizes: &Sizes, verdicts: &mut Vec<Verdict>) {
    println!("### Sessions (`sessions`)\n");
    let mut goals: Vec<(String, String, String, bool)> = Vec::new();

    let t = Instant::now();
    let renewals = renewal(config, set);
    progress(&format!("{}: sessions, renewal", config.short), t.elapsed());
    print_renewal(config, set, &renewals, verdicts, &mut goals);

    let t = Instant::now();
    let crash = crate::sessions_crash::run(config, set);
    progress(&format!("{}: sessions, kill -9", config.short), t.elapsed());
    goals.extend(crate::sessions_crash::print(set, &crash).iter().map(timing));

    let t = Instant::now();
    let end = crate::sessions_end::run(config, set);
    progress(&format!("{}: sessions, ending", config.short), t.elapsed());
    goals.extend(crate::sessions_end::print(set, &end).iter().map(timing));

    let t = Instant::now();
    let acquire = crate::sessions_acquire::run(config, sizes);
    progress(&format!("{}: sessions, ACQUIRE", config.short), t.elapsed());
    for (what, ratio, goal) in crate::sessions_acquire::print(config, sizes, &acquire, verdicts) {
        goals.push((what, format!("{ratio:.2}x"), goal.text(), goal.met(ratio)));
    }

    println!("#### Sessions: goals\n");
    println!("| goal | figure | limit | result |");
    println!("| --- | ---: | ---: | --- |");
    for (what, figure, limit, met) in &goals {
        println!("| {what} | {figure} | {limit} | {} |", pass(*met));
    }
    println!();
}

fn timing(g: &TimingGoal) -> (String, String, String, bool) {
    (
        g.what.to_string(),
        format!("{:.1} ms", g.measured.as_secs_f64() * 1e3),
        format!("<= {:.0} ms", g.limit.as_secs_f64() * 1e3),
        g.met(),
    )
}

/// Every (scheme, size) run `set.repeat` times, taking turns; per
/// repetition, in the order of `set.locks`, for each scheme.
fn renewal(config: &Config, set: &Settings) -> Vec<[Vec<Renewal>; 2]> {
    let server = config.server(true);
    let mut c = server.conn();
    for &n in &set.locks {
        cases::populate(&server, true, &prefix(Scheme::Watchdog, n), 0, n);
        let id = session_id(n);
        let _: i64 = redis::cmd("DLOCK.SESSION")
            .arg("OPEN")
            .arg(&id)
            .arg(LONG_MS)
            .query(&mut c)
            .expect("SESSION OPEN");
        bind(&server, &prefix(Scheme::Session, n), &id, n);
    }
    let total: u64 = set.locks.iter().sum();
    let bound = info_u64(&mut c, "dlock", "dlock_session_holds");
    assert_eq!(bound, total, "every session hold is bound");
    cases::settle(&mut c);
    let mut runs: Vec<[Vec<Renewal>; 2]> = set.locks.iter().map(|_| [vec![], vec![]]).collect();
    let mut order: Vec<(usize, Scheme)> = (0..set.locks.len())
        .flat_map(|i| [(i, Scheme::Watchdog), (i, Scheme::Session)])
        .collect();
    for _ in 0..set.repeat {
        for &(i, scheme) in &order {
            let r = renew(&server, &mut c, scheme, set.locks[i], set.renew_secs);
            runs[i][scheme as usize].push(r);
        }
        order.reverse();
    }
    runs
}

/// `n` holds `prefix<i>` bound to session `id`, pipelined.
pub fn bind(server: &crate::common::Server, prefix: &[u8], id: &str, n: u64) {
    let mut next = 0..n;
    let out = load::run(
        server.port(),
        Shape {
            conns: 8,
            pipeline: 128,
            total: n,
            latency: false,
        },
        |_, buf| {
            let i = next.next().unwrap_or(0);
            let (k, t) = (name(prefix, i), owner(i));
            load::command(
                buf,
                &[
                    b"DLOCK.ACQUIRE",
                    k.as_ref(),
                    t.as_ref(),
                    b"0",
                    b"SESSION",
                    id.as_bytes(),
                ],
            );
        },
    );
    cases::check(&out, "bind holds to a session");
    assert_eq!(out.positive, n, "every bound hold was granted");
}

/// Renewal rounds of `locks` locks back to back on one connection for at
/// least `secs` (and at least 3 rounds).
fn renew(
    server: &crate::common::Server,
    probe: &mut redis::Connection,
    scheme: Scheme,
    locks: u64,
    secs: f64,
) -> Renewal {
    let per_round = match scheme {
        Scheme::Watchdog => locks,
        Scheme::Session => 1,
    };
    // Rounds per load run: about 2,000 commands, at least one round.
    let chunk = (2000 / per_round).max(1);
    let pre = prefix(scheme, locks);
    let id = session_id(locks);
    let window = Duration::from_secs_f64(secs);
    let cpu0 = cpu_seconds(probe);
    let mut r = Renewal {
        rounds: 0,
        commands: 0,
        elapsed: Duration::ZERO,
        cpu_s: 0.0,
    };
    while r.elapsed < window || r.rounds < 3 {
        let mut i = 0u64;
        let out = load::run(
            server.port(),
            Shape {
                conns: 1,
                pipeline: per_round as usize,
                total: chunk * per_round,
                latency: false,
            },
            |_, buf| match scheme {
                Scheme::Watchdog => {
                    let n = i % locks;
                    i += 1;
                    let (k, t) = (name(&pre, n), owner(n));
                    load::command(buf, &[b"DLOCK.EXTEND", k.as_ref(), t.as_ref(), LONG_MS]);
                }
                Scheme::Session => {
                    load::command(buf, &[b"DLOCK.SESSION", b"KEEPALIVE", id.as_bytes()])
                }
            },
        );
        cases::check(&out, scheme.label());
        assert_eq!(out.positive, out.ops, "every renewal kept its lock");
        r.rounds += chunk;
        r.commands += out.ops;
        r.elapsed += out.elapsed;
    }
    r.cpu_s = cpu_seconds(probe) - cpu0;
    r
}

pub fn cpu_seconds(c: &mut redis::Connection) -> f64 {
    ["used_cpu_sys", "used_cpu_user"]
        .iter()
        .filter_map(|f| crate::common::info_field(c, "cpu", f))
        .filter_map(|v| v.parse::<f64>().ok())
        .sum()
}

fn median(v: &[f64]) -> f64 {
    crate::throughput::median(v)
}

fn print_renewal(
    config: &Config,
    set: &Settings,
    runs: &[[Vec<Renewal>; 2]],
    verdicts: &mut Vec<Verdict>,
    goals: &mut Vec<(String, String, String, bool)>,
) {
    println!("#### Renewal cost\n");
    println!(
        "A client keeps its locks: a per-lock watchdog sends one `DLOCK.EXTEND` per lock per \
         round (pipelined, a round's commands in one batch), a session one `DLOCK.SESSION \
         KEEPALIVE` per round. Rounds back to back on one connection for {:.1} s per run; \
         every size and scheme holds its locks on one server, and the runs take turns \
         ({} repetitions, the order reversed each time; medians). Server CPU: `INFO cpu` \
         `used_cpu_user` + `used_cpu_sys` over the run, per round.\n",
        set.renew_secs, set.repeat
    );
    println!("| locks | scheme | commands per round | rounds/s | commands/s | server CPU µs per round | per round vs {} lock(s) |", set.locks.first().copied().unwrap_or(1));
    println!("| ---: | --- | ---: | ---: | ---: | ---: | ---: |");
    let (Some(first), Some(last)) = (runs.first(), runs.last()) else {
        println!("No sizes (`DLOCK_BENCH_SESSIONS_LOCKS`).\n");
        return;
    };
    // Per repetition: CPU per round at this size / at the first size.
    let ratios = |i: usize, s: usize| -> Vec<f64> {
        runs[i][s]
            .iter()
            .zip(&first[s])
            .map(|(r, f)| r.cpu_us_per_round() / f.cpu_us_per_round().max(1e-9))
            .collect()
    };
    for scheme in [Scheme::Watchdog, Scheme::Session] {
        let s = scheme as usize;
        for (i, &locks) in set.locks.iter().enumerate() {
            let rs = &runs[i][s];
            let rounds_s = median(
                &rs.iter()
                    .map(|r| r.rounds as f64 / r.elapsed.as_secs_f64().max(1e-9))
                    .collect::<Vec<_>>(),
            );
            let cmds = median(&rs.iter().map(Renewal::commands_per_sec).collect::<Vec<_>>());
            let cpu = median(&rs.iter().map(Renewal::cpu_us_per_round).collect::<Vec<_>>());
            let per_round = if scheme == Scheme::Watchdog { locks } else { 1 };
            println!(
                "| {locks} | {} | {per_round} | {rounds_s:.0} | {cmds:.0} | {cpu:.1} | {:.2}x |",
                scheme.label(),
                median(&ratios(i, s)),
            );
        }
    }
    let n = set.locks.len() - 1;
    let (small, large) = (set.locks[0], set.locks[n]);
    let session = median(&ratios(n, Scheme::Session as usize));
    let watchdog = median(&ratios(n, Scheme::Watchdog as usize));
    let goal = Goal::AtMost(1.1);
    let pairs: Vec<String> = ratios(n, Scheme::Session as usize)
        .iter()
        .map(|r| format!("{r:.2}"))
        .collect();
    let at = |s: Scheme| {
        median(
            &last[s as usize]
                .iter()
                .map(Renewal::cpu_us_per_round)
                .collect::<Vec<_>>(),
        )
    };
    println!(
        "\nServer CPU per round at {large} locks / at {small}: one session {session:.2}x \
         (repetitions: {}); goal {}: {}. The per-lock watchdog: {watchdog:.2}x; at {large} \
         locks a watchdog round costs the server {:.0}x a session's.\n",
        pairs.join(", "),
        goal.text(),
        pass(goal.met(session)),
        at(Scheme::Watchdog) / at(Scheme::Session).max(1e-9),
    );
    let what = format!("session renewal CPU per round, {large} locks vs {small}");
    verdicts.push(Verdict {
        config: config.short,
        what: what.clone(),
        ratio: session,
        goal,
    });
    goals.push((
        format!("{what} (watchdog: {watchdog:.2}x)"),
        format!("{session:.2}x"),
        goal.text(),
        goal.met(session),
    ));
}
