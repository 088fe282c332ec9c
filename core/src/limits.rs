//! The bounds on stored and parsed values that the parsers, the rules, the
//! decoders and the error texts all check against. Nothing here depends on
//! the rest of `lock`, so every other file may use it.

/// 2^47 ms is about 4,460 years: long enough for any lease, and small enough
/// that `now + ttl` can never overflow a signed 64-bit millisecond deadline.
pub const MAX_TTL_MS: u64 = 1 << 47;

/// The loader refuses longer tokens as corrupt; commands cap tokens far lower.
pub const MAX_STORED_TOKEN: usize = 1 << 20;

/// Most permits a semaphore can have.
pub const MAX_LIMIT: u32 = 1 << 20;

/// The highest `PRIORITY` a request may ask for (`crate::queue::Rank`).
pub const MAX_PRIORITY: u16 = 1000;

/// Longest session id (`DLOCK.SESSION OPEN id`): a UUID with room for a
/// prefix; ids travel in every bound hold's effect and stored value.
pub const MAX_SESSION_ID: usize = 256;

/// Longest lock-delay a session may ask for (`LOCKDELAY ms`): a delay that
/// keeps storage safe from a late writer, not a second lease.
pub const MAX_LOCK_DELAY_MS: u64 = 60_000;

/// The deadline of a hold that has none: a session's hold, or a plain lock
/// whose key an admin made persistent (`PERSIST`). As an `i64` of unix ms
/// it is far past any deadline a ttl can give.
pub const NEVER: u64 = i64::MAX as u64;

/// Most a guarded `BATCH`'s saved copies (for undoing it) may hold, so that
/// saving and undoing stay within one event-loop turn's budget.
pub const MAX_SAVED_BYTES: u64 = 4 << 20;
/// Most elements of collections (hash fields, list items, set members ...)
/// a guarded `BATCH`'s saved copies may hold.
pub const MAX_SAVED_ELEMENTS: u64 = 16 << 10;
/// Most keys a guarded `BATCH` may save (each copied, or deleted to undo).
pub const MAX_SAVED_KEYS: u64 = 1024;
