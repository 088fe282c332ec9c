//! `DLOCK.SESSION` and its subcommands (docs/commands/dlock.session.md):
//! parse (`dlock_core::request::session_args`), then the registry decides
//! and `execute::sessions` carries it out. No subcommand names a key.

use crate::server::commands::lock::refuse_on_replica;
use crate::server::edge::api::{now_us, Ctx};
use crate::server::edge::ffi::Argv;
use crate::server::execute::sessions as run;
use crate::server::sessions;
use crate::server::state;
use crate::server::waiting::blocking;
use dlock_core::request::{glob, session_args};
use dlock_core::sessions::{EndReason, Opened};
use dlock_core::Error;

/// A page of `LIST` examines at most this many ids per id it may return,
/// so a `MATCH` that matches little still costs a bounded page.
const EXAMINED_PER_ID: usize = 10;

pub fn open(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    let req = session_args::open(argv.bytes(), &state::limits())?;
    refuse_on_replica(ctx)?;
    let client = if req.bind {
        Some(client_id(ctx)?)
    } else {
        None
    };
    match run::open(ctx, req.id, req.settings, client)? {
        Opened::New { .. } => ctx.reply_integer(1),
        Opened::Renewed { .. } => ctx.reply_integer(0),
    }
}

/// The connection `BIND` ties a session to: only a real client's.
fn client_id(ctx: Ctx) -> Result<u64, Error> {
    let flags = ctx.flags()?;
    if flags.in_script() || flags.is_replicated() || flags.is_loading() {
        return Err(Error::BindNeedsClient);
    }
    let id = unsafe { redis_module::raw::RedisModule_GetClientId }
        .map_or(0, |id_of| unsafe { id_of(ctx.0) });
    if id == 0 {
        return Err(Error::BindNeedsClient);
    }
    Ok(id)
}

pub fn keep_alive(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    let (id, ttl) = session_args::keep_alive(argv.bytes(), &state::limits())?;
    refuse_on_replica(ctx)?;
    let left = run::keep_alive(ctx, id, ttl)?;
    ctx.reply_integer(i64::try_from(left).unwrap_or(i64::MAX))
}

pub fn close(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    end(ctx, argv, EndReason::Closed)
}

pub fn kill(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    end(ctx, argv, EndReason::Killed)
}

fn end(ctx: Ctx, argv: &Argv, reason: EndReason) -> Result<(), Error> {
    let id = session_args::id(argv.bytes())?;
    refuse_on_replica(ctx)?;
    let ended = run::end(ctx, id, reason)?;
    ctx.reply_integer(i64::from(ended))
}

pub fn info(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    let id = session_args::id(argv.bytes())?;
    let now_ms = now_us() / 1000;
    let Some((deadline, settings, bound, holds)) = sessions::with(|s| {
        s.get(id)
            .map(|s| (s.deadline_ms, s.settings, s.client.is_some(), s.holds()))
    }) else {
        return ctx.reply_null();
    };
    let waits = sessions::waits_of(id, blocking::is_queued);
    ctx.reply_map(8)?;
    ctx.reply_bytes(b"id")?;
    ctx.reply_bytes(id)?;
    ctx.reply_bytes(b"ttl")?;
    ctx.reply_integer(int(deadline.saturating_sub(now_ms)))?;
    ctx.reply_bytes(b"deadline")?;
    ctx.reply_integer(int(deadline))?;
    ctx.reply_bytes(b"session-ttl")?;
    ctx.reply_integer(int(settings.ttl_ms))?;
    ctx.reply_bytes(b"lock-delay")?;
    ctx.reply_integer(int(settings.lock_delay_ms))?;
    ctx.reply_bytes(b"bound")?;
    ctx.reply_integer(i64::from(bound))?;
    ctx.reply_bytes(b"holds")?;
    ctx.reply_integer(int(holds as u64))?;
    ctx.reply_bytes(b"waits")?;
    ctx.reply_integer(int(waits as u64))
}

fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

pub fn list(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    let req = session_args::list(argv.bytes())?;
    let pattern = req.pattern.map(glob::Pattern::new).transpose()?;
    let examine = req.count.saturating_mul(EXAMINED_PER_ID);
    let (ids, next) = sessions::with(|s| {
        s.page(req.after, req.count, examine, |id| {
            pattern.as_ref().is_none_or(|p| p.matches(id))
        })
    });
    ctx.reply_array(2)?;
    match &next {
        Some(n) => ctx.reply_bytes(n)?,
        None => ctx.reply_null()?,
    }
    ctx.reply_array(ids.len())?;
    for id in &ids {
        ctx.reply_bytes(id)?;
    }
    Ok(())
}

pub fn holds(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    let req = session_args::holds(argv.bytes())?;
    let page = sessions::with(|s| {
        s.holds_page(req.id, req.after, req.count)
            .map(|(places, next)| {
                let places: Vec<_> = places.into_iter().cloned().collect();
                (places, next)
            })
    });
    let Some((places, next)) = page else {
        return ctx.reply_null();
    };
    ctx.reply_array(2)?;
    match next {
        Some(n) => ctx.reply_integer(int(n))?,
        None => ctx.reply_null()?,
    }
    ctx.reply_array(places.len() * 3)?;
    for p in &places {
        ctx.reply_integer(i64::from(p.db))?;
        ctx.reply_bytes(&p.key)?;
        ctx.reply_bytes(&p.token)?;
    }
    Ok(())
}

/// What `HELP` lists, a line each.
const HELP: &[&str] = &[
    "DLOCK.SESSION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "OPEN <id> <ttl_ms> [BIND] [LOCKDELAY <ms>]",
    "    Open a session, or keep a live one alive with these settings. 1 if new, else 0.",
    "KEEPALIVE <id> [<ttl_ms>]",
    "    Keep a session alive; returns the ms it has left.",
    "CLOSE <id>",
    "    End a session; its holds are released (no lock-delay). 1 if it existed.",
    "KILL <id>",
    "    End a session as an operator; its holds are released after its lock-delay.",
    "INFO <id>",
    "    A session's ttl, deadline, settings and numbers of holds and waits, or nil.",
    "LIST [AFTER <id>] [MATCH <pattern>] [COUNT <n>]",
    "    A page of the ids of live sessions, and the id to continue after.",
    "HOLDS <id> [AFTER <cursor>] [COUNT <n>]",
    "    A page of a session's holds (db, resource, token), and the cursor to continue after.",
    "HELP",
    "    This text.",
];

pub fn help(ctx: Ctx, argv: &Argv) -> Result<(), Error> {
    if argv.bytes().len() != 2 {
        return Err(Error::WrongArity);
    }
    ctx.reply_array(HELP.len())?;
    for line in HELP {
        ctx.reply_bytes(line.as_bytes())?;
    }
    Ok(())
}
