//! The handover workload (docs/history.md, "Handovers"): on `main`'s plain
//! lock `h0`, `CLIENTS` clients loop waits (`ACQUIRE h0 ... WAIT`); a
//! client granted holds briefly and then, eleven times in sixteen when
//! some other client has said it waits, hands the lock over to one of them
//! (`RELEASE h0 token TO waiter`), else releases it. A waiter says it
//! waits just before it sends its request, so some handovers name a token
//! not queued yet and are refused (`NOTWAITING`), as are those (one in
//! sixteen) that name a token nobody waits with: the holder keeps its hold,
//! writes to the sink once more 0 to 20 ms later and releases it plainly.
//! Every client connects directly.
use super::client::{between, direct_loop, Client};
use super::servers::MAIN;
use super::Ctx;
use crate::history::{Command, Op, Outcome};
use std::thread::sleep;
use std::time::Duration;

/// The resource, a plain lock used only by this workload.
pub const RESOURCE: &str = "h0";
/// Clients, numbered after the priority workload's.
pub const CLIENTS: u32 = 4;

pub fn client_loop(ctx: &Ctx, c: u32, seed: u64) -> Result<(), String> {
    direct_loop(ctx, c, seed, |x| {
        let token = x.token();
        let op = Op {
            ttl_ms: Some(between(&mut x.rng, 200, 600)),
            wait_ms: Some(between(&mut x.rng, 1000, 3000)),
            ..Op::new(Command::Acquire, vec![RESOURCE.to_string()], token.clone())
        };
        waiting(ctx).push(token.clone());
        let granted = x.acquired(MAIN, &op, true);
        waiting(ctx).retain(|t| *t != token);
        if granted? {
            sleep(Duration::from_millis(between(&mut x.rng, 0, 30)));
            if x.still_holds(&token) {
                let target = match x.rng.below(16) {
                    0..=3 => None,
                    // A token nobody waits with: refused, nothing changes.
                    4 => Some(x.token()),
                    _ => {
                        let w = waiting(ctx).clone();
                        (!w.is_empty()).then(|| w[x.rng.below(w.len() as u64) as usize].clone())
                    }
                };
                match target {
                    Some(to) => hand_over(x, &token, to)?,
                    None => {
                        x.release(&token)?;
                    }
                }
            }
        }
        sleep(Duration::from_millis(x.rng.below(20)));
        Ok(())
    })
}

fn waiting(ctx: &Ctx) -> std::sync::MutexGuard<'_, Vec<String>> {
    ctx.handover_waiting
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `RELEASE h0 token TO to`: answered, the hold is no longer believed
/// (1: handed over; 0: it had ended); refused (an error reply changes
/// nothing), the client still holds and releases plainly.
fn hand_over(x: &mut Client, token: &str, to: String) -> Result<(), String> {
    let op = Op {
        to: Some(to),
        ..Op::new(
            Command::Release,
            vec![RESOURCE.to_string()],
            token.to_string(),
        )
    };
    let done = x.run(MAIN, &op)?;
    if let Outcome::Fail { .. } = done.outcome {
        // Still the holder: it writes once more, a little later, so that
        // a server that handed over anyway shows in the sink.
        sleep(Duration::from_millis(x.rng.below(20)));
        x.forget_expired();
        x.write(token);
        x.release_if_held(token)?;
    } else {
        x.holds.retain(|h| h.token != token);
    }
    Ok(())
}
