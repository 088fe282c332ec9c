//! One acquire attempt over every server, with a fresh token: `ACQUIRE` on
//! all of them at once (one thread each), a decision once every server
//! answered, a quorum is out of reach, the replies are due, or a node
//! timeout after a quorum granted; and the undo of every grant that does
//! not count.
//!
//! Each server's worker keeps its connection for the whole attempt, so the
//! `RELEASE` that undoes a grant always follows the `ACQUIRE` on the same
//! connection: the server runs a connection's commands in order, whereas a
//! `RELEASE` on another connection could overtake an `ACQUIRE` still
//! buffered (a paused server, a slow network) and leave the grant behind.
//!
//! - Granted before the decision, and the decision is a lock: kept (the
//!   connection goes back to the pool).
//! - Granted, but the attempt failed or the reply came after the decision:
//!   `RELEASE` on that connection, then back to the pool.
//! - No reply in time: `RELEASE` is written behind the `ACQUIRE` and the
//!   connection closed (never pooled). The server runs the `RELEASE` after
//!   the `ACQUIRE` if that was still buffered; if the `ACQUIRE` is queued in
//!   a `WAIT`, the closed connection makes the server drop the waiter (or
//!   revoke a grant it could not deliver).
//! - Not sent by the reply deadline (a slow handshake): never sent.

use super::attempts::Missed;
use super::math::{valid_until, Tally};
use super::node::{broken, time_left, RNode, MAX_TRIES, SLACK};
use crate::error::{millis, Error, Failure};
use crate::limits::after;
use crate::request::Spec;
use redis::Value;
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// A lock held by a quorum.
pub(crate) struct Won {
    /// Per server: the fence of each grant that counts.
    pub fences: Vec<Option<u64>>,
    pub valid_until: Instant,
}

enum Got {
    Granted(u64),
    Busy,
    Failed(Failure),
}

/// Which grants count, once the attempt is decided.
#[derive(Default)]
struct Verdict {
    kept: Mutex<Option<Vec<bool>>>,
    decided: Condvar,
}

impl Verdict {
    fn decide(&self, kept: Vec<bool>) {
        *self.kept.lock().unwrap_or_else(|p| p.into_inner()) = Some(kept);
        self.decided.notify_all();
    }

