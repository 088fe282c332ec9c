//! What this run tells the AOF, replicas and the next run alongside the
//! data: the longest TTL, whether this run can lose acknowledged writes,
//! and the quarantine end the loaded data carries.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

use redis_module::raw;

use crate::server::edge::api::Ctx;
use crate::server::jobs::{self, Job};
use crate::server::state;
use dlock_core::rules::quarantine;
use dlock_core::Error;

/// The end (unix ms, 0 = none) of the quarantine the data carries: read from
/// this node's RDB aux data or AOF (`DLOCK.META`) while loading, or the
/// master's running quarantine as its last `DLOCK.META` said. The latest
/// value wins (a lifted quarantine is written as 0). A replica never runs a
/// quarantine from it: it is applied when the startup load is judged and
/// at a promotion (`resume`).
pub(super) static CARRIED_UNTIL: AtomicU64 = AtomicU64::new(0);

/// Longest TTL granted here or seen in loaded data and effects.
static LONGEST_TTL: AtomicU64 = AtomicU64::new(0);
/// What loaded data says of the run that wrote it: 0 unknown, 1 lossless, 2 lossy.
pub(super) static LOADED_LOSSY: AtomicU8 = AtomicU8::new(0);
static THIS_RUN_LOSSY: AtomicBool = AtomicBool::new(true);
/// This run's durability and longest TTL still have to reach the AOF and
/// replicas (set at load, on config changes and when the longest TTL grows).
static META_DIRTY: AtomicBool = AtomicBool::new(true);

/// Records a granted TTL; a new longest one must reach replicas and the AOF.
pub fn note_ttl(ttl_ms: u64) {
    if LONGEST_TTL.fetch_max(ttl_ms, Ordering::Relaxed) < ttl_ms {
        META_DIRTY.store(true, Ordering::Relaxed);
    }
}

pub fn longest_ttl() -> u64 {
    LONGEST_TTL.load(Ordering::Relaxed)
}

/// `CONFIG SET dlock.longest-ttl`: lowers the longest TTL to `asked`, but
/// never below what this node's live locks still have (the rule and why it
/// is safe: `quarantine::lowered_longest_ttl`). A replica refuses: its
/// longest TTL stands for its master's grants, which it may not have
/// received yet. While the module loads (a config-file value) there is
/// nothing to lower: the data brings its own. The lower value reaches an
/// RDB at its next save and the AOF at its next rewrite; a running
/// quarantine keeps its end.
pub fn lower_longest_ttl(asked: u64) -> Result<(), Error> {
    let ctx = jobs::timer_ctx();
    if ctx.is_null() || state::lock_type().is_null() {
        return Ok(());
    }
    if state::is_replica() {
        return Err(Error::BadConfig(
            "the longest TTL is lowered on a master: a replica's stands for its master's grants",
        ));
    }
    let live = crate::server::keyspace::live_ttl::longest_left_ms(ctx);
    let to = quarantine::lowered_longest_ttl(longest_ttl(), asked, live);
    if LONGEST_TTL.swap(to, Ordering::Relaxed) != to {
        write_meta_now();
    }
    Ok(())
}

pub fn this_run_lossy() -> bool {
    THIS_RUN_LOSSY.load(Ordering::Relaxed)
}

/// The metadata must go out again (with the next effect, or sooner).
pub fn mark_meta_dirty() {
    META_DIRTY.store(true, Ordering::Relaxed);
}

pub fn take_meta_dirty() -> bool {
    META_DIRTY.swap(false, Ordering::Relaxed)
}

/// Metadata loaded from RDB aux data or the AOF (`lossy` only from disk:
/// a master's durability says nothing about this node's files), or sent by
/// the master. `quarantine_until` is the writer's running quarantine's end
/// (0 = none).
pub fn observe(longest_ttl: u64, lossy: Option<bool>, quarantine_until: u64) {
    LONGEST_TTL.fetch_max(longest_ttl, Ordering::Relaxed);
    if let Some(l) = lossy {
        LOADED_LOSSY.store(if l { 2 } else { 1 }, Ordering::Relaxed);
    }
    CARRIED_UNTIL.store(quarantine_until, Ordering::Relaxed);
}

/// A quarantine just started (or was lifted): its end must be in the AOF
/// and at the replicas before anything else is, and without waiting for a
/// grant (none comes during a quarantine). Written from the deferred jobs,
/// like the metadata of an AOF rewrite: the events that start a quarantine run
/// inside commands (`REPLICAOF NO ONE`, `CONFIG SET`) where a propagation
/// would make the server propagate the command too. Until the job runs
/// no grant can happen (the quarantine is in force in memory), and a
/// refresh or extension of a surviving lock sends the dirty metadata first.
pub(super) fn write_meta_now() {
    META_DIRTY.store(true, Ordering::Relaxed);
    jobs::push(Job::WriteMeta);
}

/// Reads this run's durability from the server's own configuration.
pub fn refresh_durability(ctx: Ctx) {
    let (Some(aof), Some(fsync), Some(no_fsync)) = (
        config_get(ctx, c"appendonly"),
        config_get(ctx, c"appendfsync"),
        config_get(ctx, c"no-appendfsync-on-rewrite"),
    ) else {
        return;
    };
    let lossy = !quarantine::lossless(aof == "yes", &fsync, no_fsync == "yes");
    if THIS_RUN_LOSSY.swap(lossy, Ordering::Relaxed) != lossy {
        META_DIRTY.store(true, Ordering::Relaxed);
    }
}

fn config_get(ctx: Ctx, name: &std::ffi::CStr) -> Option<String> {
    let (call, elem, text, free) = unsafe {
        (
            raw::RedisModule_Call?,
            raw::RedisModule_CallReplyArrayElement?,
            raw::RedisModule_CallReplyStringPtr?,
            raw::RedisModule_FreeCallReply?,
        )
    };
    let reply = unsafe {
        call(
            ctx.0,
            c"CONFIG".as_ptr(),
            c"cc".as_ptr(),
            c"GET".as_ptr(),
            name.as_ptr(),
        )
    };
    if reply.is_null() {
        return None;
    }
    let value = unsafe { elem(reply, 1) };
    let out = (!value.is_null()).then(|| {
        let mut len = 0usize;
        let ptr = unsafe { text(value, &mut len) };
        if ptr.is_null() {
            return String::new();
        }
        String::from_utf8_lossy(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) })
            .into_owned()
    });
    unsafe { free(reply) };
    out
}
