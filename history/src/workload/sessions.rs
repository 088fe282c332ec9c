//! The sessions workload (docs/history.md, "Sessions"): `PAIRS` threads,
//! each driving two direct clients on `main`'s `s*` resources.
//!
//! - A session's life: one client opens a session (`BIND` one time in three,
//!   `LOCKDELAY` one time in two), takes bound holds of every kind (plain,
//!   shared and exclusive, permits, sets; with and without `WAIT`), keeps
//!   it alive, releases some holds, while its partner asks for the same
//!   resources with plain leases. Then the session ends: `CLOSE`, `KILL`
//!   by the partner, its ttl (keep-alives stop), or its `BIND` connection
//!   closed. The partner then waits for a resource the session held (the
//!   lock-delay must keep it out), the owner sends `CLOSE` (the end is now
//!   decided whatever it was), waits out the lock-delay, and probes each
//!   hold (`RELEASE`, which must answer 0: no hold outlives its session).
//! - A cycle: each client opens a session and takes one of `s0`, `s1`;
//!   the first waits (bound) for the other's, then the second asks to wait
//!   for the first's: one of the two must be refused `DEADLOCK`.
use super::client::{between, Client};
use super::servers::MAIN;
use super::Ctx;
use crate::history::{Command, Mode, Op, Outcome, Value};
use std::sync::atomic::Ordering;
use std::thread::sleep;
use std::time::{Duration, Instant};

/// Threads of the workload, two clients each.
pub const PAIRS: u32 = 3;

/// The cycle's two plain locks, then the other resources.
const CYCLE: [&str; 2] = ["s0", "s1"];
const PLAIN: &str = "s2";
const RWLOCK: &str = "s3";
const SEMAPHORE: &str = "s4";
const LIMIT: u32 = 2;

pub fn pair_loop(ctx: &Ctx, c: u32, seed: u64) -> Result<(), String> {
    let mut pair = [Client::new(ctx, c, seed), Client::new(ctx, c + 1, seed)];
    for client in &mut pair {
        // Direct: a dropped reply would close a BIND session's connection.
        client.proxied = false;
    }
    while Instant::now() < ctx.deadline {
        if ctx.abort.load(Ordering::SeqCst) {
            return Ok(());
        }
        let [a, b] = &mut pair;
        if a.rng.below(10) < 7 {
            if a.rng.below(2) == 0 {
                life(a, b)?;
            } else {
                life(b, a)?;
            }
        } else {
            cycle(a, b)?;
        }
        let think = pair[0].rng.below(20);
        sleep(Duration::from_millis(think));
    }
    Ok(())
}

/// A hold taken under a session (or maybe: an unknown outcome).
struct Bound {
    resources: Vec<String>,
    token: String,
    set: bool,
    released: bool,
}

/// What a session's owner knows of it.
struct Session {
    id: String,
    ttl: u64,
    bind: bool,
    lock_delay: u64,
    /// Recorder time (µs) of the last successful keep-alive's invocation.
    alive_at: u64,
    /// The latest completion of a keep-alive sent (its effect may be that
    /// late).
    last_sent_done: u64,
    holds: Vec<Bound>,
    ended: bool,
}

fn is_nosession(outcome: &Outcome) -> bool {
    matches!(outcome, Outcome::Fail { error } if error.starts_with("NOSESSION"))
}

fn session_op(command: Command, id: &str) -> Op {
    Op {
        session: Some(id.to_string()),
        ..Op::new(command, Vec::new(), String::new())
    }
}

fn open(x: &mut Client, ttl: u64, bind: bool, lock_delay: u64) -> Result<Option<Session>, String> {
    let id = format!("s{}-{}", x.c, x.rng.next_u64() % 1_000_000_000_000);
    let op = Op {
        ttl_ms: Some(ttl),
        bind,
        lock_delay_ms: (lock_delay > 0).then_some(lock_delay),
        ..session_op(Command::SessionOpen, &id)
    };
    let done = x.run(MAIN, &op)?;
    let now = x.ctx.rec.now();
    let mut s = Session {
        id,
        ttl,
        bind,
        lock_delay,
        alive_at: done.t,
        last_sent_done: now,
        holds: Vec::new(),
        ended: false,
    };
    match done.outcome {
        Outcome::Ok { .. } => Ok(Some(s)),
        // Maybe opened: end it for sure.
        Outcome::Info { .. } => {
            s.ended = true;
            close(x, &s)?;
            Ok(None)
        }
        // A quarantine after a restart: new sessions wait for its end.
        Outcome::Fail { .. } => {
            sleep(Duration::from_millis(between(&mut x.rng, 100, 300)));
            Ok(None)
        }
    }
}

