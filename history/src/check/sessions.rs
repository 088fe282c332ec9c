//! Sessions (docs/history.md, "Sessions"): what each session's history
//! bounds, the holds bound to it as believed holds (so `mutex` judges them
//! beside every other hold, lock-delay included), and the `sessions`
//! checker's rules: no hold outlives its session, a `DEADLOCK` refusal only
//! with a hold of the refused session in the cycle it names, no cycle of
//! two bound waits left standing.
//!
//! A hold bound to session S is held by the server from its grant until
//! S ends (or a `RELEASE` of its token), and, when S ended involuntarily
//! with lock-delay d, until S's end plus d. What the history bounds of S's
//! server-side end E from below:
//! - its ttl: E is at least the last successful `OPEN`/`KEEPALIVE`'s
//!   invocation plus the smallest ttl any of them asked (each keep-alive
//!   sets the deadline to its own time plus its ttl, and the last one the
//!   server ran ran after the last one answered was sent);
//! - `KILL`: its invocation; `BIND`'s connection: the invocation of a
//!   `disconnect` of the owner, or of any operation of the owner that lost
//!   its connection, or the start of a `CLIENT KILL` of the owner;
//! - `CLOSE`: its invocation, and it ends the hold with no delay.
//!
//! less a margin of 5 ms (the server counts the end and the delay in whole
//! ms).
//!
//! A failover or an everysec crash of `main` may lose what made the
//! session live (asynchronous replication): a hold's belief ends at the
//! first such fault since its session was opened.
use super::prep::{Hold, Prepared, MARGIN_US};
use super::{Violation, ASYNC_REPLICATION};
use crate::history::{Command, FaultKind, Kind, Mode, Outcome, Value};
use std::collections::{BTreeMap, HashMap};

/// After a session's end is decided, how long past its lock-delay a probe
/// waits before the hold must be gone: the server's clock is the wall
/// clock in ms, the recorder's a monotonic one.
const PROBE_SLACK_US: u64 = 50_000;
/// A `WAIT`'s timer may fire this much early (timer granularity).
const WAIT_SLACK_US: u64 = 2_000;

/// What the history says of one session.
pub struct SessionRec<'a> {
    pub id: &'a str,
    pub owner: u32,
    pub bind: bool,
    pub lock_delay_us: u64,
    pub opened: u64,
    /// The invocation of the last `OPEN`/`KEEPALIVE` answered with success.
    pub alive_ok: Option<u64>,
    /// The smallest ttl any `OPEN`/`KEEPALIVE` of it asked (µs).
    pub min_ttl_us: u64,
    /// Lower bounds of an involuntary end (`KILL`, a closed `BIND` connection).
    pub cut: Vec<u64>,
    /// The first `CLOSE` sent (not refused).
    pub close: Option<u64>,
    /// The first `CLOSE` or `KILL` answered: the op (index); after its
    /// completion the session is surely not live.
    pub decided: Option<usize>,
    /// The first failover or everysec crash of `main` since it was opened.
    pub lossy: Option<u64>,
}

impl SessionRec<'_> {
    /// The earliest the server can have ended it involuntarily, less the
    /// margin: the server counts the end, and the lock-delay from it, in
    /// whole ms.
    pub fn end_lower_bound(&self) -> u64 {
        let ttl = self.alive_ok.map_or(0, |t| t + self.min_ttl_us);
        let end = self.cut.iter().copied().fold(ttl, u64::min);
        end.saturating_sub(MARGIN_US)
    }

    /// Until when a hold granted under it is surely held (not counting a
    /// release of the hold itself).
    pub fn holds_until(&self) -> u64 {
        let mut until = self.end_lower_bound() + self.lock_delay_us;
        for t in [self.close, self.lossy].into_iter().flatten() {
            until = until.min(t);
        }
        until
    }
}

