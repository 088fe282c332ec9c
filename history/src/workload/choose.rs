//! What a client does next, from its seed and what it believes it holds,
//! and how each outcome changes that belief.
use super::client::{between, Client, Done, Hold};
use super::servers::{LIN, MAIN};
use crate::history::{Command, Mode, Op, Outcome, Value};
use std::sync::atomic::Ordering;
use std::thread::sleep;
use std::time::Duration;

/// Resources and the kind each is used as.
pub const MAIN_RES: [&str; 5] = ["m0", "m1", "m2", "m3", "m4"];
pub const LIN_RES: [&str; 3] = ["l0", "l1", "l2"];
/// The plain lock on `main` only single exclusive `ACQUIRE ... WAIT`s use,
/// held briefly: a queue forms and is handed over often, for the FIFO rule.
pub const FIFO_RES: &str = "m5";
/// Direct clients queued on (or holding) `m5` at once at most: enough for a
/// queue whose waiters wait well over the FIFO rule's 500 ms head start,
/// few enough that the other resources keep their clients.
const FIFO_USERS: usize = 6;
const MAIN_LIMIT: u32 = 3;
const LIN_LIMIT: u32 = 2;
/// Holds a client keeps at most before it only works on them.
const MAX_HOLDS: usize = 3;

impl Client<'_> {
    fn main_ttl(&mut self) -> u64 {
        between(&mut self.rng, 300, 3000)
    }

    /// The owner name of this client (`OWNER o<c>`).
    fn owner(&self) -> String {
        format!("o{}", self.c)
    }

    fn holds_resource(&self, r: &str) -> bool {
        self.holds
            .iter()
            .any(|h| h.resources.iter().any(|x| x == r))
    }

    /// Forgets holds whose bound has passed.
    pub fn forget_expired(&mut self) {
        let now = self.ctx.rec.now();
        self.holds.retain(|h| h.bound > now);
    }

    /// One step of the loop.
    pub fn step(&mut self) -> Result<(), String> {
        self.forget_expired();
        let r = self.rng.below(100);
        if !self.holds.is_empty() && (r < 45 || self.holds.len() >= MAX_HOLDS) {
            self.on_hold()?;
        } else {
            match self.rng.below(100) {
                0..=11 => self.info()?,
                12..=39 => self.acquire_lin()?,
                40..=49 if !self.proxied => self.acquire_fifo()?,
                40..=81 => self.acquire_main()?,
                _ => self.macquire()?,
            }
        }
        // Holders write between operations, too.
        let tokens: Vec<String> = self.holds.iter().map(|h| h.token.clone()).collect();
        for t in tokens {
            if self.rng.below(3) == 0 {
                self.write(&t);
            }
        }
        Ok(())
    }

    /// Works on a believed hold: writes, extends, releases, or takes another
    /// hold under the same owner. A set is extended more often than a single
    /// hold: sets are seldom granted (their members are contended), and
    /// with the single holds' odds a 60 s run sent as few as 2 `MEXTEND`s,
    /// some none (a coverage gap).
    fn on_hold(&mut self) -> Result<(), String> {
        let i = self.rng.below(self.holds.len() as u64) as usize;
        let h = self.holds[i].clone();
        let s = self.rng.below(100);
        let extend_below = if h.set { 65 } else { 45 };
        if h.writes() && s < 20 {
            self.write(&h.token);
        } else if s < extend_below && h.group == MAIN && self.rng.below(8) == 0 {
            self.extend_at_the_edge(&h)?;
        } else if s < extend_below {
            self.extend(&h)?;
        } else if s < 75 || h.owner.is_none() || h.set {
            self.release(&h.token)?;
        } else {
            self.owner_op(&h)?;
        }
        Ok(())
    }

    /// `EXTEND` a few milliseconds before the hold's bound: the server must
    /// still have it (`lost` judges a 0 that came back before the bound), so
    /// a lease shorter than asked shows.
    fn extend_at_the_edge(&mut self, h: &Hold) -> Result<(), String> {
        let early_us = between(&mut self.rng, 5, 30) * 1000;
        let now = self.ctx.rec.now();
        if h.bound > now + early_us {
            sleep(Duration::from_micros(h.bound - early_us - now));
        }
        self.extend(h)
    }

    fn extend(&mut self, h: &Hold) -> Result<(), String> {
        let ttl = if h.group == LIN {
            self.ctx.lin_ttl
        } else {
            self.main_ttl()
        };
        let command = if h.set {
            Command::Mextend
        } else {
            Command::Extend
        };
        let op = Op {
            ttl_ms: Some(ttl),
            ..Op::new(command, h.resources.clone(), h.token.clone())
        };
        let done = self.run(h.group, &op)?;
        match done.outcome {
            Outcome::Ok {
                value: Value::Int(1),
            } => {
                if let Some(held) = self.holds.iter_mut().find(|x| x.token == h.token) {
                    held.bound = done.t + ttl * 1000 - 5000;
                }
            }
            // The server no longer has it: stop believing.
            Outcome::Ok { .. } => self.holds.retain(|x| x.token != h.token),
            _ => {}
        }
        Ok(())
    }

    /// Another hold under the same owner on the resource of `h`: reentrant
    /// (same mode), an upgrade (exclusive while holding only shared) or a
    /// downgrade (shared while holding exclusive, then the exclusive hold
    /// released).
    fn owner_op(&mut self, h: &Hold) -> Result<(), String> {
        let r = &h.resources[0];
        let mine = |m: Mode| {
            self.holds
                .iter()
                .any(|x| !x.set && &x.resources[0] == r && x.owner == h.owner && x.mode == m)
        };
        let has_excl = mine(Mode::Exclusive);
        let same = self.rng.below(2) == 0;
        let mode = match (has_excl, same) {
            (true, true) | (false, false) => Mode::Exclusive,
            (true, false) | (false, true) => Mode::Shared,
        };
        let downgrade = has_excl && mode == Mode::Shared;
        let ttl = if h.group == LIN {
            self.ctx.lin_ttl
        } else {
            self.main_ttl()
        };
        let token = self.token();
        let op = Op {
            ttl_ms: Some(ttl),
            mode,
            owner: h.owner.clone(),
            ..Op::new(Command::Acquire, h.resources.clone(), token)
        };
        let granted = self.acquired(h.group, &op, false)?;
        if granted && downgrade {
            let excl: Vec<String> = (self.holds.iter())
                .filter(|x| !x.set && &x.resources[0] == r && x.owner == h.owner)
                .filter(|x| x.mode == Mode::Exclusive)
                .map(|x| x.token.clone())
                .collect();
            for t in excl {
                self.release(&t)?;
            }
        }
        Ok(())
    }

    /// Sends an acquire (single or set), believes a grant, releases an
    /// unacknowledged durable grant, probes a waiter that got nothing.
    /// Returns whether a grant is now believed.
    pub(super) fn acquired(&mut self, g: usize, op: &Op, probe: bool) -> Result<bool, String> {
        let done: Done = self.run(g, op)?;
        match done.outcome {
            Outcome::Ok {
                value: Value::Fence(fence),
            } => {
                let ttl = op.ttl_ms.unwrap_or(0);
                self.holds.push(Hold {
                    group: g,
                    resources: op.resources.clone(),
                    set: op.command == Command::Macquire,
                    token: op.token.clone(),
                    fence,
                    mode: op.mode,
                    owner: op.owner.clone(),
                    limit: op.limit,
                    bound: done.t + ttl * 1000 - 5000,
                });
                self.write(&op.token);
                Ok(true)
            }
            Outcome::Ok {
                value: Value::Unacknowledged(_),
            } => {
                let command = if op.command == Command::Macquire {
                    Command::Mrelease
                } else {
                    Command::Release
                };
                self.run(g, &Op::new(command, op.resources.clone(), op.token.clone()))?;
                Ok(false)
            }
            _ => {
                if probe {
                    self.probe_waiter(g, op, &done)?;
                }
                Ok(false)
            }
        }
    }

    /// `WAIT` (none, short, long), sometimes leaving before the reply, and
    /// `durable`, for an acquire on `main`.
    fn waiting(&mut self, op: &mut Op) {
        op.wait_ms = match self.rng.below(20) {
            0..=10 => None,
            11..=17 => Some(between(&mut self.rng, 20, 300)),
            _ => Some(between(&mut self.rng, 1000, 4000)),
        };
        if let Some(w) = op.wait_ms {
            if self.rng.below(6) == 0 {
                let leave = w.saturating_sub(between(&mut self.rng, 50, 250));
                if leave >= 10 {
                    op.leave_after_ms = Some(leave);
                }
            }
        }
        op.durable = op.leave_after_ms.is_none() && self.rng.below(6) == 0;
    }

    /// One of `among` this client holds nothing of, at random.
    fn pick_free(&mut self, among: &[&str]) -> Option<String> {
        let free: Vec<&str> = (among.iter().copied())
            .filter(|r| !self.holds_resource(r))
            .collect();
        if free.is_empty() {
            return None;
        }
        Some(free[self.rng.below(free.len() as u64) as usize].to_string())
    }

    fn acquire_main(&mut self) -> Result<(), String> {
        let Some(r) = self.pick_free(&MAIN_RES) else {
            return self.info();
        };
        let ttl = self.main_ttl();
        let token = self.token();
        let mut op = Op {
            ttl_ms: Some(ttl),
            ..Op::new(Command::Acquire, vec![r.clone()], token)
        };
        match r.as_str() {
            "m2" | "m3" => self.rw_options(&mut op),
            "m4" => op.limit = Some(MAIN_LIMIT),
            _ => {}
        }
        self.waiting(&mut op);
        self.acquired(MAIN, &op, true)?;
        Ok(())
    }

    /// `m5`: an exclusive `ACQUIRE ... WAIT` (1.5 to 4 s) with a short lease
    /// (100 to 300 ms), nothing else (no `OWNER`, no set, no `durable`, no
    /// leaving), from at most `FIFO_USERS` direct clients at once; another
    /// `main` acquire when that many are there. A grant is released after 0
    /// to 50 ms, or one time in two never (the lease runs out: the handoff
    /// at the deadline); it is never extended.
    fn acquire_fifo(&mut self) -> Result<(), String> {
        let users = &self.ctx.fifo_users;
        if users.fetch_add(1, Ordering::SeqCst) >= FIFO_USERS {
            users.fetch_sub(1, Ordering::SeqCst);
            return self.acquire_main();
        }
        let result = self.fifo_turn();
        self.ctx.fifo_users.fetch_sub(1, Ordering::SeqCst);
        result
    }

    fn fifo_turn(&mut self) -> Result<(), String> {
        let token = self.token();
        let op = Op {
            ttl_ms: Some(between(&mut self.rng, 100, 300)),
            wait_ms: Some(between(&mut self.rng, 1500, 4000)),
            ..Op::new(Command::Acquire, vec![FIFO_RES.to_string()], token.clone())
        };
        if !self.acquired(MAIN, &op, true)? {
            return Ok(());
        }
        if self.rng.below(2) == 0 {
            // Stop believing without a release: the lease runs out.
            self.holds.retain(|h| h.token != token);
            return Ok(());
        }
        sleep(Duration::from_millis(between(&mut self.rng, 0, 50)));
        if self.holds.iter().any(|h| h.token == token) {
            self.release(&token)?;
        }
        Ok(())
    }

    fn rw_options(&mut self, op: &mut Op) {
        if self.rng.below(5) < 2 {
            op.mode = Mode::Shared;
        }
        if self.rng.below(5) < 2 {
            op.owner = Some(self.owner());
        }
    }

    fn macquire(&mut self) -> Result<(), String> {
        let mut free: Vec<String> = (MAIN_RES[..4].iter())
            .filter(|r| !self.holds_resource(r))
            .map(|r| r.to_string())
            .collect();
        if free.len() < 2 {
            return self.info();
        }
        let n = (2 + self.rng.below(2) as usize).min(free.len());
        let mut members = Vec::new();
        for _ in 0..n {
            let i = self.rng.below(free.len() as u64) as usize;
            members.push(free.swap_remove(i));
        }
        let ttl = self.main_ttl();
        let token = self.token();
        let shared_ok = members.iter().all(|m| m == "m2" || m == "m3");
        let mut op = Op {
            ttl_ms: Some(ttl),
            ..Op::new(Command::Macquire, members, token)
        };
        if shared_ok && self.rng.below(2) == 0 {
            op.mode = Mode::Shared;
        }
        self.waiting(&mut op);
        self.acquired(MAIN, &op, true)?;
        Ok(())
    }

    fn acquire_lin(&mut self) -> Result<(), String> {
        let Some(r) = self.pick_free(&LIN_RES) else {
            return self.info();
        };
        let token = self.token();
        let mut op = Op {
            ttl_ms: Some(self.ctx.lin_ttl),
            ..Op::new(Command::Acquire, vec![r.clone()], token)
        };
        match r.as_str() {
            "l1" => self.rw_options(&mut op),
            "l2" => op.limit = Some(LIN_LIMIT),
            _ => {}
        }
        self.acquired(LIN, &op, false)?;
        Ok(())
    }

    fn info(&mut self) -> Result<(), String> {
        let i = self.rng.below((MAIN_RES.len() + LIN_RES.len()) as u64) as usize;
        let (g, r) = if i < MAIN_RES.len() {
            (MAIN, MAIN_RES[i])
        } else {
            (LIN, LIN_RES[i - MAIN_RES.len()])
        };
        self.run(
            g,
            &Op::new(Command::Info, vec![r.to_string()], String::new()),
        )?;
        Ok(())
    }

    /// At the end: releases everything believed (best effort, recorded).
    pub fn release_all(&mut self) -> Result<(), String> {
        while let Some(h) = self.holds.first() {
            let token = h.token.clone();
            self.release(&token)?;
        }
        Ok(())
    }
}
