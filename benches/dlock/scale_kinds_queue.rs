//! One queue of the `scale-kinds` section (scale_kinds.rs defines what each
//! operation is): a held resource with W waiters, a component of S queued
//! sets sharing a hub, or (the reference, without the module) W clients in
//! `BLPOP` on one list; each waiter blocked on a connection of its own, and
//! the rounds of enqueues, handoffs and leaves run on it.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use crate::cases::Config;
use crate::common::Server;
use crate::info_u64;
use crate::load::{self, Rng};
use crate::priorities::Spread;
use crate::scale_kinds::{cmdstat, per_call, Fill, Settings};
use crate::scale_kinds_holds::HOUR;
use crate::scale_kinds_pool::Pool;
use crate::scale_kinds_waiters::Measured;

#[path = "scale_kinds_queue_blpop.rs"]
mod blpop;

/// Releases the holder `count` times in a row, each release granting the
/// head of the queue; returns the granted tokens in order. KEYS[1]: the
/// queue's resource; ARGV: holder, count, `set` or `single`, the prefix of
/// a set's own member (its token is `s<n>`, its member `<prefix><n>`).
const HANDOFF: &str = "local cur, granted = ARGV[1], {} \
    for i = 1, tonumber(ARGV[2]) do \
      local r \
      if ARGV[3] == 'set' then \
        r = redis.call('DLOCK.MRELEASE', 2, KEYS[1], ARGV[4] .. string.sub(cur, 2), cur) \
      else \
        r = redis.call('DLOCK.RELEASE', KEYS[1], cur) \
      end \
      if r == 0 then break end \
      local info = redis.call('DLOCK.INFO', KEYS[1]) \
      if not info or not info[2] then break end \
      cur = info[2] \
      granted[#granted + 1] = cur \
    end \
    return granted";

const HUB: &str = "{c}:hub";
/// The reference's list.
const LIST: &str = "qlist";
const OWN: &str = "{c}:o";
/// How long an enqueue round may take to show its waiters blocked.
const ROUND_LIMIT: Duration = Duration::from_secs(30);

/// What waits in a queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Plain-lock waiters: `DLOCK.ACQUIRE q w<n> ... WAIT`.
    Waiters,
    /// Queued sets of one component: `DLOCK.MACQUIRE 2 {c}:hub ... WAIT`.
    Sets,
    /// The server's own blocking pop, without the module: `BLPOP qlist`.
    Blpop,
}

/// One queue of `w` waiters on a server of its own, and its runs.
pub struct Queue {
    // Declared first, so dropped (killed) before 10,000 waiters disconnect.
    server: Server,
    kind: Kind,
    pub w: u64,
    control: redis::Connection,
    pool: Option<Pool>,
    free: Vec<usize>,
    waiting: Vec<usize>,
    /// Per connection: its position in `waiting`.
    slot: Vec<Option<usize>>,
    /// The waiting connection of each request serial (so in the order they
    /// were sent), and the reverse.
    by_serial: BTreeMap<u64, usize>,
    serial: Vec<u64>,
    /// Per connection: the enqueue round that sent its request. Within a
    /// round the server's order is its own; rounds are blocked in turn.
    round: Vec<u64>,
    rounds: u64,
    holder: u64,
    next: u64,
    sha: String,
    rng: Rng,
    /// The `PRIORITY` each waiter asks with (the `priorities` section).
    spread: Spread,
    pub fill: Fill,
    /// Ops per second of each run: enqueue, handoff, leave.
    pub rates: [Vec<f64>; 3],
    /// Server µs per call of each run: RELEASE (MRELEASE, LPUSH), CLIENT
    /// UNBLOCK.
    pub us: [Vec<f64>; 2],
    pub error: Option<String>,
}

