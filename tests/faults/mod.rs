//! Fault injection: lost replies (a proxy that drops the connection after the
//! server executed a command but before the client hears the answer), clients
//! paused past their lease writing to fenced storage, a master SIGKILLed under
//! load and its replica promoted, corrupt DUMP payloads handed to the
//! loader, and restored fences flushed or swapped away in one transaction.
//!
//! Schedules are seeded (`FAULTS_SEED` overrides the seed; every test prints
//! the one it used) and every wait is bounded.
use crate::common;
use crate::proxy;

mod clock_steps;
mod corrupt_restore;
mod fencing;
mod lost_replies;
mod master_kill;
mod restored_fences;

use common::dump::*;
use common::lock::*;
use common::*;
use proxy::{Dropped, Frame, Proxy, Rng};
use redis::{RedisError, RedisResult};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Mutex;
use std::thread::{self, sleep};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------- helpers

const IO: Duration = Duration::from_secs(10);

fn seed(test: u64) -> u64 {
    let base = std::env::var("FAULTS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x00d1_0c4f_a017_5eed);
    base ^ test.wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

fn connect(url: &str) -> redis::Connection {
    connect_within(url, IO).unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

/// `WAIT 1 1000`: how many replicas acknowledged this client's writes.
fn wait1(c: &mut redis::Connection) -> RedisResult<i64> {
    redis::cmd("WAIT").arg(1).arg(1000).query(c)
}

/// Joins a scoped thread, re-raising its panic (with its own message).
fn join<T>(h: thread::ScopedJoinHandle<'_, T>) -> T {
    h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))
}
