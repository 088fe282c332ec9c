//! The guarded sink workload (docs/history.md, "Guarded writes"):
//! `WRITERS` clients take holds of every kind on `main`'s `g*` resources
//! and write to each resource's sink in Redis (`RPUSH {g0}:sink entry`,
//! sometimes with `INCR {g0}:count` in the same `BATCH`) through
//! `DLOCK.GUARD` (some from a Lua script), proven by `FENCE` or `TOKEN`.
//! They write whether or not they still hold, as a holder that cannot
//! tell does: after a `RELEASE`, past a lease that ran out while they kept
//! writing, after a pause past their lease (a holder stopped by the
//! scheduler, a GC, `SIGSTOP`), after a renewal found the hold gone (a
//! failover took it). The server alone decides; the checker judges every
//! write it accepted and every one it refused. At the end the sinks are
//! read (`sink_read`).
use super::client::{between, Client};
use super::servers::MAIN;
use super::Ctx;
use crate::history::{Command, Guarded, Mode, Op, Outcome, Value};
use std::sync::atomic::Ordering;
use std::thread::sleep;
use std::time::{Duration, Instant};

/// Writers, numbered after the sessions' clients.
pub const WRITERS: u32 = 4;
/// `g0` plain, `g1` read-write (shared and exclusive holds both write),
/// `g2` a semaphore of `LIMIT`.
pub const RESOURCES: [&str; 3] = ["g0", "g1", "g2"];
pub const LIMIT: u32 = 2;

pub fn writer_loop(ctx: &Ctx, c: u32, seed: u64) -> Result<(), String> {
    let mut w = Writer {
        x: Client::new(ctx, c, seed),
        written: 0,
    };
    while Instant::now() < ctx.deadline {
        if ctx.abort.load(Ordering::SeqCst) {
            return Ok(());
        }
        w.tenure()?;
        let think = w.x.rng.below(20);
        sleep(Duration::from_millis(think));
    }
    Ok(())
}

/// After every client finished: each sink's entries and counter, read on
/// the `main` master (recorded as `sink_read` operations).
pub fn read_sinks(ctx: &Ctx, c: u32, seed: u64) -> Result<(), String> {
    let mut x = Client::new(ctx, c, seed ^ 0x5151);
    x.proxied = false;
    for r in RESOURCES {
        let op = Op::new(Command::SinkRead, vec![r.into()], String::new());
        let done = x.exec(MAIN, &op)?;
        if !matches!(
            done.outcome,
            Outcome::Ok {
                value: Value::Sink { .. }
            }
        ) {
            return Err(format!(
                "reading the guarded sink of {r}: {:?}",
                done.outcome
            ));
        }
    }
    Ok(())
}

struct Writer<'a> {
    x: Client<'a>,
    /// Guarded writes sent: numbers the entries.
    written: u64,
}

/// A hold as its writer knows it.
struct Held {
    res: String,
    token: String,
    fence: u64,
    ttl: u64,
    /// Recorder time (µs) until which the server surely holds it.
    bound: u64,
}

/// How a tenure ends.
enum End {
    /// `RELEASE`, then one time in two a write or two with the old proof.
    Release,
    /// Renewals and writes stop; 100 to 400 ms past the lease the writer
    /// makes the writes it had decided on, then releases.
    Pause,
    /// Renewals stop, writes go on until 50 to 300 ms past the lease.
    Lapse,
}

