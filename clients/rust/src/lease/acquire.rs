//! The acquire loop on one server, as a state machine without I/O: it is
//! told what each command came back with and the time, and answers with
//! the next thing to do ([`Step`]). The blocking API (`single.rs`) and the
//! async one (`aio`) drive the same machine, each with its own I/O.
//!
//! The rules it carries: same-token retries through connection errors for
//! at most `retry_for` in a row (a failure after the attempt got a
//! connection starts a new outage); the whole call ends by the wait (for
//! a request that does not wait, after `retry_for`) plus a reply's margin;
//! once an attempt may have been granted without our hearing, giving up
//! releases with the token first; a grant handed over while waiting
//! started its lease at the handoff, so it is refreshed with the same
//! token and budgeted from the refresh's send; too few replicas on a grant
//! undo it.

use super::cap::{capped, left_to_cap, Cap, REACHED};
use super::renewal::Renewal;
use crate::error::{millis, Error, Failure, Result};
use crate::limits::{after, lease};
use crate::retry::Outage;
use redis::Value;
use std::time::{Duration, Instant};

/// The time a reply may take beyond the call's own deadline: the answer
/// to the last attempt, sent at the deadline, is on its way back.
const REPLY_MARGIN: Duration = Duration::from_millis(250);

/// The longest one acquire may take, from `start`: its `wait`, or for a
/// request that does not wait, `retry_for`.
fn call_deadline(start: Instant, wait: Option<Duration>, retry_for: Duration) -> Instant {
    match wait.filter(|w| millis(*w) > 0) {
        Some(w) => after(start, w),
        None => after(start, retry_for),
    }
}

/// The io timeout, beyond the server-side `waiting`, of a command sent at
/// `now` for a call that ends at `deadline`: its reply is due by then,
/// plus [`REPLY_MARGIN`]; at most `io_timeout`, at least 1 ms.
pub(crate) fn io_within(
    io_timeout: Duration,
    deadline: Instant,
    waiting: Duration,
    now: Instant,
) -> Duration {
    let left = deadline.saturating_duration_since(now) + REPLY_MARGIN;
    io_timeout
        .min(left.saturating_sub(waiting))
        .max(Duration::from_millis(1))
}

/// `TooFewReplicas` when `min_replicas` asked for more acknowledgements
/// than `acked`.
pub(crate) fn too_few(min_replicas: Option<u32>, acked: Option<i64>) -> Option<Error> {
    match (min_replicas, acked) {
        (Some(wanted), Some(acked)) if acked < wanted as i64 => {
            Some(Error::TooFewReplicas { acked, wanted })
        }
        _ => None,
    }
}

/// What an acquire is for: the lease's ttl, the wait and the settings.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Terms {
    pub ttl: Duration,
    pub wait: Option<Duration>,
    pub io_timeout: Duration,
    pub retry_for: Duration,
    /// The acknowledgements `min_replicas` asks for, if any.
    pub min_replicas: Option<u32>,
    /// `max_hold`: every attempt after the first, and the refresh, stay
    /// short of the cap's floor ([`Cap`]).
    pub max_hold: Option<Duration>,
}

/// One `ACQUIRE` to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Attempt {
    /// The ttl to ask for: the request's, or for a capped hold's retry
    /// what is left to the cap's floor.
    pub ttl: Duration,
    /// `WAIT wait_ms` in the server's queue; None: a plain try (a wait used
    /// up, or under 1 ms: `WAIT 0` would wait forever).
    pub wait_ms: Option<u64>,
    /// How long the server may hold the reply back (the wait).
    pub waiting: Duration,
    /// The reply is due within this, beyond `waiting`.
    pub io: Duration,
    /// Pipeline `WAIT n timeout` (`min_replicas`) behind it: a waiting
    /// grant's durability is confirmed by its refresh instead.
    pub durable: bool,
}

