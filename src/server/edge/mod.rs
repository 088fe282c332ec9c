//! Where the server and dlock meet: the `extern "C"` edge that no panic
//! crosses, the raw module API shims every other file uses, and what the
//! server tells dlock of its clients' connections and of Redis Cluster.

pub mod api;
pub mod call;
pub mod clients;
pub mod cluster;
pub mod ffi;
