//! What the server's command table says of the commands a guard runs
//! (`COMMAND INFO`), asked once per command and kept: commands do not
//! change flags while the server runs.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::server::edge::api::Ctx;
use crate::server::edge::call::{call_with_bytes, Part};
use dlock_core::guard::inner::{flag, Facts};
use dlock_core::Error;

/// A command's facts, and whether it is a container (its subcommands have
/// facts of their own, under `name|sub`).
#[derive(Clone, Copy)]
struct Entry {
    facts: Facts,
    container: bool,
}

/// By lower-case name (`name|sub` for a subcommand). Holds only commands
/// the server has: its size is bounded by the command table's.
static TABLE: Mutex<Option<HashMap<Box<[u8]>, Entry>>> = Mutex::new(None);

/// The facts of the command `args` (its name first, a container's
/// subcommand second), `None` when the server has no such command.
pub fn facts(ctx: Ctx, args: &[&[u8]]) -> Result<Option<Facts>, Error> {
    let Some(name) = args.first() else {
        return Ok(None);
    };
    // `|` would name a subcommand directly; a NUL cannot be a name.
    if name.is_empty() || name.contains(&b'|') || name.contains(&0) {
        return Ok(None);
    }
    let name = name.to_ascii_lowercase();
    let Some(entry) = entry(ctx, &name)? else {
        return Ok(None);
    };
    if !entry.container {
        return Ok(Some(entry.facts));
    }
    // A container without its subcommand is refused by its arity.
    let Some(sub) = args.get(1) else {
        return Ok(Some(entry.facts));
    };
    let mut full = name;
    full.push(b'|');
    full.extend(sub.to_ascii_lowercase());
    Ok(lookup(&full).map(|e| e.facts))
}

fn lookup(name: &[u8]) -> Option<Entry> {
    let table = TABLE.lock().unwrap_or_else(|p| p.into_inner());
    table.as_ref()?.get(name).copied()
}

fn entry(ctx: Ctx, name: &[u8]) -> Result<Option<Entry>, Error> {
    if let Some(e) = lookup(name) {
        return Ok(Some(e));
    }
    let Ok(reply) = call_with_bytes(ctx, c"COMMAND", &[c"INFO"], name)? else {
        return Ok(None);
    };
    let Some(info) = reply.part().get(0).filter(|p| !p.is_null()) else {
        return Ok(None);
    };
    let mut table = TABLE.lock().unwrap_or_else(|p| p.into_inner());
    let table = table.get_or_insert_with(HashMap::new);
    let found = remember(table, info);
    Ok(found)
}

/// Keeps one `COMMAND INFO` entry and its subcommands'; returns its own.
fn remember(table: &mut HashMap<Box<[u8]>, Entry>, info: Part<'_>) -> Option<Entry> {
    let name = info.get(0)?.bytes().to_ascii_lowercase();
    let arity = info.get(1)?.integer()?;
    let flags = info.get(2)?;
    let flags = (0..flags.len())
        .filter_map(|i| flags.get(i))
        .fold(0, |acc, f| acc | flag::of(&f.bytes().to_ascii_lowercase()));
    let subcommands = info.get(9).filter(|s| s.len() > 0);
    let entry = Entry {
        facts: Facts { arity, flags },
        container: subcommands.is_some(),
    };
    if let Some(subs) = subcommands {
        for i in 0..subs.len() {
            if let Some(sub) = subs.get(i) {
                remember(table, sub);
            }
        }
    }
    table.insert(name.into(), entry);
    Some(entry)
}
