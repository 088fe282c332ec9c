//! Client for dlock — distributed locks as native Redis commands
//! (`DLOCK.ACQUIRE`, `RELEASE`, `EXTEND`, `INFO`, and the set commands),
//! loaded into Redis or Valkey as a module (see the project's README, and
//! `docs/client.md` for this client).
//!
//! - [`Locker`]: locks on one server or a Redis Cluster. Server-side FIFO
//!   waiting (never polling), same-token retries after lost replies, a lease
//!   budget that never outlasts the server's deadline, `min_replicas`.
//! - [`Guard`]: the held lock; fence, extend, release, release on drop, an
//!   optional watchdog that renews and tells you when the lease is lost;
//!   writes to the same Redis that run only while the lock is held
//!   ([`Guard::write`], `DLOCK.GUARD`) and the sequencer check
//!   ([`Guard::check`], [`Locker::check`]).
//! - [`Redlock`]: one lock over N independent servers, granted by a quorum.
//! - [`Election`]: leader election with fenced terms: campaign, resign, and
//!   follow who leads without polling (`DLOCK.OBSERVE`).
//! - [`TlsSettings`]: a CA and a client certificate for `rediss://` servers
//!   (`Locker::new_tls`, `Locker::cluster_tls`, `Redlock::new_tls`).
//!
//! ```no_run
//! use std::time::Duration;
//! use dlock_client::Locker;
//!
//! let locker = Locker::new("redis://127.0.0.1:6379/")?;
//! let guard = locker
//!     .request("orders:42")
//!     .ttl(Duration::from_secs(30))
//!     .wait(Duration::from_secs(5))
//!     .acquire()?;
//! match guard {
//!     Some(guard) => {
//!         // write with guard.fence(); dropping the guard releases the lock
//!         println!("fence {}", guard.fence());
//!     }
//!     None => println!("still busy after 5 s"),
//! }
//! # Ok::<(), dlock_client::Error>(())
//! ```
//!
//! Every `Duration` the API takes is valid: `Duration::MAX` is "as long as
//! the server allows" (2^47 ms) for waits and timeouts, and a ttl outside
//! 1 ms..=2^47 ms is refused with [`Error::Invalid`] before any server is
//! asked.
//!
//! The `redis` crate this one is built on is re-exported as
//! [`redis`](crate::redis), for [`Locker::from_client`] and
//! [`Locker::info`]'s reply, so that no second version needs pinning.

#[cfg(feature = "tokio")]
pub mod aio;
mod by_token;
mod election;
mod error;
mod guard;
mod guard_write;
mod guarded;
mod handover;
mod held;
mod lease;
mod limits;
mod locker;
mod node;
mod prefer;
mod queue;
mod redlock;
mod request;
mod retry;
mod route;
pub mod sentinel;
mod session;
mod single;
mod tls;
mod url;
mod wanted;
mod watchdog;

pub use election::{Election, Leader, Leadership, Observe};
pub use error::{Error, Result};
pub use guard::Guard;
pub use locker::{LockRequest, Locker};
pub use queue::{Waiter, MAX_WAITERS_PAGE};
pub use redis;
pub use redlock::{Redlock, RedlockRequest};
pub use request::{MAX_LIMIT, MAX_PRIORITY, MAX_SET};
pub use tls::TlsSettings;
pub use url::{redact_url, same_login_at, URL_FORMS};
pub use wanted::Wanted;

/// This crate's release (e.g. `0.4.0`): one version for the module, this
/// client and the Python package.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
