//! Running a guard's inner commands for its caller. Everything that can
//! be checked is checked before any runs (the command table's facts, the
//! rules' refusals, the keys' slots, no lock key written, what a batch must
//! copy to undo); then the commands run as the caller (its ACL, script
//! rules, `maxmemory`), replicated as their effects; a batch whose command
//! fails undoes the commands before it.

mod keys;
mod table;
mod undo;

use std::ffi::{c_int, CString};
use std::ops::Range;
use std::sync::atomic::{AtomicU8, Ordering};

use redis_module::raw;

use crate::server::edge::api::Ctx;
use crate::server::edge::call::{call_argv, NotRun, Reply};
use crate::server::edge::ffi::Argv;
use crate::server::notify::stats;
use dlock_core::guard::args::Guard;
use dlock_core::guard::inner::{flag, refusal, saves_keys, Saved};
use dlock_core::rules::cluster::key_slot;
use dlock_core::Error;
use undo::Undo;

/// One inner command, ready to run.
struct Inner<'a> {
    name: CString,
    /// Its arguments after the name.
    args: &'a [*mut raw::RedisModuleString],
}

/// A guard's commands, checked, with what undoing a batch needs.
pub struct Prepared<'a> {
    commands: Vec<Inner<'a>>,
    undo: Undo<'a>,
    batch: bool,
}

/// Checks every inner command of `req` before any runs.
pub fn prepare<'a>(ctx: Ctx, argv: &'a Argv<'a>, req: &Guard<'_>) -> Result<Prepared<'a>, Error> {
    let bytes = argv.bytes();
    let resource_slot = if ctx.flags()?.is_cluster() {
        Some(key_slot(bytes.get(1).copied().unwrap_or_default()))
    } else {
        None
    };
    let count = req.commands.len();
    let mut saved = Saved::default();
    let mut prepared = Prepared {
        commands: Vec::with_capacity(count),
        undo: Undo::default(),
        batch: req.batch,
    };
    for (i, range) in req.commands.iter().enumerate() {
        let args = bytes.get(range.clone()).ok_or(Error::WrongArity)?;
        let raw_args = argv.raw_range(range.clone())?;
        let name = args.first().copied().unwrap_or_default();
        let refused = |why: &'static str| Error::GuardRefused {
            index: i + 1,
            command: name.into(),
            why,
        };
        let facts = table::facts(ctx, args)?;
        let found = match facts {
            Some(_) => keys::positions(ctx, raw_args),
            None => Vec::new(),
        };
        if let Some(why) = refusal(args, facts.as_ref(), found.len(), req.batch) {
            return Err(refused(why));
        }
        let Some(facts) = facts else {
            return Err(refused("is not a command this server knows"));
        };
        let saves = saves_keys(req.batch, i, count, &facts);
        for (pos, _) in &found {
            let (Some(key), Some(key_name)) = (args.get(*pos), raw_args.get(*pos)) else {
                continue;
            };
            if resource_slot.is_some_and(|slot| slot != key_slot(key)) {
                return Err(Error::GuardCrossSlot { index: i + 1 });
            }
            if !facts.has(flag::WRITE) {
                continue;
            }
            let seen = keys::look(ctx, *key_name)?;
            if seen.is_lock {
                return Err(refused("writes to a dlock lock's key"));
            }
            if saves && !prepared.undo.has(key) {
                let size = match seen.exists {
                    true => Some(seen.size(ctx, key)?),
                    false => None,
                };
                if !saved.admit(size) {
                    return Err(Error::GuardTooBig { index: i + 1 });
                }
                prepared
                    .undo
                    .note(*key_name, key, i, seen.exists, seen.expire_at_ms);
            }
        }
        let name = CString::new(name).map_err(|_| refused("is not a command this server knows"))?;
        prepared.commands.push(Inner {
            name,
            args: raw_args.get(1..).unwrap_or(&[]),
        });
    }
    Ok(prepared)
}

