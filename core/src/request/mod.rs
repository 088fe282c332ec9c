//! What a client asks: command arguments parsed to typed requests (or the
//! error the client sees), what a request asks of a resource, the hard limits,
//! and the glob patterns `DLOCK.QUEUED` matches names with.

pub mod args;
pub mod glob;
pub mod queue_args;
pub mod session_args;
pub mod set_args;