    /// Blocks until the attempt is decided (at the latest at its reply
    /// deadline plus [`SLACK`]).
    fn keeps(&self, i: usize) -> bool {
        let mut k = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(kept) = k.as_ref() {
                return kept[i];
            }
            k = self.decided.wait(k).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// What every worker of one attempt shares.
struct Attempt {
    spec: Arc<Spec>,
    token: Arc<str>,
    /// When the servers' queues stop waiting (`WAIT`), if at all.
    wait_until: Option<Instant>,
    /// When every reply is due.
    reply_by: Instant,
    verdict: Verdict,
}

/// One attempt with `token`: waits in the servers' queues for `wait` (None
/// or zero: no `WAIT`), each reply due within `wait` plus the node timeout.
pub(crate) fn attempt(
    nodes: &Arc<[RNode]>,
    spec: &Arc<Spec>,
    token: Arc<str>,
    wait: Option<Duration>,
    timeout: Duration,
) -> Result<Won, Missed> {
    let n = nodes.len();
    // Counted from before any command is sent: the validity runs from here.
    let first_send = Instant::now();
    let wait = wait.filter(|w| millis(*w) > 0);
    let (tx, rx) = mpsc::channel();
    // Each worker drops its end when it is done, undo included.
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let at = Arc::new(Attempt {
        spec: spec.clone(),
        token,
        wait_until: wait.map(|w| after(first_send, w)),
        reply_by: after(after(first_send, wait.unwrap_or_default()), timeout),
        verdict: Verdict::default(),
    });
    for i in 0..n {
        let (nodes, at2, tx2) = (nodes.clone(), at.clone(), tx.clone());
        let done = done_tx.clone();
        let spawned = thread::Builder::new()
            .name("dlock-redlock".into())
            .spawn(move || {
                worker(i, &nodes[i], &at2, &tx2);
                drop(done);
            });
        if let Err(e) = spawned {
            let e = Error::Unavailable(format!("cannot start a thread: {e}"));
            let _ = tx.send((i, Got::Failed(Failure::Retry(e))));
        }
    }
    drop(tx);
    drop(done_tx);

    let mut tally = Tally::new(n);
    let mut fences = vec![None; n];
    let (mut errors, mut first_error) = (0, None);
    // Once a quorum granted, the others get one more node timeout to
    // answer (with `WAIT` they may be queued behind another holder), so
    // that grants arriving together all count and none is undone for
    // nothing.
    let mut until = at.reply_by + SLACK;
    let mut quorum_seen = false;
    while tally.pending() > 0 && !tally.hopeless() {
        if !quorum_seen && tally.yes >= tally.quorum() {
            quorum_seen = true;
            until = until.min(after(Instant::now(), timeout));
        }
        let left = until.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((i, Got::Granted(fence))) => {
                tally.yes += 1;
                fences[i] = Some(fence);
            }
            Ok((_, Got::Busy)) => tally.no += 1,
            Ok((_, Got::Failed(f))) => {
                tally.failed += 1;
                if let Failure::Fatal(e) = f {
                    errors += 1;
                    first_error.get_or_insert(e);
                }
            }
            Err(_) => {
                // No answer in time from the rest.
                tally.failed += tally.pending();
                break;
            }
        }
    }
    let quorum = tally.yes >= tally.quorum();
    match quorum
        .then(|| valid_until(first_send, spec.ttl, Instant::now()))
        .flatten()
    {
        Some(valid_until) => {
            at.verdict
                .decide(fences.iter().map(Option::is_some).collect());
            Ok(Won {
                fences,
                valid_until,
            })
        }
        None => {
            at.verdict.decide(vec![false; n]);
            // Give the workers still running the time to undo a grant
            // (on its own connection) before the caller moves on, or
            // exits: a process that ends right after a miss must not
            // leave grants behind. A worker stuck on a silent server is
            // not waited for past its reply deadline and one node timeout.
            let undo_by = after(at.reply_by, timeout) + SLACK;
            let left = undo_by.saturating_duration_since(Instant::now());
            let _ = done_rx.recv_timeout(left);
            Err(Missed {
                tally,
                errors,
                first_error,
            })
        }
    }
}

/// Acquires on one server and undoes the grant unless it counts (see the
/// module docs). Reports exactly once.
fn worker(i: usize, node: &RNode, at: &Attempt, tx: &mpsc::Sender<(usize, Got)>) {
    // The attempt may be decided already: then nobody listens.
    let report = |got: Got| {
        let _ = tx.send((i, got));
    };
    let release = at.spec.release_cmd(&at.token);
    let mut last = None;
    for _ in 0..MAX_TRIES {
        let mut reported = false;
        let mut report_once = |got| {
            reported = true;
            report(got);
        };
        let (entered, r) = node.run(|c| {
            let Some(left) = time_left(at.reply_by) else {
                let e = Error::Unavailable(format!("{}: not connected in time", node.addr()));
                report_once(Got::Failed(Failure::Retry(e)));
                return Ok(());
            };
            // Every server stops waiting at the same instant; never `WAIT 0`
            // (which waits forever).
            let wait_ms = at
                .wait_until
                .map(|w| millis(w.saturating_duration_since(Instant::now())))
                .filter(|ms| *ms > 0);
            c.set_read_timeout(Some(left))?;
            c.set_write_timeout(Some(left))?;
            match at.spec.acquire_cmd(&at.token, wait_ms).query::<Value>(c) {
                Ok(Value::Int(fence)) => {
                    report_once(Got::Granted(fence as u64));
                    if at.verdict.keeps(i) {
                        return Ok(());
                    }
                    c.set_read_timeout(Some(node.timeout))?;
                    c.set_write_timeout(Some(node.timeout))?;
                    release.query::<Value>(c).map(drop)
                }
                Ok(Value::Nil) => {
                    report_once(Got::Busy);
                    Ok(())
                }
                Ok(other) => {
                    let e = Error::Server(format!("unexpected reply {other:?}"));
                    report_once(Got::Failed(Failure::Fatal(e)));
                    Ok(())
                }
                Err(e) if e.is_timeout() => {
                    // Maybe granted later: RELEASE right behind it; the
                    // error then closes the connection.
                    c.set_write_timeout(Some(node.timeout))?;
                    let _ = c.send_packed_command(&release.get_packed_command());
                    let e2 = Error::Unavailable(format!("{}: {e}", node.addr()));
                    report_once(Got::Failed(Failure::Retry(e2)));
                    Err(e)
                }
                // Retried on another connection (unreported).
                Err(e) if broken(&e) => Err(e),
                Err(e) => {
                    // An error reply: the connection is in a known state.
                    report_once(Got::Failed(e.into()));
                    Ok(())
                }
            }
        });
        if reported {
            return;
        }
        match r {
            Err(f) if entered && Instant::now() < at.reply_by => last = Some(f),
            Err(f) => return report(Got::Failed(f)),
            // Every Ok path above has reported.
            Ok(()) => return,
        }
    }
    let e = Error::Unavailable(format!("{}: connections keep breaking", node.addr()));
    report(Got::Failed(last.unwrap_or(Failure::Retry(e))));
}
