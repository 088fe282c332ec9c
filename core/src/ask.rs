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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
}

impl<'a> Ask<'a> {
    pub fn owner(&self) -> &'a [u8] {
        self.owner.unwrap_or(self.token)
    }
    pub fn limit(&self) -> u32 {
        self.limit.unwrap_or(1)
    }
    /// When a hold granted at `now_ms` ends: a session's hold never ends
    /// by time (its session's end releases it).
    #[inline]
    pub fn deadline_ms(&self, now_ms: u64) -> u64 {
        match self.session {
            Some(_) => crate::limits::NEVER,
            None => now_ms.saturating_add(self.ttl_ms),
        }
    }
}