/// What the sessions' rules looked at.
#[derive(Debug, Default)]
pub struct Stats {
    pub sessions: u64,
    pub bound_holds: u64,
    /// Bound holds believed past their session's end by its lock-delay.
    pub delayed_holds: u64,
    pub probes_judged: u64,
    pub deadlocks_judged: u64,
    /// Pairs of bound waits of two sessions surely queued at once.
    pub wait_pairs_judged: u64,
    /// Holds whose belief a failover or everysec crash cut short.
    pub cut_by_faults: u64,
}

impl<'a> Prepared<'a> {
    /// Every session's record, and the holds bound to them as believed
    /// holds.
    pub(super) fn sessions(&mut self) {
        let mut recs: Vec<SessionRec<'a>> = Vec::new();
        let mut of: HashMap<&'a str, usize> = HashMap::new();
        let ops = &self.ops;
        for (i, o) in ops.iter().enumerate() {
            let Some(id) = o.op.session.as_deref() else {
                continue;
            };
            let refused = matches!(o.outcome, Some(Outcome::Fail { .. }));
            // A session is what an `OPEN` not refused may have opened.
            if (o.op.command != Command::SessionOpen || refused) && !of.contains_key(id) {
                continue;
            }
            let ok = matches!(o.outcome, Some(Outcome::Ok { .. }));
            let n = *of.entry(id).or_insert_with(|| {
                recs.push(SessionRec {
                    id,
                    owner: o.client,
                    bind: false,
                    lock_delay_us: 0,
                    opened: o.invoke,
                    alive_ok: None,
                    min_ttl_us: u64::MAX,
                    cut: Vec::new(),
                    close: None,
                    decided: None,
                    lossy: None,
                });
                recs.len() - 1
            });
            let s = &mut recs[n];
            match o.op.command {
                Command::SessionOpen | Command::SessionKeepalive if !refused => {
                    if o.op.command == Command::SessionOpen {
                        s.bind |= o.op.bind;
                        s.lock_delay_us =
                            s.lock_delay_us.max(o.op.lock_delay_ms.unwrap_or(0) * 1000);
                    }
                    let ttl = o.op.ttl_ms.unwrap_or(0) * 1000;
                    s.min_ttl_us = s.min_ttl_us.min(ttl);
                    if ok {
                        s.alive_ok = Some(s.alive_ok.map_or(o.invoke, |t| t.max(o.invoke)));
                    }
                }
                Command::SessionKill if !refused => {
                    s.cut.push(o.invoke);
                    if ok && s.decided.is_none() {
                        s.decided = Some(i);
                    }
                }
                Command::SessionClose if !refused => {
                    s.close = Some(s.close.map_or(o.invoke, |t| t.min(o.invoke)));
                    if ok && s.decided.is_none() {
                        s.decided = Some(i);
                    }
                }
                Command::Disconnect => s.cut.push(o.invoke),
                _ => {}
            }
        }
        for s in &mut recs {
            if s.min_ttl_us == u64::MAX {
                s.min_ttl_us = 0;
            }
            if s.bind {
                // Any connection of the owner lost after the open may be
                // the bound one.
                for o in ops
                    .iter()
                    .filter(|o| o.client == s.owner && o.invoke >= s.opened)
                {
                    if o.info_reason().is_some() {
                        s.cut.push(o.invoke);
                    }
                }
                for f in &self.faults {
                    if f.kind == FaultKind::ClientKill
                        && f.client == Some(s.owner)
                        && f.end >= s.opened
                    {
                        s.cut.push(f.start);
                    }
                }
            }
            s.lossy = self
                .faults
                .iter()
                .filter(|f| f.group == "main" && f.end >= s.opened)
                .filter(|f| {
                    matches!(
                        f.kind,
                        FaultKind::Failover | FaultKind::FailoverStale | FaultKind::Kill9Everysec
                    )
                })
                .map(|f| f.start)
                .min();
        }
        if !recs.is_empty() {
            self.bound_holds(&recs, &of);
        }
        self.session_recs = recs;
        self.session_of = of;
    }

