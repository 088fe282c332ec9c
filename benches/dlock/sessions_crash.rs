//! From `kill -9` of a holder to the next waiter's grant (the `sessions`
//! section): the holder is a child process (this bench binary started
//! again in holder mode, `HOLDER_ENV`), which takes the lock on its own
//! connection, says so on stdout and sleeps; a waiter queues on another
//! connection with `ACQUIRE ... WAIT`; then the child gets SIGKILL, and the
//! time to the waiter's grant reply is measured. Three ways to hold:
//!
//! - a connection-bound session (`OPEN id 30000 BIND`): its end comes from
//!   the connection's close, long before its ttl;
//! - a ttl-bound session (`OPEN id <ttl>`, no keep-alive after the kill);
//! - a per-lock lease (`ACQUIRE res tok <ttl>`).
//!
//! For the last two the figure is about the ttl: the child is killed just
//! after its grant, so the waiter waits out nearly the whole ttl; the
//! table also gives how long after the deadline the grant came.
//! `redis-cli` cannot be the holder: with its stdin piped it reads to EOF
//! before sending anything.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use crate::cases::Config;
use crate::common::{self, Server};
use crate::sessions::Settings;
use crate::stats::Summary;
use crate::timing_goals::TimingGoal;

/// Set in the holder child's environment: `<port> <mode> <resource> <ttl_ms>`.
pub const HOLDER_ENV: &str = "DLOCK_BENCH_SESSION_HOLDER";

/// ttl of the connection-bound session: far beyond the figure.
const BIND_TTL_MS: u64 = 30_000;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    Bind,
    Session,
    Lease,
}

impl Mode {
    const ALL: [Mode; 3] = [Mode::Bind, Mode::Session, Mode::Lease];
    fn word(self) -> &'static str {
        match self {
            Mode::Bind => "bind",
            Mode::Session => "session",
            Mode::Lease => "lease",
        }
    }
    fn parse(w: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.word() == w)
    }
    fn label(self, ttl_ms: u64) -> String {
        match self {
            Mode::Bind => format!("connection-bound session (`BIND`, ttl {BIND_TTL_MS} ms)"),
            Mode::Session => format!("ttl-bound session (ttl {ttl_ms} ms)"),
            Mode::Lease => format!("per-lock lease (`ACQUIRE ... {ttl_ms}`)"),
        }
    }
}

/// The figures of one way to hold.
pub struct Crash {
    pub mode: Mode,
    /// From SIGKILL to the waiter's grant reply.
    pub kill_to_grant: Summary,
    /// From the hold's (or session's) deadline to the grant, ms; ttl modes
    /// only.
    pub past_deadline: Vec<f64>,
}

/// The holder child's whole life: hold, report, sleep until killed (or 120
/// s, so that an orphan never outlives the bench for long).
pub fn hold(spec: &str) {
    let f: Vec<&str> = spec.split(' ').collect();
    let (Some(port), Some(mode), Some(res), Some(ttl)) = (
        f.first().and_then(|p| p.parse::<u16>().ok()),
        f.get(1).and_then(|m| Mode::parse(m)),
        f.get(2),
        f.get(3).and_then(|t| t.parse::<u64>().ok()),
    ) else {
        eprintln!("{HOLDER_ENV}: bad spec {spec:?}");
        std::process::exit(2);
    };
    let mut c = common::connect_within(
        &format!("redis://127.0.0.1:{port}/"),
        Duration::from_secs(10),
    )
    .expect("holder connects");
    let id = format!("holder-{res}");
    let started_us = common::now_us();
    let fence: Option<i64> = match mode {
        Mode::Lease => redis::cmd("DLOCK.ACQUIRE")
            .arg(res)
            .arg("holder")
            .arg(ttl)
            .query(&mut c),
        Mode::Bind | Mode::Session => {
            let mut open = redis::cmd("DLOCK.SESSION");
            open.arg("OPEN").arg(&id);
            if mode == Mode::Bind {
                open.arg(BIND_TTL_MS).arg("BIND");
            } else {
                open.arg(ttl);
            }
            let _: i64 = open.query(&mut c).expect("holder OPEN");
            redis::cmd("DLOCK.ACQUIRE")
                .arg(res)
                .arg("holder")
                .arg(0)
                .arg("SESSION")
                .arg(&id)
                .query(&mut c)
        }
    }
    .expect("holder ACQUIRE");
    assert!(fence.is_some(), "the holder was not granted");
    let mut out = std::io::stdout();
    writeln!(out, "held {started_us}").expect("holder stdout");
    out.flush().expect("holder stdout");
    thread::sleep(Duration::from_secs(120));
}

