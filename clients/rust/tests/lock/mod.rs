//! `Locker` and `Guard` against a real server: grants, busy, release,
//! release on drop, extend, the lease budget, sets, holds.

#[path = "../../../../tests/proxy/mod.rs"]
mod proxy;

mod api;
mod election;
mod election_safety;
mod faults;
mod guard;
mod guarded;
mod handover;
mod loss;
mod max_hold;
mod position;
mod session;
mod wanted;
mod watchdog;
