//! The slow-lock log, like the server's `SLOWLOG`: holds that lasted longer
//! than one threshold and waits longer than another, newest first, in a
//! bounded ring. Every byte string is cut to a fixed length, so an entry's
//! size is bounded and so is the log's.

use std::collections::VecDeque;

/// Longest part of a resource, token, owner or session kept.
pub const FIELD_BYTES: usize = 256;

/// Longest log `dlock.slowlog-max-len` allows.
pub const MAX_LEN: u64 = 10_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slow {
    /// A hold that lasted long: released, revoked or ran out.
    Hold,
    /// A wait that lasted long: granted or given up.
    Wait,
}

impl Slow {
    pub fn name(self) -> &'static str {
        match self {
            Slow::Hold => "hold",
            Slow::Wait => "wait",
        }
    }
}

/// How the slow hold or wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    Released,
    Expired,
    Revoked,
    Granted,
    GaveUp,
}

impl Ended {
    pub fn name(self) -> &'static str {
        match self {
            Ended::Released => "released",
            Ended::Expired => "expired",
            Ended::Revoked => "revoked",
            Ended::Granted => "granted",
            Ended::GaveUp => "gave-up",
        }
    }
}

/// What the caller knows of a slow hold or wait.
#[derive(Debug, Clone, Copy)]
pub struct Seen<'a> {
    pub slow: Slow,
    pub ended: Ended,
    pub micros: u64,
    pub db: i32,
    pub resource: &'a [u8],
    pub token: &'a [u8],
    pub owner: Option<&'a [u8]>,
    pub session: Option<&'a [u8]>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub id: u64,
    /// Unix ms when it was logged (the hold's or the wait's end).
    pub at_ms: u64,
    pub slow: Slow,
    pub ended: Ended,
    pub micros: u64,
    pub db: i32,
    pub resource: Box<[u8]>,
    pub token: Box<[u8]>,
    pub owner: Option<Box<[u8]>>,
    pub session: Option<Box<[u8]>>,
    /// The client that ended the hold or waited, when there was one:
    /// `ip:port` (or a socket path) and its name.
    pub client_addr: Option<Box<str>>,
    pub client_name: Option<Box<str>>,
}

fn cut(b: &[u8]) -> Box<[u8]> {
    b.get(..FIELD_BYTES).unwrap_or(b).into()
}

fn cut_str(s: &str) -> Box<str> {
    let mut end = s.len().min(FIELD_BYTES);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.get(..end).unwrap_or_default().into()
}

/// Thresholds in microseconds; 0 logs nothing of that kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    pub hold_us: u64,
    pub wait_us: u64,
}

impl Thresholds {
    /// Whether a hold or wait of `micros` is logged.
    pub fn logs(&self, slow: Slow, micros: u64) -> bool {
        let t = match slow {
            Slow::Hold => self.hold_us,
            Slow::Wait => self.wait_us,
        };
        t > 0 && micros >= t
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlowLog {
    entries: VecDeque<Entry>,
    max_len: usize,
    next_id: u64,
}

impl SlowLog {
    pub fn new(max_len: u64) -> Self {
        SlowLog {
            entries: VecDeque::new(),
            max_len: max_len.min(MAX_LEN) as usize,
            next_id: 0,
        }
    }

    /// Keeps at most `max_len` entries from now on, the newest.
    pub fn set_max_len(&mut self, max_len: u64) {
        self.max_len = max_len.min(MAX_LEN) as usize;
        self.entries.truncate(self.max_len);
    }

    /// Logs `seen` at `at_ms`; its id, or `None` when the log keeps none.
    pub fn push(&mut self, seen: &Seen<'_>, at_ms: u64) -> Option<u64> {
        if self.max_len == 0 {
            return None;
        }
        let id = self.next_id;
        self.next_id += 1;
        if self.entries.len() >= self.max_len {
            self.entries.pop_back();
        }
        self.entries.push_front(Entry {
            id,
            at_ms,
            slow: seen.slow,
            ended: seen.ended,
            micros: seen.micros,
            db: seen.db,
            resource: cut(seen.resource),
            token: cut(seen.token),
            owner: seen.owner.map(cut),
            session: seen.session.map(cut),
            client_addr: None,
            client_name: None,
        });
        Some(id)
    }

    /// Names the client of entry `id`, if it is still in the log.
    pub fn name_client(&mut self, id: u64, addr: &str, name: &str) {
        let Some(newest) = self.entries.front().map(|e| e.id) else {
            return;
        };
        let Some(at) = newest.checked_sub(id).and_then(|d| usize::try_from(d).ok()) else {
            return;
        };
        if let Some(e) = self.entries.get_mut(at).filter(|e| e.id == id) {
            e.client_addr = Some(cut_str(addr));
            e.client_name = (!name.is_empty()).then(|| cut_str(name));
        }
    }

    /// The `count` newest entries, newest first.
    pub fn newest(&self, count: usize) -> impl Iterator<Item = &Entry> {
        self.entries.iter().take(count)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Empties the log; ids go on increasing, as `SLOWLOG RESET` does.
    pub fn reset(&mut self) {
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(name: &[u8], micros: u64) -> Seen<'_> {
        Seen {
            slow: Slow::Hold,
            ended: Ended::Released,
            micros,
            db: 0,
            resource: name,
            token: name,
            owner: None,
            session: None,
        }
    }

    #[test]
    fn a_bounded_ring_newest_first_with_increasing_ids() {
        let mut log = SlowLog::new(3);
        for i in 0..5u64 {
            assert_eq!(
                log.push(&seen(format!("r{i}").as_bytes(), i), 100 + i),
                Some(i)
            );
        }
        let ids: Vec<u64> = log.newest(10).map(|e| e.id).collect();
        assert_eq!(ids, [4, 3, 2]);
        log.name_client(3, "127.0.0.1:5000", "worker");
        log.name_client(0, "gone", "gone");
        let e3 = log.newest(2).nth(1).unwrap();
        assert_eq!(e3.client_addr.as_deref(), Some("127.0.0.1:5000"));
        assert_eq!(e3.client_name.as_deref(), Some("worker"));
        log.set_max_len(1);
        assert_eq!(log.len(), 1);
        log.reset();
        assert!(log.is_empty());
        assert_eq!(log.push(&seen(b"r", 1), 0), Some(5));
        log.set_max_len(0);
        assert_eq!(log.push(&seen(b"r", 1), 0), None);
        assert!(log.is_empty());
    }

    #[test]
    fn fields_are_cut_and_thresholds_of_zero_log_nothing() {
        let mut log = SlowLog::new(10);
        let long = vec![b'x'; 10_000];
        log.push(&seen(&long, 1), 0);
        log.name_client(0, &"é".repeat(500), "");
        let e = log.newest(1).next().unwrap();
        assert_eq!(
            (e.resource.len(), e.token.len()),
            (FIELD_BYTES, FIELD_BYTES)
        );
        assert!(e.client_addr.as_ref().unwrap().len() <= FIELD_BYTES);
        assert_eq!(e.client_name, None);
        let t = Thresholds {
            hold_us: 0,
            wait_us: 5,
        };
        assert!(!t.logs(Slow::Hold, u64::MAX));
        assert!(t.logs(Slow::Wait, 5) && !t.logs(Slow::Wait, 4));
    }
}
