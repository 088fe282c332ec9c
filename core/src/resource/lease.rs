//! The lock value: who holds the resource and under which fence.
//!
//! The lease's end is not stored here: it is the key's own Redis TTL, so
//! `PTTL`, `EXPIRE`, `PERSIST` and active expiry all see the real thing.

use crate::fence::MAX_FENCE;
use crate::limits::MAX_STORED_TOKEN;

/// The data type's encoding version this build registers: the server
/// stamps it on every value (RDB, `DUMP`, `MIGRATE`) and on the aux data,
/// and a release refuses any version above the newest it reads. The lock
/// value layout is the same in every version; version 2 added
/// restart-quarantine metadata to the aux data (`aux.rs`). Kept at 2, what
/// the previous release reads, for as long as nothing written needs more:
/// a new kind of data says so inside its own bytes, so that only that data
/// is refused by an older release (docs/operations.md#compatibility).
pub const ENCODING_VERSION: i32 = 2;

/// The newest encoding version this build reads. Version 3 (aux data that
/// always carries a quarantine's end) was written by a release that stamped
/// it on every value; such files and payloads must still load.
pub const NEWEST_READ_VERSION: i32 = 3;

/// An owned lease: what the decoder produces and tests build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    fence: u64,
    token: Box<[u8]>,
}

/// A lease as stored in the keyspace, borrowed: whatever holds the bytes
/// (the server keeps fence and token in one allocation) hands out this view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseRef<'a> {
    fence: u64,
    token: &'a [u8],
}

impl<'a> LeaseRef<'a> {
    #[inline]
    pub fn new(token: &'a [u8], fence: u64) -> Self {
        LeaseRef { fence, token }
    }

    #[inline]
    pub fn fence(&self) -> u64 {
        self.fence
    }

    #[inline]
    pub fn token(&self) -> &'a [u8] {
        self.token
    }

    /// Byte-for-byte: tokens are opaque and binary-safe.
    #[inline]
    pub fn is_owned_by(&self, token: &[u8]) -> bool {
        self.token == token
    }

    /// Layout v1: fence as 8 bytes little-endian, then the token bytes. One
    /// buffer means one RDB string, and a pure decoder that can be tested
    /// (and fuzzed) against any bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 + self.token.len());
        out.extend_from_slice(&self.fence.to_le_bytes());
        out.extend_from_slice(self.token);
        out
    }
}

impl Lease {
    pub fn new(token: &[u8], fence: u64) -> Self {
        Lease {
            fence,
            token: token.into(),
        }
    }

    pub fn as_ref(&self) -> LeaseRef<'_> {
        LeaseRef::new(&self.token, self.fence)
    }

    pub fn fence(&self) -> u64 {
        self.fence
    }

    pub fn token(&self) -> &[u8] {
        &self.token
    }

    pub fn is_owned_by(&self, token: &[u8]) -> bool {
        self.as_ref().is_owned_by(token)
    }

    pub fn encode(&self) -> Vec<u8> {
        self.as_ref().encode()
    }

    pub fn decode(version: i32, bytes: &[u8]) -> Result<Lease, DecodeError> {
        if !(1..=NEWEST_READ_VERSION).contains(&version) {
            return Err(DecodeError::UnknownVersion(version));
        }
        let (fence, token) = bytes
            .split_first_chunk::<8>()
            .ok_or(DecodeError::Truncated)?;
        let fence = u64::from_le_bytes(*fence);
        if fence == 0 || fence > MAX_FENCE {
            return Err(DecodeError::FenceOutOfRange(fence));
        }
        if token.is_empty() || token.len() > MAX_STORED_TOKEN {
            return Err(DecodeError::TokenLength(token.len()));
        }
        Ok(Lease::new(token, fence))
    }
}