impl Writer<'_> {
    /// One hold, from the acquire to the last write after it ended.
    fn tenure(&mut self) -> Result<(), String> {
        let x = &mut self.x;
        let r = RESOURCES[x.rng.below(RESOURCES.len() as u64) as usize];
        let ttl = between(&mut x.rng, 200, 1000);
        let token = x.token();
        let mut op = Op {
            ttl_ms: Some(ttl),
            ..Op::new(Command::Acquire, vec![r.into()], token.clone())
        };
        match r {
            "g1" if x.rng.below(2) == 0 => op.mode = Mode::Shared,
            "g2" => op.limit = Some(LIMIT),
            _ => {}
        }
        if x.rng.below(2) == 0 {
            op.wait_ms = Some(between(&mut x.rng, 100, 1500));
        }
        let done = x.run(MAIN, &op)?;
        let Outcome::Ok {
            value: Value::Fence(fence),
        } = done.outcome
        else {
            return Ok(());
        };
        let mut h = Held {
            res: r.into(),
            token,
            fence,
            ttl,
            // Measured from the request: the server's lease began later.
            bound: done.t + ttl * 1000 - 5000,
        };
        let hold_for = Duration::from_millis(between(&mut self.x.rng, 100, 1200));
        // One tenure in four never renews: its lease may run out while it
        // writes.
        let renews = self.x.rng.below(4) != 0;
        let began = Instant::now();
        let every = Duration::from_millis(ttl / 3);
        let mut renew_at = began + every;
        while began.elapsed() < hold_for && !self.x.ctx.abort.load(Ordering::SeqCst) {
            if renews && Instant::now() >= renew_at {
                if !self.renew(&mut h)? {
                    // The server no longer has it: write on, stale.
                    let n = between(&mut self.x.rng, 1, 3);
                    return self.writes(&h, n);
                }
                renew_at = Instant::now() + every;
                continue;
            }
            self.write(&h)?;
            let nap = between(&mut self.x.rng, 10, 50);
            sleep(Duration::from_millis(nap));
        }
        let end = match self.x.rng.below(10) {
            0..=3 => End::Release,
            4..=6 => End::Pause,
            _ => End::Lapse,
        };
        match end {
            End::Release => {
                self.release(&h)?;
                if self.x.rng.below(2) == 0 {
                    let n = between(&mut self.x.rng, 1, 2);
                    self.writes(&h, n)?;
                }
            }
            End::Pause => {
                let past = between(&mut self.x.rng, 100, 400) * 1000;
                let now = self.x.ctx.rec.now();
                sleep(Duration::from_micros(h.bound.saturating_sub(now) + past));
                let n = between(&mut self.x.rng, 1, 2);
                self.writes(&h, n)?;
                self.release(&h)?;
            }
            End::Lapse => {
                let until = h.bound + between(&mut self.x.rng, 50, 300) * 1000;
                while self.x.ctx.rec.now() < until {
                    self.write(&h)?;
                    let nap = between(&mut self.x.rng, 10, 40);
                    sleep(Duration::from_millis(nap));
                }
                self.release(&h)?;
            }
        }
        Ok(())
    }

    fn writes(&mut self, h: &Held, n: u64) -> Result<(), String> {
        for _ in 0..n {
            self.write(h)?;
        }
        Ok(())
    }

    /// One guarded write (never retried: a repeat could push twice),
    /// proven by `FENCE` or `TOKEN` at random, one in three a batch, one
    /// in six from a Lua script.
    fn write(&mut self, h: &Held) -> Result<(), String> {
        self.written += 1;
        let x = &mut self.x;
        let guard = Guarded {
            fence: (x.rng.below(2) == 0).then_some(h.fence),
            entry: format!("{}:{}:{}", x.c, h.fence, self.written),
            batch: x.rng.below(3) == 0,
            lua: x.rng.below(6) == 0,
        };
        let op = Op {
            guard: Some(guard),
            ..Op::new(Command::Guard, vec![h.res.clone()], h.token.clone())
        };
        x.exec(MAIN, &op)?;
        Ok(())
    }

    /// `EXTEND` with the hold's ttl; false when the server answered that
    /// it no longer has the hold.
    fn renew(&mut self, h: &mut Held) -> Result<bool, String> {
        let op = Op {
            ttl_ms: Some(h.ttl),
            ..Op::new(Command::Extend, vec![h.res.clone()], h.token.clone())
        };
        let done = self.x.run(MAIN, &op)?;
        match done.outcome {
            Outcome::Ok {
                value: Value::Int(1),
            } => {
                h.bound = done.t + h.ttl * 1000 - 5000;
                Ok(true)
            }
            Outcome::Ok { .. } => Ok(false),
            _ => Ok(true),
        }
    }

    fn release(&mut self, h: &Held) -> Result<(), String> {
        let op = Op::new(Command::Release, vec![h.res.clone()], h.token.clone());
        self.x.run(MAIN, &op)?;
        Ok(())
    }
}
