//! Throughput of two or more sides, all servers up at once, in short blocks
//! that alternate between them (ABBA): two builds of the module
//! (baseline.rs), dlock against the server's own compare-and-set commands
//! (native.rs), or dlock and those commands against the floor (floor.rs).
//! A whole run per side back to back compares whatever else the machine did
//! during each run: on a shared 2-core box one run of a second catches a
//! burst of another job and the next does not, and the same build swings
//! by a third from run to run. Blocks of a tenth of a second spread those
//! bursts over both sides alike, and the median of the blocks' ratios
//! leaves out the few that one burst hit. Both sides see the same sequence
//! of resources (the same seeds) and so the same fill of the keyspace at
//! every block.

use crate::cases::{self, owner, populate, populate_keys, stranger, Config, TTL};
use crate::common::Server;
use crate::load::{self, Outcome, Rng, Shape};

/// Blocks a run is cut into; the sides take turns.
pub const BLOCKS: usize = 40;

/// What one side sends: random resources out of the run's keys.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Cmd {
    /// `DLOCK.ACQUIRE lock:<rand> <fresh token> 30000` on an empty database.
    Acquire,
    /// `SET lock:<rand> <fresh token> NX PX 30000` on an empty database.
    SetNx,
    /// `DLOCK.RELEASE lock:<n> <owner>`: each populated lock once, shuffled.
    Release,
    /// `DLOCK.RELEASE lock:<rand> <wrong token>` on populated locks.
    ReleaseMiss,
    /// `DLOCK.EXTEND lock:<rand> <owner> 30000` on populated locks.
    Extend,
    /// `DELEX lock:<n> IFEQ <owner>` (Redis 8.4+), as `Release`.
    Delex,
    /// `DELEX lock:<rand> IFEQ <wrong token>` on populated strings.
    DelexMiss,
    /// `DELIFEQ lock:<n> <owner>` (Valkey 9), as `Release`.
    Delifeq,
    /// `DELIFEQ lock:<rand> <wrong token>` on populated strings.
    DelifeqMiss,
    /// `SET lock:<rand> <owner> IFEQ <owner> PX 30000` on populated strings:
    /// a lease renewed by its holder.
    SetIfeq,
    /// `FLOOR.CHECK lock:<rand> <owner>` on populated floor values: the
    /// least a module command on a lock does (floor.rs).
    Floor,
}

impl Cmd {
    /// Whether the side's server loads the module (the native side runs
    /// without it: dlock's keyspace-event subscription would tax it).
    pub fn module(self) -> bool {
        matches!(
            self,
            Cmd::Acquire | Cmd::Release | Cmd::ReleaseMiss | Cmd::Extend | Cmd::Floor
        )
    }

    fn populated(self) -> bool {
        !matches!(self, Cmd::Acquire | Cmd::SetNx)
    }

    /// Each command deletes its key: a shuffled walk over the populated
    /// keys, populated again (untimed) when it runs out.
    fn consumes(self) -> bool {
        matches!(self, Cmd::Release | Cmd::Delex | Cmd::Delifeq)
    }