/// What an `ACQUIRE` came back with.
pub(crate) enum Reply {
    /// Granted with this fence; the replicas' acknowledgements, when asked.
    Granted { fence: u64, acked: Option<i64> },
    /// Busy (or the wait ran out).
    Busy,
    /// A reply no `ACQUIRE` gives.
    Unexpected(Value),
    /// No reply. `connected`: the attempt got a connection (it was sent,
    /// or its connection broke or timed out after sending): a server that
    /// died while we waited in its queue starts a new outage.
    Failed { failure: Failure, connected: bool },
}

impl Reply {
    /// The reply to an `ACQUIRE` (and its `WAIT n`), as the I/O got it.
    pub(crate) fn of(
        got: std::result::Result<(Value, Option<i64>), Failure>,
        connected: bool,
    ) -> Reply {
        match got {
            Ok((Value::Int(fence), acked)) => Reply::Granted {
                fence: fence as u64,
                acked,
            },
            Ok((Value::Nil, _)) => Reply::Busy,
            Ok((other, _)) => Reply::Unexpected(other),
            Err(failure) => Reply::Failed { failure, connected },
        }
    }
}

/// A lease granted: its fence, and until when it surely lasts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Grant {
    pub fence: u64,
    pub valid_until: Instant,
    /// A capped hold's floor, which its renewals stay short of.
    pub cap: Option<Cap>,
}

/// What the driver does next.
#[derive(Debug)]
pub(crate) enum Step {
    /// Send this `ACQUIRE`, then [`AcquireLoop::replied`].
    Send(Attempt),
    /// A connection error is retried with the same token: sleep `pause`
    /// (telling whoever listens what is retried), then
    /// [`AcquireLoop::resumed`].
    Pause { pause: Duration, retrying: Error },
    /// Refresh the grant (`EXTEND` with the same token and `ttl`),
    /// retried through connection errors until `by`, then
    /// [`AcquireLoop::refreshed`].
    Refresh { ttl: Duration, by: Instant },
    /// Release with the token, best effort, retried until `by`, then
    /// [`AcquireLoop::abandoned`].
    Abandon { by: Instant },
    /// The acquire's outcome: `Ok(None)` busy.
    Done(Result<Option<Grant>>),
}

/// The acquire loop of one request (see the module docs).
pub(crate) struct AcquireLoop {
    terms: Terms,
    /// When the server-side wait ends, if the request waits.
    wait_deadline: Option<Instant>,
    /// When the whole call ends (plus a reply's margin).
    deadline: Instant,
    /// Once an attempt may have been granted without our hearing, giving
    /// up releases with the token first.
    maybe_granted: bool,
    outage: Outage,
    /// When the attempt under way was sent, with what ttl, and whether
    /// it waits.
    sent: Instant,
    sent_ttl: Duration,
    waits: bool,
    /// A capped hold's floor, from the first attempt's send.
    cap: Option<Cap>,
    /// The fence of a waiting grant, while it is refreshed.
    fence: u64,
    /// A capped hold granted past its floor: the refresh asks for the
    /// whole ttl to learn where the server's cap is; when it was sent.
    probe: Option<Instant>,
    /// What the call ends with once its grant is abandoned.
    after_abandon: Option<Result<Option<Grant>>>,
}

impl AcquireLoop {
    /// A loop started at `now`; its first step.
    pub(crate) fn start(terms: Terms, now: Instant) -> (AcquireLoop, Step) {
        let mut l = AcquireLoop {
            terms,
            wait_deadline: terms.wait.map(|w| after(now, w)),
            deadline: call_deadline(now, terms.wait, terms.retry_for),
            maybe_granted: false,
            outage: Outage::new(),
            sent: now,
            sent_ttl: terms.ttl,
            waits: false,
            cap: terms.max_hold.map(|m| Cap::new(now, m)),
            fence: 0,
            probe: None,
            after_abandon: None,
        };
        let first = l.send_with(terms.ttl, now);
        (l, first)
    }

    /// When the whole call ends (plus a reply's margin).
    #[cfg(test)]
    fn deadline(&self) -> Instant {
        self.deadline
    }

