//! The state file that tells a restart how the previous run ended.
//!
//! How the previous run ended is kept in a small state file in the data
//! directory (Redis runs with its working directory there): "running" is
//! written at load, "clean" by the `Shutdown` event. On Redis 7.0 that event
//! fires after the final RDB save and AOF flush, so a marker inside the data
//! could not record a clean end; a crash leaves "running" behind.

use std::sync::atomic::{AtomicU8, Ordering};

use crate::server::edge::api;
use dlock_core::rules::quarantine::PreviousRun;

pub(super) const STATE_FILE: &str = "dlock.state";

pub(super) static PREVIOUS: AtomicU8 = AtomicU8::new(0);

pub(super) fn previous() -> PreviousRun {
    match PREVIOUS.load(Ordering::Relaxed) {
        x if x == PreviousRun::Clean as u8 => PreviousRun::Clean,
        x if x == PreviousRun::Crashed as u8 => PreviousRun::Crashed,
        x if x == PreviousRun::Unsaved as u8 => PreviousRun::Unsaved,
        _ => PreviousRun::None,
    }
}

pub(super) fn write_state(what: &str) {
    if let Err(e) = std::fs::write(STATE_FILE, what) {
        api::log(
            std::ptr::null_mut(),
            c"warning",
            &format!("dlock: cannot write {STATE_FILE} in the data directory: {e}"),
        );
    }
}

/// The server is shutting down (after its last save and AOF fsync). Only a
/// shutdown that persisted every write is clean: with nothing saved (no AOF,
/// and changes since the last RDB save, as with `save ""` or `SHUTDOWN
/// NOSAVE`) grants this run acknowledged are lost as in a crash, and their
/// holders still believe they hold them.
pub fn on_shutdown() {
    let [aof, rewriting, unsaved] = api::server_info_numbers(
        c"persistence",
        [
            c"aof_enabled",
            c"aof_rewrite_in_progress",
            c"rdb_changes_since_last_save",
        ],
    );
    let persisted = (aof == Some(1) && rewriting == Some(0)) || unsaved == Some(0);
    write_state(if persisted { "clean" } else { "unsaved" });
}
