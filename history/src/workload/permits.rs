//! The weighted-permits workload (docs/history.md, "Weighted permits and
//! resizing"): on `main`'s semaphore `w0` (`LIMIT 4`), `HOLDERS` clients
//! loop requests for 1 to 4 permits at once (`PERMITS k`, with or without
//! a `WAIT`), hold them briefly and release them, while one client resizes
//! the semaphore every 100 to 500 ms to a limit from 2 to 6
//! (`DLOCK.RESIZE w0 n`): up, waiters are granted at once; down, the holds
//! stay and nobody is granted until they fit. Every client connects
//! directly.
use super::client::{between, Client};
use super::servers::MAIN;
use super::Ctx;
use crate::history::{Command, Op};
use std::sync::atomic::Ordering;
use std::thread::sleep;
use std::time::{Duration, Instant};

/// The resource, a semaphore used only by this workload.
pub const RESOURCE: &str = "w0";
/// The limit every request names (a resize changes it while held).
pub const LIMIT: u32 = 4;
/// Holders, numbered after the handover's clients, then the resizer.
pub const HOLDERS: u32 = 4;
pub const RESIZERS: u32 = 1;

pub fn holder_loop(ctx: &Ctx, c: u32, seed: u64) -> Result<(), String> {
    let mut x = Client::new(ctx, c, seed);
    x.proxied = false;
    while Instant::now() < ctx.deadline {
        if ctx.abort.load(Ordering::SeqCst) {
            return Ok(());
        }
        let token = x.token();
        let k = [1, 1, 2, 2, 3, 4][x.rng.below(6) as usize];
        let wait = x.rng.below(4) != 0;
        let op = Op {
            ttl_ms: Some(between(&mut x.rng, 200, 800)),
            limit: Some(LIMIT),
            permits: (k > 1).then_some(k),
            wait_ms: wait.then(|| between(&mut x.rng, 200, 2000)),
            ..Op::new(Command::Acquire, vec![RESOURCE.to_string()], token.clone())
        };
        if x.acquired(MAIN, &op, true)? {
            sleep(Duration::from_millis(between(&mut x.rng, 0, 100)));
            x.forget_expired();
            if x.holds.iter().any(|h| h.token == token) {
                x.release(&token)?;
            }
        }
        sleep(Duration::from_millis(x.rng.below(20)));
    }
    x.forget_expired();
    x.release_all()
}

pub fn resizer_loop(ctx: &Ctx, c: u32, seed: u64) -> Result<(), String> {
    let mut x = Client::new(ctx, c, seed);
    x.proxied = false;
    while Instant::now() < ctx.deadline {
        if ctx.abort.load(Ordering::SeqCst) {
            return Ok(());
        }
        sleep(Duration::from_millis(between(&mut x.rng, 100, 500)));
        let op = Op {
            limit: Some(between(&mut x.rng, 2, 6) as u32),
            ..Op::new(Command::Resize, vec![RESOURCE.to_string()], String::new())
        };
        x.run(MAIN, &op)?;
    }
    Ok(())
}