    /// A retry: a capped hold's asks for what is left to the floor (the
    /// first attempt may have been granted), and none is sent past it.
    fn send(&mut self, now: Instant) -> Step {
        match capped(self.cap, self.terms.ttl, now) {
            Some(ttl) => self.send_with(ttl, now),
            None => self.abandon(Err(Error::MaxHold(REACHED.into())), now),
        }
    }

    fn send_with(&mut self, ttl: Duration, now: Instant) -> Step {
        let wait_ms = self
            .wait_deadline
            .map(|d| millis(d.saturating_duration_since(now)))
            .filter(|&w| w > 0);
        let waiting = Duration::from_millis(wait_ms.unwrap_or(0));
        self.sent = now;
        self.sent_ttl = ttl;
        self.waits = wait_ms.is_some();
        Step::Send(Attempt {
            ttl,
            wait_ms,
            waiting,
            io: io_within(self.terms.io_timeout, self.deadline, waiting, now),
            durable: wait_ms.is_none(),
        })
    }

    fn abandon(&mut self, outcome: Result<Option<Grant>>, now: Instant) -> Step {
        self.after_abandon = Some(outcome);
        Step::Abandon {
            by: self.deadline.min(now + REPLY_MARGIN),
        }
    }

    /// The `ACQUIRE` sent last came back with `reply` at `now`.
    pub(crate) fn replied(&mut self, reply: Reply, now: Instant) -> Step {
        match reply {
            Reply::Granted { fence, acked } => {
                if let Some(e) = too_few(self.terms.min_replicas, acked) {
                    return self.abandon(Err(e), now);
                }
                let sure = self.sure(fence);
                if !self.waits {
                    return Step::Done(Ok(Some(sure)));
                }
                self.fence = fence;
                // A capped hold granted after a wait past its floor: the
                // server's cap counts from the grant, later than the
                // floor, so the refresh asks for the whole ttl and the
                // answer tells where the cap is (see `refreshed`).
                let ttl = capped(self.cap, self.terms.ttl, now).unwrap_or_else(|| {
                    self.probe = Some(now);
                    self.terms.ttl
                });
                self.refresh(ttl, now)
            }
            Reply::Busy => Step::Done(Ok(None)),
            Reply::Unexpected(other) => {
                Step::Done(Err(Error::Server(format!("unexpected reply {other:?}"))))
            }
            Reply::Failed {
                failure: Failure::Retry(e),
                connected,
            } => {
                self.maybe_granted = true;
                if connected {
                    self.outage = Outage::new();
                }
                match self
                    .outage
                    .next_pause(self.terms.retry_for, self.deadline, now)
                {
                    Some(pause) => Step::Pause { pause, retrying: e },
                    None => self.abandon(Err(e), now),
                }
            }
            Reply::Failed { failure, .. } => {
                let e = failure.into_error();
                if self.maybe_granted {
                    self.abandon(Err(e), now)
                } else {
                    Step::Done(Err(e))
                }
            }
        }
    }

    /// The pause is over at `now`: the next attempt, same token.
    pub(crate) fn resumed(&mut self, now: Instant) -> Step {
        self.send(now)
    }

    /// A grant as it surely lasts: from the send of the attempt it
    /// answered.
    fn sure(&self, fence: u64) -> Grant {
        Grant {
            fence,
            valid_until: self.sent + lease(self.sent_ttl),
            cap: self.cap,
        }
    }

    /// The refresh gets what is left of the call, and at least a reply's
    /// margin.
    fn refresh(&self, ttl: Duration, now: Instant) -> Step {
        Step::Refresh {
            ttl,
            by: self.deadline.max(now + REPLY_MARGIN),
        }
    }

