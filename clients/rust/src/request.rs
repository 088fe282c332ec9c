//! What to acquire, and the commands that acquire, extend and release it.
//! Validated here, before any server is asked.

use crate::error::{millis, Error, Result};
use std::time::Duration;

/// The most resources one `DLOCK.MACQUIRE` takes.
pub const MAX_SET: usize = 64;

/// The largest `LIMIT` (permits of a semaphore) the server takes: 2^20.
pub const MAX_LIMIT: u32 = 1 << 20;

/// The highest `PRIORITY` the server takes.
pub const MAX_PRIORITY: u16 = 1000;

/// The shape of a lock request, shared by [`crate::Locker`] and
/// [`crate::Redlock`].
#[derive(Clone, Debug)]
pub(crate) struct Spec {
    pub resources: Vec<String>,
    pub ttl: Duration,
    pub shared: bool,
    pub limit: Option<u32>,
    pub owner: Option<String>,
    pub wait: Option<Duration>,
    /// `MAXHOLD`: the longest the hold may live from its grant, across
    /// every renewal.
    pub max_hold: Option<Duration>,
    /// The ttl asked for; `ttl` is the lease, which a cap may shorten.
    pub asked_ttl: Duration,
    pub priority: Option<u16>,
    /// `PERMITS k`: the hold counts as k of the semaphore's permits.
    pub permits: Option<u32>,
}

impl Spec {
    pub(crate) fn new(resources: Vec<String>) -> Spec {
        Spec {
            resources,
            ttl: Duration::from_secs(30),
            shared: false,
            limit: None,
            owner: None,
            wait: None,
            max_hold: None,
            asked_ttl: Duration::from_secs(30),
            priority: None,
            permits: None,
        }
    }

    /// The ttl asked for: the lease, unless a cap is shorter (the server
    /// grants the smaller of the two, and so the budget counts that).
    pub(crate) fn set_ttl(&mut self, ttl: Duration) {
        self.asked_ttl = ttl;
        self.ttl = self.max_hold.map_or(ttl, |cap| ttl.min(cap));
    }

    /// `MAXHOLD`: see [`Spec::set_ttl`].
    pub(crate) fn set_max_hold(&mut self, cap: Duration) {
        self.max_hold = Some(cap);
        self.set_ttl(self.asked_ttl);
    }

    pub(crate) fn is_set(&self) -> bool {
        self.resources.len() > 1
    }

    /// The key that routes the request (every member of a set must share
    /// its slot in Redis Cluster: use a hash tag).
    pub(crate) fn route_key(&self) -> &str {
        &self.resources[0]
    }

    pub(crate) fn validate(&self) -> Result<()> {
        let invalid = |m: &str| Err(Error::Invalid(m.to_string()));
        if self.resources.is_empty() {
            return invalid("no resource to lock");
        }
        if self.resources.len() > MAX_SET {
            return invalid("a set takes at most 64 resources");
        }
        for (i, r) in self.resources.iter().enumerate() {
            if self.resources[..i].contains(r) {
                return invalid("a set names the same resource twice");
            }
        }
        crate::limits::check_ttl(self.ttl)?;
        if let Some(cap) = self.max_hold {
            crate::limits::check_ttl(cap)
                .map_err(|_| Error::Invalid("max_hold must be 1 ms to 2^47 ms".into()))?;
        }
        if self.limit == Some(0) {
            return invalid("limit must be at least 1");
        }
        if self.limit.is_some_and(|l| l > MAX_LIMIT) {
            return invalid("limit must be at most 1048576 (2^20), the server's maximum");
        }
        if self.shared && self.limit.is_some_and(|l| l > 1) {
            return invalid("shared cannot be combined with a limit above 1");
        }
        if self.owner.as_deref() == Some("") {
            return invalid("owner must not be empty");
        }
        if let Some(k) = self.permits {
            let n = self.limit.filter(|n| *n > 1);
            let Some(n) = n else {
                return invalid("permits needs a limit above 1");
            };
            if !(1..=n).contains(&k) {
                return invalid("permits must be from 1 to the limit");
            }
        }
        if self.priority.is_some_and(|p| p > MAX_PRIORITY) {
            return invalid("priority must be at most 1000, the server's maximum");
        }
        if self.is_set() && (self.limit.is_some() || self.owner.is_some()) {
            return invalid("a set of resources takes no limit and no owner");
        }
        Ok(())
    }

