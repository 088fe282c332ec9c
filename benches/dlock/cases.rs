//! Throughput, latency, memory and scale: dlock's commands against what
//! clients run on plain Redis today, each side on its own fresh server with
//! the same configuration. The baseline servers run without the module
//! (dlock subscribes to generic keyspace events, so a loaded module would
//! tax `DEL` and `PEXPIRE` on the baseline side).

use std::time::{Duration, Instant};

use crate::common::Server;
use crate::load::{self, Outcome, Rng, Shape};

/// `GET`-compare-`DEL`, as Redlock clients release.
pub const UNLOCK: &str =
    "if redis.call('GET',KEYS[1])==ARGV[1] then return redis.call('DEL',KEYS[1]) else return 0 end";
/// `GET`-compare-`PEXPIRE`, as Redlock clients extend.
pub const EXTEND: &str = "if redis.call('GET',KEYS[1])==ARGV[1] then \
     return redis.call('PEXPIRE',KEYS[1],ARGV[2]) else return 0 end";

/// TTL of the benchmark's own requests.
pub const TTL: &[u8] = b"30000";
/// TTL of pre-populated locks: nothing may expire during a run.
const LONG_TTL: &[u8] = b"3600000";

/// A server configuration under test.
#[derive(Clone)]
pub struct Config {
    pub label: &'static str,
    pub short: &'static str,
    pub args: Vec<&'static str>,
    /// Another build of the module (`BASELINE`, see baseline.rs); `None`:
    /// this build (`target/release/libdlock.so`, or `DLOCK_MODULE`).
    pub module: Option<std::path::PathBuf>,
}

impl Config {
    pub fn server(&self, module: bool) -> Server {
        let mut b = Server::builder();
        match (module, &self.module) {
            (false, _) => b = b.without_module(),
            (true, Some(other)) => {
                b = b
                    .without_module()
                    .arg("--loadmodule")
                    .arg(other.display().to_string())
            }
            (true, None) => {}
        }
        for a in &self.args {
            b = b.arg(*a);
        }
        for a in crate::pin::server_args() {
            b = b.arg(a);
        }
        b.start()
    }
}

/// Sizes, from the environment (see main.rs).
#[derive(Clone, Debug)]
pub struct Sizes {
    pub clients: usize,
    pub keys: u64,
    pub ops_p1: u64,
    pub ops_p16: u64,
    pub memory_locks: u64,
    pub scale: Vec<u64>,
    pub scale_ops: u64,
    pub repeat: usize,
    pub scale_repeat: usize,
    pub scale_baseline: bool,
}

/// One side of a comparison: what runs, on which kind of server.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Op {
    /// `DLOCK.ACQUIRE lock:<rand> tok:<rand> 30000` on an empty database.
    Acquire,
    /// `SET lock:<rand> tok:<rand> NX PX 30000` on an empty database.
    SetNx,
    /// `DLOCK.RELEASE lock:<n> tok:<n>`: each populated lock once, shuffled.
    ReleaseHit,
    /// `EVALSHA <unlock> 1 lock:<n> tok:<n>`, same walk over string keys.
    LuaReleaseHit,
    /// `DEL lock:<n>`, same walk over string keys.
    DelHit,
    /// `DLOCK.RELEASE lock:<rand> <wrong token>` on populated locks.
    ReleaseMiss,
    /// `EVALSHA <unlock> 1 lock:<rand> <wrong token>` on populated keys.
    LuaReleaseMiss,
    /// `DLOCK.EXTEND lock:<rand> tok:<n> 30000` on populated locks.
    ExtendHit,
    /// `EVALSHA <extend> 1 lock:<rand> tok:<n> 30000` on populated keys.
    LuaExtendHit,
    /// Per connection: acquire a random lock with a fresh token, release it.
    CycleDlock,
    /// The same with `SET NX PX` and the unlock script.
    CycleLua,
}

