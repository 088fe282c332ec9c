//! The rules of a lock, in plain Rust: nothing here knows about Redis.
//!
//! Time is always passed in, so every transition is deterministic and can be
//! unit-tested without a server.

pub mod admission;
pub mod args;
pub mod ask;
pub mod aux;
pub mod changes;
pub mod cluster;
pub mod component;
pub mod config;
pub mod decimal;
pub mod error;
pub mod fence;
pub mod glob;
pub mod holds;
pub mod layout;
pub mod lease;
pub mod limits;
pub mod observe;
pub mod observe_pace;
pub mod parking;
pub mod plain;
pub mod plan;
pub mod policy;
pub mod quarantine;
pub mod queue;
pub mod set_args;

pub use error::Error;
pub use fence::FenceClock;
pub use lease::Lease;

#[cfg(test)]
mod differential_tests;
