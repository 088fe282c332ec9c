//! Signals sent to `dlock exec`: blocked in every thread and taken by one
//! thread with `sigwait` (no handler runs, so nothing async-signal-unsafe
//! can happen in one). While the lock is being acquired, a signal ends
//! dlock the way it would have without it (default action; the server
//! drops the waiter with the connection). Once the lock is held, signals
//! are queued for the supervisor, which forwards them to the command's
//! process group.

use libc::c_int;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

/// What `dlock exec` forwards to the command.
pub const FORWARDED: [c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

#[derive(Clone, Copy, PartialEq)]
enum Phase {
    /// Acquiring: a signal ends dlock.
    Acquiring,
    /// Holding: signals go to the queue.
    Forwarding,
}

pub struct Signals {
    /// The mask dlock started with: the command gets it back.
    pub original: libc::sigset_t,
    phase: Arc<Mutex<Phase>>,
    rx: mpsc::Receiver<c_int>,
}

pub fn set_of(signals: &[c_int]) -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the set before sigaddset reads it.
    unsafe {
        let mut set = std::mem::zeroed::<libc::sigset_t>();
        libc::sigemptyset(&mut set);
        for &s in signals {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Blocks the forwarded signals (and `SIGTTOU`, so that dlock may write to
/// and take back a terminal whose foreground is the command's group) and
/// starts the thread that takes them. Call it before any other thread
/// starts: threads inherit the mask of the thread that creates them.
pub fn install() -> std::io::Result<Signals> {
    let mut blocked = FORWARDED.to_vec();
    blocked.push(libc::SIGTTOU);
    let set = set_of(&blocked);
    // SAFETY: plain libc calls on initialised sets.
    let original = unsafe {
        let mut old = std::mem::zeroed::<libc::sigset_t>();
        let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc));
        }
        old
    };
    let phase = Arc::new(Mutex::new(Phase::Acquiring));
    let (tx, rx) = mpsc::channel();
    let waited = set_of(&FORWARDED);
    let p = phase.clone();
    std::thread::Builder::new()
        .name("dlock-signals".into())
        .spawn(move || loop {
            let mut sig: c_int = 0;
            // SAFETY: `waited` is an initialised set of blocked signals.
            if unsafe { libc::sigwait(&waited, &mut sig) } != 0 {
                continue;
            }
            let phase = p.lock().unwrap_or_else(|e| e.into_inner());
            if *phase == Phase::Acquiring {
                crate::status_line::clear_now();
                die_of(sig);
            }
            let _ = tx.send(sig);
        })?;
    Ok(Signals {
        original,
        phase,
        rx,
    })
}

/// Ends the process by `sig` with its default action, as if dlock had not
/// caught it (so a shell sees "killed by SIGINT").
pub fn die_of(sig: c_int) -> ! {
    // SAFETY: resetting a disposition and unblocking in this thread only.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        let one = set_of(&[sig]);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &one, std::ptr::null_mut());
        libc::raise(sig);
    }
    // A signal whose default is to be ignored would not end us.
    std::process::exit(128 + sig)
}

impl Signals {
    /// From now on, signals are queued (see [`Signals::pending`]).
    pub fn forward(&self) {
        *self.phase.lock().unwrap_or_else(|e| e.into_inner()) = Phase::Forwarding;
    }

    /// Signals received since the last call, oldest first.
    pub fn pending(&self) -> Vec<c_int> {
        self.rx.try_iter().collect()
    }
}

/// `SIGTERM` → `"SIGTERM"`.
pub fn name(sig: c_int) -> String {
    match sig {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGHUP => "SIGHUP".into(),
        libc::SIGQUIT => "SIGQUIT".into(),
        libc::SIGKILL => "SIGKILL".into(),
        n => format!("signal {n}"),
    }
}
