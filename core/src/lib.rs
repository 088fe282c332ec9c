//! The rules of a lock, in plain Rust: nothing here knows about Redis.
//!
//! Time is always passed in, so every transition is deterministic and can be
//! unit-tested without a server. The module crate (`dlock`, `src/server/`)
//! carries out what these rules decide; this crate cannot reach it, so the
//! rules stay free of the module API by construction.
//!
//! The folders, by role (docs/architecture.md walks a request through them):
//! - `request`: command arguments to typed requests, and their limits;
//! - `resource`: one resource's holds and the values they are stored as;
//! - `admission`: the one rule that admits a request to a resource;
//! - `plan`: a step decided whole, returned as a `Plan`; the plain lock's
//!   fast path decided inside the same model;
//! - `queue`: the FIFO wait queues, set requests in every member's queue;
//! - `parking`: a waiting client from queueing to its reply;
//! - `guard`: whether a token or fence holds a resource now, and what a
//!   guarded write may run;
//! - `observe`: what observers see of a resource, and their pace;
//! - `rules`: the fence clock, the quarantine, risky settings, hash slots,
//!   config ranges and the aux data that persists them.

#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing
    )
)]

pub mod ask;
pub mod decimal;
pub mod error;
pub mod fence;
pub mod guard;
pub mod limits;
pub mod observe;
pub mod parking;
pub mod plan;
pub mod queue;
pub mod request;
pub mod resource;
pub mod rules;
pub mod sessions;
pub mod stats;

pub use error::Error;
pub use fence::FenceClock;
pub use resource::lease::Lease;
