//! The terminal of the live view: keys read one at a time without echo
//! (termios), the alternate screen, and the terminal given back as it was
//! however the view ends: `q`, SIGINT, SIGTERM, SIGHUP, or a panic.
//! Signals are turned into bytes on a pipe (the handler only writes one
//! byte, which is async-signal-safe) that [`Terminal::wait`] polls with
//! the keyboard.

use std::io::Write;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// The terminal's settings before the view, while it runs (given back by
/// [`restore`], once).
static SAVED: Mutex<Option<libc::termios>> = Mutex::new(None);
/// The write end of the signal pipe (-1: none).
static SIGNAL_FD: AtomicI32 = AtomicI32::new(-1);

const ENTER: &str = "\x1b[?1049h\x1b[?25l\x1b[H\x1b[2J";
const LEAVE: &str = "\x1b[?25h\x1b[?1049l";

/// The signals that end the view; SIGWINCH redraws it.
const ENDING: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// What ended a wait.
#[derive(Debug, PartialEq)]
pub enum Event {
    /// The interval passed.
    Tick,
    Key(u8),
    /// The window changed size.
    Resized,
    /// A signal that ends the view.
    Signal(libc::c_int),
}

pub struct Terminal {
    /// The read end of the signal pipe.
    signals: libc::c_int,
    /// False once stdin reached its end (it is then not polled: it would
    /// be readable forever).
    keys: bool,
}

pub fn is_tty(fd: libc::c_int) -> bool {
    // SAFETY: isatty only reads the descriptor's state.
    unsafe { libc::isatty(fd) == 1 }
}

/// The window's size (columns, rows); 80x24 when unknown.
pub fn size() -> (usize, usize) {
    // SAFETY: TIOCGWINSZ writes a winsize into the zeroed struct given.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) } == 0;
    if ok && ws.ws_col > 0 && ws.ws_row > 0 {
        (ws.ws_col.into(), ws.ws_row.into())
    } else {
        (80, 24)
    }
}

extern "C" fn on_signal(sig: libc::c_int) {
    let fd = SIGNAL_FD.load(Ordering::Relaxed);
    if fd >= 0 {
        let b = sig as u8;
        // SAFETY: write(2) is async-signal-safe; a full pipe drops the byte
        // (one is enough).
        unsafe { libc::write(fd, (&b as *const u8).cast(), 1) };
    }
}

/// Gives the terminal back: its settings, the main screen, the cursor.
/// Idempotent (the panic hook, a signal and the normal end may all call it).
pub fn restore() {
    let saved = SAVED.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(t) = saved {
        let mut out = std::io::stdout();
        let _ = out.write_all(LEAVE.as_bytes());
        let _ = out.flush();
        // SAFETY: the settings read by tcgetattr at the start.
        unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSAFLUSH, &t) };
    }
}

impl Terminal {
    /// Enters the view: keys unbuffered and not echoed, the alternate
    /// screen, the hooks that give the terminal back. stdin must be the
    /// terminal.
    pub fn enter() -> std::io::Result<Terminal> {
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills the two descriptors.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: tcgetattr fills the zeroed struct.
        let mut t: libc::termios = unsafe { std::mem::zeroed() };
        if unsafe { libc::tcgetattr(libc::STDIN_FILENO, &mut t) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        *SAVED.lock().unwrap_or_else(|e| e.into_inner()) = Some(t);
        let mut raw = t;
        // Keys come one by one, unseen; output processing (newlines) and
        // the terminal's own Ctrl-C (SIGINT) stay.
        raw.c_lflag &= !(libc::ICANON | libc::ECHO | libc::IEXTEN);
        raw.c_iflag &= !(libc::IXON | libc::ICRNL);
        raw.c_cc[libc::VMIN] = 1;
        raw.c_cc[libc::VTIME] = 0;
        // SAFETY: settings derived from the terminal's own.
        if unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSAFLUSH, &raw) } != 0 {
            let e = std::io::Error::last_os_error();
            SAVED.lock().unwrap_or_else(|e| e.into_inner()).take();
            return Err(e);
        }
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
        SIGNAL_FD.store(fds[1], Ordering::Relaxed);
        for sig in ENDING.into_iter().chain([libc::SIGWINCH]) {
            // SAFETY: a handler that only calls write(2); SA_RESTART keeps
            // the other threads' reads going.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_signal as *const () as usize;
                sa.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut sa.sa_mask);
                libc::sigaction(sig, &sa, std::ptr::null_mut());
            }
        }
        let mut out = std::io::stdout();
        out.write_all(ENTER.as_bytes())?;
        out.flush()?;
        Ok(Terminal {
            signals: fds[0],
            keys: true,
        })
    }

    /// Draws a screen.
    pub fn draw(&self, screen: &str) {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(screen.as_bytes());
        let _ = out.flush();
    }

    /// Waits at most `timeout` for a key or a signal.
    pub fn wait(&mut self, timeout: Duration) -> Event {
        let mut fds = [
            libc::pollfd {
                fd: self.signals,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: libc::STDIN_FILENO,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let n = if self.keys { 2 } else { 1 };
        let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
        // SAFETY: `n` initialised pollfds.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), n as libc::nfds_t, ms) };
        if ready <= 0 {
            // A timeout, or EINTR (a signal, whose byte is read next time).
            return if ready == 0 {
                Event::Tick
            } else {
                Event::Resized
            };
        }
        if fds[0].revents & libc::POLLIN != 0 {
            let mut b = 0u8;
            // SAFETY: one byte into `b`.
            if unsafe { libc::read(self.signals, (&mut b as *mut u8).cast(), 1) } == 1 {
                let sig = libc::c_int::from(b);
                return if ENDING.contains(&sig) {
                    Event::Signal(sig)
                } else {
                    Event::Resized
                };
            }
        }
        if n == 2 && fds[1].revents != 0 {
            let mut b = 0u8;
            // SAFETY: one byte into `b`.
            match unsafe { libc::read(libc::STDIN_FILENO, (&mut b as *mut u8).cast(), 1) } {
                1 => return Event::Key(b),
                // The end of stdin, or an error: no keys from now on.
                _ => self.keys = false,
            }
        }
        Event::Resized
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        restore();
    }
}
