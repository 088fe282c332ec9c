//! What a session's history bounds (docs/history.md, the `sessions` rule):
//! a record per session, and the holds bound to it as believed holds (so
//! `mutex` judges them beside every other hold, lock-delay included).
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
use crate::history::{Command, FaultKind, Outcome, Value};
use std::collections::HashMap;

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
                    permits: o.op.permits.unwrap_or(1),
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
