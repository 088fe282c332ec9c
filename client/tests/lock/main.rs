//! `Locker` and `Guard` against a real server: grants, busy, release,
//! release on drop, extend, the lease budget, sets, holds.

#[path = "../common/mod.rs"]
mod common;

mod guard;
