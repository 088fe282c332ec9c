//! How a resource with several holds (or a limit, or an owner) is stored.
//! A plain lock keeps the one-hold layout of `lease.rs`, byte
//! for byte; every other resource uses this layout, which starts with eight
//! zero bytes: the plain decoder reads them as fence 0 and refuses the value
//! cleanly, so a release that knows only plain locks never misreads it.
//!
//! ```text
//! [0; 8]  marker          u8 layout version (1 to 4)
//! [layout 4: u8 flags]
//! u32 limit               u32 count of holds
//! count x { u64 fence, u64 deadline_ms, u8 mode (0 exclusive, 1 shared),
//!           u32 token length, token, u32 owner length (0: the token), owner
//!           [layout 2 and 3, layout 4 with flag bit 0:
//!                u32 session length (0: none), session, u64 ends_by]
//!           [layout 3, layout 4 with flag bit 1:
//!                u64 cap_ms, u64 max_hold_ms (both 0: no cap)]
//!           [layout 4 with flag bit 2: u32 permits (1 to limit)] }
//! ```
//! Layout 4's flags say which optional fields every hold has, in bit
//! order: bit 0 the session fields, bit 1 the cap fields, bit 2 the
//! permits (`PERMITS`); bit 3 marks the value resized (`DLOCK.RESIZE`: its
//! holds may pass its limit); any other bit is refused. Layout 4 is
//! written only when a hold counts as more than one permit or the value
//! was resized, so every other value keeps the layout an older release
//! reads.
//! Little-endian throughout. Layout 2 is written only when a hold is bound
//! to a session, layout 3 only when a hold is capped (`MAXHOLD`), so a
//! value without either stays readable by a release that knows only
//! layout 1 (and one without a cap by a release that knows layout 2). `ends_by` is when a bound hold ends at the latest
//! as the writer saw it: its session's deadline, or its own (`encode_with`).
//! Where the session does not exist when the value is read (`MIGRATE`,
//! `RESTORE` elsewhere) the hold becomes an ordinary one ending then.

use crate::ask::Mode;
use crate::fence::MAX_FENCE;
use crate::limits::{MAX_LIMIT, MAX_SESSION_ID, MAX_STORED_TOKEN, MAX_TTL_MS};
use crate::resource::holds::{Hold, HoldRef, Holds};
use crate::resource::lease::DecodeError;

const MARKER: [u8; 8] = [0; 8];
const LAYOUT_VERSION: u8 = 1;
const LAYOUT_WITH_SESSIONS: u8 = 2;
const LAYOUT_WITH_CAPS: u8 = 3;
const LAYOUT_WITH_FLAGS: u8 = 4;
const FLAG_SESSIONS: u8 = 1 << 0;
const FLAG_CAPS: u8 = 1 << 1;
const FLAG_PERMITS: u8 = 1 << 2;
const FLAG_RESIZED: u8 = 1 << 3;
const KNOWN_FLAGS: u8 = FLAG_SESSIONS | FLAG_CAPS | FLAG_PERMITS | FLAG_RESIZED;
/// The smallest hold on disk: fence, deadline, mode, two lengths, one token byte.
const MIN_HOLD: usize = 8 + 8 + 1 + 4 + 1 + 4;

/// Whether stored bytes use this layout (and not the plain one).
pub fn is_multi(bytes: &[u8]) -> bool {
    bytes.starts_with(&MARKER)
}

pub fn encode(holds: &Holds) -> Vec<u8> {
    encode_with(holds, |_| None)
}

