//! One resource: its holds, indexed for O(log n) commands, the values they
//! are stored as (the plain lock's one-allocation lease, the multi-hold
//! layout), and the per-hold changes a step makes to them.

pub mod admission;
pub mod changes;
pub mod holds;
pub mod layout;
pub mod lease;
#[cfg(test)]
mod weighted_tests;
