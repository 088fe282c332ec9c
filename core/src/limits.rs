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