fn keep_alive(x: &mut Client, s: &mut Session) -> Result<(), String> {
    let op = Op {
        ttl_ms: Some(s.ttl),
        ..session_op(Command::SessionKeepalive, &s.id)
    };
    let done = x.run(MAIN, &op)?;
    s.last_sent_done = x.ctx.rec.now();
    match &done.outcome {
        Outcome::Ok { .. } => s.alive_at = done.t,
        o if is_nosession(o) => s.ended = true,
        _ => {}
    }
    Ok(())
}

fn close(x: &mut Client, s: &Session) -> Result<(), String> {
    x.run(MAIN, &session_op(Command::SessionClose, &s.id))?;
    Ok(())
}

/// A bound acquire of one kind at random.
fn acquire(x: &mut Client, s: &mut Session) -> Result<(), String> {
    let token = x.token();
    let mut op = match x.rng.below(6) {
        0 => Op::new(Command::Macquire, vec![PLAIN.into(), RWLOCK.into()], token),
        1 => {
            let r = CYCLE[x.rng.below(2) as usize];
            Op::new(Command::Acquire, vec![r.into()], token)
        }
        2 => Op::new(Command::Acquire, vec![PLAIN.into()], token),
        3 => Op {
            mode: Mode::Shared,
            ..Op::new(Command::Acquire, vec![RWLOCK.into()], token)
        },
        4 => Op::new(Command::Acquire, vec![RWLOCK.into()], token),
        _ => Op {
            limit: Some(LIMIT),
            ..Op::new(Command::Acquire, vec![SEMAPHORE.into()], token)
        },
    };
    if s.holds
        .iter()
        .any(|h| !h.released && h.resources.iter().any(|r| op.resources.contains(r)))
    {
        return Ok(());
    }
    op.ttl_ms = Some(0);
    op.session = Some(s.id.clone());
    // A wait shorter than a third of the ttl: keep-alives go on.
    if x.rng.below(2) == 0 {
        op.wait_ms = Some(between(&mut x.rng, 20, (s.ttl / 3).max(21)));
    }
    let done = x.run(MAIN, &op)?;
    match &done.outcome {
        Outcome::Ok {
            value: Value::Fence(_),
        }
        | Outcome::Info { .. } => s.holds.push(Bound {
            set: op.command == Command::Macquire,
            resources: op.resources,
            token: op.token,
            released: false,
        }),
        o if is_nosession(o) => s.ended = true,
        _ => {}
    }
    Ok(())
}

fn release(x: &mut Client, h: &mut Bound, probe: Option<&str>) -> Result<(), String> {
    let command = if h.set {
        Command::Mrelease
    } else {
        Command::Release
    };
    let op = Op {
        probe: probe.is_some(),
        session: probe.map(String::from),
        ..Op::new(command, h.resources.clone(), h.token.clone())
    };
    let done = x.run(MAIN, &op)?;
    if matches!(done.outcome, Outcome::Ok { value: Value::Int(n) } if n >= h.resources.len() as i64)
    {
        h.released = true;
    }
    Ok(())
}

/// The partner asks for `r` with a plain lease (the kind's mode), waiting
/// up to `wait` ms; a grant is released at once.
fn contend(y: &mut Client, r: &str, wait: u64) -> Result<(), String> {
    let token = y.token();
    let mut op = Op {
        ttl_ms: Some(between(&mut y.rng, 200, 600)),
        wait_ms: Some(wait),
        ..Op::new(Command::Acquire, vec![r.into()], token.clone())
    };
    if r == SEMAPHORE {
        op.limit = Some(LIMIT);
    }
    let done = y.run(MAIN, &op)?;
    if matches!(
        done.outcome,
        Outcome::Ok {
            value: Value::Fence(_)
        }
    ) {
        y.run(MAIN, &Op::new(Command::Release, vec![r.into()], token))?;
    }
    Ok(())
}

/// A resource the session may still hold, at random.
fn held(x: &mut Client, s: &Session) -> Option<String> {
    let all: Vec<&String> = (s.holds.iter().filter(|h| !h.released))
        .flat_map(|h| h.resources.iter())
        .collect();
    if all.is_empty() {
        return None;
    }
    Some(all[x.rng.below(all.len() as u64) as usize].clone())
}

