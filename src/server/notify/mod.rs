//! What is told of every change of a lock: the counters of `INFO dlock`, the
//! keyspace events, and the hooks that queue a check for the resource's
//! observers (`DLOCK.OBSERVE ... WAIT`).

pub mod figures;
pub mod stats;
pub mod watchers;
