//! The plain lock: `DLOCK.ACQUIRE`, `RELEASE`, `EXTEND`, `INFO` and
//! `QUEUED`, one test per rule and per bad input (`contract`), and mutual
//! exclusion under contention (`concurrency`).
mod concurrency;
mod contract;
