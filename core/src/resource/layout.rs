//! How a resource with several holds (or a limit, or an owner) is stored.
//! A plain lock keeps the one-hold layout of `lease.rs`, byte
//! for byte; every other resource uses this layout, which starts with eight
//! zero bytes: the plain decoder reads them as fence 0 and refuses the value
//! cleanly, so a release that knows only plain locks never misreads it.
//!
//! ```text
//! [0; 8]  marker          u8 layout version (1)
//! u32 limit               u32 count of holds
//! count x { u64 fence, u64 deadline_ms, u8 mode (0 exclusive, 1 shared),
//!           u32 token length, token, u32 owner length (0: the token), owner
//!           [layout 2: u32 session length (0: none), session] }
//! ```
//! Little-endian throughout. Layout 2 is written only when a hold is bound
//! to a session, so a value without one stays readable by a release that
//! knows only layout 1. A bound hold's deadline on disk is its session's
//! deadline when the value was written (`encode_with`): where the session
//! does not exist when the value is read (`MIGRATE`, `RESTORE` elsewhere),
//! the hold becomes an ordinary one ending then.

use crate::ask::Mode;
use crate::fence::MAX_FENCE;
use crate::limits::{MAX_LIMIT, MAX_SESSION_ID, MAX_STORED_TOKEN};
use crate::resource::holds::{Hold, HoldRef, Holds};
use crate::resource::lease::DecodeError;

const MARKER: [u8; 8] = [0; 8];
const LAYOUT_VERSION: u8 = 1;
const LAYOUT_WITH_SESSIONS: u8 = 2;
/// The smallest hold on disk: fence, deadline, mode, two lengths, one token byte.
const MIN_HOLD: usize = 8 + 8 + 1 + 4 + 1 + 4;

/// Whether stored bytes use this layout (and not the plain one).
pub fn is_multi(bytes: &[u8]) -> bool {
    bytes.starts_with(&MARKER)
}

pub fn encode(holds: &Holds) -> Vec<u8> {
    encode_with(holds, |_| None)
}

/// As `encode`, a bound hold's deadline written as `session_deadline` of
/// its session says (`None`: no deadline).
pub fn encode_with(holds: &Holds, session_deadline: impl Fn(&[u8]) -> Option<u64>) -> Vec<u8> {
    let bound = holds.iter().any(|h| h.session.is_some());
    let size: usize = holds
        .iter()
        .map(|h| {
            MIN_HOLD - 1
                + h.token.len()
                + owner_bytes(&h).len()
                + if bound {
                    4 + h.session.map_or(0, <[u8]>::len)
                } else {
                    0
                }
        })
        .sum();
    let mut out = Vec::with_capacity(8 + 1 + 4 + 4 + size);
    out.extend_from_slice(&MARKER);
    out.push(if bound {
        LAYOUT_WITH_SESSIONS
    } else {
        LAYOUT_VERSION
    });
    out.extend_from_slice(&holds.limit.to_le_bytes());
    out.extend_from_slice(&(holds.len() as u32).to_le_bytes());
    for h in holds.iter() {
        out.extend_from_slice(&h.fence.to_le_bytes());
        let deadline = match h.session {
            Some(s) => session_deadline(s).unwrap_or(h.deadline_ms),
            None => h.deadline_ms,
        };
        out.extend_from_slice(&deadline.to_le_bytes());
        out.push(match h.mode {
            Mode::Exclusive => 0,
            Mode::Shared => 1,
        });
        out.extend_from_slice(&(h.token.len() as u32).to_le_bytes());
        out.extend_from_slice(h.token);
        let owner = owner_bytes(&h);
        out.extend_from_slice(&(owner.len() as u32).to_le_bytes());
        out.extend_from_slice(owner);
        if bound {
            let session = h.session.unwrap_or_default();
            out.extend_from_slice(&(session.len() as u32).to_le_bytes());
            out.extend_from_slice(session);
        }
    }
    out
}

/// The owner as stored: empty when it is the token itself.
fn owner_bytes<'h>(h: &HoldRef<'h>) -> &'h [u8] {
    if h.owner == h.token {
        &[]
    } else {
        h.owner
    }
}

/// Reads bytes written by `encode`; refuses anything else, never panics.
/// Every hold stored with a session stays bound to it.
pub fn decode(bytes: &[u8]) -> Result<Holds, DecodeError> {
    decode_with(bytes, |_| true)
}

