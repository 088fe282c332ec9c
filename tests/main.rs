//! The integration tests of the module: one test binary (`cargo test
//! --release --test dlock`), one module per feature, so the harness is
//! compiled once. Every test starts its own servers (`common`: a free
//! loopback port, a temp dir, `--loadmodule`, killed on drop). A suite runs
//! alone with its module path as the filter, e.g. `cargo test --release
//! --test dlock -- sets::`; no module below a suite shares a suite's name,
//! so that filter picks one suite. `layers.rs` (the module's layering, read
//! from the sources) is a binary of its own.
use std::sync::{Mutex, MutexGuard};

mod common;
mod proxy;

/// `WAIT`: queues, handoffs, the ways a waiter leaves.
mod blocking;
/// A real Redis Cluster: routing, resharding, failover.
mod cluster;
/// The manual and the command metadata, checked.
mod docs;
/// Persistence, replication, the restart quarantine, upgrades and rollbacks.
mod durability;
/// Injected faults: lost replies, paused holders, killed masters, clock steps.
mod faults;
/// `DLOCK.GUARD` and `DLOCK.CHECK`: writes only a holder can make.
mod guard;
/// `DLOCK.GUARD` under faults: a paused holder, a failover, resharding.
mod guarded;
/// `RELEASE ... TO`: a hold handed over to one waiter out of turn.
mod handover;
/// The test harness itself.
mod harness;
/// `SHARED`, `LIMIT` and `OWNER` holds; their durability; very many holds.
mod holds;
/// The plain lock: the command contract, mutual exclusion under contention.
mod locks;
/// `MAXHOLD`: a cap on how long a hold may live across extends.
mod maxhold;
/// `DLOCK.OBSERVE`.
mod observe;
/// What an operator sees and sets: ACL, configuration, memory, stats, version.
mod ops;
/// `DLOCK.POSITION`, `DLOCK.WAITERS`: where a waiter stands.
mod position;
/// `PRIORITY`: who goes first, aged by `dlock.priority-aging-ms`.
mod priority;
/// `DLOCK.RESIZE`: a held semaphore's limit changed while permits are held.
mod resize;
/// Sessions: one liveness lease for many holds and waits.
mod sessions;
/// `MACQUIRE`, `MRELEASE`, `MEXTEND`: contract, load, durability.
mod sets;
/// `DLOCK.STATS` and `DLOCK.SLOWLOG`: statistics in a fixed memory bound.
mod statistics;
/// `EXTEND ... WANTED`: telling a holder that someone waits.
mod wanted;
/// `LIMIT n PERMITS k`: one hold counting as k of a semaphore's permits.
mod weighted;

static QUIET: Mutex<()> = Mutex::new(());

/// Serializes the load tests and the tests whose timing matters (of every
/// suite, since all run in this one process), so a 2-core machine never
/// carries two of them at once.
fn quiet() -> MutexGuard<'static, ()> {
    QUIET.lock().unwrap_or_else(|p| p.into_inner())
}
