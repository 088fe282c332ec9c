//! The weighted-permits workload (docs/history.md, "Weighted permits and
//! resizing"): on `main`'s semaphore `w0` (`LIMIT 4`), `HOLDERS` clients
//! loop requests for 1 to 4 permits at once (`PERMITS k`, with or without
//! a `WAIT`), hold them briefly and release them, while one client resizes
//! the semaphore every 100 to 500 ms to a limit from 2 to 6
//! (`DLOCK.RESIZE w0 n`): up, waiters are granted at once; down, the holds
//! stay and nobody is granted until they fit. One more client, the
//! anchor, holds one permit for 3 to 6 s at a time (renewed every 200 ms),
//! then lets go for 0.5 to 1.5 s: while it holds, `w0` is never free, so a
//! limit a resize set stays in force and the limit the requests name does
//! not come back (the `mutex` rule then judges against the resized limit
//! alone). Every client connects directly.
use super::client::{between, direct_loop, Client};
use super::servers::MAIN;
use super::Ctx;
use crate::history::{Command, Op, Outcome, Value};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// The resource, a semaphore used only by this workload.
pub const RESOURCE: &str = "w0";
/// The limit every request names (a resize changes it while held).
pub const LIMIT: u32 = 4;
/// Holders, numbered after the handover's clients, then the resizer and
/// the anchor.
pub const HOLDERS: u32 = 4;
pub const RESIZERS: u32 = 1;
pub const ANCHORS: u32 = 1;
/// The anchor's lease and how often it renews it (ms).
const ANCHOR_TTL_MS: u64 = 600;
const ANCHOR_RENEW_MS: u64 = 200;

pub fn holder_loop(ctx: &Ctx, c: u32, seed: u64) -> Result<(), String> {
    direct_loop(ctx, c, seed, |x| {
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
        x.take_briefly(&op, &token, 100)?;
        sleep(Duration::from_millis(x.rng.below(20)));
        Ok(())
    })
}

pub fn resizer_loop(ctx: &Ctx, c: u32, seed: u64) -> Result<(), String> {
    direct_loop(ctx, c, seed, |x| {
        sleep(Duration::from_millis(between(&mut x.rng, 100, 500)));
        let op = Op {
            limit: Some(between(&mut x.rng, 2, 6) as u32),
            ..Op::new(Command::Resize, vec![RESOURCE.to_string()], String::new())
        };
        x.run(MAIN, &op)?;
        Ok(())
    })
}

pub fn anchor_loop(ctx: &Ctx, c: u32, seed: u64) -> Result<(), String> {
    direct_loop(ctx, c, seed, |x| {
        let token = x.token();
        let op = Op {
            ttl_ms: Some(ANCHOR_TTL_MS),
            limit: Some(LIMIT),
            wait_ms: Some(2000),
            ..Op::new(Command::Acquire, vec![RESOURCE.to_string()], token.clone())
        };
        if x.acquired(MAIN, &op, true)? {
            let until = Instant::now() + Duration::from_millis(between(&mut x.rng, 3000, 6000));
            while Instant::now() < until && Instant::now() < ctx.deadline && renew(x, &token)? {
                sleep(Duration::from_millis(ANCHOR_RENEW_MS));
            }
            x.release_if_held(&token)?;
        }
        sleep(Duration::from_millis(between(&mut x.rng, 500, 1500)));
        Ok(())
    })
}

/// `EXTEND w0 token 600`: whether the anchor still holds.
fn renew(x: &mut Client, token: &str) -> Result<bool, String> {
    let op = Op {
        ttl_ms: Some(ANCHOR_TTL_MS),
        ..Op::new(
            Command::Extend,
            vec![RESOURCE.to_string()],
            token.to_string(),
        )
    };
    let done = x.run(MAIN, &op)?;
    let held = matches!(
        done.outcome,
        Outcome::Ok {
            value: Value::Int(1)
        }
    );
    if held {
        if let Some(h) = x.holds.iter_mut().find(|h| h.token == token) {
            h.bound = done.t + ANCHOR_TTL_MS * 1000 - 5000;
        }
    } else if matches!(done.outcome, Outcome::Ok { .. }) {
        x.holds.retain(|h| h.token != token);
    }
    Ok(held && x.still_holds(token))
}
