//! The holds part of the `scale-kinds` section (scale_kinds.rs defines what
//! each operation is): one resource with N permits or N shared holds,
//! filled one hold at a time, then ACQUIRE + RELEASE pairs and EXTENDs of
//! one hold on it; fill rate against plain locks, memory per hold against a
//! sorted-set member.

use std::time::Instant;

use crate::cases::{self, name, owner, Config};
use crate::common::Server;
use crate::load::{self, Rng};
use crate::scale_kinds::{
    chunked, cmdstat, fill, median, num, order, per_call, vs, Fill, Goals, Settings,
};
use crate::{info_u64, progress, Goal};

const LIMIT: &[u8] = b"100000";
const LIMIT_N: u64 = 100_000;
/// Lease of the filled holds and of the waiters: nothing expires in a run.
pub const HOUR: &[u8] = b"3600000";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Limit,
    Shared,
}

impl Kind {
    fn option(self) -> &'static [&'static [u8]] {
        match self {
            Kind::Limit => &[b"LIMIT", LIMIT],
            Kind::Shared => &[b"SHARED"],
        }
    }
    fn label(self) -> &'static str {
        match self {
            Kind::Limit => "`LIMIT 100000` permits",
            Kind::Shared => "`SHARED` holds",
        }
    }
}

/// One resource of `n` holds on a server of its own, and its runs.
struct Loaded {
    kind: Kind,
    n: u64,
    server: Server,
    fill: Fill,
    /// The same number of plain locks on distinct resources, filled just
    /// before on a fresh server.
    plain: Fill,
    bytes_per_hold: f64,
    rng: Rng,
    fresh: u64,
    chunks: [u64; 2],
    pairs: Vec<f64>,
    extends: Vec<f64>,
    /// Server µs per call: ACQUIRE, RELEASE, EXTEND, one entry per run.
    us: [Vec<f64>; 3],
    negative: u64,
    error: Option<String>,
}

fn acquire(buf: &mut Vec<u8>, kind: Kind, token: &[u8], ttl: &[u8]) {
    let mut args: Vec<&[u8]> = vec![b"DLOCK.ACQUIRE", b"sem", token, ttl];
    args.extend_from_slice(kind.option());
    load::command(buf, &args);
}

impl Loaded {
    fn new(config: &Config, kind: Kind, n: u64, budget: f64) -> Loaded {
        let plain = {
            let server = config.server(true);
            let mut next = 0u64;
            fill(server.port(), n, budget, |_, buf| {
                let (k, t) = (name(b"lock:", next), owner(next));
                next += 1;
                load::command(buf, &[b"DLOCK.ACQUIRE", k.as_ref(), t.as_ref(), HOUR]);
            })
        };
        let server = config.server(true);
        let mut c = server.conn();
        let before = info_u64(&mut c, "memory", "used_memory");
        let mut next = 0u64;
        let f = fill(server.port(), n, budget, |_, buf| {
            let t = owner(next);
            next += 1;
            acquire(buf, kind, t.as_ref(), HOUR);
        });
        let bytes_per_hold = if f.complete {
            cases::settle(&mut c);
            let after = info_u64(&mut c, "memory", "used_memory");
            (after as f64 - before as f64) / n as f64
        } else {
            f64::NAN
        };
        if kind == Kind::Limit && f.complete {
            // A full semaphore answers every newcomer nil: the last permits
            // filled go (untimed), so that each connection's ACQUIRE of a
            // pair finds one free and the resource still holds about `n`.
            let room = (n + crate::scale_kinds::CONNS as u64).saturating_sub(LIMIT_N);
            for i in n.saturating_sub(room)..n {
                let t = owner(i);
                let _: i64 = redis::cmd("DLOCK.RELEASE")
                    .arg("sem")
                    .arg(t.as_ref())
                    .query(&mut c)
                    .unwrap_or(0);
            }
        }
        Loaded {
            kind,
            n,
            server,
            fill: f,
            plain,
            bytes_per_hold,
            rng: Rng::new(0x5ca1e ^ n),
            fresh: 0,
            chunks: [0, 0],
            pairs: Vec::new(),
            extends: Vec::new(),
            us: Default::default(),
            negative: 0,
            error: None,
        }
    }

