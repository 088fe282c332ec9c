//! A lock value rewritten into the AOF, and the `DLOCK.META` facts that
//! must reach the AOF and replicas when they change.

use std::ffi::{c_char, c_longlong, c_void};

use redis_module::raw;

use super::rdb::stored;
use crate::server::edge::api::{self, Ctx};
use crate::server::edge::ffi::guard;
use crate::server::jobs::{self, Job};
use crate::server::keyspace::value::Stored;
use crate::server::persistence::effects::{self, APPLY, META};
use crate::server::{quarantine, state};

/// Emits the effect without a deadline: the server appends the key's own
/// `PEXPIREAT` after it (the callback cannot see the TTL). Each emitted lock
/// also carries the fence high-water mark: an AOF without the RDB preamble
/// has no aux data, so this is the only way the mark reaches the new file.
pub(super) extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    guard("aof_rewrite", (), || {
        let (Some(stored), Some(emit)) = (unsafe { stored(value) }, unsafe {
            raw::RedisModule_EmitAOF
        }) else {
            return;
        };
        crate::server::persistence::session_effects::rewrite_once(aof);
        // In the forms `effects::meta_args` describes.
        let (longest, lossy, until) = effects::meta_args();
        unsafe { emit(aof, META.as_ptr(), c"ll".as_ptr(), longest, lossy) };
        if until != 0 {
            unsafe { emit(aof, META.as_ptr(), c"lll".as_ptr(), longest, lossy, until) };
        }
        let lease = match stored {
            Stored::Plain(lease) => lease,
            Stored::Multi(holds) => {
                return crate::server::persistence::hold_effects::rewrite(aof, key, holds)
            }
        };
        let token = lease.token();
        unsafe {
            emit(
                aof,
                APPLY.as_ptr(),
                c"sblll".as_ptr(),
                key,
                token.as_ptr().cast::<c_char>(),
                token.len(),
                lease.fence() as c_longlong,
                0 as c_longlong,
                state::last_fence() as c_longlong,
            )
        };
    })
}

/// A child was just forked (we are the parent). When it rewrites the AOF,
/// the files holding the `DLOCK.META` facts are dropped once it is done,
/// and the new base carries them only next to a lock key (no aux data
/// without the RDB preamble): with no lock alive, not at all. The server
/// opened the incremental file that follows the new base before forking,
/// so the facts go there, from a timer: inside a command (`BGREWRITEAOF`,
/// `CONFIG SET appendonly yes`) a propagation would count as a write and
/// make the server propagate that command too.
pub fn on_fork_child_born() {
    if !aof_rewrite_in_progress() {
        return;
    }
    // A grant before the timer fires carries the facts itself.
    quarantine::mark_meta_dirty();
    jobs::push(Job::WriteMeta);
}

/// While writes are paused (`CLIENT PAUSE WRITE`, a failover) nothing may be
/// propagated; retry until the pause ends.
const PAUSED_RETRY_MS: u64 = 100;

/// Writes the `DLOCK.META` facts, if they changed, from the deferred jobs
/// (`Job::WriteMeta`): into the AOF (the file an AOF rewrite started, or
/// the current one when a quarantine starts or is lifted) and to replicas.
/// A replica's own propagation reaches only its AOF (it proxies its
/// master's stream to its replicas). Without a timer (before the module
/// finished loading) the facts stay dirty and go out with the next effect.
pub fn write_meta(ctx: Ctx) {
    if jobs::writes_paused() {
        jobs::push_after(Job::WriteMeta, PAUSED_RETRY_MS);
        return;
    }
    if let Err(e) = effects::meta_if_changed(ctx) {
        quarantine::mark_meta_dirty();
        ctx.log_warning(&format!("dlock: metadata for the AOF and replicas: {e}"));
    }
}

/// Whether the child just forked is an AOF rewrite (the server records the
/// child's type before it tells modules of the fork).
fn aof_rewrite_in_progress() -> bool {
    let [in_progress] = api::server_info_numbers(c"persistence", [c"aof_rewrite_in_progress"]);
    in_progress == Some(1)
}