/// As `encode`, a bound hold's `ends_by` being what `session_deadline` says
/// of its session (`None`: its own deadline).
pub fn encode_with(holds: &Holds, session_deadline: impl Fn(&[u8]) -> Option<u64>) -> Vec<u8> {
    let capped = holds.iter().any(|h| h.cap.is_some());
    let with_session = holds.iter().any(|h| h.session.is_some());
    let weighted = holds.is_weighted();
    let flagged = weighted || holds.resized;
    // Layouts 1-3 as before while nothing needs layout 4; in layout 3 a
    // capped value carries the session fields too.
    let bound = with_session || (capped && !flagged);
    let flags = (if bound { FLAG_SESSIONS } else { 0 })
        | (if capped { FLAG_CAPS } else { 0 })
        | (if weighted { FLAG_PERMITS } else { 0 })
        | (if holds.resized { FLAG_RESIZED } else { 0 });
    let size: usize = holds
        .iter()
        .map(|h| {
            MIN_HOLD - 1
                + h.token.len()
                + owner_bytes(&h).len()
                + if bound {
                    4 + h.session.map_or(0, <[u8]>::len) + 8
                } else {
                    0
                }
                + if capped { 16 } else { 0 }
                + if weighted { 4 } else { 0 }
        })
        .sum();
    let mut out = Vec::with_capacity(8 + 2 + 4 + 4 + size);
    out.extend_from_slice(&MARKER);
    if flagged {
        out.push(LAYOUT_WITH_FLAGS);
        out.push(flags);
    } else {
        out.push(match (capped, bound) {
            (true, _) => LAYOUT_WITH_CAPS,
            (false, true) => LAYOUT_WITH_SESSIONS,
            (false, false) => LAYOUT_VERSION,
        });
    }
    out.extend_from_slice(&holds.limit.to_le_bytes());
    out.extend_from_slice(&(holds.len() as u32).to_le_bytes());
    for h in holds.iter() {
        out.extend_from_slice(&h.fence.to_le_bytes());
        out.extend_from_slice(&h.deadline_ms.to_le_bytes());
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
            let ends_by = match h.session {
                Some(s) if h.deadline_ms >= crate::limits::NEVER => {
                    session_deadline(s).unwrap_or(h.deadline_ms)
                }
                _ => h.deadline_ms,
            };
            out.extend_from_slice(&ends_by.to_le_bytes());
        }
        if capped {
            let (at, ms) = h.cap.map_or((0, 0), |c| (c.at_ms, c.ms));
            out.extend_from_slice(&at.to_le_bytes());
            out.extend_from_slice(&ms.to_le_bytes());
        }
        if weighted {
            out.extend_from_slice(&h.permits.to_le_bytes());
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
/// says the session does (live or ending), and otherwise becomes an
/// ordinary hold ending by its `ends_by`.
pub fn decode_with(bytes: &[u8], exists: impl Fn(&[u8]) -> bool) -> Result<Holds, DecodeError> {
    let mut r = Reader(bytes);
    if r.take(8)? != MARKER {
        return Err(DecodeError::Layout("no multi-hold marker"));
    }
    let flags = match r.u8()? {
        LAYOUT_VERSION => 0,
        LAYOUT_WITH_SESSIONS => FLAG_SESSIONS,
        LAYOUT_WITH_CAPS => FLAG_SESSIONS | FLAG_CAPS,
        LAYOUT_WITH_FLAGS => match r.u8()? {
            f if f & !KNOWN_FLAGS == 0 => f,
            _ => return Err(DecodeError::Layout("unknown multi-hold layout flags")),
        },
        _ => return Err(DecodeError::Layout("unknown multi-hold layout version")),
    };
    let with_sessions = flags & FLAG_SESSIONS != 0;
    let with_caps = flags & FLAG_CAPS != 0;
    let with_permits = flags & FLAG_PERMITS != 0;
    let resized = flags & FLAG_RESIZED != 0;
    let limit = r.u32()?;
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(DecodeError::Layout("limit out of range"));
    }
    let count = r.u32()? as usize;
    // Bounded by the bytes present, so no count makes us allocate much.
    if count == 0 || count > r.0.len() / MIN_HOLD {
        return Err(DecodeError::Layout("hold count out of range"));
    }
    if resized && limit < 2 {
        return Err(DecodeError::Layout("a resized value that is no semaphore"));
    }
    let mut holds = Holds::new(limit);
    holds.resized = resized;
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
        let ends_by = if with_sessions { r.u64()? } else { deadline_ms };
        if ends_by > i64::MAX as u64 {
            return Err(DecodeError::Layout("deadline out of range"));
        }
        let cap = if with_caps { read_cap(&mut r)? } else { None };
        let permits = if with_permits { r.u32()? } else { 1 };
        // A resize down keeps every hold, one of more permits than the new
        // limit included.
        let most = if resized { MAX_LIMIT } else { limit };
        if !(1..=most).contains(&permits) {
            return Err(DecodeError::Layout("permits out of range"));
        }
        if cap.is_some() && !session.is_empty() {
            return Err(DecodeError::Layout("a cap on a session's hold"));
        }
        // No hold outlives its cap, whatever wrote the bytes.
        let deadline_ms = cap.map_or(deadline_ms, |c| deadline_ms.min(c.at_ms));
        let (session, deadline_ms) = match session {
            [] => (None, deadline_ms),
            s if exists(s) => (Some(s.into()), deadline_ms),
            _ => (None, deadline_ms.min(ends_by)),
        };
        let fresh = holds.push(Hold {
            token: token.into(),
            owner: owner.into(),
            fence,
            mode,
            deadline_ms,
            session,
            cap,
            permits,
        });
        if !fresh {
            return Err(DecodeError::Layout("holds that exclude each other"));
        }
    }
    if !r.0.is_empty() {
        return Err(DecodeError::Layout("trailing bytes"));
    }
    // A semaphore's permits past its limit (unless resized), or a reader.
    if limit > 1 && !holds.is_consistent() {
        return Err(DecodeError::Layout("semaphore holds out of range"));
    }
    // Bytes that decode but describe holds no command could make (two
    // writers, a reader beside another owner's writer, one token twice).
    if !holds.is_consistent() {
        return Err(DecodeError::Layout("holds that exclude each other"));
    }
    Ok(holds)
}

