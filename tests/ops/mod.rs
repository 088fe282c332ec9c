//! What an operator sees and sets: the ACL category, `CONFIG REWRITE`,
//! eviction, a fresh machine's `make` steps, the server's heap per waiter,
//! the sizing figures, `INFO` counters and events, and the running version.
mod acl;
mod config_rewrite;
mod eviction;
mod fresh_machine;
mod memory;
mod sizing;
mod stats;
mod version;
