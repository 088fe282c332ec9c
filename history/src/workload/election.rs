//! The election workload (docs/history.md, "The election"): candidates
//! campaign for `e0` (an exclusive `ACQUIRE ... WAIT`: the server's FIFO
//! queue of candidates), lead (renew at a third of the ttl, as the client's
//! watchdog does, and write their term, the lease's fence, to the fenced
//! sink while they believe they lead), then resign, crash (stop renewing:
//! the lease runs out and the next candidate is granted at its deadline) or
//! are paused past their lease and then make the write they had decided on
//! (a late write, which the sink must be free to refuse). Observers follow
//! `e0` with `DLOCK.OBSERVE ... SINCE version WAIT ms`, often coming back
//! a while after a reply, and resuming from the last version they were
//! shown after any lost connection.
use super::client::{between, Client};
use super::servers::MAIN;
use super::Ctx;
use crate::history::{Command, Op, Outcome, Value};
use std::sync::atomic::Ordering;
use std::thread::sleep;
use std::time::{Duration, Instant};

/// The election's resource, on `main`.
pub const ELECTION: &str = "e0";
/// Candidates and observers, numbered after the locks workload's clients.
/// With the default 16 clients one of each (19, 23) talks through the
/// lost-reply proxy (`c % 4 == 3`).
pub const CANDIDATES: u32 = 5;
pub const OBSERVERS: u32 = 3;

pub fn candidate_loop(ctx: &Ctx, c: u32, seed: u64) -> Result<(), String> {
    let mut client = Client::new(ctx, c, seed);
    while Instant::now() < ctx.deadline {
        if ctx.abort.load(Ordering::SeqCst) {
            return Ok(());
        }
        client.campaign()?;
        let think = client.rng.below(30);
        sleep(Duration::from_millis(think));
    }
    client.forget_expired();
    client.release_all()
}

pub fn observer_loop(ctx: &Ctx, c: u32, seed: u64) -> Result<(), String> {
    let mut client = Client::new(ctx, c, seed);
    let mut since: Option<String> = None;
    while Instant::now() < ctx.deadline {
        if ctx.abort.load(Ordering::SeqCst) {
            return Ok(());
        }
        let mut op = Op::new(Command::Observe, vec![ELECTION.into()], String::new());
        // One time in 25 a fresh look (answered at once); else the wait
        // for a state other than the last one shown, also after a lost
        // connection or reply (the version is all an observer keeps).
        if since.is_some() && client.rng.below(25) != 0 {
            op.since = since.clone();
            op.wait_ms = Some(between(&mut client.rng, 100, 2000));
        }
        let done = client.exec(MAIN, &op)?;
        if let Outcome::Ok {
            value: Value::Observed { version, .. },
        } = done.outcome
        {
            since = Some(version);
        }
        // One time in two it comes back only after acting on what it was
        // shown (0 to 400 ms): changes made meanwhile must be told at once.
        if client.rng.below(2) == 0 {
            sleep(Duration::from_millis(client.rng.below(400)));
        }
    }
    Ok(())
}

/// How a leadership ends.
enum End {
    /// `RELEASE`: the next candidate leads at once.
    Resign,
    /// Renewals stop and nothing is sent: the lease runs out.
    Crash,
    /// Renewals stop; past the lease, the write decided on before the
    /// pause is made, then the `RELEASE` a guard sends when dropped.
    Pause,
}

impl Client<'_> {
    /// One campaign, and the leadership if it is granted.
    fn campaign(&mut self) -> Result<(), String> {
        let ttl = between(&mut self.rng, 300, 1500);
        let wait = between(&mut self.rng, 300, 3000);
        let token = format!("e{}/{}", self.c, self.rng.next_u64() % 1_000_000_000_000);
        let mut op = Op {
            ttl_ms: Some(ttl),
            wait_ms: Some(wait),
            ..Op::new(Command::Acquire, vec![ELECTION.into()], token.clone())
        };
        // One candidate in ten gives up its campaign before the reply.
        if self.rng.below(10) == 0 {
            op.leave_after_ms = Some(wait.saturating_sub(between(&mut self.rng, 50, 250)).max(10));
        }
        if !self.acquired(MAIN, &op, true)? {
            return Ok(());
        }
        // A grant handed over in the queue started its lease before the
        // reply came, when, the candidate cannot tell: as the client does,
        // it renews at once and counts its lease from that renewal.
        self.renew(&token, ttl)?;
        self.lead(&token, ttl)
    }

    /// Leads for 100 to 800 ms: renews every third of the ttl, and writes
    /// its term to the sink every 10 to 60 ms between renewals (each write
    /// made only while the recorder's clock is before the hold's bound: the
    /// check a careful leader makes before acting).
    fn lead(&mut self, token: &str, ttl: u64) -> Result<(), String> {
        let lead_for = Duration::from_millis(between(&mut self.rng, 100, 800));
        let every = Duration::from_millis(ttl / 3);
        let began = Instant::now();
        let mut renew_at = began + every;
        loop {
            let Some(bound) = self.bound(token) else {
                return Ok(()); // a renewal found it lost
            };
            if self.ctx.rec.now() >= bound {
                // Renewals did not get through in time: no longer believed.
                self.holds.retain(|h| h.token != token);
                return Ok(());
            }
            let now = Instant::now();
            if now >= began + lead_for || self.ctx.abort.load(Ordering::SeqCst) {
                break;
            }
            if now >= renew_at {
                self.renew(token, ttl)?;
                renew_at = Instant::now() + every;
                continue;
            }
            self.write(token);
            let nap = Duration::from_millis(between(&mut self.rng, 10, 60));
            sleep(nap.min(renew_at.saturating_duration_since(Instant::now())));
        }
        let end = match self.rng.below(10) {
            0..=4 => End::Resign,
            5..=6 => End::Crash,
            _ => End::Pause,
        };
        match end {
            End::Resign => {
                self.release(token)?;
            }
            End::Crash => self.holds.retain(|h| h.token != token),
            End::Pause => {
                let Some(h) = self.holds.iter().find(|h| h.token == token).cloned() else {
                    return Ok(());
                };
                self.holds.retain(|x| x.token != token);
                let past = between(&mut self.rng, 100, 400) * 1000;
                let now = self.ctx.rec.now();
                sleep(Duration::from_micros(h.bound.saturating_sub(now) + past));
                self.ctx.rec.late_write(self.c, ELECTION, token, h.fence);
                let release = Op::new(Command::Release, vec![ELECTION.into()], token.into());
                self.run(MAIN, &release)?;
            }
        }
        Ok(())
    }

    fn bound(&self, token: &str) -> Option<u64> {
        self.holds
            .iter()
            .find(|h| h.token == token)
            .map(|h| h.bound)
    }

    /// `EXTEND` with the leadership's own ttl (the watchdog's renewal).
    fn renew(&mut self, token: &str, ttl: u64) -> Result<(), String> {
        let op = Op {
            ttl_ms: Some(ttl),
            ..Op::new(Command::Extend, vec![ELECTION.into()], token.into())
        };
        let done = self.run(MAIN, &op)?;
        match done.outcome {
            Outcome::Ok {
                value: Value::Int(1),
            } => {
                if let Some(h) = self.holds.iter_mut().find(|h| h.token == token) {
                    h.bound = done.t + ttl * 1000 - 5000;
                }
            }
            // The server no longer has it: the leadership is lost.
            Outcome::Ok { .. } => self.holds.retain(|h| h.token != token),
            _ => {}
        }
        Ok(())
    }
}
