//! Mutual exclusion under contention: 12 clients, each 200 rounds of
//! acquire → read-modify-write of a plain counter → release.
//!
//! Hold intervals are recorded honestly: the start right after the grant
//! reply arrives, the end right before RELEASE is sent. If the module ever
//! granted the lock to two clients at once, two intervals would overlap (or
//! the counter would lose an update).
use crate::common;

use common::lock::*;
use common::*;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

const THREADS: usize = 12;
const ROUNDS: usize = 200;
const DEADLINE: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy)]
struct Hold {
    fence: i64,
    start: Instant,
    end: Instant,
    thread: usize,
    round: usize,
}

/// Returns the thread's holds and how many ACQUIREs were refused (busy).
fn worker(url: String, id: usize, barrier: Arc<Barrier>, deadline: Instant) -> (Vec<Hold>, u64) {
    let client = redis::Client::open(url).unwrap();
    let mut con = client
        .get_connection_with_timeout(Duration::from_secs(10))
        .unwrap();
    con.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    con.set_write_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut holds = Vec::with_capacity(ROUNDS);
    barrier.wait();
    let mut tries: u64 = 0;
    for round in 0..ROUNDS {
        let token = format!("thread{id}-round{round}");
        let (fence, start) = loop {
            let granted = acquire(&mut con, "counter-lock", &token, 10_000);
            if let Some(f) = granted {
                break (f, Instant::now());
            }
            assert!(
                Instant::now() < deadline,
                "thread {id} round {round}: lock not granted before the deadline"
            );
            tries += 1;
            // 100..=499 µs, varied per thread and try to avoid lockstep.
            let pause = 100 + (id as u64 * 131 + tries * 37) % 400;
            thread::sleep(Duration::from_micros(pause));
        };
        let v: Option<i64> = redis::cmd("GET")
            .arg("counter")
            .query(&mut con)
            .expect("GET");
        let _: () = redis::cmd("SET")
            .arg("counter")
            .arg(v.unwrap_or(0) + 1)
            .query(&mut con)
            .expect("SET");
        let end = Instant::now();
        let released: i64 = redis::cmd("DLOCK.RELEASE")
            .arg("counter-lock")
            .arg(&token)
            .query(&mut con)
            .expect("DLOCK.RELEASE");
        assert_eq!(
            released, 1,
            "thread {id} round {round}: RELEASE by the holder must reply 1"
        );
        holds.push(Hold {
            fence,
            start,
            end,
            thread: id,
            round,
        });
    }
    (holds, tries)
}

#[test]
fn contended_lock_gives_mutual_exclusion_and_increasing_fences() {
    let _quiet = crate::quiet();
    let s = Server::start();
    let deadline = Instant::now() + DEADLINE;
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|id| {
            let url = s.url();
            let barrier = barrier.clone();
            thread::spawn(move || worker(url, id, barrier, deadline))
        })
        .collect();
    let mut holds: Vec<Hold> = vec![];
    let mut refused = 0;
    for h in handles {
        let (mine, busy) = h.join().expect("worker thread panicked");
        holds.extend(mine);
        refused += busy;
    }
    // Informational: shows the lock was really contended.
    eprintln!("{refused} ACQUIREs refused as busy");
    assert_eq!(holds.len(), THREADS * ROUNDS);

    let mut c = s.conn();
    let counter: i64 = redis::cmd("GET").arg("counter").query(&mut c).unwrap();
    assert_eq!(counter, (THREADS * ROUNDS) as i64, "lost updates");
    let info: Option<redis::Value> = redis::cmd("DLOCK.INFO")
        .arg("counter-lock")
        .query(&mut c)
        .unwrap();
    assert_eq!(info, None, "lock must be free at the end");

    holds.sort_by_key(|h| h.start);
    for w in holds.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        assert!(
            a.end <= b.start,
            "overlapping holds: thread {} round {} (fence {}) ended {:?} after \
             thread {} round {} (fence {}) started",
            a.thread,
            a.round,
            a.fence,
            a.end.duration_since(b.start),
            b.thread,
            b.round,
            b.fence
        );
        assert!(
            a.fence < b.fence,
            "fences not increasing in grant order: {} (thread {} round {}) then {} \
             (thread {} round {})",
            a.fence,
            a.thread,
            a.round,
            b.fence,
            b.thread,
            b.round
        );
    }
}