    /// The refresh of a waiting grant came back at `now`.
    pub(crate) fn refreshed(&mut self, r: Renewal, now: Instant) -> Step {
        // A probe's answer moves the floor: accepted, the server's cap is
        // no earlier than the lease it gave; refused at the cap, the
        // server said how long the hold may live from then on.
        let probe = self.probe.take();
        if let (Some(sent), Some(cap)) = (probe, self.cap.as_mut()) {
            match &r {
                Renewal::Extended(_) => cap.no_earlier_than(sent + self.terms.ttl),
                Renewal::Failed(Error::MaxHold(why)) => {
                    if let Some(left) = left_to_cap(why) {
                        cap.no_earlier_than(sent + left);
                        return match capped(self.cap, self.terms.ttl, now) {
                            Some(ttl) => self.refresh(ttl, now),
                            // The cap is at hand: the lease as it surely
                            // lasts from the attempt's send.
                            None => Step::Done(Ok(Some(self.sure(self.fence)))),
                        };
                    }
                }
                _ => {}
            }
        }
        match r {
            Renewal::Extended(valid_until) => Step::Done(Ok(Some(Grant {
                fence: self.fence,
                valid_until,
                cap: self.cap,
            }))),
            Renewal::Lost => Step::Done(Err(Error::Lost)),
            Renewal::Failed(e) => self.abandon(Err(e), now),
        }
    }

