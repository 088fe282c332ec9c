//! The status line shown while `dlock exec` waits for a lock on a
//! terminal: after a second, one line (time waited, the holders' fences,
//! the queue) rewritten in place from `DLOCK.INFO` on a connection of its
//! own, and erased when the lock is granted. Nothing when stderr is not a
//! terminal.

use crate::args::show;
use crate::backend::{Backend, Info};
use crate::status_line::{self, stderr_is_tty};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

/// Shown only after this long: most waits are short.
const AFTER: Duration = Duration::from_secs(1);
const EVERY: Duration = Duration::from_millis(500);

pub struct WaitLine {
    _stop: mpsc::Sender<()>,
}

impl WaitLine {
    /// Starts the line's thread if stderr is a terminal.
    pub fn start(backend: Backend, resource: String) -> Option<WaitLine> {
        if !stderr_is_tty() {
            return None;
        }
        let (stop, stopped) = mpsc::channel::<()>();
        let started = Instant::now();
        std::thread::Builder::new()
            .name("dlock-waitline".into())
            .spawn(move || {
                let mut pause = AFTER;
                loop {
                    match stopped.recv_timeout(pause) {
                        Err(RecvTimeoutError::Timeout) => {}
                        _ => return,
                    }
                    pause = EVERY;
                    let what = describe(backend.info(&resource));
                    let text = format!(
                        "dlock: waiting for {resource} ({}): {what}",
                        show(Duration::from_secs(started.elapsed().as_secs()))
                    );
                    if !status_line::draw(&text) {
                        return;
                    }
                }
            })
            .ok()?;
        Some(WaitLine { _stop: stop })
    }

    /// Stops the line and erases it if it was shown.
    pub fn finish(self) {
        status_line::clear_now();
    }
}

fn describe(info: dlock_client::Result<Vec<Info>>) -> String {
    let infos = match info {
        Ok(i) => i,
        Err(e) => return format!("no status ({e})"),
    };
    let mut fences = Vec::new();
    let mut waiters = 0;
    let mut reserved = false;
    for i in &infos {
        fences.extend(i.fences());
        waiters = waiters.max(i.waiters());
        reserved |= matches!(i, Info::Lock { token: None, .. });
    }
    let holders = match fences.len() {
        0 if reserved => "handoff pending".to_string(),
        0 => "free".to_string(),
        1 => format!("held by fence {}", fences[0]),
        n => format!("{n} holds, fences {}", join(&fences)),
    };
    format!("{holders}, {waiters} queued")
}

fn join(fences: &[u64]) -> String {
    let shown: Vec<String> = fences.iter().take(3).map(u64::to_string).collect();
    let more = if fences.len() > 3 { ", ..." } else { "" };
    format!("{}{more}", shown.join(", "))
}
