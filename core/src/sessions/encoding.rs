//! The sessions as bytes, for the RDB aux data: every live session (its
//! settings, deadline and the places of its holds) and every ending one
//! (its end and the places still to settle). Which connection a session is
//! bound to is never written: a restart has no connections.
//!
//! ```text
//! u8 version (1)
//! u32 live count,   count x { id, u64 ttl_ms, u64 lock_delay_ms, u64 deadline_ms, places }
//! u32 ending count, count x { id, u64 until_ms, places }
//! places: u32 count, count x { i32 db, key, token }
//! id, key, token: u32 length, bytes
//! ```
//! Little-endian throughout.

use super::{Place, Sessions, Settings};
use crate::limits::{MAX_SESSION_ID, MAX_STORED_TOKEN};

const VERSION: u8 = 1;

pub fn encode(sessions: &Sessions) -> Vec<u8> {
    let mut out = vec![VERSION];
    let live: Vec<_> = sessions.live_sessions().collect();
    put_u32(&mut out, live.len());
    for (id, s) in live {
        put_bytes(&mut out, id);
        out.extend_from_slice(&s.settings.ttl_ms.to_le_bytes());
        out.extend_from_slice(&s.settings.lock_delay_ms.to_le_bytes());
        out.extend_from_slice(&s.deadline_ms.to_le_bytes());
        put_places(&mut out, s.holds.by_seq.values());
    }
    let endings: Vec<_> = sessions.endings().collect();
    put_u32(&mut out, endings.len());
    for (id, e) in endings {
        put_bytes(&mut out, id);
        out.extend_from_slice(&e.until_ms.to_le_bytes());
        put_places(&mut out, e.places.by_seq.values());
    }
    out
}

/// Reads what `encode` wrote; refuses anything else, never panics.
pub fn decode(bytes: &[u8]) -> Result<Sessions, &'static str> {
    let mut r = Reader(bytes);
    if r.u8()? != VERSION {
        return Err("unknown sessions version");
    }
    let mut sessions = Sessions::new();
    for _ in 0..r.count(8 + 24 + 4)? {
        let id = r.bytes(MAX_SESSION_ID)?;
        let settings = Settings {
            ttl_ms: r.u64()?,
            lock_delay_ms: r.u64()?,
        };
        let deadline_ms = r.u64()?;
        sessions
            .put(id, settings, deadline_ms)
            .map_err(|_| "session out of range")?;
        for place in r.places()? {
            sessions.bind(id, place);
        }
    }
    for _ in 0..r.count(4 + 8 + 4)? {
        let id = r.bytes(MAX_SESSION_ID)?;
        let until_ms = r.u64()?;
        let places = r.places()?;
        if id.is_empty() || sessions.get(id).is_some() {
            return Err("ending session twice");
        }
        sessions.put_ending(id, until_ms, places);
    }
    if !r.0.is_empty() {
        return Err("trailing bytes");
    }
    Ok(sessions)
}

fn put_u32(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(&(n as u32).to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_u32(out, b.len());
    out.extend_from_slice(b);
}

fn put_places<'a>(out: &mut Vec<u8>, places: impl ExactSizeIterator<Item = &'a Place>) {
    put_u32(out, places.len());
    for p in places {
        out.extend_from_slice(&p.db.to_le_bytes());
        put_bytes(out, &p.key);
        put_bytes(out, &p.token);
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        if self.0.len() < n {
            return Err("truncated");
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, &'static str> {
        Ok(self.take(1)?.first().copied().unwrap_or(0))
    }
    fn u32(&mut self) -> Result<u32, &'static str> {
        let b: [u8; 4] = self.take(4)?.try_into().map_err(|_| "truncated")?;
        Ok(u32::from_le_bytes(b))
    }
    fn u64(&mut self) -> Result<u64, &'static str> {
        let b: [u8; 8] = self.take(8)?.try_into().map_err(|_| "truncated")?;
        Ok(u64::from_le_bytes(b))
    }
    fn i32(&mut self) -> Result<i32, &'static str> {
        let b: [u8; 4] = self.take(4)?.try_into().map_err(|_| "truncated")?;
        Ok(i32::from_le_bytes(b))
    }
    /// A count of entries of at least `min` bytes each: bounded by the
    /// bytes present, so no count makes the decoder allocate much.
    fn count(&mut self, min: usize) -> Result<usize, &'static str> {
        let n = self.u32()? as usize;
        if n > self.0.len() / min {
            return Err("count out of range");
        }
        Ok(n)
    }
    fn bytes(&mut self, max: usize) -> Result<&'a [u8], &'static str> {
        let b = self.any_bytes()?;
        if b.is_empty() || b.len() > max {
            return Err("length out of range");
        }
        Ok(b)
    }
    /// Key names may be empty.
    fn any_bytes(&mut self) -> Result<&'a [u8], &'static str> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    fn places(&mut self) -> Result<Vec<Place>, &'static str> {
        let n = self.count(4 + 4 + 5)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(Place {
                db: self.i32()?,
                key: self.any_bytes()?.into(),
                token: self.bytes(MAX_STORED_TOKEN)?.into(),
            });
        }
        Ok(out)
    }
}