/// Why stored bytes were refused; the loader logs it and fails the load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    UnknownVersion(i32),
    Truncated,
    FenceOutOfRange(u64),
    TokenLength(usize),
    /// A multi-hold value (`layout.rs`) that does not decode.
    Layout(&'static str),
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::UnknownVersion(v) => write!(f, "unknown encoding version {v}"),
            DecodeError::Truncated => write!(f, "truncated lock value"),
            DecodeError::FenceOutOfRange(x) => write!(f, "fence {x} out of range"),
            DecodeError::TokenLength(n) => write!(f, "token length {n} out of range"),
            DecodeError::Layout(what) => write!(f, "multi-hold value: {what}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::request::args::Acquire;
    use crate::resource::admission::{Decision, Summary};
    use crate::{Error, FenceClock};

    fn req(token: &[u8]) -> Acquire<'_> {
        Acquire {
            members: crate::request::args::Members::ONE,
            token,
            ttl_ms: 10,
            wait_ms: None,
            max_new_token: 512,
            mode: crate::ask::Mode::Exclusive,
            limit: None,
            owner: None,
            session: None,
            max_hold_ms: None,
            permits: None,
            priority: None,
        }
    }

    /// A plain ACQUIRE of `r` on `held`, as the plain path decides it.
    fn acquire(
        held: Option<&Lease>,
        r: &Acquire<'_>,
        clock: &mut FenceClock,
        now_us: u64,
    ) -> Result<Decision, Error> {
        Summary::of_plain(held.map(Lease::as_ref)).decide(
            &r.ask(),
            false,
            None,
            || r.check_new_token(),
            clock,
            || now_us,
        )
    }

    #[test]
    fn a_token_over_the_limit_refreshes_its_hold_but_gets_no_new_grant() {
        let mut clock = FenceClock::new();
        let long = [b'x'; 8];
        let r = Acquire {
            max_new_token: 4,
            ..req(&long)
        };
        let held = Lease::new(&long, 7);
        let d = acquire(Some(&held), &r, &mut clock, 900).unwrap();
        assert_eq!(d, Decision::Refresh { fence: 7 });
        let other = Lease::new(b"a", 7);
        let d = acquire(Some(&other), &r, &mut clock, 900).unwrap();
        assert_eq!(d, Decision::Busy, "the caller decides about waiting");
        let d = acquire(None, &r, &mut clock, 900);
        assert_eq!(d, Err(Error::TokenTooLong { max: 4 }));
        assert_eq!(clock.last(), 0, "a refused grant consumes no fence");
    }

    #[test]
    fn free_resource_is_granted_with_a_new_fence() {
        let mut clock = FenceClock::new();
        let d = acquire(None, &req(b"a"), &mut clock, 500).unwrap();
        assert_eq!(d, Decision::Grant { fence: 500 });
    }

    #[test]
    fn same_token_refreshes_with_the_same_fence_and_no_clock_tick() {
        let mut clock = FenceClock::new();
        let held = Lease::new(b"a", 7);
        let before = clock.clone();
        let d = acquire(Some(&held), &req(b"a"), &mut clock, 900).unwrap();
        assert_eq!(d, Decision::Refresh { fence: 7 });
        assert_eq!(clock, before);
    }

    #[test]
    fn other_token_is_busy_and_consumes_no_fence() {
        let mut clock = FenceClock::new();
        let held = Lease::new(b"a", 7);
        let d = acquire(Some(&held), &req(b"b"), &mut clock, 900).unwrap();
        assert_eq!(d, Decision::Busy);
        assert_eq!(clock.last(), 0);
    }

    #[test]
    fn ownership_is_byte_exact() {
        let held = Lease::new(b"tok\x00", 1);
        assert!(held.is_owned_by(b"tok\x00"));
        assert!(!held.is_owned_by(b"tok"));
        assert!(!held.is_owned_by(b"TOK\x00"));
    }

    #[test]
    fn version_1_values_still_load() {
        // Bytes as dlock's first release wrote them: fence 5 LE, token "t".
        let v1 = [5, 0, 0, 0, 0, 0, 0, 0, b't'];
        assert_eq!(Lease::decode(1, &v1), Ok(Lease::new(b"t", 5)));
    }

    #[test]
    fn version_3_values_still_load() {
        // A plain lock as the release that stamped version 3 on every value
        // wrote it (the same layout): fence 1795366037458587 LE, token "tok".
        let v3 = [
            0x9b, 0x8e, 0xe7, 0x3a, 0xe0, 0x60, 0x06, 0x00, b't', b'o', b'k',
        ];
        assert_eq!(
            Lease::decode(3, &v3),
            Ok(Lease::new(b"tok", 1_795_366_037_458_587))
        );
    }

    #[test]
    fn encoding_round_trips() {
        let l = Lease::new(b"\x00binary\xff", 1_700_000_000_000_000);
        assert_eq!(Lease::decode(ENCODING_VERSION, &l.encode()), Ok(l));
    }

    #[test]
    fn decoder_refuses_nonsense() {
        let good = Lease::new(b"t", 5).encode();
        let next = NEWEST_READ_VERSION + 1;
        assert_eq!(
            Lease::decode(next, &good),
            Err(DecodeError::UnknownVersion(next))
        );
        for other in 1..=NEWEST_READ_VERSION {
            assert_eq!(
                Lease::decode(other, &good),
                Lease::decode(ENCODING_VERSION, &good)
            );
        }
        assert_eq!(Lease::decode(0, &good), Err(DecodeError::UnknownVersion(0)));
        assert_eq!(Lease::decode(1, &good[..7]), Err(DecodeError::Truncated));
        assert_eq!(
            Lease::decode(1, &good[..8]),
            Err(DecodeError::TokenLength(0))
        );
        assert_eq!(
            Lease::decode(1, &[0u8; 9]),
            Err(DecodeError::FenceOutOfRange(0))
        );
        let mut huge = u64::MAX.to_le_bytes().to_vec();
        huge.push(b'x');
        assert_eq!(
            Lease::decode(1, &huge),
            Err(DecodeError::FenceOutOfRange(u64::MAX))
        );
    }
}
