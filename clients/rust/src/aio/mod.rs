//! The async API on tokio (feature `tokio`): [`Locker`], [`LockRequest`]
//! and [`Guard`] with the same rules as the blocking API (same-token
//! retries, a lease budget counted from send times, a refresh after a
//! `WAIT` grant, `min_replicas`, an opt-in watchdog, a loss signal that
//! follows every change of deadline), on one server.
//!
//! Release with `guard.release().await`. Dropping a guard instead does a
//! best-effort release on a spawned task (when dropped inside a tokio
//! runtime; otherwise the lease simply runs out). Redis Cluster and Redlock
//! are offered by the blocking API.
//!
//! ```no_run
//! # async fn demo() -> dlock_client::Result<()> {
//! use std::time::Duration;
//! let locker = dlock_client::aio::Locker::new("redis://127.0.0.1:6379/")?;
//! let guard = locker
//!     .request("orders:42")
//!     .ttl(Duration::from_secs(30))
//!     .wait(Duration::from_secs(5))
//!     .acquire()
//!     .await?;
//! if let Some(guard) = guard {
//!     println!("fence {}", guard.fence());
//!     guard.release().await?;
//! }
//! # Ok(()) }
//! ```

mod conn;
mod election;
mod guard;
mod guard_state;
mod guarded;
mod lease;
mod locker;
mod session;
pub use election::{Election, Leadership, Observe};
pub use guard::Guard;
pub use locker::{LockRequest, Locker};
