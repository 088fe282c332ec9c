//! The `dlock` ACL category, so `ACL SETUSER locker on >pw ~lock:* +@dlock`
//! grants exactly the lock commands. `RedisModule_AddACLCategory` exists
//! from Redis 7.4 and in Valkey 8; on Redis 7.0 and 7.2 the module loads
//! without the category (users are granted the commands by name).

use std::ffi::CStr;

use redis_module::raw;

use crate::server::edge::api::{Ctx, OK};
use dlock_core::Error;

pub const CATEGORY: &CStr = c"dlock";

/// The commands the category holds, with the server's own categories that
/// fit them (a module command has none unless it says so, so `-@write`
/// would not stop a grant). The internal effect commands are left out: they
/// are refused from clients whatever the ACL says.
const COMMANDS: [(&CStr, &CStr); 25] = [
    (c"dlock.acquire", c"write dlock"),
    (c"dlock.release", c"write dlock"),
    (c"dlock.resize", c"write dlock"),
    (c"dlock.extend", c"write fast dlock"),
    (c"dlock.info", c"read fast dlock"),
    // Its inner commands are checked against the caller's ACL each.
    (c"dlock.guard", c"write dlock"),
    (c"dlock.check", c"read fast dlock"),
    (c"dlock.observe", c"read blocking dlock"),
    // Names of resources whatever the user's key patterns, as `SCAN`
    // gives them: the same categories as `SCAN`.
    (c"dlock.queued", c"keyspace read slow dlock"),
    (c"dlock.position", c"read fast dlock"),
    (c"dlock.waiters", c"read slow dlock"),
    (c"dlock.stats", c"read slow dlock"),
    (c"dlock.slowlog", c"read slow dlock"),
    (c"dlock.macquire", c"write dlock"),
    (c"dlock.mrelease", c"write dlock"),
    (c"dlock.mextend", c"write dlock"),
    (c"dlock.session|open", c"write fast dlock"),
    (c"dlock.session|keepalive", c"write fast dlock"),
    (c"dlock.session|close", c"write fast dlock"),
    (c"dlock.session|kill", c"write fast dlock"),
    (c"dlock.session|info", c"read fast dlock"),
    (c"dlock.session|list", c"read slow dlock"),
    (c"dlock.session|holds", c"read slow dlock"),
    (c"dlock.session|waits", c"read slow dlock"),
    (c"dlock.session|help", c"slow dlock"),
];

/// Registers the category and puts every lock command in it; does nothing
/// where the server lacks the API. Called from `OnLoad`, after the commands
/// are created.
pub fn register(ctx: Ctx) -> Result<(), Error> {
    let (Some(add), Some(set), Some(get)) = (
        unsafe { raw::RedisModule_AddACLCategory },
        unsafe { raw::RedisModule_SetCommandACLCategories },
        unsafe { raw::RedisModule_GetCommand },
    ) else {
        return Ok(());
    };
    if unsafe { add(ctx.0, CATEGORY.as_ptr()) } != OK {
        return Err(Error::Internal("cannot add the dlock ACL category"));
    }
    for (name, categories) in COMMANDS {
        let cmd = unsafe { get(ctx.0, name.as_ptr()) };
        if cmd.is_null() || unsafe { set(cmd, categories.as_ptr()) } != OK {
            return Err(Error::Internal(
                "cannot put a command in the dlock ACL category",
            ));
        }
    }
    Ok(())
}
