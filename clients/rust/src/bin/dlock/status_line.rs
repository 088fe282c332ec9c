//! The one status line `dlock` keeps on stderr while it waits: drawn and
//! redrawn in place, messages written above it, erased for good at the
//! end (also from a signal handler's thread).

use std::io::Write;
use std::sync::Mutex;

struct Line {
    shown: bool,
    stopped: bool,
}

/// Held while the line is written or erased, so it is never written after
/// [`clear_now`].
static LINE: Mutex<Line> = Mutex::new(Line {
    shown: false,
    stopped: false,
});

fn line() -> std::sync::MutexGuard<'static, Line> {
    LINE.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn stderr_is_tty() -> bool {
    // SAFETY: isatty only inspects the descriptor.
    unsafe { libc::isatty(2) == 1 }
}

/// Draws `text` as the status line (replacing what it showed); false once
/// the line was stopped for good (nothing is drawn).
pub fn draw(text: &str) -> bool {
    let mut l = line();
    if l.stopped {
        return false;
    }
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "\r\x1b[2K{text}");
    let _ = err.flush();
    l.shown = true;
    true
}

/// Writes `dlock: msg` on a line of its own, above the status line if
/// one is shown (it is drawn again on its next update).
pub fn say(msg: &str) {
    let mut l = line();
    let mut err = std::io::stderr().lock();
    if l.shown {
        let _ = write!(err, "\r\x1b[2K");
        l.shown = false;
    }
    let _ = writeln!(err, "dlock: {msg}");
}

/// Erases the line (if shown) and stops it for good.
pub fn clear_now() {
    let mut l = line();
    l.stopped = true;
    if l.shown {
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[2K");
        let _ = err.flush();
        l.shown = false;
    }
}
