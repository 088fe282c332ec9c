//! `on_wanted`: a held lock hears that someone waits for it. Renewals
//! send `EXTEND ... WANTED` (only when a hook is set), whose reply counts
//! the requests queued on the resource; the hook fires when that count
//! goes from 0 to more than 0 (once per such change, again after it went
//! back to 0). It runs on a thread of its own, never on the renewal's: a
//! slow hook cannot delay a renewal. A server that refuses the option (a
//! release before it) is told to the hook once, and renewals go on
//! without it: the lock is never lost over it.

use crate::error::Error;
use redis::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex};

/// What an `on_wanted` hook is told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wanted {
    /// This many requests now wait on the resource (for a set, on the
    /// member with the most), where none waited at the renewal before.
    Waiters(u64),
    /// The server refused `EXTEND ... WANTED` (a dlock release before it):
    /// told once; renewals go on without asking.
    Unsupported(String),
}

/// The hook of one held lock: the edge, and the thread that calls it.
pub(crate) struct WantedHook {
    tx: Mutex<mpsc::Sender<Wanted>>,
    /// Someone waited at the last renewal that said.
    wanted: AtomicBool,
    /// The server refused the option: renewals stop asking.
    refused: AtomicBool,
}

impl WantedHook {
    /// Starts the thread that calls `hook`; it ends with the hook (the
    /// lease that holds it dropped). `None` if no thread could be started.
    pub(crate) fn start(mut hook: Box<dyn FnMut(Wanted) + Send>) -> Option<WantedHook> {
        let (tx, rx) = mpsc::channel::<Wanted>();
        std::thread::Builder::new()
            .name("dlock-wanted".into())
            .spawn(move || {
                while let Ok(w) = rx.recv() {
                    hook(w);
                }
            })
            .ok()?;
        Some(WantedHook {
            tx: Mutex::new(tx),
            wanted: AtomicBool::new(false),
            refused: AtomicBool::new(false),
        })
    }

    /// Whether renewals ask (`WANTED`).
    pub(crate) fn asks(&self) -> bool {
        !self.refused.load(Ordering::Relaxed)
    }

    fn tell(&self, w: Wanted) {
        let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        let _ = tx.send(w);
    }

    /// A renewal's count of waiters: fires on a change from 0 to more.
    pub(crate) fn seen(&self, waiters: u64) {
        let now = waiters > 0;
        if self.wanted.swap(now, Ordering::Relaxed) != now && now {
            self.tell(Wanted::Waiters(waiters));
        }
    }

    /// Whether `e`, the reply to an `EXTEND ... WANTED`, is a server that
    /// does not know the option; if so renewals stop asking, and the hook
    /// is told (once).
    pub(crate) fn refused(&self, e: &Error) -> bool {
        if !is_unknown_option(e) {
            return false;
        }
        if !self.refused.swap(true, Ordering::Relaxed) {
            self.tell(Wanted::Unsupported(e.to_string()));
        }
        true
    }
}

/// A server before `WANTED` answers `EXTEND` with five arguments with its
/// arity error, and `MEXTEND` with one argument too many likewise.
fn is_unknown_option(e: &Error) -> bool {
    let text = e.to_string();
    matches!(e, Error::Server(_))
        && (text.contains("wrong number of arguments") || text.contains("syntax error"))
}

/// The `extended` and `waiters` of an `EXTEND`/`MEXTEND ... WANTED` reply
/// (a map in RESP3, a flat array in RESP2; other fields are skipped), or
/// the plain integer reply with no count. For a set, the most waiters of
/// any member.
pub(crate) fn read_reply(v: &Value) -> Option<(i64, Option<u64>)> {
    let pairs: Vec<(&Value, &Value)> = match v {
        Value::Int(n) => return Some((*n, None)),
        Value::Map(m) => m.iter().map(|(k, v)| (k, v)).collect(),
        Value::Array(flat) if flat.len() % 2 == 0 => {
            flat.chunks_exact(2).map(|p| (&p[0], &p[1])).collect()
        }
        _ => return None,
    };
    let (mut extended, mut waiters) = (None, None);
    for (k, v) in pairs {
        match (name(k)?, v) {
            ("extended", Value::Int(n)) => extended = Some(*n),
            ("waiters", Value::Int(n)) => waiters = Some(u64::try_from(*n).unwrap_or(0)),
            ("waiters", Value::Array(per_member)) => {
                let most = per_member.iter().map(|v| match v {
                    Value::Int(n) => u64::try_from(*n).unwrap_or(0),
                    _ => 0,
                });
                waiters = Some(most.max().unwrap_or(0));
            }
            _ => {}
        }
    }
    Some((extended?, waiters))
}

fn name(v: &Value) -> Option<&str> {
    match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok(),
        Value::SimpleString(s) => Some(s),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn reads_every_form_of_the_reply() {
        assert_eq!(read_reply(&Value::Int(1)), Some((1, None)));
        let flat = Value::Array(vec![
            bulk("extended"),
            Value::Int(1),
            bulk("waiters"),
            Value::Int(3),
        ]);
        assert_eq!(read_reply(&flat), Some((1, Some(3))));
        let map = Value::Map(vec![
            (
                bulk("waiters"),
                Value::Array(vec![Value::Int(0), Value::Int(2)]),
            ),
            (bulk("priority"), Value::Int(7)),
            (bulk("extended"), Value::Int(0)),
        ]);
        assert_eq!(
            read_reply(&map),
            Some((0, Some(2))),
            "by name, new fields skipped"
        );
        assert_eq!(read_reply(&Value::Nil), None);
        assert_eq!(read_reply(&Value::Array(vec![bulk("waiters")])), None);
        let no_extended = Value::Array(vec![bulk("waiters"), Value::Int(3)]);
        assert_eq!(read_reply(&no_extended), None);
    }

    #[test]
    fn fires_once_per_change_from_nobody_to_someone() {
        let (tx, rx) = mpsc::channel();
        let hook = WantedHook::start(Box::new(move |w| tx.send(w).unwrap())).unwrap();
        for n in [0, 2, 3, 1, 0, 0, 5, 5] {
            hook.seen(n);
        }
        let got: Vec<Wanted> = (0..2)
            .map(|_| rx.recv_timeout(Duration::from_secs(10)).unwrap())
            .collect();
        assert_eq!(got, [Wanted::Waiters(2), Wanted::Waiters(5)]);
        drop(hook);
        assert!(
            rx.recv_timeout(Duration::from_secs(10)).is_err(),
            "nothing more"
        );
    }

    #[test]
    fn a_refused_option_is_told_once_and_no_longer_asked() {
        let (tx, rx) = mpsc::channel();
        let hook = WantedHook::start(Box::new(move |w| tx.send(w).unwrap())).unwrap();
        let other = Error::Server("ERR something else".into());
        assert!(!hook.refused(&other));
        assert!(hook.asks());
        let arity =
            Error::Server("ERR wrong number of arguments for 'dlock.extend' command".into());
        assert!(hook.refused(&arity));
        assert!(hook.refused(&arity));
        assert!(!hook.asks());
        drop(hook);
        let got: Vec<Wanted> = rx.iter().collect();
        assert!(matches!(&got[..], [Wanted::Unsupported(m)] if m.contains("wrong number")));
    }
}