    fn keys(&self, name: &str, c: &mut redis::Cmd) {
        if self.is_set() {
            c.arg(format!("DLOCK.M{name}")).arg(self.resources.len());
            c.arg(&self.resources);
        } else {
            c.arg(format!("DLOCK.{name}")).arg(&self.resources[0]);
        }
    }

    /// `ACQUIRE`/`MACQUIRE`, with `WAIT wait_ms` when given and above 0
    /// (the server's `WAIT 0` waits forever: a wait used up is a plain try).
    pub(crate) fn acquire_cmd(&self, token: &str, wait_ms: Option<u64>) -> redis::Cmd {
        self.acquire_cmd_in(token, wait_ms, None)
    }

    /// [`Spec::acquire_cmd`], the hold bound to `session` when given
    /// (`SESSION id`; the ttl is still sent, and the server ignores it).
    pub(crate) fn acquire_cmd_in(
        &self,
        token: &str,
        wait_ms: Option<u64>,
        session: Option<&str>,
    ) -> redis::Cmd {
        self.acquire_cmd_for(token, self.ttl, wait_ms, session)
    }

    /// [`Spec::acquire_cmd_in`] asking for `ttl` (a capped hold's retry
    /// asks for what is left to its cap's floor).
    pub(crate) fn acquire_cmd_for(
        &self,
        token: &str,
        ttl: Duration,
        wait_ms: Option<u64>,
        session: Option<&str>,
    ) -> redis::Cmd {
        let mut c = redis::Cmd::new();
        self.keys("ACQUIRE", &mut c);
        c.arg(token).arg(millis(ttl));
        if self.shared {
            c.arg("SHARED");
        }
        if let Some(l) = self.limit {
            c.arg("LIMIT").arg(l);
        }
        // One permit is what the server grants without PERMITS.
        if let Some(k) = self.permits.filter(|k| *k > 1) {
            c.arg("PERMITS").arg(k);
        }
        if let Some(o) = &self.owner {
            c.arg("OWNER").arg(o);
        }
        if let Some(w) = wait_ms.filter(|&w| w > 0) {
            c.arg("WAIT").arg(w);
        }
        if let Some(id) = session {
            c.arg("SESSION").arg(id);
        }
        if let Some(cap) = self.max_hold {
            c.arg("MAXHOLD").arg(millis(cap));
        }
        if let Some(p) = self.priority {
            c.arg("PRIORITY").arg(p);
        }
        c
    }

    pub(crate) fn extend_cmd(&self, token: &str, ttl: Duration) -> redis::Cmd {
        let mut c = redis::Cmd::new();
        self.keys("EXTEND", &mut c);
        c.arg(token).arg(millis(ttl));
        c
    }

    /// [`Spec::extend_cmd`], with `WANTED` when `wanted` (the reply also
    /// counts the waiters).
    pub(crate) fn extend_cmd_wanted(&self, token: &str, ttl: Duration, wanted: bool) -> redis::Cmd {
        let mut c = self.extend_cmd(token, ttl);
        if wanted {
            c.arg("WANTED");
        }
        c
    }

    pub(crate) fn release_cmd(&self, token: &str) -> redis::Cmd {
        let mut c = redis::Cmd::new();
        self.keys("RELEASE", &mut c);
        c.arg(token);
        c
    }
}

