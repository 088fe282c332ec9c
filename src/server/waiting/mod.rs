//! Clients that wait: `DLOCK.ACQUIRE ... WAIT` and `DLOCK.MACQUIRE ... WAIT`
//! parked in `dlock_core::parking`, their blocked-client plumbing and the one
//! timer for every `WAIT`'s end.

pub mod blocking;