impl Op {
    pub fn module(self) -> bool {
        matches!(
            self,
            Op::Acquire | Op::ReleaseHit | Op::ReleaseMiss | Op::ExtendHit | Op::CycleDlock
        )
    }
    fn populated(self) -> bool {
        !matches!(
            self,
            Op::Acquire | Op::SetNx | Op::CycleDlock | Op::CycleLua
        )
    }
    /// Each command deletes its key: walk a permutation, re-populate per round.
    fn consumes(self) -> bool {
        matches!(self, Op::ReleaseHit | Op::LuaReleaseHit | Op::DelHit)
    }
    fn script(self) -> Option<&'static str> {
        match self {
            Op::LuaReleaseHit | Op::LuaReleaseMiss | Op::CycleLua => Some(UNLOCK),
            Op::LuaExtendHit => Some(EXTEND),
            _ => None,
        }
    }
    pub fn label(self) -> &'static str {
        match self {
            Op::Acquire => "`DLOCK.ACQUIRE`",
            Op::SetNx => "`SET NX PX`",
            Op::ReleaseHit => "`DLOCK.RELEASE` (owner)",
            Op::LuaReleaseHit => "`EVALSHA` unlock (owner)",
            Op::DelHit => "`DEL`",
            Op::ReleaseMiss => "`DLOCK.RELEASE` (wrong token)",
            Op::LuaReleaseMiss => "`EVALSHA` unlock (wrong token)",
            Op::ExtendHit => "`DLOCK.EXTEND` (owner)",
            Op::LuaExtendHit => "`EVALSHA` pexpire (owner)",
            Op::CycleDlock => "dlock cycle (ACQUIRE + RELEASE)",
            Op::CycleLua => "`SET NX PX` + `EVALSHA` unlock cycle",
        }
    }
}

/// A fixed-size name: `prefix` + 12 zero-padded digits, the same shape as
/// redis-benchmark's `__rand_int__` keys.
pub struct Name {
    b: [u8; 24],
    len: usize,
}

impl AsRef<[u8]> for Name {
    fn as_ref(&self) -> &[u8] {
        &self.b[..self.len]
    }
}

pub fn name(prefix: &[u8], n: u64) -> Name {
    let mut b = [b'0'; 24];
    b[..prefix.len()].copy_from_slice(prefix);
    let len = prefix.len() + 12;
    let mut n = n;
    for i in (prefix.len()..len).rev() {
        b[i] = b'0' + (n % 10) as u8;
        n /= 10;
    }
    Name { b, len }
}

/// The owner's token of populated lock `n`.
pub fn owner(n: u64) -> Name {
    name(b"tok:", n)
}

/// A random token that never equals any `owner(n)` with n < 10^11.
/// The next command of a lock cycle on one connection: a batch of
/// `pipeline` acquisitions of random resources with fresh tokens, then the
/// batch of their releases. Returns whether it acquires, and the resource
/// and token.
pub fn cycle_step(
    count: &mut usize,
    held: &mut [(u64, u64)],
    pipeline: usize,
    rng: &mut Rng,
    keys: u64,
) -> (bool, Name, Name) {
    let c = *count;
    *count += 1;
    let acquiring = (c / pipeline).is_multiple_of(2);
    let Some(slot) = held.get_mut(c % pipeline) else {
        return (acquiring, name(b"lock:", 0), name(b"tok:", 0));
    };
    if acquiring {
        *slot = (
            rng.below(keys),
            100_000_000_000 + rng.below(900_000_000_000),
        );
    }
    (acquiring, name(b"lock:", slot.0), name(b"tok:", slot.1))
}

pub fn stranger(rng: &mut Rng) -> Name {
    name(b"tok:", 100_000_000_000 + rng.below(900_000_000_000))
}

/// Creates locks (module) or `SET NX PX` strings `prefix<n>` for n in
/// `from..to`, owned by `owner(n)`, pipelined over 50 connections.
pub fn populate(server: &Server, module: bool, prefix: &[u8], from: u64, to: u64) {
    let all: Vec<u64> = (from..to).collect();
    populate_keys(server, module, prefix, &all);
}

/// As `populate`, for the keys `prefix<n>` with n in `keys`.
pub fn populate_keys(server: &Server, module: bool, prefix: &[u8], keys: &[u64]) {
    let mut next = keys.iter().copied();
    let out = load::run(
        server.port(),
        Shape {
            conns: 50,
            pipeline: 128,
            total: keys.len() as u64,
            latency: false,
        },
        |_, buf| {
            let n = next.next().unwrap_or(0);
            let (k, t) = (name(prefix, n), owner(n));
            if module {
                load::command(buf, &[b"DLOCK.ACQUIRE", k.as_ref(), t.as_ref(), LONG_TTL]);
            } else {
                load::command(
                    buf,
                    &[b"SET", k.as_ref(), t.as_ref(), b"NX", b"PX", LONG_TTL],
                );
            }
        },
    );
    check(&out, "populate");
    assert_eq!(
        out.positive,
        keys.len() as u64,
        "populate: not every key was created"
    );
}