    pub fn label(self) -> &'static str {
        match self {
            Cmd::Acquire => "`DLOCK.ACQUIRE`",
            Cmd::SetNx => "`SET NX PX`",
            Cmd::Release => "`DLOCK.RELEASE` (owner)",
            Cmd::ReleaseMiss => "`DLOCK.RELEASE` (wrong token)",
            Cmd::Extend => "`DLOCK.EXTEND` (owner)",
            Cmd::Delex => "`DELEX IFEQ` (owner)",
            Cmd::DelexMiss => "`DELEX IFEQ` (wrong value)",
            Cmd::Delifeq => "`DELIFEQ` (owner)",
            Cmd::DelifeqMiss => "`DELIFEQ` (wrong value)",
            Cmd::SetIfeq => "`SET IFEQ PX` (owner)",
            Cmd::Floor => "`FLOOR.CHECK` (owner)",
        }
    }

    /// Appends one command; `next` gives the next key of a consuming walk.
    fn emit(self, buf: &mut Vec<u8>, rng: &mut Rng, keys: u64, next: &mut dyn FnMut() -> u64) {
        let i = if self.consumes() {
            next()
        } else {
            rng.below(keys)
        };
        let k = cases::name(b"lock:", i);
        let (k, own) = (k.as_ref(), owner(i));
        let own = own.as_ref();
        match self {
            Cmd::Acquire | Cmd::SetNx | Cmd::ReleaseMiss | Cmd::DelexMiss | Cmd::DelifeqMiss => {
                let t = stranger(rng);
                let t = t.as_ref();
                let args: &[&[u8]] = match self {
                    Cmd::Acquire => &[b"DLOCK.ACQUIRE", k, t, TTL],
                    Cmd::SetNx => &[b"SET", k, t, b"NX", b"PX", TTL],
                    Cmd::ReleaseMiss => &[b"DLOCK.RELEASE", k, t],
                    Cmd::DelexMiss => &[b"DELEX", k, b"IFEQ", t],
                    _ => &[b"DELIFEQ", k, t],
                };
                load::command(buf, args);
            }
            Cmd::Release => load::command(buf, &[b"DLOCK.RELEASE", k, own]),
            Cmd::Extend => load::command(buf, &[b"DLOCK.EXTEND", k, own, TTL]),
            Cmd::Delex => load::command(buf, &[b"DELEX", k, b"IFEQ", own]),
            Cmd::Delifeq => load::command(buf, &[b"DELIFEQ", k, own]),
            Cmd::SetIfeq => load::command(buf, &[b"SET", k, own, b"IFEQ", own, b"PX", TTL]),
            Cmd::Floor => load::command(buf, &[b"FLOOR.CHECK", k, own]),
        }
    }
}

/// One side: its server, the generator's state, and the blocks so far.
struct Side {
    cmd: Cmd,
    server: Server,
    rng: Rng,
    /// A consuming walk: the populated keys in the order they go, and how
    /// many are gone.
    order: Vec<u64>,
    gone: usize,
    out: Outcome,
    /// Each block's rate, ops/s.
    rates: Vec<f64>,
}

impl Side {
    fn new(config: &Config, cmd: Cmd, pipeline: usize, keys: u64) -> Side {
        let server = config.server(cmd.module());
        if cmd == Cmd::Floor {
            crate::floor::populate(&server, keys);
        } else if cmd.populated() {
            populate(&server, cmd.module(), b"lock:", 0, keys);
        }
        let mut rng = Rng::new(0x5eed ^ pipeline as u64);
        let mut order: Vec<u64> = Vec::new();
        if cmd.consumes() {
            order = (0..keys).collect();
            rng.shuffle(&mut order);
        }
        Side {
            cmd,
            server,
            rng,
            order,
            gone: 0,
            out: Outcome::default(),
            rates: Vec::new(),
        }
    }

    /// `n` commands (at most the keys for a consuming walk).
    fn block(&mut self, pipeline: usize, clients: usize, keys: u64, n: u64) {
        if self.cmd.consumes() && self.gone + n as usize > self.order.len() {
            // The keys released so far come back (untimed); the walk starts
            // again in a new order.
            let gone = self.order.get(..self.gone).unwrap_or_default();
            populate_keys(&self.server, self.cmd.module(), b"lock:", gone);
            self.rng.shuffle(&mut self.order);
            self.gone = 0;
        }
        let shape = Shape {
            conns: clients,
            pipeline,
            total: n,
            latency: false,
        };
        let (cmd, rng, order, gone) = (self.cmd, &mut self.rng, &self.order, &mut self.gone);
        let out = load::run(self.server.port(), shape, |_, buf| {
            let mut next = || {
                let i = order.get(*gone).copied().unwrap_or(0);
                *gone += 1;
                i
            };
            cmd.emit(buf, rng, keys, &mut next);
        });
        cases::check(&out, cmd.label());
        self.rates.push(out.ops_per_sec());
        self.out.absorb(out);
    }
}

