//! Locks in the keyspace: a key opened through the raw key API, the value it
//! holds, the time the longest lock still has, a guard timer per multi-hold
//! key, and what happens when the keyspace evicts or restores a lock.

pub mod eviction;
pub mod hold_guards;
pub mod keys;
pub mod live_ttl;
pub mod restored;
pub mod value;