pub fn check(out: &Outcome, what: &str) {
    assert!(
        out.errors == 0,
        "{what}: {} error replies, first: {:?}",
        out.errors,
        out.first_error
    );
}

pub fn script_sha(server: &Server, script: &str) -> String {
    redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(script)
        .query(&mut server.conn())
        .expect("SCRIPT LOAD")
}

/// Runs `op` for `total` commands on a fresh server with `config`.
pub fn measure(config: &Config, op: Op, pipeline: usize, total: u64, sizes: &Sizes) -> Outcome {
    let server = config.server(op.module());
    let keys = sizes.keys;
    let sha = op
        .script()
        .map(|s| script_sha(&server, s))
        .unwrap_or_default();
    let sha = sha.as_bytes();
    let shape = |total| Shape {
        conns: sizes.clients,
        pipeline,
        total,
        latency: pipeline == 1,
    };
    let mut rng = Rng::new(0x5eed ^ pipeline as u64);
    if op.consumes() {
        // Every command hits: each round populates all keys, then deletes
        // each once, in shuffled order.
        let mut result = Outcome::default();
        let mut perm: Vec<u64> = (0..keys).collect();
        let mut left = total;
        while left > 0 {
            populate(&server, op.module(), b"lock:", 0, keys);
            rng.shuffle(&mut perm);
            let n = left.min(keys);
            let mut it = perm.iter().copied();
            let out = load::run(server.port(), shape(n), |_, buf| {
                let i = it.next().expect("permutation exhausted");
                let (k, t) = (name(b"lock:", i), owner(i));
                match op {
                    Op::ReleaseHit => {
                        load::command(buf, &[b"DLOCK.RELEASE", k.as_ref(), t.as_ref()])
                    }
                    Op::LuaReleaseHit => {
                        load::command(buf, &[b"EVALSHA", sha, b"1", k.as_ref(), t.as_ref()])
                    }
                    Op::DelHit => load::command(buf, &[b"DEL", k.as_ref()]),
                    _ => unreachable!(),
                }
            });
            check(&out, op.label());
            result.absorb(out);
            left -= n;
        }
        return result;
    }
    if op.populated() {
        populate(&server, op.module(), b"lock:", 0, keys);
    }
    // Lock cycles: per connection, a batch of acquisitions, then the batch
    // of their releases.
    let mut held: Vec<Vec<(u64, u64)>> = vec![vec![(0, 0); pipeline]; sizes.clients];
    let mut count = vec![0usize; sizes.clients];
    let total = if matches!(op, Op::CycleDlock | Op::CycleLua) {
        total.div_ceil(2 * pipeline as u64) * 2 * pipeline as u64
    } else {
        total
    };
    let out = load::run(server.port(), shape(total), |conn, buf| match op {
        Op::Acquire | Op::SetNx => {
            let k = name(b"lock:", rng.below(keys));
            let t = stranger(&mut rng);
            if op == Op::Acquire {
                load::command(buf, &[b"DLOCK.ACQUIRE", k.as_ref(), t.as_ref(), TTL]);
            } else {
                load::command(buf, &[b"SET", k.as_ref(), t.as_ref(), b"NX", b"PX", TTL]);
            }
        }
        Op::ReleaseMiss | Op::LuaReleaseMiss => {
            let k = name(b"lock:", rng.below(keys));
            let t = stranger(&mut rng);
            if op == Op::ReleaseMiss {
                load::command(buf, &[b"DLOCK.RELEASE", k.as_ref(), t.as_ref()]);
            } else {
                load::command(buf, &[b"EVALSHA", sha, b"1", k.as_ref(), t.as_ref()]);
            }
        }
        Op::ExtendHit | Op::LuaExtendHit => {
            let i = rng.below(keys);
            let (k, t) = (name(b"lock:", i), owner(i));
            if op == Op::ExtendHit {
                load::command(buf, &[b"DLOCK.EXTEND", k.as_ref(), t.as_ref(), TTL]);
            } else {
                load::command(buf, &[b"EVALSHA", sha, b"1", k.as_ref(), t.as_ref(), TTL]);
            }
        }
        Op::CycleDlock | Op::CycleLua => {
            let (acquiring, k, t) =
                cycle_step(&mut count[conn], &mut held[conn], pipeline, &mut rng, keys);
            match (op, acquiring) {
                (Op::CycleDlock, true) => {
                    load::command(buf, &[b"DLOCK.ACQUIRE", k.as_ref(), t.as_ref(), TTL])
                }
                (Op::CycleDlock, false) => {
                    load::command(buf, &[b"DLOCK.RELEASE", k.as_ref(), t.as_ref()])
                }
                (_, true) => {
                    load::command(buf, &[b"SET", k.as_ref(), t.as_ref(), b"NX", b"PX", TTL])
                }
                (_, false) => load::command(buf, &[b"EVALSHA", sha, b"1", k.as_ref(), t.as_ref()]),
            }
        }
        Op::ReleaseHit | Op::LuaReleaseHit | Op::DelHit => unreachable!(),
    });
    check(&out, op.label());
    out
}

