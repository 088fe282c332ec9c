//! `--on-wanted SIGNAL` (exec, elect): the command's group gets SIGNAL
//! when someone starts waiting for the lock (the library's `on_wanted`,
//! told by the renewals). The hook only raises a flag; the supervising
//! loop, which knows the group, sends the signal, so a waiter seen before
//! the command started is told once it runs.

use crate::args::{usage, Parsed};
use dlock_client::Wanted;
use libc::c_int;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The signals `--on-wanted` takes, by name (with or without `SIG`).
const SIGNALS: [(&str, c_int); 9] = [
    ("HUP", libc::SIGHUP),
    ("INT", libc::SIGINT),
    ("QUIT", libc::SIGQUIT),
    ("USR1", libc::SIGUSR1),
    ("USR2", libc::SIGUSR2),
    ("TERM", libc::SIGTERM),
    ("ALRM", libc::SIGALRM),
    ("WINCH", libc::SIGWINCH),
    ("CONT", libc::SIGCONT),
];

/// `--on-wanted SIGNAL`: the signal, and whether it is due.
#[derive(Debug)]
pub struct OnWanted {
    pub signal: c_int,
    due: Arc<AtomicBool>,
}

impl OnWanted {
    /// `--on-wanted VALUE`: a name such as `USR1`, `SIGTERM`, or a number
    /// from 1 to 31.
    pub fn parse(value: &str) -> Parsed<OnWanted> {
        let upper = value.to_ascii_uppercase();
        let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
        let by_name = SIGNALS.iter().find(|(n, _)| *n == bare).map(|(_, s)| *s);
        let by_number = value.parse::<c_int>().ok().filter(|n| (1..=31).contains(n));
        match by_name.or(by_number) {
            Some(signal) => Ok(OnWanted {
                signal,
                due: Arc::default(),
            }),
            None => usage(format!(
                "--on-wanted {value:?}: a signal name (HUP, INT, QUIT, USR1, USR2, TERM, ALRM, \
                 WINCH, CONT) or number (1 to 31)"
            )),
        }
    }

    /// The library's hook: raises the flag; says once on stderr when the
    /// server cannot tell (renewals go on).
    pub fn hook(&self) -> impl FnMut(Wanted) + Send + 'static {
        let due = self.due.clone();
        move |w| match w {
            Wanted::Waiters(_) => due.store(true, Ordering::SeqCst),
            Wanted::Unsupported(why) => eprintln!(
                "dlock: warning: the server cannot say who waits (--on-wanted is ignored): {why}"
            ),
        }
    }

    /// Whether the signal is due (once per raise).
    pub fn take(&self) -> bool {
        self.due.swap(false, Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_by_name_or_number() {
        for (v, want) in [
            ("USR1", libc::SIGUSR1),
            ("sigusr1", libc::SIGUSR1),
            ("SIGTERM", libc::SIGTERM),
            ("hup", libc::SIGHUP),
            ("10", 10),
        ] {
            assert_eq!(OnWanted::parse(v).unwrap().signal, want, "{v}");
        }
        for bad in ["", "KILL", "SIGKILL9", "0", "32", "-1", "USR3"] {
            assert!(OnWanted::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_hook_raises_the_flag_once() {
        let w = OnWanted::parse("USR1").unwrap();
        let mut hook = w.hook();
        assert!(!w.take());
        hook(Wanted::Waiters(2));
        assert!(w.take());
        assert!(!w.take());
        hook(Wanted::Unsupported("old".into()));
        assert!(!w.take());
    }
}