/// One session of `x`, `y` its partner.
fn life<'a>(x: &mut Client<'a>, y: &mut Client<'a>) -> Result<(), String> {
    let ttl = between(&mut x.rng, 600, 1500);
    let bind = x.rng.below(3) == 0;
    let lock_delay = match x.rng.below(2) {
        0 => between(&mut x.rng, 100, 600),
        _ => 0,
    };
    let Some(mut s) = open(x, ttl, bind, lock_delay)? else {
        return Ok(());
    };
    let steps = between(&mut x.rng, 3, 10);
    for _ in 0..steps {
        if s.ended || x.ctx.abort.load(Ordering::SeqCst) {
            break;
        }
        if x.ctx.rec.now() > s.alive_at + s.ttl * 1000 / 3 {
            keep_alive(x, &mut s)?;
            continue;
        }
        match x.rng.below(10) {
            0..=5 => acquire(x, &mut s)?,
            6..=7 => {
                let live: Vec<usize> = (0..s.holds.len())
                    .filter(|&i| !s.holds[i].released)
                    .collect();
                if !live.is_empty() {
                    let i = live[x.rng.below(live.len() as u64) as usize];
                    release(x, &mut s.holds[i], None)?;
                }
            }
            _ => {
                if let Some(r) = held(x, &s) {
                    let wait = between(&mut y.rng, 20, 200);
                    contend(y, &r, wait)?;
                }
            }
        }
        sleep(Duration::from_millis(x.rng.below(30)));
    }
    if !s.ended {
        match x.rng.below(4) {
            0 => close(x, &s)?,
            1 => {
                y.run(MAIN, &session_op(Command::SessionKill, &s.id))?;
            }
            2 => {
                // Keep-alives stop: the partner waits through the end.
                if let Some(r) = held(x, &s) {
                    let wait = s.ttl + s.lock_delay + 500;
                    contend(y, &r, wait)?;
                }
                let expired = s.last_sent_done.max(s.alive_at) + s.ttl * 1000 + 50_000;
                let now = x.ctx.rec.now();
                sleep(Duration::from_micros(expired.saturating_sub(now)));
            }
            _ if s.bind => x.disconnect(MAIN, &s.id),
            _ => close(x, &s)?,
        }
    }
    if let Some(r) = held(x, &s) {
        let wait = s.lock_delay + 500;
        contend(y, &r, wait)?;
    }
    // Whatever ended it, the end is decided once this is answered.
    close(x, &s)?;
    sleep(Duration::from_millis(s.lock_delay + 50));
    let id = s.id.clone();
    for h in s.holds.iter_mut().filter(|h| !h.released) {
        release(x, h, Some(&id))?;
    }
    Ok(())
}

/// Two sessions, each holding one of `CYCLE`, each asking for the other's.
fn cycle<'a>(a: &mut Client<'a>, b: &mut Client<'a>) -> Result<(), String> {
    let ttl = 2000;
    let mut sessions = Vec::new();
    for x in [&mut *a, &mut *b] {
        let bind = x.rng.below(4) == 0;
        match open(x, ttl, bind, 0)? {
            Some(s) => sessions.push(s),
            None => break,
        }
    }
    let mut tokens = Vec::new();
    if sessions.len() == 2 {
        for (i, x) in [&mut *a, &mut *b].into_iter().enumerate() {
            let token = x.token();
            let op = Op {
                ttl_ms: Some(0),
                session: Some(sessions[i].id.clone()),
                ..Op::new(Command::Acquire, vec![CYCLE[i].into()], token.clone())
            };
            let done = x.run(MAIN, &op)?;
            if !matches!(
                done.outcome,
                Outcome::Ok {
                    value: Value::Fence(_)
                }
            ) {
                break;
            }
            tokens.push(token);
        }
    }
    if tokens.len() == 2 {
        let wait = |x: &mut Client, i: usize, ms: u64| Op {
            ttl_ms: Some(0),
            wait_ms: Some(ms),
            session: Some(sessions[i].id.clone()),
            ..Op::new(Command::Acquire, vec![CYCLE[1 - i].into()], x.token())
        };
        let ms = between(&mut a.rng, 800, 1500);
        let first = wait(a, 0, ms);
        let pending = a.send(MAIN, &first)?;
        sleep(Duration::from_millis(between(&mut b.rng, 30, 100)));
        let ms = between(&mut b.rng, 200, 500);
        let second = wait(b, 1, ms);
        b.run(MAIN, &second)?;
        // One time in two the second lets go: the first is granted.
        if b.rng.below(2) == 0 {
            b.run(
                MAIN,
                &Op::new(Command::Release, vec![CYCLE[1].into()], tokens[1].clone()),
            )?;
        }
        a.finish(pending);
    }
    for (i, s) in sessions.iter().enumerate() {
        let x = if i == 0 { &mut *a } else { &mut *b };
        close(x, s)?;
    }
    Ok(())
}