    /// The holds granted under a session, believed from the grant's reply
    /// until the first of: a `RELEASE` of the token sent, the session's
    /// `holds_until`.
    fn bound_holds(&mut self, recs: &[SessionRec<'a>], of: &HashMap<&'a str, usize>) {
        let mut releases: HashMap<(u32, u32), u64> = HashMap::new();
        for o in &self.ops {
            if matches!(o.op.command, Command::Release | Command::Mrelease) {
                let t = releases.entry((o.client, o.token)).or_insert(o.invoke);
                *t = (*t).min(o.invoke);
            }
        }
        for (i, o) in self.ops.iter().enumerate() {
            if !matches!(o.op.command, Command::Acquire | Command::Macquire) {
                continue;
            }
            let Some(&n) = o.op.session.as_deref().and_then(|id| of.get(id)) else {
                continue;
            };
            let (Some(Value::Fence(fence)), Some(start)) = (o.value(), o.complete) else {
                continue;
            };
            let s = &recs[n];
            let mut end = s.holds_until();
            if let Some(&r) = releases.get(&(o.client, o.token)) {
                end = end.min(r);
            }
            for &res in &o.res {
                self.holds.push(Hold {
                    op: i,
                    client: o.client,
                    token: o.token,
                    owner: o.token,
                    res,
                    mode: o.op.mode,
                    fence: *fence,
                    start,
                    bound: end,
                    end,
                    durable_bound: None,
                    grant_invoke: o.root_invoke,
                    renewed: o.root_invoke,
                });
                self.holds_by_key
                    .entry((o.client, o.token, res))
                    .or_default()
                    .push(self.holds.len() - 1);
            }
        }
    }
}

pub fn check(p: &Prepared, limits: &mut BTreeMap<&'static str, u64>) -> (Vec<Violation>, Stats) {
    let mut out = Vec::new();
    let mut stats = Stats {
        sessions: p.session_recs.len() as u64,
        ..Stats::default()
    };
    for h in &p.holds {
        let o = &p.ops[h.op];
        let Some(&n) = o.op.session.as_deref().and_then(|id| p.session_of.get(id)) else {
            continue;
        };
        let s = &p.session_recs[n];
        stats.bound_holds += 1;
        if s.lossy == Some(h.end) {
            stats.cut_by_faults += 1;
        }
        if s.lock_delay_us > 0 && h.end > s.end_lower_bound() && h.start < h.end {
            stats.delayed_holds += 1;
        }
    }
    probes(p, limits, &mut stats, &mut out);
    deadlocks(p, &mut stats, &mut out);
    cycles(p, &mut stats, &mut out);
    (out, stats)
}

/// No hold outlives its session: a probe `RELEASE` of a token granted under
/// a session, sent after a `CLOSE` or `KILL` of it was answered and its
/// lock-delay passed, answers 0.
fn probes(
    p: &Prepared,
    limits: &mut BTreeMap<&'static str, u64>,
    stats: &mut Stats,
    out: &mut Vec<Violation>,
) {
    for o in &p.ops {
        if !o.op.probe || !matches!(o.op.command, Command::Release | Command::Mrelease) {
            continue;
        }
        let Some(&n) = o.op.session.as_deref().and_then(|id| p.session_of.get(id)) else {
            continue;
        };
        let s = &p.session_recs[n];
        let Some(d) = s.decided else { continue };
        let decided = &p.ops[d];
        let Some(at) = decided.complete else { continue };
        if o.invoke < at + s.lock_delay_us + PROBE_SLACK_US {
            continue;
        }
        let Some(found) = o.int() else { continue };
        stats.probes_judged += 1;
        if found == 0 {
            continue;
        }
        if p.lossy_fault("main", s.opened, o.complete.unwrap_or(u64::MAX)) {
            *limits.entry(ASYNC_REPLICATION).or_default() += 1;
            continue;
        }
        out.push(Violation {
            checker: "sessions",
            what: format!(
                "{}: probe {} of token {} answered {found}: the hold outlived session {} (ended for sure by op {} at {at}, lock-delay {} ms)",
                o.op.resources.join(","),
                o.id,
                o.op.token,
                s.id,
                decided.id,
                s.lock_delay_us / 1000
            ),
            ops: vec![decided.id, o.id],
        });
    }
}

fn is_deadlock<'a>(o: &super::prep::OpRec<'a>) -> Option<&'a str> {
    match o.outcome {
        Some(Outcome::Fail { error }) if error.starts_with("DEADLOCK") => Some(error),
        _ => None,
    }
}

