//! What a request asks of a resource's holds: its mode, owner and limit.
//! The parsers build it, the rules decide on it, the queues keep it.

/// A hold's kind: exclusive (a write lock, a permit, a plain lock) or
/// shared (a read lock).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Mode {
    #[default]
    Exclusive,
    Shared,
}

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ask<'a> {
    pub token: &'a [u8],
    /// `OWNER owner`; `None`: the token is the owner.
    pub owner: Option<&'a [u8]>,
    pub mode: Mode,
    /// `LIMIT n`; `None` is a plain lock (limit 1) or a read-write lock.
    pub limit: Option<u32>,
    pub ttl_ms: u64,
    /// `SESSION id`: the hold lives as long as that session, with no
    /// deadline of its own (`ttl_ms` is not used).
    pub session: Option<&'a [u8]>,
    /// `MAXHOLD ms`: the hold may live at most this long from its grant,
    /// across every extend (never with `session`).
    pub max_hold_ms: Option<u64>,
    /// `PERMITS k` above 1 (with `LIMIT` above 1): one hold that counts as
    /// k of the semaphore's permits; `None` is one permit.
    pub permits: Option<u32>,
}

impl<'a> Ask<'a> {
    /// How many of a semaphore's permits the hold takes.
    pub fn permits(&self) -> u32 {
        self.permits.unwrap_or(1)
    }
    pub fn owner(&self) -> &'a [u8] {
        self.owner.unwrap_or(self.token)
    }
    pub fn limit(&self) -> u32 {
        self.limit.unwrap_or(1)
    }
    /// When a hold granted at `now_ms` ends: a session's hold never ends
    /// by time (its session's end releases it); a capped one by its cap at
    /// the latest.
    #[inline]
    pub fn deadline_ms(&self, now_ms: u64) -> u64 {
        match self.session {
            Some(_) => crate::limits::NEVER,
            None => now_ms.saturating_add(self.ttl_ms.min(self.max_hold_ms.unwrap_or(u64::MAX))),
        }
    }

    /// The cap of a hold granted at `now_ms` (`MAXHOLD`), if it has one.
    #[inline]
    pub fn cap(&self, now_ms: u64) -> Option<Cap> {
        self.max_hold_ms.map(|ms| Cap {
            at_ms: now_ms.saturating_add(ms),
            ms,
        })
    }
}

/// A hold's cap (`MAXHOLD`): it may live until `at_ms` (absolute unix ms,
/// fixed at the grant) and no longer, whatever extends it; `ms` is what the
/// request asked, so that a same-token retry can be told apart from a
/// request asking another cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cap {
    pub at_ms: u64,
    pub ms: u64,
}

impl Cap {
    /// Whether a deadline moved to `deadline_ms` at `now_ms` stays within
    /// the cap: `Err` says how long the hold may still live. A deadline up
    /// to the cap itself passes.
    pub fn allows(&self, deadline_ms: u64, now_ms: u64) -> Result<(), crate::Error> {
        if deadline_ms <= self.at_ms {
            return Ok(());
        }
        Err(crate::Error::MaxHold {
            ms_left: self.at_ms.saturating_sub(now_ms),
        })
    }
}