    /// One run of pairs, then one of EXTENDs.
    fn run(&mut self, set: &Settings) {
        let mut c = self.server.conn();
        let names = ["dlock.acquire", "dlock.release", "dlock.extend"];
        let before: Vec<(u64, u64)> = names.iter().map(|n| cmdstat(&mut c, n)).collect();
        let (kind, port) = (self.kind, self.server.port());
        let mut held = [0u64; crate::scale_kinds::CONNS];
        let mut count = [0usize; crate::scale_kinds::CONNS];
        let fresh = &mut self.fresh;
        let (pairs, _) = chunked(
            port,
            set.run_ops,
            set.run_secs,
            2,
            &mut self.chunks[0],
            |conn, buf| {
                if count[conn].is_multiple_of(2) {
                    *fresh += 1;
                    held[conn] = *fresh;
                    acquire(buf, kind, name(b"new:", *fresh).as_ref(), cases::TTL);
                } else {
                    let t = name(b"new:", held[conn]);
                    load::command(buf, &[b"DLOCK.RELEASE", b"sem", t.as_ref()]);
                }
                count[conn] += 1;
            },
        );
        let (rng, n) = (&mut self.rng, self.n);
        let (extends, _) = chunked(
            port,
            set.run_ops,
            set.run_secs,
            1,
            &mut self.chunks[1],
            |_, buf| {
                let t = owner(rng.below(n));
                load::command(buf, &[b"DLOCK.EXTEND", b"sem", t.as_ref(), HOUR]);
            },
        );
        let after: Vec<(u64, u64)> = names.iter().map(|n| cmdstat(&mut c, n)).collect();
        for (i, us) in self.us.iter_mut().enumerate() {
            us.push(per_call(before[i], after[i]));
        }
        for o in [&pairs, &extends] {
            self.negative += o.negative;
            if self.error.is_none() {
                self.error.clone_from(&o.first_error);
            }
        }
        self.pairs.push(pairs.ops_per_sec());
        self.extends.push(extends.ops_per_sec());
    }
}

/// `used_memory` growth per member of `ZADD zsem <deadline ms> tok:<n>`
/// for n < `count`, on a fresh server without the module.
fn zset_bytes(config: &Config, count: u64, budget: f64) -> f64 {
    let server = config.server(false);
    let mut c = server.conn();
    let before = info_u64(&mut c, "memory", "used_memory");
    let deadline = crate::common::now_ms() as u64 + 3_600_000;
    let mut next = 0u64;
    let f = fill(server.port(), count, budget, |_, buf| {
        let score = (deadline + next).to_string();
        let t = owner(next);
        next += 1;
        load::command(buf, &[b"ZADD", b"zsem", score.as_bytes(), t.as_ref()]);
    });
    if !f.complete {
        return f64::NAN;
    }
    cases::settle(&mut c);
    (info_u64(&mut c, "memory", "used_memory") as f64 - before as f64) / count as f64
}

pub fn run(config: &Config, set: &Settings, goals: &mut Goals) {
    let mut loaded: Vec<Loaded> = Vec::new();
    for kind in [Kind::Limit, Kind::Shared] {
        for &n in &set.sizes {
            let t = Instant::now();
            let l = Loaded::new(config, kind, n, set.budget_secs);
            progress(
                &format!(
                    "{}: scale-kinds {n} {} filled: {} of {n} at {:.0}/s (plain locks {:.0}/s)",
                    config.short,
                    kind.label(),
                    l.fill.done,
                    l.fill.rate(),
                    l.plain.rate()
                ),
                t.elapsed(),
            );
            loaded.push(l);
        }
    }
    let zset: Vec<f64> = set
        .sizes
        .iter()
        .map(|&n| zset_bytes(config, n, set.budget_secs))
        .collect();
    for rep in 0..set.repeat {
        for i in order(loaded.len(), rep) {
            let l = &mut loaded[i];
            if !l.fill.complete {
                continue;
            }
            let t = Instant::now();
            l.run(set);
            progress(
                &format!(
                    "{}: scale-kinds {} {} (run {}): pairs {:.0}, extend {:.0} cmds/s",
                    config.short,
                    l.n,
                    l.kind.label(),
                    rep + 1,
                    l.pairs.last().copied().unwrap_or(0.0),
                    l.extends.last().copied().unwrap_or(0.0)
                ),
                t.elapsed(),
            );
        }
    }
    report(set, &loaded, &zset, goals);
}

