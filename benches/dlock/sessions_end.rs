//! Ending a session of 100,000 holds (the `sessions` section): the longest
//! event-loop stall, seen from outside, and the total time.
//!
//! On a fresh server a session gets `holds` bound holds. A pinger thread
//! sends `PING` on its own connection, one at a time, for the whole round;
//! then `DLOCK.SESSION CLOSE` is sent on another connection, and a third
//! polls `INFO dlock` until `dlock_session_holds_ending` is 0, then
//! `DBSIZE` until the keys are gone. The server answers a PING only
//! between event-loop turns' work, so the longest PING round trip from the
//! CLOSE to the end bounds the longest stall (from above: it includes the
//! pinger's own scheduling). The same pinger's longest round trip over an
//! equal stretch just before the CLOSE is the reference: what a round trip
//! costs on the machine with nothing to settle.
//!
//! The server's main thread and the pinger run `SCHED_FIFO` for these
//! rounds (when the system allows it and `DLOCK_BENCH_SESSIONS_FIFO` is not
//! 0; the report says whether they did): on
//! a shared, loaded machine other processes would otherwise preempt either
//! for milliseconds, which is the machine's stall, not the server's. The
//! main thread's CPU time (`used_cpu_*_main_thread`) from the CLOSE to the
//! holds settled is the server-side cross-check: per settled hold, it is
//! what a batch of 128 costs on average (it includes the PINGs and the
//! `INFO` polls).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::cases::Config;
use crate::common;
use crate::info_u64;
use crate::sessions::Settings;
use crate::timing_goals::TimingGoal;

/// One round's figures.
pub struct Ending {
    /// The longest PING round trip from the CLOSE to the keys being gone.
    pub stall: Duration,
    /// The longest PING round trip over an equal stretch before the CLOSE.
    pub idle: Duration,
    /// PINGs answered from the CLOSE to the end.
    pub pings: usize,
    /// The CLOSE command's own round trip.
    pub close: Duration,
    /// From sending CLOSE to `dlock_session_holds_ending:0`.
    pub settled: Duration,
    /// From sending CLOSE to `DBSIZE` 0.
    pub gone: Duration,
    /// The main thread's CPU from the CLOSE to the holds settled, s.
    pub main_cpu_s: f64,
    /// Whether the server's main thread and the pinger ran `SCHED_FIFO`.
    pub realtime: bool,
}

/// Moves thread `tid` (0: the calling thread) to `SCHED_FIFO`, priority 1;
/// whether it could.
fn realtime(tid: i32) -> bool {
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: a valid sched_param; tid is 0 or a thread id of ours or our
    // child's.
    unsafe { libc::sched_setscheduler(tid, libc::SCHED_FIFO, &param) == 0 }
}

fn main_thread_cpu(c: &mut redis::Connection) -> f64 {
    ["used_cpu_sys_main_thread", "used_cpu_user_main_thread"]
        .iter()
        .filter_map(|f| common::info_field(c, "cpu", f))
        .filter_map(|v| v.parse::<f64>().ok())
        .sum()
}

pub fn run(config: &Config, set: &Settings) -> Vec<Ending> {
    (0..set.end_rounds)
        .map(|round| one(config, set.end_holds, round, set.end_fifo))
        .collect()
}