/// A hold's cap as layout 3 stores it: both 0 for none.
fn read_cap(r: &mut Reader<'_>) -> Result<Option<crate::ask::Cap>, DecodeError> {
    let (at_ms, ms) = (r.u64()?, r.u64()?);
    match (at_ms, ms) {
        (0, 0) => Ok(None),
        (at_ms, ms) if at_ms <= i64::MAX as u64 && (1..=MAX_TTL_MS).contains(&ms) => {
            Ok(Some(crate::ask::Cap { at_ms, ms }))
        }
        _ => Err(DecodeError::Layout("cap out of range")),
    }
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
            cap: None,
            permits: 1,
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
    fn a_cap_is_written_in_layout_3_only_when_a_hold_has_one() {
        let mut h = sample();
        assert_eq!(encode(&h)[8], LAYOUT_VERSION, "no cap: the old layout");
        let cap = crate::ask::Cap {
            at_ms: 1_700_000_000_500,
            ms: 2_000,
        };
        h.push(Hold {
            cap: Some(cap),
            ..hold("c", "c", 12, Mode::Shared)
        });
        let bytes = encode(&h);
        assert_eq!(bytes[8], LAYOUT_WITH_CAPS);
        let back = decode(&bytes).unwrap();
        assert_eq!(back, h);
        assert_eq!(back.hold_of(b"c").and_then(|x| x.cap), Some(cap));
        assert_eq!(back.hold_of(b"r").and_then(|x| x.cap), None);
        for n in 0..bytes.len() {
            assert!(decode(&bytes[..n]).is_err(), "truncated to {n}");
        }
        // A deadline past the cap, from whatever wrote it, ends at the cap.
        let mut late = Holds::new(1);
        late.push(Hold {
            cap: Some(crate::ask::Cap {
                at_ms: 1_600_000_000_000,
                ms: 5,
            }),
            ..hold("x", "x", 3, Mode::Exclusive)
        });
        let back = decode(&encode(&late)).unwrap();
        assert_eq!(
            back.hold_of(b"x").map(|x| x.deadline_ms),
            Some(1_600_000_000_000)
        );
        // A cap out of range is refused.
        let mut bad = encode(&late);
        let at = bad.len() - 8;
        bad[at..].copy_from_slice(&0u64.to_le_bytes());
        assert!(decode(&bad).is_err(), "MAXHOLD 0 with a cap");
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