pub fn run(config: &Config, set: &Settings) -> Vec<Crash> {
    let server = config.server(true);
    let mut out: Vec<Crash> = Mode::ALL
        .iter()
        .map(|&mode| Crash {
            mode,
            kill_to_grant: Summary::of(vec![]),
            past_deadline: vec![],
        })
        .collect();
    let mut samples: Vec<Vec<Duration>> = vec![vec![]; Mode::ALL.len()];
    // Rounds of the three modes take turns.
    for round in 0..set.kill_rounds {
        for (m, &mode) in Mode::ALL.iter().enumerate() {
            let (took, past) = one(&server, mode, round, set.kill_ttl_ms);
            samples[m].push(took);
            out[m].past_deadline.extend(past);
        }
    }
    for (o, s) in out.iter_mut().zip(samples) {
        o.kill_to_grant = Summary::of(s);
    }
    out
}

/// One round: the child holds `crash:<mode>:<round>`, a waiter queues, the
/// child is killed; the time to the grant and, for the ttl modes, how long
/// after the deadline it came (ms).
fn one(server: &Server, mode: Mode, round: usize, ttl_ms: u64) -> (Duration, Option<f64>) {
    let res = format!("crash:{}:{round}", mode.word());
    let mut child = Command::new(std::env::current_exe().expect("this bench's path"))
        .env(
            HOLDER_ENV,
            format!("{} {} {res} {ttl_ms}", server.port(), mode.word()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the holder");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("holder stdout"))
        .read_line(&mut line)
        .expect("holder says it holds");
    let started_us: i64 = line
        .strip_prefix("held ")
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("holder: {line:?}"));
    let mut waiter = server.conn();
    let (tx, rx) = mpsc::channel();
    let resource = res.clone();
    let waiting = thread::spawn(move || {
        let fence: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
            .arg(&resource)
            .arg("waiter")
            .arg(30_000)
            .arg("WAIT")
            .arg(30_000)
            .query(&mut waiter)
            .expect("waiting ACQUIRE");
        let _ = tx.send((Instant::now(), common::now_us(), fence));
        waiter
    });
    let mut probe = server.conn();
    crate::handoff::wait_for_waiters(&mut probe, &res);
    let t0 = Instant::now();
    // SAFETY: kill(2) on our own child's pid, which has not been reaped.
    let rc = unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    assert_eq!(rc, 0, "kill -9 of the holder");
    let (t1, granted_us, fence) = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the waiter's reply");
    assert!(fence.is_some(), "the waiter timed out");
    let _ = child.wait();
    let mut waiter = waiting.join().expect("waiter thread");
    let _: i64 = redis::cmd("DLOCK.RELEASE")
        .arg(&res)
        .arg("waiter")
        .query(&mut waiter)
        .expect("RELEASE");
    let past = (mode != Mode::Bind).then(|| (granted_us - started_us) as f64 / 1e3 - ttl_ms as f64);
    (t1.duration_since(t0), past)
}

pub fn print(set: &Settings, r: &[Crash]) -> Vec<TimingGoal> {
    println!("#### From `kill -9` of a holder to the next waiter's grant\n");
    println!(
        "The holder is a child process that takes the lock on its own connection and sleeps; \
         a waiter queues with `DLOCK.ACQUIRE res tok 30000 WAIT 30000` on another; the child \
         gets SIGKILL just after its grant, and the time from the kill to the waiter's grant \
         reply is taken. {} rounds each, the three ways taking turns. \"Past the deadline\": \
         the grant's time minus (the holder's first command + the ttl), a bound that is late \
         by up to the holder's round trips.\n",
        set.kill_rounds
    );
    println!("| holder | rounds | median ms | max ms | past the deadline, median ms |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    for c in r {
        let past = if c.past_deadline.is_empty() {
            "-".to_string()
        } else {
            format!("{:.1}", crate::throughput::median(&c.past_deadline))
        };
        println!(
            "| {} | {} | {} | {} | {past} |",
            c.mode.label(set.kill_ttl_ms),
            c.kill_to_grant.count(),
            c.kill_to_grant.ms(0.5),
            c.kill_to_grant.ms(1.0),
        );
    }
    println!();
    r.iter()
        .filter(|c| c.mode == Mode::Bind)
        .map(|c| TimingGoal {
            what: "`kill -9` of a `BIND` session's holder to the waiter's grant, median",
            measured: c.kill_to_grant.quantile(0.5),
            limit: Duration::from_millis(50),
        })
        .collect()
}