/// Runs the prepared commands and replies: the one command's reply, or a
/// batch's array; a batch whose command fails is undone and answers that
/// command's error.
pub fn run(ctx: Ctx, mut prepared: Prepared<'_>) -> Result<(), Error> {
    if prepared.batch {
        prepared.undo.copy(ctx)?;
    }
    let count = prepared.commands.len();
    let fmt = call_format(ctx)?;
    let mut replies: Vec<Reply> = Vec::with_capacity(count);
    for (i, inner) in prepared.commands.iter().enumerate() {
        let outcome = call_argv(ctx, &inner.name, fmt, inner.args)?;
        let failed: Option<Box<[u8]>> = match &outcome {
            Ok(reply) if reply.part().is_error() => Some(reply.part().bytes().into()),
            Ok(_) => None,
            Err(not_run) => Some(not_run_text(*not_run).into()),
        };
        match (failed, outcome) {
            (None, Ok(reply)) => replies.push(reply),
            (Some(text), outcome) => {
                let text = with_acl_code(text);
                if !prepared.batch {
                    return match outcome {
                        Ok(reply) if !text.starts_with(NOPERM) => reply.forward(ctx),
                        _ => Err(Error::Refused(text)),
                    };
                }
                prepared.undo.undo(ctx, i)?;
                stats::GUARD_BATCHES_UNDONE.add();
                return Err(Error::GuardFailed {
                    index: i + 1,
                    count,
                    text,
                });
            }
            (None, Err(_)) => return Err(Error::Internal("call without a reply")),
        }
    }
    if prepared.batch {
        ctx.reply_array(replies.len())?;
    }
    replies.iter().try_for_each(|r| r.forward(ctx))
}

/// The calls' format: replicated (`!`), as the calling user (`C`), with a
/// script's rules (`S`: no commands scripts may not run, writes refused
/// when replicas or persistence fail) and `maxmemory`'s (`M`), replying in
/// the caller's protocol (`0`) with refusals as error replies (`E`), each
/// where the server has it: asked once.
fn call_format(ctx: Ctx) -> Result<&'static std::ffi::CStr, Error> {
    const FORMATS: [&std::ffi::CStr; 3] = [c"!CSM0Ev", c"!CSM0v", c"!CSMv"];
    const PROBES: [&std::ffi::CStr; 3] = [c"0Ev", c"0v", c"v"];
    static CHOSEN: AtomicU8 = AtomicU8::new(u8::MAX);
    let known = CHOSEN.load(Ordering::Relaxed);
    if let Some(f) = FORMATS.get(usize::from(known)) {
        return Ok(f);
    }
    let mut chosen = FORMATS.len() - 1;
    for (i, probe) in PROBES.iter().enumerate() {
        if call_argv(ctx, c"PING", probe, &[])?.is_ok() {
            chosen = i;
            break;
        }
    }
    CHOSEN.store(chosen as u8, Ordering::Relaxed);
    Ok(FORMATS.get(chosen).copied().unwrap_or(c"!CSMv"))
}

const NOPERM: &[u8] = b"NOPERM this user has no permissions to run the command or its keys";

/// An ACL refusal as `NOPERM`, whatever the server: Redis 7.0's module API
/// answers it with a plain `ERR`, which a client could not tell from others.
fn with_acl_code(text: Box<[u8]>) -> Box<[u8]> {
    if text.starts_with(b"ERR acl verification failed") {
        NOPERM.into()
    } else {
        text
    }
}

/// The server's reason for running nothing, where it gave no error reply
/// (servers without `E`).
fn not_run_text(not_run: NotRun) -> &'static [u8] {
    match not_run.0 {
        libc::ENOENT => b"ERR unknown command",
        libc::EINVAL => b"ERR wrong number of arguments",
        libc::EACCES => NOPERM,
        libc::ENOSPC => b"OOM command not allowed when used memory > 'maxmemory'",
        libc::ESPIPE => b"ERR this command is not allowed from a script",
        libc::EROFS => b"READONLY writes are refused here now",
        libc::ENETDOWN => b"CLUSTERDOWN the cluster is down",
        libc::EPERM => b"ERR a key is served by another node",
        _ => b"ERR the server refused to run the command",
    }
}

/// The keys of a guard's call, for the server's key requests: the
/// resource, then each inner command's keys as its command table gives
/// them, with their flags.
pub fn key_positions(ctx: Ctx, argv: &Argv<'_>, commands: &[Range<usize>]) -> Vec<(usize, c_int)> {
    let mut out = vec![(1, 0)];
    for range in commands {
        let is_dlock = argv.bytes().get(range.start).is_some_and(|n| {
            n.len() >= 6
                && n.get(..6)
                    .is_some_and(|p| p.eq_ignore_ascii_case(b"dlock."))
        });
        let Ok(raw_args) = argv.raw_range(range.clone()) else {
            continue;
        };
        if is_dlock {
            continue;
        }
        out.extend(
            keys::positions(ctx, raw_args)
                .into_iter()
                .map(|(p, f)| (range.start + p, f)),
        );
    }
    out
}