fn report(set: &Settings, loaded: &[Loaded], zset: &[f64], goals: &mut Goals) {
    println!("#### Permits and shared holds on one resource\n");
    println!(
        "| holds | acquire + release cmds/s | vs first | extend cmds/s | vs first | server µs/call \
         ACQUIRE / RELEASE / EXTEND | answered nil or 0 |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for kind in [Kind::Limit, Kind::Shared] {
        let rows: Vec<&Loaded> = loaded.iter().filter(|l| l.kind == kind).collect();
        let first = rows.first();
        for l in &rows {
            let (p, e) = (median(&l.pairs), median(&l.extends));
            let (p0, e0) = first.map_or((f64::NAN, f64::NAN), |f| {
                (median(&f.pairs), median(&f.extends))
            });
            let us: Vec<String> = l.us.iter().map(|v| num(median(v), 2)).collect();
            let cell = match (&l.error, l.fill.complete) {
                (_, false) => "not measured".to_string(),
                (Some(e), _) => format!("{} (error: {e})", l.negative),
                (None, _) => l.negative.to_string(),
            };
            println!(
                "| {} {} | {} | {} | {} | {} | {} | {cell} |",
                l.n,
                kind.label(),
                num(p, 0),
                vs(p, p0),
                num(e, 0),
                vs(e, e0),
                us.join(" / "),
            );
        }
    }
    println!();
    println!(
        "| holds | fill s | holds/s | plain ACQUIRE locks/s | fill / plain | bytes/hold | `ZADD` \
         bytes/member | bytes ratio |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for l in loaded {
        let z = set
            .sizes
            .iter()
            .position(|&n| n == l.n)
            .map_or(f64::NAN, |i| zset[i]);
        println!(
            "| {} {} | {} | {:.0} | {:.0} | {:.2}x | {} | {} | {} |",
            l.n,
            l.kind.label(),
            l.fill.cell(),
            l.fill.rate(),
            l.plain.rate(),
            l.fill.rate() / l.plain.rate().max(1e-9),
            num(l.bytes_per_hold, 1),
            num(z, 1),
            vs(l.bytes_per_hold, z),
        );
    }
    println!();
    let (Some(&lo), Some(&hi)) = (set.sizes.first(), set.sizes.last()) else {
        return;
    };
    let zset_hi = zset.last().copied().unwrap_or(f64::NAN);
    for kind in [Kind::Limit, Kind::Shared] {
        let at = |n: u64| loaded.iter().find(|l| l.kind == kind && l.n == n);
        let (Some(a), Some(b)) = (at(lo), at(hi)) else {
            continue;
        };
        let measured = |l: &Loaded| -> Result<(), String> {
            if let Some(why) = l.fill.shortfall(set.budget_secs) {
                return Err(format!("{} holds: {why}", l.n));
            }
            match &l.error {
                Some(e) => Err(format!("{} holds: error reply {e}", l.n)),
                None => Ok(()),
            }
        };
        let ratio = |f: &dyn Fn(&Loaded) -> f64| -> Result<f64, String> {
            measured(a)?;
            measured(b)?;
            Ok(f(b) / f(a))
        };
        let us = |l: &Loaded, i: usize| num(median(&l.us[i]), 2);
        goals.judge(
            format!(
                "{}: ACQUIRE + RELEASE of one, {hi} vs {lo} held",
                kind.label()
            ),
            Goal::AtLeast(0.7),
            ratio(&|l| median(&l.pairs)),
            &format!(
                " (server µs/call ACQUIRE {} -> {}, RELEASE {} -> {})",
                us(a, 0),
                us(b, 0),
                us(a, 1),
                us(b, 1)
            ),
        );
        goals.judge(
            format!("{}: EXTEND of one, {hi} vs {lo} held", kind.label()),
            Goal::AtLeast(0.7),
            ratio(&|l| median(&l.extends)),
            &format!(" (server µs/call {} -> {})", us(a, 2), us(b, 2)),
        );
        if kind == Kind::Limit {
            let fill_ratio = match (b.fill.shortfall(set.budget_secs), &b.plain) {
                (Some(why), _) => Err(why),
                (None, p) if !p.complete => Err(format!("plain fill: {:?}", p.error)),
                (None, p) => Ok(b.fill.rate() / p.rate()),
            };
            goals.judge(
                format!(
                    "{}: fill of {hi}, one at a time vs plain ACQUIREs",
                    kind.label()
                ),
                Goal::AtLeast(0.5),
                fill_ratio,
                &format!(
                    " ({:.0} vs {:.0} per second)",
                    b.fill.rate(),
                    b.plain.rate()
                ),
            );
        }
        let memory = match b.fill.shortfall(set.budget_secs) {
            Some(why) => Err(why),
            None if zset_hi.is_nan() => Err("the sorted set was not filled".into()),
            None => Ok(b.bytes_per_hold / zset_hi),
        };
        goals.judge(
            format!("{}: memory per hold, {hi} vs a `ZADD` member", kind.label()),
            Goal::AtMost(1.5),
            memory,
            &format!(
                " ({} vs {} bytes)",
                num(b.bytes_per_hold, 1),
                num(zset_hi, 1)
            ),
        );
    }
    println!();
}