/// `used_memory` growth per key for `count` locks or `SET NX PX` strings
/// with the same names and tokens, on a fresh server.
pub fn memory_per_key(config: &Config, module: bool, count: u64) -> f64 {
    let server = config.server(module);
    let mut c = server.conn();
    let before = used_memory(&mut c);
    populate(&server, module, b"lock:", 0, count);
    settle(&mut c);
    let after = used_memory(&mut c);
    (after as f64 - before as f64) / count as f64
}

fn used_memory(c: &mut redis::Connection) -> u64 {
    crate::info_u64(c, "memory", "used_memory")
}

/// Waits for a background AOF rewrite and the keyspace's incremental rehash
/// to finish, so that a measurement starts from a steady state. `hz` is
/// raised only while waiting (active rehashing runs once per cron tick).
pub fn settle(c: &mut redis::Connection) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("hz")
        .arg(500)
        .query(c)
        .expect("CONFIG SET hz");
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        let rewriting = crate::info_u64(c, "persistence", "aof_rewrite_in_progress") == 1
            || crate::info_u64(c, "persistence", "aof_rewrite_scheduled") == 1
            || crate::info_u64(c, "persistence", "rdb_bgsave_in_progress") == 1;
        let stats: String = redis::cmd("DEBUG")
            .arg("HTSTATS")
            .arg(0)
            .query(c)
            .unwrap_or_default();
        if (!rewriting && !stats.contains("rehashing target")) || Instant::now() > end {
            break;
        }
        // Not faster: on a big keyspace HTSTATS itself walks every bucket.
        std::thread::sleep(Duration::from_millis(1000));
    }
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("hz")
        .arg(10)
        .query(c)
        .expect("CONFIG SET hz");
}

pub fn set_config(c: &mut redis::Connection, name: &str, value: &str) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query(c)
        .unwrap_or_else(|e| panic!("CONFIG SET {name} {value}: {e}"));
}

/// redis-benchmark on the acquire pair, to cross-check the Rust driver:
/// returns ops/s and p50/p99 (its `--csv` has no p99.9).
pub fn redis_benchmark(
    config: &Config,
    module: bool,
    pipeline: usize,
    total: u64,
    sizes: &Sizes,
) -> Option<(f64, f64, f64)> {
    let server = config.server(module);
    let mut cmd = std::process::Command::new(crate::common::benchmark_binary());
    cmd.args(["-p", &server.port().to_string()])
        .args(["-c", &sizes.clients.to_string()])
        .args(["-P", &pipeline.to_string()])
        .args(["-n", &total.to_string()])
        .args(["-r", &sizes.keys.to_string()])
        .arg("--csv");
    if module {
        cmd.args([
            "DLOCK.ACQUIRE",
            "lock:__rand_int__",
            "tok:__rand_int__",
            "30000",
        ]);
    } else {
        cmd.args([
            "SET",
            "lock:__rand_int__",
            "tok:__rand_int__",
            "NX",
            "PX",
            "30000",
        ]);
    }
    let out = cmd.output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    // "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
    let row = text.lines().nth(1)?;
    let f: Vec<f64> = row
        .split("\",\"")
        .skip(1)
        .map(|v| v.trim_matches('"').parse().unwrap_or(f64::NAN))
        .collect();
    Some((*f.first()?, *f.get(3)?, *f.get(5)?))
}
