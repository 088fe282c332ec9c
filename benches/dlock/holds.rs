//! Read locks and semaphores: `DLOCK.ACQUIRE ... SHARED` and
//! `DLOCK.ACQUIRE ... LIMIT n`, each acquired and released in lock cycles,
//! against what clients run on plain Redis (the Lua scripts of
//! holds_lua.rs: a read lock in Redisson's layout, an expirable semaphore
//! on a sorted set).
//!
//! The workload is the one of the throughput table's lock cycle: per
//! connection, a batch of `pipeline` acquisitions of random resources with
//! fresh tokens, then the batch of their releases; both sides send the same
//! sequence of resources and tokens, each run on a fresh server (plain
//! Redis without the module for the Lua side).
//!
//! A build without read locks and semaphores answers `ERR syntax error` to
//! `SHARED` and `LIMIT`: the dlock side of that row is then skipped (the Lua
//! side still runs), so the section runs on such a build too.

use std::time::Instant;

use crate::cases::{self, Config, Sizes, TTL};
use crate::holds_lua::{self, timeout_prefix, READ_ACQUIRE, READ_RELEASE, SEM_ACQUIRE};
use crate::load::{self, Outcome, Rng, Shape};
use crate::paired::{self, Runs};
use crate::throughput::wanted;
use crate::{progress, Goal, Verdict};

/// Permits of the semaphore rows (`LIMIT 4`).
const PERMITS: &[u8] = b"4";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Shared,
    Limit,
}

impl Kind {
    fn title(self) -> &'static str {
        match self {
            Kind::Shared => "SHARED acquire + release vs Lua read lock (Redisson)",
            Kind::Limit => "LIMIT 4 acquire + release vs Lua zset semaphore",
        }
    }
    fn side(self, dlock: bool) -> &'static str {
        match (self, dlock) {
            (Kind::Shared, true) => "`DLOCK.ACQUIRE ... SHARED` + `DLOCK.RELEASE` cycle",
            (Kind::Shared, false) => "Lua read lock + unlock cycle",
            (Kind::Limit, true) => "`DLOCK.ACQUIRE ... LIMIT 4` + `DLOCK.RELEASE` cycle",
            (Kind::Limit, false) => "Lua semaphore acquire + `ZREM` cycle",
        }
    }
    /// The option as `DLOCK.ACQUIRE` takes it.
    fn option(self) -> &'static [&'static [u8]] {
        match self {
            Kind::Shared => &[b"SHARED"],
            Kind::Limit => &[b"LIMIT", PERMITS],
        }
    }
}

/// Whether this build's `DLOCK.ACQUIRE` takes `kind`'s option: `Err` with
/// the reason to print when it does not.
fn supported(config: &Config, kind: Kind) -> Result<(), String> {
    let server = config.server(true);
    let mut c = server.conn();
    let mut acquire = redis::cmd("DLOCK.ACQUIRE");
    acquire.arg("probe").arg("tok").arg(TTL);
    for a in kind.option() {
        acquire.arg(*a);
    }
    let shown = kind
        .option()
        .iter()
        .map(|a| String::from_utf8_lossy(a))
        .collect::<Vec<_>>()
        .join(" ");
    match acquire.query::<redis::Value>(&mut c) {
        Ok(redis::Value::Int(f)) if f > 0 => {}
        Ok(other) => {
            return Err(format!(
                "`DLOCK.ACQUIRE probe tok 30000 {shown}` answered {other:?}"
            ))
        }
        Err(e) if e.to_string().contains("syntax error") => {
            return Err(format!(
                "this build answers `ERR syntax error` to `DLOCK.ACQUIRE ... {shown}` (it has no \
                 read locks or semaphores)"
            ))
        }
        Err(e) => return Err(format!("`DLOCK.ACQUIRE ... {shown}` failed: {e}")),
    }
    match redis::cmd("DLOCK.RELEASE")
        .arg("probe")
        .arg("tok")
        .query(&mut c)
    {
        Ok(1) => Ok(()),
        other => Err(format!(
            "`DLOCK.RELEASE` of a {shown} hold answered {other:?}"
        )),
    }
}

