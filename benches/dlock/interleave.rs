//! Throughput of two builds of the module, both servers up at once, in
//! short blocks that alternate between them (ABBA). A whole run per side
//! back to back compares whatever else the machine did during each run: on
//! a shared 2-core box one run of a second catches a burst of another job
//! and the next does not, and the same build swings by a third from run to
//! run. Blocks of a tenth of a second spread those bursts over both sides
//! alike, so the ratio of the pooled blocks shows the builds, not the
//! bursts. Both sides see the same sequence of commands (the same seeds)
//! and so the same fill of the keyspace at every block.

use crate::cases::{self, owner, populate, stranger, Config, Op, Sizes, TTL};
use crate::common::Server;
use crate::load::{self, Outcome, Rng, Shape};

/// Blocks a run is cut into; the sides take turns.
pub const BLOCKS: usize = 40;

/// One side: its server, the generator's state, and the blocks so far.
struct Side {
    server: Server,
    rng: Rng,
    /// Owner RELEASE: the populated keys in the order they are released,
    /// and how many are gone.
    order: Vec<u64>,
    released: usize,
    out: Outcome,
    /// Each block's rate, ops/s.
    rates: Vec<f64>,
}

impl Side {
    fn new(config: &Config, op: Op, pipeline: usize, keys: u64) -> Side {
        let server = config.server(true);
        if op != Op::Acquire {
            populate(&server, true, b"lock:", 0, keys);
        }
        let mut rng = Rng::new(0x5eed ^ pipeline as u64);
        let mut order: Vec<u64> = Vec::new();
        if op == Op::ReleaseHit {
            order = (0..keys).collect();
            rng.shuffle(&mut order);
        }
        Side {
            server,
            rng,
            order,
            released: 0,
            out: Outcome::default(),
            rates: Vec::new(),
        }
    }

    /// `n` commands of `op` (`n` at most the keys for owner RELEASE).
    fn block(&mut self, op: Op, pipeline: usize, clients: usize, keys: u64, n: u64) {
        if op == Op::ReleaseHit && self.released + n as usize > self.order.len() {
            // Every lock was released: populate again (untimed), new order.
            populate(&self.server, true, b"lock:", 0, keys);
            self.rng.shuffle(&mut self.order);
            self.released = 0;
        }
        let shape = Shape {
            conns: clients,
            pipeline,
            total: n,
            latency: false,
        };
        let (rng, order, released) = (&mut self.rng, &self.order, &mut self.released);
        let out = load::run(self.server.port(), shape, |_, buf| match op {
            Op::Acquire => {
                let k = cases::name(b"lock:", rng.below(keys));
                let t = stranger(rng);
                load::command(buf, &[b"DLOCK.ACQUIRE", k.as_ref(), t.as_ref(), TTL]);
            }
            Op::ExtendHit => {
                let i = rng.below(keys);
                let (k, t) = (cases::name(b"lock:", i), owner(i));
                load::command(buf, &[b"DLOCK.EXTEND", k.as_ref(), t.as_ref(), TTL]);
            }
            _ => {
                let i = order[*released];
                *released += 1;
                let (k, t) = (cases::name(b"lock:", i), owner(i));
                load::command(buf, &[b"DLOCK.RELEASE", k.as_ref(), t.as_ref()]);
            }
        });
        cases::check(&out, op.label());
        self.rates.push(out.ops_per_sec());
        self.out.absorb(out);
    }
}

/// `total` commands of `op` per side on a fresh server each (this build's
/// `config`, the other's `base`), in `BLOCKS` blocks alternating ABBA;
/// `rep` odd starts with the other side. Returns each side's pooled
/// blocks and the ratio (this / other) of every pair of blocks. `op` is
/// ACQUIRE, owner RELEASE or owner EXTEND.
pub fn run(
    config: &Config,
    base: &Config,
    op: Op,
    pipeline: usize,
    total: u64,
    sizes: &Sizes,
    rep: usize,
) -> Blocks {
    assert!(
        matches!(op, Op::Acquire | Op::ReleaseHit | Op::ExtendHit),
        "interleave: {} is not a plain-lock command of this build",
        op.label()
    );
    let keys = sizes.keys;
    // The side started first alternates too: a server started earlier has
    // its memory laid out and its AOF grown in another order.
    let mut sides = if rep.is_multiple_of(2) {
        [
            Side::new(config, op, pipeline, keys),
            Side::new(base, op, pipeline, keys),
        ]
    } else {
        let other = Side::new(base, op, pipeline, keys);
        [Side::new(config, op, pipeline, keys), other]
    };
    let blocks = BLOCKS.min(total.max(1) as usize);
    for block in 0..blocks {
        let mut n =
            total * (block as u64 + 1) / blocks as u64 - total * block as u64 / blocks as u64;
        if op == Op::ReleaseHit {
            n = n.min(keys);
        }
        let first = (rep + block / 2 + block) % 2;
        for side in [first, 1 - first] {
            sides[side].block(op, pipeline, sizes.clients, keys, n);
        }
    }
    let ratios = sides[0]
        .rates
        .iter()
        .zip(&sides[1].rates)
        .map(|(d, b)| d / b.max(1e-9))
        .collect();
    let [this, other] = sides.map(|s| s.out);
    Blocks {
        this,
        other,
        ratios,
    }
}

/// What an interleaved run measured.
pub struct Blocks {
    pub this: Outcome,
    pub other: Outcome,
    /// This build's rate over the other's, block by block: a burst of
    /// another job lands in one block of one side, and the median of the
    /// blocks' ratios leaves it out where a ratio of the totals would not.
    pub ratios: Vec<f64>,
}
