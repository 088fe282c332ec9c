//! `DLOCK.STATS`: the statistics (`notify::figures`), read, the hottest
//! resources, or reset. Reads no key and writes nothing.

use crate::server::edge::api::{now_us, Ctx};
use crate::server::edge::clients;
use crate::server::edge::ffi::Argv;
use crate::server::notify::figures;
use dlock_core::stats::args::{self, StatsCommand};
use dlock_core::stats::histogram::Summary;
use dlock_core::stats::hot::HotEntry;
use dlock_core::stats::{FiguresReport, Kind};
use dlock_core::Error;

pub fn stats(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    let words = argv.bytes();
    match args::parse(words.get(1..).unwrap_or_default())? {
        StatsCommand::Show => show(ctx),
        StatsCommand::Hot { by, count } => {
            let hot: Vec<HotEntry> =
                figures::with(|s| s.hot(by, count).into_iter().cloned().collect());
            ctx.reply_array(hot.len())?;
            for e in &hot {
                reply_hot(ctx, e)?;
            }
            Ok(())
        }
        StatsCommand::Reset => {
            // Reading the figures is `@read`; wiping them takes what the
            // server's own statistics take.
            if !clients::may_run(ctx, &[b"CONFIG", b"RESETSTAT"]) {
                return Err(Error::Refused(
                    b"NOPERM DLOCK.STATS RESET needs the permission to run CONFIG RESETSTAT"[..]
                        .into(),
                ));
            }
            figures::with(|s| s.reset(now_us() / 1000));
            ctx.reply_ok()
        }
    }
}

fn show(ctx: Ctx) -> Result<(), Error> {
    let (since, memory, total, kinds) = figures::with(|s| {
        let kinds = Kind::ALL.map(|k| (k, s.of(k).report()));
        (s.since_ms(), s.memory(), s.total().report(), kinds)
    });
    ctx.reply_map(4 + kinds.len())?;
    ctx.reply_bytes(b"since")?;
    ctx.reply_integer(i64::try_from(since).unwrap_or(i64::MAX))?;
    ctx.reply_bytes(b"enabled")?;
    ctx.reply_integer(i64::from(figures::enabled()))?;
    ctx.reply_bytes(b"memory")?;
    ctx.reply_integer(i64::try_from(memory).unwrap_or(i64::MAX))?;
    ctx.reply_bytes(b"total")?;
    reply_figures(ctx, &total)?;
    for (kind, report) in &kinds {
        ctx.reply_bytes(kind.name().as_bytes())?;
        reply_figures(ctx, report)?;
    }
    Ok(())
}

fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn reply_figures(ctx: Ctx, f: &FiguresReport) -> Result<(), Error> {
    ctx.reply_map(f.counters.len() + 2)?;
    for (name, value) in &f.counters {
        ctx.reply_bytes(name.as_bytes())?;
        ctx.reply_integer(int(*value))?;
    }
    ctx.reply_bytes(b"wait")?;
    reply_summary(ctx, &f.wait)?;
    ctx.reply_bytes(b"hold")?;
    reply_summary(ctx, &f.hold)
}

fn reply_summary(ctx: Ctx, s: &Summary) -> Result<(), Error> {
    ctx.reply_map(6)?;
    for (name, v) in [
        ("count", s.count),
        ("sum", s.sum),
        ("p50", s.p50),
        ("p90", s.p90),
        ("p99", s.p99),
        ("max", s.max),
    ] {
        ctx.reply_bytes(name.as_bytes())?;
        ctx.reply_integer(int(v))?;
    }
    Ok(())
}

fn reply_hot(ctx: Ctx, e: &HotEntry) -> Result<(), Error> {
    ctx.reply_map(9)?;
    ctx.reply_bytes(b"resource")?;
    if e.cut {
        let mut name = e.name.to_vec();
        name.extend_from_slice(b"...");
        ctx.reply_bytes(&name)?;
    } else {
        ctx.reply_bytes(&e.name)?;
    }
    ctx.reply_bytes(b"db")?;
    ctx.reply_integer(i64::from(e.db))?;
    let f = &e.figures;
    for (name, v) in [
        ("score", e.score),
        ("error", e.error),
        ("contended", f.contended),
        ("waited", f.waited),
        ("wait_timeouts", f.wait_timeouts),
        ("expired", f.expired),
    ] {
        ctx.reply_bytes(name.as_bytes())?;
        ctx.reply_integer(int(v))?;
    }
    ctx.reply_bytes(b"wait")?;
    reply_summary(ctx, &f.wait.summary())
}