/// What an interleaved run measured.
pub struct Blocks {
    /// Each side's blocks, pooled.
    pub this: Outcome,
    pub other: Outcome,
    /// The first side's rate over the other's, block by block: a burst of
    /// another job lands in one block of one side, and the median of the
    /// blocks' ratios leaves it out where a ratio of the totals would not.
    pub ratios: Vec<f64>,
}

/// One side (`this`) against another, `total` commands each on a fresh
/// server each, in `BLOCKS` blocks alternating ABBA; `rep` odd starts
/// with the other side and starts its server first.
pub fn run(
    this: (&Config, Cmd),
    other: (&Config, Cmd),
    pipeline: usize,
    total: u64,
    clients: usize,
    keys: u64,
    rep: usize,
) -> Blocks {
    let [this, other] = run_sides(&[this, other], pipeline, total, clients, keys, rep)
        .try_into()
        .unwrap_or_else(|_| unreachable!("two sides in, two out"));
    let ratios = block_ratios(&this, &other);
    Blocks {
        this: this.out,
        other: other.out,
        ratios,
    }
}

/// One side's share of an interleaved run.
pub struct Measured {
    /// Its blocks, pooled.
    pub out: Outcome,
    /// Each block's rate, ops/s.
    pub rates: Vec<f64>,
}

/// `a`'s rate over `b`'s, block by block: a burst of another job lands in
/// one block of one side, and the median of the blocks' ratios leaves it
/// out where a ratio of the totals would not.
pub fn block_ratios(a: &Measured, b: &Measured) -> Vec<f64> {
    a.rates
        .iter()
        .zip(&b.rates)
        .map(|(a, b)| a / b.max(1e-9))
        .collect()
}

/// Any number of sides (floor.rs runs three), `total` commands each on a
/// fresh server each, in `BLOCKS` blocks: each block runs every side once,
/// in an order that rotates with the block pair and reverses within it
/// (ABC CBA BCA ACB ...; for two sides ABBA), starting at side `rep`, which
/// also starts its server first.
pub fn run_sides(
    sides: &[(&Config, Cmd)],
    pipeline: usize,
    total: u64,
    clients: usize,
    keys: u64,
    rep: usize,
) -> Vec<Measured> {
    let n = sides.len().max(1);
    // The side started first rotates too: a server started earlier has
    // its memory laid out and its AOF grown in another order.
    let mut started: Vec<(usize, Side)> = (0..sides.len())
        .map(|i| (rep + i) % n)
        .filter_map(|i| {
            let (config, cmd) = sides.get(i)?;
            Some((i, Side::new(config, *cmd, pipeline, keys)))
        })
        .collect();
    started.sort_by_key(|(i, _)| *i);
    let mut sides: Vec<Side> = started.into_iter().map(|(_, s)| s).collect();
    let blocks = BLOCKS.min(total.max(1) as usize);
    let consumes = sides.iter().any(|s| s.cmd.consumes());
    for block in 0..blocks {
        let mut count =
            total * (block as u64 + 1) / blocks as u64 - total * block as u64 / blocks as u64;
        if consumes {
            count = count.min(keys);
        }
        let first = rep + block / 2;
        let mut order: Vec<usize> = (0..n).map(|i| (first + i) % n).collect();
        if block % 2 == 1 {
            order.reverse();
        }
        for i in order {
            if let Some(side) = sides.get_mut(i) {
                side.block(pipeline, clients, keys, count);
            }
        }
    }
    sides
        .into_iter()
        .map(|s| Measured {
            out: s.out,
            rates: s.rates,
        })
        .collect()
}
