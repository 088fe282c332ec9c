//! One server of a Redlock: its connection pool, one command on it bounded
//! by a deadline, the same command on every server at once, and the lease
//! (renewal and release on every server) behind a Redlock [`Guard`].
//!
//! [`Guard`]: crate::Guard

use super::math::{valid_until, RenewalKind, Tally};
use crate::error::{Error, Failure};
use crate::lease::{Lease, Renewal};
use crate::node::Node;
use crate::request::Spec;
use redis::{RedisError, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

/// How long the caller waits past a round's reply deadline for the workers
/// to report (a reply read just in time still counts).
pub(crate) const SLACK: Duration = Duration::from_millis(10);

/// Connections a command may try on one server: a restarted server leaves
/// every pooled connection broken (8 at most), and a command sent on a
/// broken one is retried on the next (same token: idempotent).
pub(crate) const MAX_TRIES: usize = 10;

/// Handshakes in progress to one server beyond which it counts as
/// unreachable. `redis` 0.27 bounds only the TCP connect of a new
/// connection, not its setup round trip, so a paused server (SIGSTOP, a
/// stalled VM) holds each handshake's thread until it runs again: this
/// bounds how many such threads pile up.
const MAX_CONNECTING: usize = 16;

pub(crate) struct RNode {
    node: Node,
    /// Callers that asked for a connection and did not get one yet: a
    /// pooled connection is handed out at once, so these are handshakes.
    connecting: AtomicUsize,
    /// The longest a command waits for its reply (also the TCP connect
    /// timeout of new connections).
    pub timeout: Duration,
}

/// A connection that broke mid-command (as opposed to one that timed out):
/// the command is retried on another, with the same token.
pub(crate) fn broken(e: &RedisError) -> bool {
    !e.is_timeout() && (e.is_io_error() || e.is_connection_dropped())
}

/// What is left until `deadline`, if anything (at least 1 ms: a zero socket
/// timeout is refused).
pub(crate) fn time_left(deadline: Instant) -> Option<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    (!left.is_zero()).then(|| left.max(Duration::from_millis(1)))
}

impl RNode {
    pub(crate) fn new(node: Node, timeout: Duration) -> RNode {
        RNode {
            node,
            connecting: AtomicUsize::new(0),
            timeout,
        }
    }

    pub(crate) fn addr(&self) -> String {
        self.node.addr()
    }

    /// Runs `f` on a connection of this server's pool (see
    /// [`Node::with_conn`]); also tells whether `f` ran at all (false: no
    /// connection could be had).
    pub(crate) fn run<T>(
        &self,
        f: impl FnOnce(&mut redis::Connection) -> redis::RedisResult<T>,
    ) -> (bool, Result<T, Failure>) {
        if self.connecting.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTING {
            self.connecting.fetch_sub(1, Ordering::SeqCst);
            let e = Error::Unavailable(format!("{}: handshakes do not complete", self.addr()));
            return (false, Err(Failure::Retry(e)));
        }
        let mut entered = false;
        let r = self.node.with_conn(self.timeout, |c| {
            entered = true;
            self.connecting.fetch_sub(1, Ordering::SeqCst);
            f(c)
        });
        if !entered {
            self.connecting.fetch_sub(1, Ordering::SeqCst);
        }
        (entered, r)
    }

    /// `cmd` on this server, its reply due by `reply_by`. A command that
    /// cannot be sent before then is not sent at all; one sent on a
    /// connection that turns out broken is sent again on another (every
    /// command Redlock sends is idempotent, or harmless when repeated).
    pub(crate) fn call(&self, cmd: &redis::Cmd, reply_by: Instant) -> Result<Value, Failure> {
        let mut last = None;
        for _ in 0..MAX_TRIES {
            let mut was_broken = false;
            let (entered, r) = self.run(|c| {
                let Some(left) = time_left(reply_by) else {
                    return Ok(None);
                };
                c.set_read_timeout(Some(left))?;
                c.set_write_timeout(Some(left))?;
                cmd.query::<Value>(c).map(Some).inspect_err(|e| {
                    was_broken = broken(e);
                })
            });
            match r {
                Ok(Some(v)) => return Ok(v),
                Ok(None) => break,
                Err(f) if entered && was_broken && Instant::now() < reply_by => last = Some(f),
                Err(f) => return Err(f.at(&self.addr())),
            }
        }
        Err(last.unwrap_or_else(|| {
            Failure::Retry(Error::Unavailable(format!(
                "{}: no answer in time",
                self.addr()
            )))
        }))
    }
}