/// The resources a `DEADLOCK` error names (`through 'a' 'b'`).
fn named(error: &str) -> Vec<&str> {
    let Some((_, list)) = error.split_once(" through") else {
        return Vec::new();
    };
    list.split('\'').skip(1).step_by(2).collect()
}

/// A `DEADLOCK` refusal names a cycle from one of the request's resources
/// to one the refused session may have held then: granted (or maybe) to a
/// request of the session sent before the refusal's reply, not surely
/// released before the refusal was sent.
fn deadlocks(p: &Prepared, stats: &mut Stats, out: &mut Vec<Violation>) {
    let mut by_session: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, o) in p.ops.iter().enumerate() {
        if matches!(o.op.command, Command::Acquire | Command::Macquire) {
            if let Some(s) = o.op.session.as_deref() {
                by_session.entry(s).or_default().push(i);
            }
        }
    }
    let released_by = |client: u32, token: u32, members: usize| -> Option<u64> {
        p.ops
            .iter()
            .filter(|r| r.client == client && r.token == token)
            .filter(|r| matches!(r.op.command, Command::Release | Command::Mrelease))
            .filter(|r| r.int().is_some_and(|n| n >= members as i64))
            .filter_map(|r| r.complete)
            .min()
    };
    for (i, o) in p.ops.iter().enumerate() {
        let Some(error) = is_deadlock(o) else {
            continue;
        };
        let Some(session) = o.op.session.as_deref() else {
            continue;
        };
        stats.deadlocks_judged += 1;
        let names = named(error);
        let (Some(first), Some(last)) = (names.first(), names.last()) else {
            out.push(violation(
                o,
                format!("a DEADLOCK refusal names no cycle: {error}"),
            ));
            continue;
        };
        if !o.op.resources.iter().any(|r| r == first) {
            out.push(violation(
                o,
                format!("a DEADLOCK refusal's cycle does not start at what it asked for: {error}"),
            ));
            continue;
        }
        let refused_at = o.complete.unwrap_or(u64::MAX);
        let held = by_session.get(session).into_iter().flatten().any(|&j| {
            let a = &p.ops[j];
            let maybe = match a.outcome {
                None | Some(Outcome::Info { .. }) => true,
                Some(Outcome::Ok { value }) => matches!(value, Value::Fence(_)),
                Some(Outcome::Fail { .. }) => false,
            };
            j != i
                && maybe
                && a.root_invoke < refused_at
                && a.op.resources.iter().any(|r| r == last)
                && released_by(a.client, a.token, a.res.len()).is_none_or(|t| t >= o.invoke)
        });
        if !held {
            out.push(violation(
                o,
                format!(
                    "session {session} was refused DEADLOCK through {last}, which it did not hold: {error}"
                ),
            ));
        }
    }
}

fn violation(o: &super::prep::OpRec, what: String) -> Violation {
    Violation {
        checker: "sessions",
        what,
        ops: vec![o.id],
    }
}