impl Queue {
    fn resource(&self) -> &'static str {
        match self.kind {
            Kind::Waiters => "q",
            Kind::Sets => HUB,
            Kind::Blpop => LIST,
        }
    }

    fn token(&self, serial: u64) -> String {
        format!(
            "{}{serial}",
            if self.kind == Kind::Sets { 's' } else { 'w' }
        )
    }

    /// The command that frees the resource, as `INFO commandstats` names it.
    fn release(&self) -> &'static str {
        match self.kind {
            Kind::Waiters => "dlock.release",
            Kind::Sets => "dlock.mrelease",
            Kind::Blpop => "lpush",
        }
    }

    /// The arguments of `serial`'s request (with WAIT: a waiter's, without:
    /// the holder's).
    fn args(&self, serial: u64, wait: bool) -> Vec<Vec<u8>> {
        if self.kind == Kind::Blpop {
            return vec![b"BLPOP".to_vec(), LIST.into(), b"3600".to_vec()];
        }
        let token = self.token(serial).into_bytes();
        let mut args: Vec<Vec<u8>> = if self.kind == Kind::Sets {
            let own = format!("{OWN}{serial}").into_bytes();
            vec![b"DLOCK.MACQUIRE".to_vec(), b"2".to_vec(), HUB.into(), own]
        } else {
            vec![b"DLOCK.ACQUIRE".to_vec(), b"q".to_vec()]
        };
        args.extend([token, HOUR.to_vec()]);
        if wait {
            if let Some(p) = self.spread.of(serial) {
                args.extend([b"PRIORITY".to_vec(), p.to_string().into_bytes()]);
            }
            args.extend([b"WAIT".to_vec(), HOUR.to_vec()]);
        }
        args
    }

    /// A queue whose waiters ask with the priorities of `spread`
    /// (`Spread::Fifo`: none).
    pub fn with_spread(
        config: &Config,
        kind: Kind,
        w: u64,
        set: &Settings,
        spread: Spread,
    ) -> Queue {
        let conns = w as usize + set.batch;
        let mut config = config.clone();
        let maxclients = (conns + 256).max(10_000).to_string();
        config.args.push("--maxclients");
        config.args.push(Box::leak(maxclients.into_boxed_str()));
        let server = config.server(kind != Kind::Blpop);
        let mut control = server.conn();
        let _ = control.set_read_timeout(Some(Duration::from_secs(120)));
        // The slow-lock log off: in a queue of 10,000 every wait that ends
        // has lasted past the log's 1 s and is logged (a cost per wait, the
        // client's address and name, whatever the queue's size), in a
        // queue of 10 none is. The sizes are compared for the queue's own
        // cost.
        let setup = match kind {
            Kind::Blpop => Ok(()),
            _ => redis::cmd("CONFIG")
                .arg("SET")
                .arg("dlock.slowlog-wait-ms")
                .arg(0)
                .query::<()>(&mut control),
        };
        let mut q = Queue {
            server,
            kind,
            w,
            control,
            pool: None,
            free: Vec::new(),
            waiting: Vec::new(),
            slot: vec![None; conns],
            by_serial: BTreeMap::new(),
            serial: vec![0; conns],
            round: vec![0; conns],
            rounds: 0,
            holder: 0,
            next: 1,
            sha: String::new(),
            rng: Rng::new(0x9e7e ^ w),
            spread,
            fill: Fill {
                wanted: w,
                ..Fill::default()
            },
            rates: Default::default(),
            us: Default::default(),
            error: setup
                .err()
                .map(|e| format!("CONFIG SET dlock.slowlog-wait-ms 0: {e}")),
        };
        if let Err(e) = q.load(conns, set.budget_secs) {
            q.fill.error = Some(e);
        }
        q
    }

    /// The holder, the connections, the W waiters (within `budget`).
    fn load(&mut self, conns: usize, budget: f64) -> Result<(), String> {
        if self.kind != Kind::Blpop {
            self.hold()?;
        }
        self.pool = Some(Pool::open(self.server.port(), conns)?);
        self.free = (0..conns).rev().collect();
        let t = Instant::now();
        let deadline = t + Duration::from_secs_f64(budget);
        while (self.waiting.len() as u64) < self.w && Instant::now() < deadline {
            let n = (self.w - self.waiting.len() as u64).min(500) as usize;
            self.enqueue(n, deadline, true)?;
        }
        self.fill.secs = t.elapsed().as_secs_f64();
        self.fill.done = info_u64(&mut self.control, "clients", "blocked_clients");
        self.fill.complete = self.fill.done == self.w;
        Ok(())
    }

    /// The holder's lock and the handoff script.
    fn hold(&mut self) -> Result<(), String> {
        let args = self.args(0, false);
        let mut first = redis::Cmd::new();
        for a in &args {
            first.arg(&a[..]);
        }
        let reply: redis::Value = first
            .query(&mut self.control)
            .map_err(|e| format!("the holder's acquire: {e}"))?;
        if !matches!(reply, redis::Value::Int(f) if f > 0) {
            return Err(format!("the holder's acquire answered {reply:?}"));
        }
        self.sha = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(HANDOFF)
            .query(&mut self.control)
            .map_err(|e| format!("SCRIPT LOAD: {e}"))?;
        Ok(())
    }

    /// `n` idle connections join the queue; returns the time until all of
    /// them show as blocked. Past `deadline`, stops waiting: the waiters
    /// blocked by then count (a fill), the rest are still on their way.
    /// `pause`: poll every millisecond rather than back to back (a fill,
    /// which is not timed per operation).
    fn enqueue(&mut self, n: usize, deadline: Instant, pause: bool) -> Result<Duration, String> {
        let picks: Vec<usize> = (0..n).filter_map(|_| self.free.pop()).collect();
        let serials: Vec<u64> = (self.next..).take(picks.len()).collect();
        self.next += picks.len() as u64;
        let cmds: Vec<Vec<u8>> = serials
            .iter()
            .map(|&s| {
                let args = self.args(s, true);
                let args: Vec<&[u8]> = args.iter().map(|a| &a[..]).collect();
                let mut buf = Vec::new();
                load::command(&mut buf, &args);
                buf
            })
            .collect();
        let expected = (self.waiting.len() + picks.len()) as u64;
        let pool = self.pool.as_mut().ok_or("no connections")?;
        let t0 = Instant::now();
        for (&i, cmd) in picks.iter().zip(&cmds) {
            pool.send(i, cmd)?;
        }
        let mut seen;
        loop {
            seen = info_u64(&mut self.control, "clients", "blocked_clients");
            if seen >= expected || Instant::now() >= deadline {
                break;
            }
            if pause {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let took = t0.elapsed();
        self.rounds += 1;
        for (&i, &s) in picks.iter().zip(&serials) {
            self.slot[i] = Some(self.waiting.len());
            self.waiting.push(i);
            self.by_serial.insert(s, i);
            self.serial[i] = s;
            self.round[i] = self.rounds;
        }
        if seen < expected && !pause {
            return Err(format!(
                "{seen} of {expected} waiters blocked after {:.0} s",
                took.as_secs_f64()
            ));
        }
        Ok(took)
    }

    fn unqueue(&mut self, i: usize) {
        self.by_serial.remove(&self.serial[i]);
        if let Some(at) = self.slot[i].take() {
            self.waiting.swap_remove(at);
            if let Some(&moved) = self.waiting.get(at) {
                self.slot[moved] = Some(at);
            }
        }
        self.free.push(i);
    }

    /// k handoffs in one script; returns their time.
    fn handoff(&mut self, k: usize) -> Result<Duration, String> {
        if self.kind == Kind::Blpop {
            return self.push(k);
        }
        let t0 = Instant::now();
        let granted: Vec<String> = redis::cmd("EVALSHA")
            .arg(&self.sha)
            .arg(1)
            .arg(self.resource())
            .arg(self.token(self.holder))
            .arg(k)
            .arg(if self.kind == Kind::Sets {
                "set"
            } else {
                "single"
            })
            .arg(OWN)
            .query(&mut self.control)
            .map_err(|e| format!("handoff script: {e}"))?;
        let took = t0.elapsed();
        if granted.len() != k {
            return Err(format!("{} of {k} handoffs granted", granted.len()));
        }
        for token in &granted {
            let serial: u64 = token[1..].parse().map_err(|_| format!("token {token}"))?;
            let i = *self
                .by_serial
                .get(&serial)
                .ok_or(format!("no waiter has token {token}"))?;
            let reply = self.pool.as_mut().ok_or("no connections")?.reply(i)?;
            if !reply.starts_with(':') {
                return Err(format!("granted waiter {token} got {reply}"));
            }
            self.unqueue(i);
            self.holder = serial;
        }
        Ok(took)
    }

    /// k `CLIENT UNBLOCK`s of random waiters, pipelined; returns their time.
    fn leave(&mut self, k: usize) -> Result<Duration, String> {
        let mut at = HashSet::new();
        while at.len() < k.min(self.waiting.len()) {
            at.insert(self.rng.below(self.waiting.len() as u64) as usize);
        }
        let picks: Vec<usize> = at.iter().map(|&p| self.waiting[p]).collect();
        let pool = self.pool.as_mut().ok_or("no connections")?;
        let mut pipe = redis::pipe();
        for &i in &picks {
            pipe.cmd("CLIENT").arg("UNBLOCK").arg(pool.id(i));
        }
        let t0 = Instant::now();
        let done: Vec<i64> = pipe
            .query(&mut self.control)
            .map_err(|e| format!("CLIENT UNBLOCK: {e}"))?;
        let took = t0.elapsed();
        if done.iter().any(|&d| d != 1) {
            return Err(format!("CLIENT UNBLOCK answered {done:?}"));
        }
        for &i in &picks {
            let reply = pool.reply(i)?;
            if !matches!(reply.as_str(), "$-1" | "*-1" | "_") {
                return Err(format!("unblocked waiter got {reply}"));
            }
        }
        for i in picks {
            self.unqueue(i);
        }
        Ok(took)
    }

    /// What was measured; the server and the connections are dropped.
    pub fn measured(self) -> Measured {
        Measured {
            w: self.w,
            fill: self.fill,
            rates: self.rates,
            us: self.us,
            error: self.error,
        }
    }

    /// Cycles of enqueue, handoff, enqueue, leave for `run_secs`.
    pub fn run(&mut self, set: &Settings) -> Result<(), String> {
        let k = set.batch;
        let release = self.release();
        let before = [
            cmdstat(&mut self.control, release),
            cmdstat(&mut self.control, "client|unblock"),
        ];
        let mut secs = [0.0f64; 3];
        let mut ops = [0usize; 3];
        let start = Instant::now();
        while start.elapsed().as_secs_f64() < set.run_secs || ops[2] == 0 {
            let limit = Instant::now() + ROUND_LIMIT;
            for (op, took) in [
                (0, self.enqueue(k, limit, false)?),
                (1, self.handoff(k)?),
                (0, self.enqueue(k, limit, false)?),
                (2, self.leave(k)?),
            ] {
                secs[op] += took.as_secs_f64();
                ops[op] += k;
            }
        }
        let after = [
            cmdstat(&mut self.control, release),
            cmdstat(&mut self.control, "client|unblock"),
        ];
        for op in 0..3 {
            self.rates[op].push(ops[op] as f64 / secs[op].max(1e-9));
        }
        for (j, us) in self.us.iter_mut().enumerate() {
            us.push(per_call(before[j], after[j]));
        }
        Ok(())
    }
}