/// Runs `f` on every server at once, one thread each, and collects what
/// came back by `until`, in server order (`None`: no answer by then). A
/// thread still running at `until` is left to finish on its own; it sends
/// nothing after its command's own deadline.
pub(crate) fn fan_out<T, F>(nodes: &Arc<[RNode]>, until: Instant, f: F) -> Vec<Option<T>>
where
    T: Send + 'static,
    F: Fn(&RNode) -> T + Send + Sync + 'static,
{
    let f = Arc::new(f);
    let (tx, rx) = mpsc::channel();
    for i in 0..nodes.len() {
        let (nodes, f, tx) = (nodes.clone(), f.clone(), tx.clone());
        // A thread that cannot be spawned is a server without an answer.
        let _ = thread::Builder::new()
            .name("dlock-redlock".into())
            .spawn(move || {
                let _ = tx.send((i, f(&nodes[i])));
            });
    }
    drop(tx);
    let mut out: Vec<Option<T>> = (0..nodes.len()).map(|_| None).collect();
    for _ in 0..nodes.len() {
        let left = until.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((i, v)) => out[i] = Some(v),
            Err(_) => break,
        }
    }
    out
}

/// A lock held on a quorum of servers: what a Redlock [`crate::Guard`]
/// renews and releases.
pub(crate) struct RedlockLease {
    pub nodes: Arc<[RNode]>,
    pub spec: Spec,
    pub token: String,
    pub timeout: Duration,
}

impl RedlockLease {
    /// `cmd` on every server; `judge` reads a reply as yes, no, or neither.
    /// Returns the tally, when the round was sent, and the servers' own
    /// error when error replies alone (the module missing, a denied
    /// command, ...) rule out a quorum: the caller reports that rather
    /// than "no quorum", as an acquire does.
    fn round(
        &self,
        cmd: redis::Cmd,
        judge: fn(&Value, usize) -> Option<bool>,
    ) -> (Tally, Instant, Option<Error>) {
        let sent = Instant::now();
        let reply_by = crate::limits::after(sent, self.timeout);
        let members = self.spec.resources.len();
        let answers = fan_out(&self.nodes, reply_by + SLACK, move |node| {
            node.call(&cmd, reply_by)
        });
        let mut tally = Tally::new(self.nodes.len());
        let (mut errors, mut first_error) = (0, None);
        for a in answers {
            match a {
                Some(Ok(v)) => match judge(&v, members) {
                    Some(true) => tally.yes += 1,
                    Some(false) => tally.no += 1,
                    None => tally.failed += 1,
                },
                Some(Err(Failure::Fatal(e))) => {
                    tally.failed += 1;
                    errors += 1;
                    first_error.get_or_insert(e);
                }
                _ => tally.failed += 1,
            }
        }
        let refused = first_error.filter(|_| errors > tally.nodes - tally.quorum());
        (tally, sent, refused)
    }
}

fn no_quorum(t: &Tally) -> Error {
    Error::NoQuorum {
        granted: t.yes,
        reached: t.answered(),
        nodes: t.nodes,
    }
}

impl Lease for RedlockLease {
    /// `EXTEND` (`MEXTEND`) on every server; never a same-token acquire,
    /// which could grant again a server whose hold had ended. Extended with
    /// a quorum of 1s, valid from the round's send time less the drift;
    /// lost when so many servers answered 0 that no quorum can hold the
    /// token; otherwise undecided (`Failed`: the budget stays as it was).
    fn extend(&self, ttl: Duration) -> Renewal {
        let cmd = self.spec.extend_cmd(&self.token, ttl);
        let (tally, sent, refused) = self.round(cmd, |v, _| match v {
            Value::Int(1) => Some(true),
            Value::Int(0) => Some(false),
            _ => None,
        });
        match tally.renewal() {
            RenewalKind::Extended => match valid_until(sent, ttl, Instant::now()) {
                Some(until) => Renewal::Extended(until),
                None => Renewal::Failed(Error::Unavailable(
                    "a quorum renewed only after the new ttl's validity had run out".into(),
                )),
            },
            RenewalKind::Lost => Renewal::Lost,
            RenewalKind::Failed => Renewal::Failed(refused.unwrap_or_else(|| no_quorum(&tally))),
        }
    }

    /// `RELEASE` (`MRELEASE`) on every server. `Ok(true)` if a quorum
    /// released the token, `Ok(false)` if so many answered "not held" that
    /// no quorum held it; otherwise [`Error::NoQuorum`] (a server that did
    /// not answer keeps its hold until the ttl ends).
    fn release(&self, _valid_until: Instant) -> crate::Result<bool> {
        let cmd = self.spec.release_cmd(&self.token);
        // RELEASE answers 1/0, MRELEASE the members it released.
        let (tally, _, refused) = self.round(cmd, |v, members| match v {
            Value::Int(n) => Some(*n == members as i64),
            _ => None,
        });
        if tally.yes >= tally.quorum() {
            Ok(true)
        } else if tally.renewal() == RenewalKind::Lost {
            Ok(false)
        } else {
            Err(refused.unwrap_or_else(|| no_quorum(&tally)))
        }
    }
}
