//! The priority workload (docs/history.md, "Priorities"): on `main`'s
//! plain lock `p0`, `STREAM` clients loop short holds at priority `TOP`,
//! a steady stream that keeps the lock wanted, while `WAITERS` clients
//! loop waits of priority 0 (`PRIORITY 0`, or none named). With the
//! servers' aging of `servers::PRIORITY_AGING_MS`, a stream request passes
//! a waiting one of priority 0 only within `TOP` levels of aging of its
//! arrival (1000 ms), inside the waiter's `WAIT`: the FIFO rule sees
//! passes inside that window (allowed, counted) and none after it, and
//! the `priority` rule bounds the waiter's wait. Every client connects
//! directly (no lost-reply proxy): the rules judge only direct clients.
use super::client::{between, direct_loop};
use super::Ctx;
use crate::history::{Command, Op};
use std::thread::sleep;
use std::time::Duration;

/// The resource, a plain lock used only by this workload.
pub const RESOURCE: &str = "p0";
/// Stream clients, numbered after the guard's writers, then the waiters.
pub const STREAM: u32 = 3;
pub const WAITERS: u32 = 1;
/// The stream's priority: its window (`TOP` x 200 ms) well past the
/// FIFO rule's 500 ms for arrival, so that the passes it counts (B sent
/// at least 500 ms after A, inside the window) happen many times a run.
pub const TOP: u16 = 5;
/// The stream's longest lease (ms): a holder that stalls lets go by then.
pub const LEASE_MS: u64 = 300;
/// The waiter's `WAIT` (ms): past its bound of 2900 ms (docs/history.md).
pub const WAIT_MS: u64 = 4000;

/// Short holds at priority `TOP`, back to back.
pub fn stream_loop(ctx: &Ctx, c: u32, seed: u64) -> Result<(), String> {
    direct_loop(ctx, c, seed, |x| {
        let token = x.token();
        let op = Op {
            ttl_ms: Some(between(&mut x.rng, 100, LEASE_MS)),
            wait_ms: Some(between(&mut x.rng, 1500, 4000)),
            priority: Some(TOP),
            ..Op::new(Command::Acquire, vec![RESOURCE.to_string()], token.clone())
        };
        x.take_briefly(&op, &token, 30)?;
        let think = x.rng.below(6);
        sleep(Duration::from_millis(think));
        Ok(())
    })
}

/// Waits of priority 0 (`PRIORITY 0` or none named), one after another.
pub fn waiter_loop(ctx: &Ctx, c: u32, seed: u64) -> Result<(), String> {
    direct_loop(ctx, c, seed, |x| {
        let token = x.token();
        let op = Op {
            ttl_ms: Some(LEASE_MS),
            wait_ms: Some(WAIT_MS),
            priority: (x.rng.below(2) == 0).then_some(0),
            ..Op::new(Command::Acquire, vec![RESOURCE.to_string()], token.clone())
        };
        x.take_briefly(&op, &token, 20)?;
        let think = between(&mut x.rng, 50, 300);
        sleep(Duration::from_millis(think));
        Ok(())
    })
}