/// The options every request builder takes ([`crate::LockRequest`],
/// [`crate::RedlockRequest`], `aio::LockRequest`), on a type with the fields `spec: Spec`,
/// `watchdog: bool` and `on_lost: Option<Box<dyn FnOnce() + Send>>`.
macro_rules! lock_options {
    ($request:ident) => {
        impl $request<'_> {
            /// The lease (default 30 s).
            pub fn ttl(mut self, ttl: std::time::Duration) -> Self {
                self.spec.set_ttl(ttl);
                self
            }
            /// Wait up to `wait` for the lock, in the servers' FIFO queues
            /// (`WAIT`; Redlock waits briefly per attempt, see
            /// [`crate::Redlock`]). `Duration::MAX` waits for as long as
            /// the server allows (2^47 ms).
            pub fn wait(mut self, wait: std::time::Duration) -> Self {
                self.spec.wait = Some($crate::limits::clamp(wait));
                self
            }
            /// A cap on holding (`MAXHOLD`): the hold may live at most
            /// `max_hold` from its grant, however often it is renewed; the
            /// lease is the smaller of the ttl and `max_hold`. Renewals
            /// stay short of the cap (they ask for at most what is left to
            /// the acquire's first send plus `max_hold`; after a wait
            /// longer than that, the refresh learns from the server where
            /// the cap counted from the grant is), and the guard is
            /// then lost at the cap with that reason (`loss_reason` on the
            /// guard); a manual `extend` past it is refused by the server
            /// ([`crate::Error::MaxHold`]). A capped guard is never bound
            /// to a session. 1 ms to 2^47 ms.
            pub fn max_hold(mut self, max_hold: std::time::Duration) -> Self {
                self.spec.set_max_hold(max_hold);
                self
            }
            /// A shared hold (readers of a read-write lock).
            pub fn shared(mut self) -> Self {
                self.spec.shared = true;
                self
            }
            /// One of `n` permits (a semaphore; over several Redlock
            /// servers only `1`).
            pub fn limit(mut self, n: u32) -> Self {
                self.spec.limit = Some(n);
                self
            }
            /// With [`Self::limit`] `n` above 1: the hold counts as `k` of
            /// the `n` permits (`PERMITS`; docs/lock-kinds.md#weighted-permits),
            /// granted all at once or not at all, renewed and released as
            /// one. `k` from 1 (the default) to `n`; otherwise the acquire
            /// fails with [`crate::Error::Invalid`] before any server is
            /// asked.
            pub fn permits(mut self, k: u32) -> Self {
                self.spec.permits = Some(k);
                self
            }
            /// Where the request stands in the servers' queues: 0 (the
            /// default) to 1000, higher first, FIFO within one priority, aged
            /// by the server's `dlock.priority-aging-ms` so that nobody
            /// starves (`PRIORITY`; docs/waiting.md#priorities). Above 1000
            /// the acquire fails with [`crate::Error::Invalid`] before any
            /// server is asked.
            pub fn priority(mut self, p: u16) -> Self {
                self.spec.priority = Some(p);
                self
            }
            /// A reentrant hold of `owner`.
            pub fn owner(mut self, owner: impl Into<String>) -> Self {
                self.spec.owner = Some(owner.into());
                self
            }
            /// Renew in the background at ttl/3 until release; see
            /// [`crate::Guard::is_lost`] and [`crate::Guard::lost_signal`].
            pub fn watchdog(mut self) -> Self {
                self.watchdog = true;
                self
            }
            /// Called once when the lease is found lost: on the watchdog's
            /// thread, or on the thread whose acquire, `extend` or
            /// `release` found it.
            pub fn on_lost(mut self, f: impl FnOnce() + Send + 'static) -> Self {
                self.on_lost = Some(Box::new(f));
                self
            }
        }
    };
}
pub(crate) use lock_options;

