//! Carrying out what the rules decided: a step on a group of resources
//! opened once, the plain lock's handoff, `MACQUIRE`'s common case, and the
//! revocation of grants that never reached their waiter.

pub mod deadlock;
pub mod group;
pub mod handoff;
pub mod hold_checks;
pub mod hold_work;
pub mod inputs;
pub mod plain;
pub mod revoke;
pub mod sessions;
pub mod sets_plain;
pub mod step;
