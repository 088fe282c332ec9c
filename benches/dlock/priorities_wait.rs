//! The `priorities` section's starvation bound: with
//! `dlock.priority-aging-ms` at `AGING_MS`, `HOLDERS` connections loop
//! `DLOCK.ACQUIRE pr <token> 10000 PRIORITY 5 WAIT 10000`, hold for
//! `HOLD_MS` and `DLOCK.RELEASE`: a steady stream that keeps the lock
//! wanted. Meanwhile one request of priority 0 at a time (`WAIT 30000`,
//! released at once, `WAITS` of them, 100 ms apart) waits among them.
//! The documented bound (docs/waiting.md#priorities): it is passed only by
//! requests that arrive within 5 x `AGING_MS` of it, after which it waits
//! only for those ranked ahead of it, at most one per holder connection
//! (each has one request at a time), each served in at most the longest
//! hold seen (from its grant's reply to its release's, the next grant
//! included). Goal: the longest wait of priority 0 below
//! `5 x AGING_MS + HOLDERS x the longest hold`.

use crate::cases::Config;
use crate::scale_kinds::Goals;
use crate::Goal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const AGING_MS: u64 = 100;
const TOP: u64 = 5;
const HOLDERS: usize = 8;
const HOLD_MS: u64 = 1;
const WAITS: usize = 30;

pub fn run(config: &Config, goals: &mut Goals) {
    let t = Instant::now();
    let server = config.server(true);
    let measured = measure(&server);
    crate::progress(
        &format!("{}: priorities starvation bound", config.short),
        t.elapsed(),
    );
    println!("#### A request of priority 0 under a stream of priority {TOP}\n");
    println!(
        "`dlock.priority-aging-ms {AGING_MS}`; {HOLDERS} connections loop `ACQUIRE ... PRIORITY {TOP} \
         WAIT`, a hold of {HOLD_MS} ms, `RELEASE`; {WAITS} requests of priority 0, one at a time. \
         Bound: its window ({TOP} x {AGING_MS} ms) plus {HOLDERS} holds ranked ahead of it, each at \
         most the longest hold seen (grant reply to release reply).\n"
    );
    let ratio = match measured {
        Ok(m) => {
            let bound = (TOP * AGING_MS) as f64 + HOLDERS as f64 * m.longest_hold_ms;
            println!("| waits of priority 0 | median wait ms | longest wait ms | longest hold ms | grants to the stream | bound ms |");
            println!("| ---: | ---: | ---: | ---: | ---: | ---: |");
            println!(
                "| {} | {:.1} | {:.1} | {:.2} | {} | {:.1} |\n",
                m.waits.len(),
                crate::scale_kinds::median(&m.waits),
                m.longest_ms(),
                m.longest_hold_ms,
                m.stream_grants,
                bound
            );
            Ok(m.longest_ms() / bound)
        }
        Err(e) => Err(e),
    };
    goals.judge(
        format!("priorities: longest wait of priority 0 under a stream of {TOP} / its bound"),
        Goal::AtMost(1.0),
        ratio,
        "",
    );
    println!();
}

struct Measured {
    waits: Vec<f64>,
    longest_hold_ms: f64,
    stream_grants: u64,
}

impl Measured {
    fn longest_ms(&self) -> f64 {
        self.waits.iter().copied().fold(0.0, f64::max)
    }
}

fn measure(server: &crate::common::Server) -> Result<Measured, String> {
    let mut control = server.conn();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("dlock.priority-aging-ms")
        .arg(AGING_MS)
        .query(&mut control)
        .map_err(|e| format!("CONFIG SET: {e}"))?;
    let stop = Arc::new(AtomicBool::new(false));
    let longest_hold_us = Arc::new(AtomicU64::new(0));
    let grants = Arc::new(AtomicU64::new(0));
    let mut holders = Vec::new();
    for h in 0..HOLDERS {
        let mut c = server.conn();
        let _ = c.set_read_timeout(Some(Duration::from_secs(30)));
        let (stop, longest, grants) = (stop.clone(), longest_hold_us.clone(), grants.clone());
        holders.push(std::thread::spawn(move || -> Result<(), String> {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let token = format!("h{h}-{n}");
                let fence: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
                    .arg(
                        &[
                            "pr",
                            &token,
                            "10000",
                            "PRIORITY",
                            &TOP.to_string(),
                            "WAIT",
                            "10000",
                        ][..],
                    )
                    .query(&mut c)
                    .map_err(|e| format!("holder {h}: {e}"))?;
                if fence.is_none() {
                    continue;
                }
                let granted = Instant::now();
                std::thread::sleep(Duration::from_millis(HOLD_MS));
                let _: i64 = redis::cmd("DLOCK.RELEASE")
                    .arg(&["pr", &token][..])
                    .query(&mut c)
                    .map_err(|e| format!("holder {h}: {e}"))?;
                longest.fetch_max(granted.elapsed().as_micros() as u64, Ordering::Relaxed);
                grants.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        }));
    }
    // The stream first: every holder has been granted at least once.
    let end = Instant::now() + Duration::from_secs(10);
    while grants.load(Ordering::Relaxed) < HOLDERS as u64 * 4 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = control.set_read_timeout(Some(Duration::from_secs(40)));
    let mut waits = Vec::new();
    let mut result = Ok(());
    for i in 0..WAITS {
        std::thread::sleep(Duration::from_millis(100));
        let token = format!("low-{i}");
        let t0 = Instant::now();
        let got: redis::RedisResult<Option<i64>> = redis::cmd("DLOCK.ACQUIRE")
            .arg(&["pr", &token, "10000", "WAIT", "30000"][..])
            .query(&mut control);
        let waited = t0.elapsed().as_secs_f64() * 1000.0;
        match got {
            Ok(Some(_)) => waits.push(waited),
            Ok(None) => {
                result = Err(format!("a request of priority 0 waited 30 s in vain ({i})"));
                break;
            }
            Err(e) => {
                result = Err(format!("priority 0: {e}"));
                break;
            }
        }
        let _: redis::RedisResult<i64> = redis::cmd("DLOCK.RELEASE")
            .arg(&["pr", &token][..])
            .query(&mut control);
    }
    stop.store(true, Ordering::Relaxed);
    for h in holders {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => result = result.and(Err(e)),
            Err(_) => result = result.and(Err("a holder panicked".into())),
        }
    }
    result?;
    Ok(Measured {
        waits,
        longest_hold_ms: longest_hold_us.load(Ordering::Relaxed) as f64 / 1000.0,
        stream_grants: grants.load(Ordering::Relaxed),
    })
}