fn one(config: &Config, holds: u64, round: usize, fifo: bool) -> Ending {
    // A fresh server: the round's AOF and keyspace are its own.
    let server = config.server(true);
    let mut c = server.conn();
    let id = format!("bench-end-{round}");
    let _: i64 = redis::cmd("DLOCK.SESSION")
        .arg("OPEN")
        .arg(&id)
        .arg(3_600_000)
        .query(&mut c)
        .expect("SESSION OPEN");
    crate::sessions::bind(&server, b"end:", &id, holds);
    assert_eq!(info_u64(&mut c, "dlock", "dlock_session_holds"), holds);
    crate::cases::settle(&mut c);
    // The main thread's id is the process id.
    let server_rt = fifo && realtime(server.pid());

    let stop = Arc::new(AtomicBool::new(false));
    let base = Instant::now();
    let pinger = {
        let (mut p, stop) = (server.conn(), stop.clone());
        thread::spawn(move || {
            let rt = fifo && realtime(0);
            // (sent, round trip) of every PING.
            let mut rtts: Vec<(Duration, Duration)> = Vec::with_capacity(1 << 16);
            while !stop.load(Ordering::Relaxed) {
                let sent = Instant::now();
                let _: String = redis::cmd("PING").query(&mut p).expect("PING");
                rtts.push((sent - base, sent.elapsed()));
            }
            (rtts, rt)
        })
    };
    let reference = Duration::from_millis(500);
    thread::sleep(reference);
    let mut closer = server.conn();
    let cpu0 = main_thread_cpu(&mut c);
    let t0 = Instant::now();
    let closed: i64 = redis::cmd("DLOCK.SESSION")
        .arg("CLOSE")
        .arg(&id)
        .query(&mut closer)
        .expect("SESSION CLOSE");
    let close = t0.elapsed();
    assert_eq!(closed, 1, "the session was open");
    let deadline = t0 + Duration::from_secs(600);
    while info_u64(&mut c, "dlock", "dlock_session_holds_ending") > 0 {
        assert!(Instant::now() < deadline, "holds still ending after 600 s");
        thread::sleep(Duration::from_millis(1));
    }
    let settled = t0.elapsed();
    let main_cpu_s = main_thread_cpu(&mut c) - cpu0;
    while common::dbsize(&mut c) > 0 {
        assert!(Instant::now() < deadline, "keys left after 600 s");
        thread::sleep(Duration::from_millis(1));
    }
    let gone = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    let (rtts, pinger_rt) = pinger.join().expect("pinger");
    let (from, to) = (t0 - base, t0 - base + gone);
    let longest = |lo: Duration, hi: Duration| {
        rtts.iter()
            .filter(|(sent, rtt)| *sent + *rtt >= lo && *sent <= hi)
            .map(|&(_, rtt)| rtt)
            .max()
            .unwrap_or_default()
    };
    let during = rtts
        .iter()
        .filter(|(sent, rtt)| *sent + *rtt >= from && *sent <= to)
        .count();
    let idle_from = from.saturating_sub(gone.min(reference));
    Ending {
        stall: longest(from, to),
        idle: longest(idle_from, from.saturating_sub(Duration::from_micros(1))),
        pings: during,
        close,
        settled,
        gone,
        main_cpu_s,
        realtime: server_rt && pinger_rt,
    }
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}

pub fn print(set: &Settings, r: &[Ending]) -> Vec<TimingGoal> {
    println!("#### Ending a session of {} holds\n", set.end_holds);
    println!(
        "A fresh server per round; the session's holds are settled {} per event-loop turn. \
         A pinger sends `PING`, one at a time, throughout; `DLOCK.SESSION CLOSE` goes on \
         another connection, and a third polls `INFO dlock` every ms until \
         `dlock_session_holds_ending` is 0, then `DBSIZE` until 0. Stall bound: the longest \
         PING round trip from the CLOSE to the keys gone (it includes the pinger's own \
         scheduling); reference: the same pinger's longest over an equal stretch (at most \
         0.5 s) just before. The server's main thread and the pinger run `SCHED_FIFO` ({}), \
         so that other work on the machine does not preempt them. Main-thread CPU: \
         `used_cpu_*_main_thread` from the CLOSE to `holds_ending` 0 (with the PINGs and \
         polls), and per batch of 128 holds.\n",
        128,
        if r.iter().all(|e| e.realtime) {
            "in every round"
        } else {
            "NOT in some rounds (not allowed, or `DLOCK_BENCH_SESSIONS_FIFO=0`): their round \
             trips include preemption by other work"
        }
    );
    println!("| round | longest PING ms (stall bound) | reference ms | PINGs during | CLOSE ms | to `holds_ending` 0, ms | to keys gone, ms | main-thread CPU ms | per batch of 128, ms |");
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (i, e) in r.iter().enumerate() {
        let batches = set.end_holds.div_ceil(128).max(1) as f64;
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {:.1} | {:.3} |",
            i + 1,
            ms(e.stall),
            ms(e.idle),
            e.pings,
            ms(e.close),
            ms(e.settled),
            ms(e.gone),
            e.main_cpu_s * 1e3,
            e.main_cpu_s * 1e3 / batches,
        );
    }
    println!();
    let mut stalls: Vec<Duration> = r.iter().map(|e| e.stall).collect();
    stalls.sort();
    let median = stalls.get(stalls.len() / 2).copied().unwrap_or_default();
    vec![TimingGoal {
        what: "longest event-loop stall ending a session (PING bound), median of rounds",
        measured: median,
        limit: Duration::from_millis(10),
    }]
}