/// Lock cycles of `kind` on one side, on a fresh server.
fn measure(
    config: &Config,
    kind: Kind,
    dlock: bool,
    pipeline: usize,
    total: u64,
    sizes: &Sizes,
) -> Outcome {
    let server = config.server(dlock);
    let (acq, rel) = match (dlock, kind) {
        (true, _) => (String::new(), String::new()),
        (false, Kind::Shared) => (
            cases::script_sha(&server, READ_ACQUIRE),
            cases::script_sha(&server, READ_RELEASE),
        ),
        (false, Kind::Limit) => (cases::script_sha(&server, SEM_ACQUIRE), String::new()),
    };
    let (acq, rel) = (acq.as_bytes(), rel.as_bytes());
    let keys = sizes.keys;
    // The same seed on both sides: the same resources and tokens.
    let mut rng = Rng::new(0x401d ^ pipeline as u64);
    let mut held: Vec<Vec<(u64, u64)>> = vec![vec![(0, 0); pipeline]; sizes.clients];
    let mut count = vec![0usize; sizes.clients];
    let total = total.div_ceil(2 * pipeline as u64) * 2 * pipeline as u64;
    let shape = Shape {
        conns: sizes.clients,
        pipeline,
        total,
        latency: false,
    };
    let (mut prefix, mut write_field, mut all) = (Vec::new(), Vec::new(), Vec::new());
    let out = load::run(server.port(), shape, |conn, buf| {
        let (acquiring, k, t) =
            cases::cycle_step(&mut count[conn], &mut held[conn], pipeline, &mut rng, keys);
        let (k, t) = (k.as_ref(), t.as_ref());
        match (dlock, kind, acquiring) {
            (true, _, true) => {
                let mut args: Vec<&[u8]> = vec![b"DLOCK.ACQUIRE", k, t, TTL];
                args.extend_from_slice(kind.option());
                load::command(buf, &args)
            }
            (true, _, false) => load::command(buf, &[b"DLOCK.RELEASE", k, t]),
            (false, Kind::Shared, true) => {
                timeout_prefix(&mut prefix, k, t);
                write_field.clear();
                write_field.extend_from_slice(t);
                write_field.extend_from_slice(b":write");
                load::command(
                    buf,
                    &[b"EVALSHA", acq, b"2", k, &prefix, TTL, t, &write_field],
                )
            }
            (false, Kind::Shared, false) => {
                timeout_prefix(&mut prefix, k, t);
                all.clear();
                all.push(b'{');
                all.extend_from_slice(k);
                all.push(b'}');
                load::command(buf, &[b"EVALSHA", rel, b"3", k, &prefix, &all, t])
            }
            (false, Kind::Limit, true) => {
                load::command(buf, &[b"EVALSHA", acq, b"1", k, TTL, t, PERMITS])
            }
            (false, Kind::Limit, false) => load::command(buf, &[b"ZREM", k, t]),
        }
    });
    cases::check(&out, kind.side(dlock));
    out
}

/// The section: a table of the SHARED and LIMIT rows at pipeline 1 and 16.
pub fn run(config: &Config, sizes: &Sizes, verdicts: &mut Vec<Verdict>) {
    let kinds: Vec<Kind> = [Kind::Shared, Kind::Limit]
        .into_iter()
        .filter(|k| wanted(k.title()))
        .collect();
    if kinds.is_empty() {
        return;
    }
    let t = Instant::now();
    holds_lua::self_check(&config.server(false));
    let support: Vec<Result<(), String>> = kinds.iter().map(|&k| supported(config, k)).collect();
    let mut rows = Vec::new();
    for (&kind, ok) in kinds.iter().zip(&support) {
        for pipeline in [1usize, 16] {
            let total = if pipeline == 1 {
                sizes.ops_p1
            } else {
                sizes.ops_p16
            };
            let runs = paired::alternate(sizes.repeat, ok.is_ok(), |dlock, rep| {
                let t = Instant::now();
                let out = measure(config, kind, dlock, pipeline, total, sizes);
                progress(
                    &format!(
                        "{}: {} -P {pipeline} (run {}): {:.0} ops/s",
                        config.short,
                        kind.side(dlock),
                        rep,
                        out.ops_per_sec()
                    ),
                    t.elapsed(),
                );
                out
            });
            rows.push((kind, pipeline, runs));
        }
    }
    progress(&format!("{}: holds", config.short), t.elapsed());
    print(config, sizes, &kinds, &support, &rows, verdicts);
}

fn print(
    config: &Config,
    sizes: &Sizes,
    kinds: &[Kind],
    support: &[Result<(), String>],
    rows: &[(Kind, usize, Runs)],
    verdicts: &mut Vec<Verdict>,
) {
    println!("### Read locks and semaphores\n");
    println!(
        "Lock cycles (a batch of `pipeline` acquisitions of random resources out of {} with \
         fresh tokens, then the batch of their releases, per connection; a cycle counts as one \
         op), the same sequence on both sides, each run on a fresh server. Baselines: a read \
         lock in Redisson's layout (a hash of holders with reentrancy counts plus one timeout \
         key per hold; `EVALSHA` to acquire, `EVALSHA` to release) and an expirable semaphore \
         (a sorted set of permits scored by expiry; `EVALSHA` of `ZREMRANGEBYSCORE` + `ZCARD` + \
         `ZADD` to acquire, `ZREM` to release); the scripts are in \
         `benches/dlock/holds_lua.rs` and passed their self-check on this server. Each side ran \
         {} times, alternating; ops/s is the median run, the ratio the median of the pairs.\n",
        sizes.keys, sizes.repeat
    );
    paired::header("dlock", "Lua");
    for (kind, pipeline, runs) in rows {
        let goal = Goal::AtLeast(2.0);
        paired::row(
            config.short,
            kind.title(),
            *pipeline,
            2.0,
            goal,
            runs,
            verdicts,
        );
    }
    println!();
    for (kind, ok) in kinds.iter().zip(support) {
        if let Err(why) = ok {
            println!("- {}: dlock side skipped: {why}.", kind.title());
        }
    }
    if support.iter().any(Result::is_err) {
        println!();
    }
}