/// As `decode`; a hold stored with a session stays bound only if `exists`
/// says the session does, and otherwise keeps the deadline stored with it.
pub fn decode_with(bytes: &[u8], exists: impl Fn(&[u8]) -> bool) -> Result<Holds, DecodeError> {
    let mut r = Reader(bytes);
    if r.take(8)? != MARKER {
        return Err(DecodeError::Layout("no multi-hold marker"));
    }
    let with_sessions = match r.u8()? {
        LAYOUT_VERSION => false,
        LAYOUT_WITH_SESSIONS => true,
        _ => return Err(DecodeError::Layout("unknown multi-hold layout version")),
    };
    let limit = r.u32()?;
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(DecodeError::Layout("limit out of range"));
    }
    let count = r.u32()? as usize;
    // Bounded by the bytes present, so no count makes us allocate much.
    if count == 0 || count > r.0.len() / MIN_HOLD {
        return Err(DecodeError::Layout("hold count out of range"));
    }
    let mut holds = Holds::new(limit);
    for _ in 0..count {
        let fence = r.u64()?;
        if fence == 0 || fence > MAX_FENCE {
            return Err(DecodeError::FenceOutOfRange(fence));
        }
        let deadline_ms = r.u64()?;
        if deadline_ms > i64::MAX as u64 {
            return Err(DecodeError::Layout("deadline out of range"));
        }
        let mode = match r.u8()? {
            0 => Mode::Exclusive,
            1 => Mode::Shared,
            _ => return Err(DecodeError::Layout("unknown hold mode")),
        };
        let token = r.bytes()?;
        if token.is_empty() {
            return Err(DecodeError::TokenLength(0));
        }
        let owner = r.bytes()?;
        let owner = if owner.is_empty() { token } else { owner };
        let session = if with_sessions { r.bytes()? } else { &[] };
        if session.len() > MAX_SESSION_ID {
            return Err(DecodeError::Layout("session id too long"));
        }
        let session = (!session.is_empty() && exists(session)).then(|| session.into());
        let fresh = holds.push(Hold {
            token: token.into(),
            owner: owner.into(),
            fence,
            mode,
            deadline_ms,
            session,
        });
        if !fresh {
            return Err(DecodeError::Layout("holds that exclude each other"));
        }
    }
    if !r.0.is_empty() {
        return Err(DecodeError::Layout("trailing bytes"));
    }
    if limit > 1 && (holds.len() > limit as usize || holds.iter().any(|h| h.mode == Mode::Shared)) {
        return Err(DecodeError::Layout("semaphore holds out of range"));
    }
    // Bytes that decode but describe holds no command could make (two
    // writers, a reader beside another owner's writer, one token twice).
    if !holds.is_consistent() {
        return Err(DecodeError::Layout("holds that exclude each other"));
    }
    Ok(holds)
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.0.len() < n {
            return Err(DecodeError::Truncated);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?.first().copied().unwrap_or(0))
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        let b: [u8; 4] = self
            .take(4)?
            .try_into()
            .map_err(|_| DecodeError::Truncated)?;
        Ok(u32::from_le_bytes(b))
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        let b: [u8; 8] = self
            .take(8)?
            .try_into()
            .map_err(|_| DecodeError::Truncated)?;
        Ok(u64::from_le_bytes(b))
    }
    fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let n = self.u32()? as usize;
        if n > MAX_STORED_TOKEN {
            return Err(DecodeError::TokenLength(n));
        }
        self.take(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Lease;

    fn hold(token: &str, owner: &str, fence: u64, mode: Mode) -> Hold {
        Hold {
            token: token.as_bytes().into(),
            owner: owner.as_bytes().into(),
            fence,
            mode,
            deadline_ms: 1_700_000_000_000,
            session: None,
        }
    }

    fn sample() -> Holds {
        Holds::from_holds(
            1,
            vec![
                hold("a1", "A", 10, Mode::Shared),
                hold("a2", "A", 10, Mode::Shared),
                hold("r", "r", 11, Mode::Shared),
            ],
        )
    }

    #[test]
    fn round_trips() {
        let h = sample();
        let bytes = encode(&h);
        assert!(is_multi(&bytes));
        assert_eq!(decode(&bytes), Ok(h));
        let sem = Holds::from_holds(3, vec![hold("p", "p", 5, Mode::Exclusive)]);
        assert_eq!(decode(&encode(&sem)), Ok(sem));
    }

    #[test]
    fn the_plain_decoder_refuses_this_layout_cleanly() {
        // What the previous release does with such a value: refuse it.
        let bytes = encode(&sample());
        assert!(matches!(
            Lease::decode(2, &bytes),
            Err(DecodeError::FenceOutOfRange(0))
        ));
        assert!(!is_multi(&Lease::new(b"t", 5).encode()));
    }

    #[test]
    fn refuses_every_truncation_and_bad_field() {
        let good = encode(&sample());
        for n in 0..good.len() {
            assert!(decode(&good[..n]).is_err(), "truncated to {n}");
        }
        let mut trailing = good.clone();
        trailing.push(0);
        assert!(decode(&trailing).is_err());
        let field = |at: usize, v: u8| {
            let mut b = good.clone();
            b[at] = v;
            decode(&b)
        };
        assert!(field(8, 2).is_err(), "layout version");
        assert!(field(9, 0).is_err(), "limit 0");
        assert!(field(13, 0).is_err(), "zero holds");
        assert!(field(13, 200).is_err(), "more holds than bytes");
        assert!(field(17, 0).is_err(), "fence 0");
        assert!(field(33, 7).is_err(), "mode");
        let mut no_marker = good.clone();
        no_marker[0] = 1;
        assert!(decode(&no_marker).is_err());
    }

    #[test]
    fn a_semaphore_never_decodes_with_more_holds_than_permits_or_shared_ones() {
        let too_many = Holds::from_holds(
            2,
            vec![
                hold("a", "a", 1, Mode::Exclusive),
                hold("b", "b", 2, Mode::Exclusive),
                hold("c", "c", 3, Mode::Exclusive),
            ],
        );
        assert!(decode(&encode(&too_many)).is_err());
        let shared = Holds::from_holds(2, vec![hold("a", "a", 1, Mode::Shared)]);
        assert!(decode(&encode(&shared)).is_err());
    }

    #[test]
    fn a_token_named_twice_never_decodes() {
        let mut bytes = encode(&Holds::from_holds(
            1,
            vec![
                hold("a", "a", 1, Mode::Shared),
                hold("b", "b", 2, Mode::Shared),
            ],
        ));
        // The second hold's token byte, made the first's.
        let at = bytes.iter().rposition(|b| *b == b'b').unwrap();
        bytes[at] = b'a';
        assert_eq!(
            decode(&bytes),
            Err(DecodeError::Layout("holds that exclude each other"))
        );
    }
}
