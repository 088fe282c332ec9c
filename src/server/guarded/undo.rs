//! All or none for a `BATCH`: the keys its commands write are copied
//! (`DUMP`) before any runs; when a command fails, what the commands before
//! it wrote is put back (`RESTORE ... REPLACE ABSTTL`, or `DEL` for a key
//! that did not exist), replicated like the writes it undoes.

use std::collections::HashSet;

use redis_module::raw;

use crate::server::edge::api::Ctx;
use crate::server::edge::call::{self, call_with_bytes, Reply};
use dlock_core::Error;

/// One key's state before the batch.
struct Before<'a> {
    name: *mut raw::RedisModuleString,
    key: &'a [u8],
    /// The first command (0-based) that writes it: undone only when a
    /// later command fails.
    by: usize,
    /// `DUMP`'s payload and expiry; `None` for a key that did not exist.
    copy: Option<(Reply, i64)>,
    exists: bool,
    expire_at_ms: i64,
}

#[derive(Default)]
pub struct Undo<'a> {
    keys: Vec<Before<'a>>,
    /// The keys noted, to find one in O(1) (a batch may name many).
    noted: HashSet<&'a [u8]>,
}

impl<'a> Undo<'a> {
    /// Whether `key` is already noted (by an earlier command of the batch).
    pub fn has(&self, key: &[u8]) -> bool {
        self.noted.contains(key)
    }

    /// Notes `key` to be copied before the batch runs.
    pub fn note(
        &mut self,
        name: *mut raw::RedisModuleString,
        key: &'a [u8],
        by: usize,
        exists: bool,
        expire_at_ms: i64,
    ) {
        self.noted.insert(key);
        self.keys.push(Before {
            name,
            key,
            by,
            copy: None,
            exists,
            expire_at_ms,
        });
    }

    /// Copies every noted key that exists; nothing has run yet.
    pub fn copy(&mut self, ctx: Ctx) -> Result<(), Error> {
        for before in self.keys.iter_mut().filter(|b| b.exists) {
            let reply = match call_with_bytes(ctx, c"DUMP", &[], before.key)? {
                Ok(r) if r.part().is_null() => {
                    // Expired since it was looked at: undone by deleting it.
                    before.exists = false;
                    continue;
                }
                Ok(r) if !r.part().is_error() => r,
                _ => return Err(Error::Internal("DUMP of a key to undo failed")),
            };
            before.copy = Some((reply, before.expire_at_ms));
        }
        Ok(())
    }

    /// Puts back what commands before `failed` (0-based) wrote.
    pub fn undo(&self, ctx: Ctx, failed: usize) -> Result<(), Error> {
        for before in self.keys.iter().rev().filter(|b| b.by < failed) {
            let done = match &before.copy {
                Some((payload, expire_at_ms)) => {
                    call::restore(ctx, before.name, *expire_at_ms, payload.part().bytes())?
                }
                None => call::delete(ctx, before.name)?,
            };
            let why = match &done {
                Ok(r) if !r.part().is_error() => continue,
                Ok(r) => String::from_utf8_lossy(r.part().bytes()).into_owned(),
                Err(not_run) => format!("errno {}", not_run.0),
            };
            ctx.log_warning(&format!(
                "dlock: a failed guarded BATCH could not put back key '{}': {why}",
                String::from_utf8_lossy(before.key).escape_debug()
            ));
        }
        Ok(())
    }
}