/// No cycle left standing: two bound single-resource exclusive waits of two
/// sessions, each for a lock (plain or read-write) the other session surely held
/// (exclusive, bound) all the while, both told nil after their `WAIT`,
/// and surely queued at once. Whichever the server queued second closed
/// the cycle and had to be refused.
fn cycles(p: &Prepared, stats: &mut Stats, out: &mut Vec<Violation>) {
    // Bound exclusive holds by resource.
    let mut bound: HashMap<u32, Vec<usize>> = HashMap::new();
    for (i, h) in p.holds.iter().enumerate() {
        let o = &p.ops[h.op];
        if o.op.session.is_some() && h.mode == Mode::Exclusive && h.start < h.end {
            bound.entry(h.res).or_default().push(i);
        }
    }
    // Waits told nil after their timeout: (op, earliest and latest queueing).
    let mut waits = Vec::new();
    for (i, o) in p.ops.iter().enumerate() {
        let (Some(w), Some(_), Some(done)) = (o.op.wait_ms, o.op.session.as_ref(), o.complete)
        else {
            continue;
        };
        let single = o.op.command == Command::Acquire && o.op.mode == Mode::Exclusive;
        let lock = o
            .res
            .first()
            .is_some_and(|&r| !matches!(p.resources[r as usize].kind, Kind::Semaphore { .. }));
        if !single || !lock || !matches!(o.value(), Some(Value::Nil)) {
            continue;
        }
        let unblocked = p.fault_overlaps(o.invoke, done, |f| {
            f.kind == FaultKind::ClientUnblock && f.client == Some(o.client)
        });
        let w = (w * 1000).saturating_sub(WAIT_SLACK_US);
        if unblocked || done < w {
            continue;
        }
        // Queued at some T in [invoke, done - w], waiting until T + w.
        waits.push((i, o.invoke, done - w, w));
    }
    let holds_over = |session: &str, res: u32, from: u64, to: u64| {
        bound.get(&res).into_iter().flatten().any(|&h| {
            let h = &p.holds[h];
            p.ops[h.op].op.session.as_deref() == Some(session) && h.start <= from && to < h.end
        })
    };
    for (x, &(i, inv_i, late_i, w_i)) in waits.iter().enumerate() {
        for &(j, inv_j, late_j, w_j) in &waits[x + 1..] {
            if inv_j > inv_i + w_i {
                break; // in invocation order: no later one overlaps
            }
            let (a, b) = (&p.ops[i], &p.ops[j]);
            let (sa, sb) = (a.op.session.as_deref(), b.op.session.as_deref());
            let (Some(sa), Some(sb)) = (sa, sb) else {
                continue;
            };
            if sa == sb || a.res[0] == b.res[0] {
                continue;
            }
            // Both surely queued at the later one's queueing time.
            let from = inv_i.max(inv_j);
            let to = late_i.max(late_j);
            if to > (inv_i + w_i).min(inv_j + w_j) || from > to {
                continue;
            }
            stats.wait_pairs_judged += 1;
            // a waits for what b's session holds, and the other way round.
            if !holds_over(sb, a.res[0], from, to) || !holds_over(sa, b.res[0], from, to) {
                continue;
            }
            out.push(Violation {
                checker: "sessions",
                what: format!(
                    "a cycle left standing: session {sa} waited for {} held by session {sb}, which waited for {} held by {sa}, both until their WAIT ran out",
                    p.resources[a.res[0] as usize].name,
                    p.resources[b.res[0] as usize].name
                ),
                ops: vec![a.id, b.id],
            });
        }
    }
}

/// What a sessions workload must have exercised.
pub fn gaps(s: &Stats) -> Vec<String> {
    let mut out = Vec::new();
    let mut gap = |none: bool, what: &str| {
        if none {
            out.push(what.to_string());
        }
    };
    gap(s.bound_holds == 0, "no hold was bound to a session");
    gap(
        s.delayed_holds == 0,
        "no bound hold was believed through a lock-delay",
    );
    gap(
        s.probes_judged == 0,
        "no probe after a session's end was judged",
    );
    gap(
        s.deadlocks_judged == 0,
        "no bound wait was refused DEADLOCK",
    );
    out
}