    /// The grant was released (or the release gave up).
    pub(crate) fn abandoned(&mut self) -> Step {
        Step::Done(self.after_abandon.take().unwrap_or(Ok(None)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);
    const MS: Duration = Duration::from_millis(1);

    fn terms(wait: Option<Duration>) -> Terms {
        Terms {
            ttl: 10 * S,
            wait,
            io_timeout: 2 * S,
            retry_for: 2 * S,
            min_replicas: None,
            max_hold: None,
        }
    }

    fn retry(connected: bool) -> Reply {
        Reply::Failed {
            failure: Failure::Retry(Error::Unavailable("connection refused".into())),
            connected,
        }
    }

    fn fatal() -> Reply {
        Reply::Failed {
            failure: Failure::Fatal(Error::Server("ERR no".into())),
            connected: true,
        }
    }

    /// What a step is, without its payload, for table rows.
    #[derive(Debug, PartialEq, Eq)]
    enum Kind {
        Send,
        Pause,
        Refresh,
        Abandon,
        Granted,
        Busy,
        Failed,
    }

    fn kind(s: &Step) -> Kind {
        match s {
            Step::Send(_) => Kind::Send,
            Step::Pause { .. } => Kind::Pause,
            Step::Refresh { .. } => Kind::Refresh,
            Step::Abandon { .. } => Kind::Abandon,
            Step::Done(Ok(Some(_))) => Kind::Granted,
            Step::Done(Ok(None)) => Kind::Busy,
            Step::Done(Err(_)) => Kind::Failed,
        }
    }

    /// An input to the machine, `at` from its start.
    enum In {
        Reply(Reply),
        Resumed,
        Refreshed(Renewal),
        Abandoned,
    }

    /// Runs `inputs` from a start at t0, checking the step after each.
    fn run(terms: Terms, first: Kind, rows: Vec<(Duration, In, Kind)>) -> Vec<Step> {
        let t0 = Instant::now();
        let (mut m, s) = AcquireLoop::start(terms, t0);
        assert_eq!(kind(&s), first, "first step");
        let mut steps = vec![s];
        for (i, (at, input, want)) in rows.into_iter().enumerate() {
            let now = t0 + at;
            let s = match input {
                In::Reply(r) => m.replied(r, now),
                In::Resumed => m.resumed(now),
                In::Refreshed(r) => m.refreshed(r, now),
                In::Abandoned => m.abandoned(),
            };
            assert_eq!(kind(&s), want, "row {i}: {s:?}");
            steps.push(s);
        }
        steps
    }

    fn granted(fence: u64) -> In {
        In::Reply(Reply::Granted { fence, acked: None })
    }

    #[test]
    fn a_plain_try_is_granted_with_a_budget_from_its_send() {
        let t0 = Instant::now();
        let (mut m, s) = AcquireLoop::start(terms(None), t0);
        let Step::Send(a) = s else { panic!("{s:?}") };
        assert_eq!(
            a,
            Attempt {
                ttl: 10 * S,
                wait_ms: None,
                waiting: Duration::ZERO,
                io: 2 * S,
                durable: true
            }
        );
        let s = m.replied(
            Reply::Granted {
                fence: 7,
                acked: None,
            },
            t0 + 5 * MS,
        );
        let Step::Done(Ok(Some(g))) = s else {
            panic!("{s:?}")
        };
        assert_eq!(
            g,
            Grant {
                fence: 7,
                valid_until: t0 + 10 * S,
                cap: None,
            }
        );
    }

    #[test]
    fn table_of_acquire_runs() {
        let wait = Some(5 * S);
        // Busy, an unexpected reply, an error reply before any doubt.
        run(
            terms(None),
            Kind::Send,
            vec![(MS, In::Reply(Reply::Busy), Kind::Busy)],
        );
        run(
            terms(None),
            Kind::Send,
            vec![(MS, In::Reply(Reply::Unexpected(Value::Okay)), Kind::Failed)],
        );
        run(
            terms(None),
            Kind::Send,
            vec![(MS, In::Reply(fatal()), Kind::Failed)],
        );
        // A lost reply, retried with the same token, then granted.
        run(
            terms(None),
            Kind::Send,
            vec![
                (MS, In::Reply(retry(false)), Kind::Pause),
                (300 * MS, In::Resumed, Kind::Send),
                (400 * MS, granted(3), Kind::Granted),
            ],
        );
        // After a lost reply, an error reply releases first: the lost
        // attempt may have been granted.
        run(
            terms(None),
            Kind::Send,
            vec![
                (MS, In::Reply(retry(false)), Kind::Pause),
                (300 * MS, In::Resumed, Kind::Send),
                (400 * MS, In::Reply(fatal()), Kind::Abandon),
                (500 * MS, In::Abandoned, Kind::Failed),
            ],
        );
        // An outage longer than retry_for ends the call, after a release.
        run(
            terms(None),
            Kind::Send,
            vec![
                (MS, In::Reply(retry(false)), Kind::Pause),
                (300 * MS, In::Resumed, Kind::Send),
                (2100 * MS, In::Reply(retry(false)), Kind::Abandon),
                (2200 * MS, In::Abandoned, Kind::Failed),
            ],
        );
        // A waiting grant is refreshed, and budgeted from the refresh.
        let steps = run(
            terms(wait),
            Kind::Send,
            vec![
                (3 * S, granted(9), Kind::Refresh),
                (
                    3 * S,
                    In::Refreshed(Renewal::Extended(Instant::now() + 20 * S)),
                    Kind::Granted,
                ),
            ],
        );
        assert!(matches!(
            steps[0],
            Step::Send(Attempt {
                wait_ms: Some(5000),
                durable: false,
                ..
            })
        ));
        // A refresh answered 0: the grant was taken meanwhile.
        run(
            terms(wait),
            Kind::Send,
            vec![
                (S, granted(9), Kind::Refresh),
                (S, In::Refreshed(Renewal::Lost), Kind::Failed),
            ],
        );
        // A refresh that failed: released, and the error returned.
        run(
            terms(wait),
            Kind::Send,
            vec![
                (S, granted(9), Kind::Refresh),
                (
                    2 * S,
                    In::Refreshed(Renewal::Failed(Error::Unavailable("x".into()))),
                    Kind::Abandon,
                ),
                (2 * S, In::Abandoned, Kind::Failed),
            ],
        );
    }

    #[test]
    fn a_waiting_attempt_waits_what_is_left_and_a_used_up_wait_is_a_plain_try() {
        let t0 = Instant::now();
        let (mut m, _) = AcquireLoop::start(terms(Some(5 * S)), t0);
        // The server died while we waited in its queue: a new outage.
        let s = m.replied(retry(true), t0 + 4 * S);
        assert!(matches!(s, Step::Pause { .. }), "{s:?}");
        let s = m.resumed(t0 + 4 * S + 500 * MS);
        assert!(
            matches!(
                s,
                Step::Send(Attempt {
                    wait_ms: Some(500),
                    ..
                })
            ),
            "{s:?}"
        );
        // Nothing left of the wait: no `WAIT 0`, which waits forever.
        let (mut m, _) = AcquireLoop::start(terms(Some(S)), t0);
        let _ = m.replied(retry(true), t0 + 800 * MS);
        let s = m.resumed(t0 + S);
        assert!(
            matches!(s, Step::Send(Attempt { wait_ms: None, .. })),
            "{s:?}"
        );
    }

    #[test]
    fn the_call_ends_by_its_deadline_plus_a_reply_margin() {
        let t0 = Instant::now();
        let (m, s) = AcquireLoop::start(terms(Some(5 * S)), t0);
        assert_eq!(m.deadline(), t0 + 5 * S);
        // The waiting attempt's reply is due within the wait plus the margin.
        let Step::Send(a) = s else { panic!("{s:?}") };
        assert_eq!((a.waiting, a.io), (5 * S, REPLY_MARGIN));
        // A call that does not wait ends after retry_for.
        let (m, _) = AcquireLoop::start(terms(None), t0);
        assert_eq!(m.deadline(), t0 + 2 * S);
        assert_eq!(
            io_within(2 * S, t0 + 2 * S, Duration::ZERO, t0 + 1900 * MS),
            350 * MS
        );
        assert_eq!(io_within(2 * S, t0, 5 * S, t0 + S), MS, "never zero");
    }

    #[test]
    fn too_few_replicas_undo_the_grant() {
        let t = Terms {
            min_replicas: Some(2),
            ..terms(None)
        };
        run(
            t,
            Kind::Send,
            vec![
                (
                    MS,
                    In::Reply(Reply::Granted {
                        fence: 1,
                        acked: Some(1),
                    }),
                    Kind::Abandon,
                ),
                (2 * MS, In::Abandoned, Kind::Failed),
            ],
        );
        run(
            t,
            Kind::Send,
            vec![(
                MS,
                In::Reply(Reply::Granted {
                    fence: 1,
                    acked: Some(2),
                }),
                Kind::Granted,
            )],
        );
        let t0 = Instant::now();
        let (mut m, _) = AcquireLoop::start(t, t0);
        let _ = m.replied(
            Reply::Granted {
                fence: 1,
                acked: Some(0),
            },
            t0,
        );
        let Step::Done(Err(Error::TooFewReplicas {
            acked: 0,
            wanted: 2,
        })) = m.abandoned()
        else {
            panic!("TooFewReplicas expected")
        };
    }

    /// The cap of `t` (its `max_hold`) whose floor is `at`.
    fn floor(at: Instant, t: Terms) -> Cap {
        let max_hold = t.max_hold.unwrap();
        Cap::new(at - max_hold, max_hold)
    }

    #[test]
    fn a_capped_hold_retries_and_refreshes_short_of_the_cap_floor() {
        let t = Terms {
            ttl: 3 * S,
            max_hold: Some(3 * S),
            ..terms(Some(5 * S))
        };
        let t0 = Instant::now();
        // The refresh after a waiting grant asks for what is left to the
        // floor (t0 + 3 s) less the margin (60 ms), and the guard's budget
        // carries the floor.
        let (mut m, s) = AcquireLoop::start(t, t0);
        assert!(
            matches!(s, Step::Send(Attempt { ttl, .. }) if ttl == 3 * S),
            "{s:?}"
        );
        let s = m.replied(
            Reply::Granted {
                fence: 4,
                acked: None,
            },
            t0 + S,
        );
        let Step::Refresh { ttl, .. } = s else {
            panic!("{s:?}")
        };
        assert_eq!(ttl, 2 * S - 60 * MS);
        let s = m.refreshed(Renewal::Extended(t0 + 3 * S - 60 * MS), t0 + S + MS);
        let Step::Done(Ok(Some(g))) = s else {
            panic!("{s:?}")
        };
        assert_eq!(g.cap, Some(Cap::new(t0, 3 * S)));
        // A same-token retry, likewise.
        let (mut m, _) = AcquireLoop::start(t, t0);
        let _ = m.replied(retry(true), t0 + 500 * MS);
        let s = m.resumed(t0 + S);
        assert!(
            matches!(s, Step::Send(Attempt { ttl, .. }) if ttl == 2 * S - 60 * MS),
            "{s:?}"
        );
        // A grant after a wait past the floor: the refresh asks for the
        // whole ttl; refused at the cap, the server's "2000 ms more" moves
        // the floor to the probe's send plus 2 s, and the second refresh
        // asks for what is left to it.
        let granted_at = |m: &mut AcquireLoop, at| {
            let s = m.replied(
                Reply::Granted {
                    fence: 4,
                    acked: None,
                },
                at,
            );
            match s {
                Step::Refresh { ttl, .. } => ttl,
                s => panic!("{s:?}"),
            }
        };
        let refused = |n: u64| {
            Renewal::Failed(Error::MaxHold(format!(
                "MAXHOLD the hold may live {n} ms more: it cannot be extended past its MAXHOLD"
            )))
        };
        let (mut m, _) = AcquireLoop::start(t, t0);
        assert_eq!(granted_at(&mut m, t0 + 4 * S), 3 * S, "the probe");
        let s = m.refreshed(refused(2000), t0 + 4 * S + 10 * MS);
        let Step::Refresh { ttl, .. } = s else {
            panic!("{s:?}")
        };
        assert_eq!(ttl, 2 * S - 10 * MS - 60 * MS);
        let until = t0 + 6 * S - 70 * MS;
        let s = m.refreshed(Renewal::Extended(until), t0 + 4 * S + 20 * MS);
        let Step::Done(Ok(Some(g))) = s else {
            panic!("{s:?}")
        };
        assert_eq!((g.valid_until, g.cap), (until, Some(floor(t0 + 6 * S, t))));
        // The probe accepted: the floor is no earlier than its lease.
        let (mut m, _) = AcquireLoop::start(t, t0);
        assert_eq!(granted_at(&mut m, t0 + 4 * S), 3 * S);
        let s = m.refreshed(Renewal::Extended(t0 + 7 * S), t0 + 4 * S + MS);
        let Step::Done(Ok(Some(g))) = s else {
            panic!("{s:?}")
        };
        assert_eq!(g.cap, Some(floor(t0 + 7 * S, t)));
        // Refused with the cap at hand: the lease as it surely lasts from
        // the attempt's send (lost), no second refresh.
        let (mut m, _) = AcquireLoop::start(t, t0);
        granted_at(&mut m, t0 + 4 * S);
        let s = m.refreshed(refused(30), t0 + 4 * S + 10 * MS);
        let Step::Done(Ok(Some(g))) = s else {
            panic!("{s:?}")
        };
        assert_eq!(g.valid_until, t0 + 3 * S);
        // A refusal that names no time: abandoned with it, as any failure.
        let (mut m, _) = AcquireLoop::start(t, t0);
        granted_at(&mut m, t0 + 4 * S);
        let s = m.refreshed(Renewal::Failed(Error::MaxHold(REACHED.into())), t0 + 4 * S);
        assert!(matches!(s, Step::Abandon { .. }), "{s:?}");
        // A retry past the floor is not sent: the possible grant is
        // released, and the call fails with the cap's reason.
        let (mut m, _) = AcquireLoop::start(
            Terms {
                wait: None,
                retry_for: 10 * S,
                ..t
            },
            t0,
        );
        let _ = m.replied(retry(true), t0 + 2 * S);
        let s = m.resumed(t0 + 3 * S);
        assert!(matches!(s, Step::Abandon { .. }), "{s:?}");
        assert!(matches!(m.abandoned(), Step::Done(Err(Error::MaxHold(_)))));
    }
}
