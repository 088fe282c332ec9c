//! The client's integration suites, one module each, in one test binary
//! (the harness in `common/` compiled once): `aio` (the async API), `cli`
//! (the `dlock` tool end to end), `cluster`, `lock` (the blocking API on
//! one server), `redlock`, `sentinel` and `tls`. Run one suite with its
//! name as the filter, e.g. `cargo test -p dlock-client --features tokio
//! --test suites -- redlock::` (a filter is a substring of the test's
//! path: `lock::` also matches `redlock::`; `make test-matrix` picks a
//! suite's tests exactly).

#[cfg(feature = "tokio")]
mod aio;
mod cli;
mod cluster;
mod common;
mod lock;
mod redlock;
mod sentinel;
mod tls;
