//! What survives a restart, a replica or another release: the AOF's
//! effects, persistence, replication, the restart quarantine and the longest
//! TTL it uses, files of older releases (`upgrade`) and the previous release
//! next to this one (`rollback`).
mod effects;
mod longest_ttl;
mod persistence;
mod quarantine;
mod replication;
mod rollback;
mod upgrade;
