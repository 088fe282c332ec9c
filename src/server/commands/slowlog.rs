//! `DLOCK.SLOWLOG GET [count] | LEN | RESET`: the slow-lock log
//! (`notify::slowlog`), read or emptied. Reads no key and writes nothing.

use crate::server::edge::api::Ctx;
use crate::server::edge::clients;
use crate::server::edge::ffi::Argv;
use crate::server::notify::slowlog;
use dlock_core::stats::args::{self, SlowlogCommand};
use dlock_core::stats::slowlog::Entry;
use dlock_core::Error;

pub fn slowlog(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    let words = argv.bytes();
    match args::parse_slowlog(words.get(1..).unwrap_or_default())? {
        SlowlogCommand::Get(count) => {
            let entries: Vec<Entry> = slowlog::with(|l| l.newest(count).cloned().collect());
            ctx.reply_array(entries.len())?;
            for e in &entries {
                reply_entry(ctx, e)?;
            }
            Ok(())
        }
        SlowlogCommand::Len => ctx.reply_integer(slowlog::with(|l| l.len()) as i64),
        SlowlogCommand::Reset => {
            if !clients::may_run(ctx, &[b"SLOWLOG", b"RESET"]) {
                return Err(Error::Refused(
                    b"NOPERM DLOCK.SLOWLOG RESET needs the permission to run SLOWLOG RESET"[..]
                        .into(),
                ));
            }
            slowlog::with(|l| l.reset());
            ctx.reply_ok()
        }
    }
}

fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn reply_entry(ctx: Ctx, e: &Entry) -> Result<(), Error> {
    let optional = [
        ("owner", e.owner.as_deref()),
        ("session", e.session.as_deref()),
        ("client_addr", e.client_addr.as_deref().map(str::as_bytes)),
        ("client_name", e.client_name.as_deref().map(str::as_bytes)),
    ];
    let present = optional.iter().filter(|(_, v)| v.is_some()).count();
    ctx.reply_map(8 + present)?;
    ctx.reply_bytes(b"id")?;
    ctx.reply_integer(int(e.id))?;
    ctx.reply_bytes(b"time")?;
    ctx.reply_integer(int(e.at_ms))?;
    ctx.reply_bytes(b"type")?;
    ctx.reply_bytes(e.slow.name().as_bytes())?;
    ctx.reply_bytes(b"duration")?;
    ctx.reply_integer(int(e.micros))?;
    ctx.reply_bytes(b"ended")?;
    ctx.reply_bytes(e.ended.name().as_bytes())?;
    ctx.reply_bytes(b"resource")?;
    ctx.reply_bytes(&e.resource)?;
    ctx.reply_bytes(b"db")?;
    ctx.reply_integer(i64::from(e.db))?;
    ctx.reply_bytes(b"token")?;
    ctx.reply_bytes(&e.token)?;
    for (name, value) in optional {
        if let Some(v) = value {
            ctx.reply_bytes(name.as_bytes())?;
            ctx.reply_bytes(v)?;
        }
    }
    Ok(())
}