/// A fresh 128-bit random token for one acquisition.
pub(crate) fn new_token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(c: &redis::Cmd) -> Vec<String> {
        c.args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
                redis::Arg::Cursor => "<cursor>".into(),
            })
            .collect()
    }

    #[test]
    fn max_hold_is_sent_and_caps_the_lease() {
        let mut s = Spec::new(vec!["r".into()]);
        s.set_ttl(Duration::from_secs(60));
        s.set_max_hold(Duration::from_secs(20));
        assert_eq!(s.ttl, Duration::from_secs(20), "the lease is the smaller");
        assert_eq!(
            args(&s.acquire_cmd("t", None)),
            ["DLOCK.ACQUIRE", "r", "t", "20000", "MAXHOLD", "20000"]
        );
        s.set_ttl(Duration::from_secs(5));
        assert_eq!(s.ttl, Duration::from_secs(5));
        s.set_ttl(Duration::from_secs(50));
        assert_eq!(s.ttl, Duration::from_secs(20), "in either order");
        assert!(s.validate().is_ok());
        s.set_max_hold(Duration::ZERO);
        assert!(matches!(s.validate(), Err(Error::Invalid(_))));
    }

    #[test]
    fn builds_single_and_set_commands() {
        let mut s = Spec::new(vec!["r".into()]);
        s.ttl = Duration::from_millis(1500);
        s.limit = Some(3);
        s.owner = Some("app".into());
        assert_eq!(
            args(&s.acquire_cmd("t", Some(200))),
            [
                "DLOCK.ACQUIRE",
                "r",
                "t",
                "1500",
                "LIMIT",
                "3",
                "OWNER",
                "app",
                "WAIT",
                "200"
            ]
        );
        assert_eq!(args(&s.release_cmd("t")), ["DLOCK.RELEASE", "r", "t"]);
        let bound = args(&s.acquire_cmd_in("t", Some(200), Some("s-1")));
        assert_eq!(bound[bound.len() - 4..], ["WAIT", "200", "SESSION", "s-1"]);
        s.priority = Some(7);
        let ranked = args(&s.acquire_cmd("t", Some(200)));
        assert_eq!(ranked[ranked.len() - 4..], ["WAIT", "200", "PRIORITY", "7"]);
        s.priority = None;
        s.permits = Some(2);
        let weighted = args(&s.acquire_cmd("t", None));
        assert_eq!(weighted[4..8], ["LIMIT", "3", "PERMITS", "2"]);
        s.permits = Some(1);
        assert!(
            !args(&s.acquire_cmd("t", None)).contains(&"PERMITS".to_string()),
            "one permit is sent as none"
        );
        s.permits = None;
        // WAIT 0 would wait forever: a wait used up is a plain try.
        assert!(!args(&s.acquire_cmd("t", Some(0))).contains(&"WAIT".to_string()));
        let mut set = Spec::new(vec!["{o}a".into(), "{o}b".into()]);
        set.shared = true;
        assert_eq!(
            args(&set.acquire_cmd("t", None)),
            [
                "DLOCK.MACQUIRE",
                "2",
                "{o}a",
                "{o}b",
                "t",
                "30000",
                "SHARED"
            ]
        );
        assert_eq!(
            args(&set.extend_cmd("t", Duration::from_secs(2))),
            ["DLOCK.MEXTEND", "2", "{o}a", "{o}b", "t", "2000"]
        );
        assert_eq!(
            args(&set.extend_cmd_wanted("t", Duration::from_secs(2), true)),
            ["DLOCK.MEXTEND", "2", "{o}a", "{o}b", "t", "2000", "WANTED"]
        );
        assert_eq!(
            args(&s.extend_cmd_wanted("t", Duration::from_secs(2), false)),
            ["DLOCK.EXTEND", "r", "t", "2000"]
        );
    }

    #[test]
    fn refuses_what_the_server_would_refuse() {
        let bad = |f: &dyn Fn(&mut Spec)| {
            let mut s = Spec::new(vec!["a".into()]);
            f(&mut s);
            assert!(matches!(s.validate(), Err(Error::Invalid(_))), "{s:?}");
        };
        bad(&|s| s.resources.clear());
        bad(&|s| s.resources = vec!["a".into(), "a".into()]);
        bad(&|s| s.resources = (0..65).map(|i| i.to_string()).collect());
        bad(&|s| s.ttl = Duration::from_micros(500));
        bad(&|s| s.limit = Some(0));
        bad(&|s| {
            s.shared = true;
            s.limit = Some(2)
        });
        bad(&|s| s.owner = Some(String::new()));
        bad(&|s| {
            s.resources.push("b".into());
            s.owner = Some("o".into())
        });
        bad(&|s| s.permits = Some(2));
        bad(&|s| {
            s.limit = Some(1);
            s.permits = Some(1)
        });
        bad(&|s| {
            s.limit = Some(3);
            s.permits = Some(4)
        });
        bad(&|s| {
            s.limit = Some(3);
            s.permits = Some(0)
        });
        bad(&|s| s.priority = Some(1001));
        bad(&|s| s.priority = Some(u16::MAX));
        assert!(Spec::new(vec!["a".into()]).validate().is_ok());
        let mut top = Spec::new(vec!["a".into()]);
        top.priority = Some(1000);
        assert!(top.validate().is_ok());
    }

    #[test]
    fn tokens_are_128_bit_and_distinct() {
        let (a, b) = (new_token(), new_token());
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
    }
}
