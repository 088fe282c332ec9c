//! What the server calls dlock for besides commands: its events (flushes,
//! swaps, role changes, loading, shutdown), the keyspace notifications dlock
//! listens to, and the timer that runs the deferred jobs.

pub mod job_runner;
pub mod notifications;
pub mod server;
