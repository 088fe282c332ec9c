//! When each hold surely ended on the server, for the `guard` rule.
//!
//! A hold (resource, token) is surely not live after the first of:
//! - the completion of a `RELEASE`/`MRELEASE` of its token that was
//!   answered (whatever it answered: the token holds nothing after it);
//! - the completion of an `EXTEND`/`MEXTEND` answered 0 (the server had
//!   lost it: a renewal cannot bring it back);
//! - its lease: the latest completion of a grant or renewal that may have
//!   taken effect (answered, or its outcome unknown) plus its ttl, plus
//!   `LEASE_SLACK_US` (the server counts its absolute deadline in wall-clock
//!   ms; the recorder's clock is a monotonic one).
use super::prep::Prepared;
use crate::history::{Command, Outcome};
use std::collections::HashMap;

/// How much later than its deadline the server may still take a lease
/// for live, against the recorder's clock.
pub const LEASE_SLACK_US: u64 = 50_000;

/// What surely ended a hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// No request of the token on the resource may have been granted.
    Never,
    Released,
    Lost,
    Expired,
}

/// When a hold surely ended, how, and the op that shows it (for
/// `Expired`: its last grant or renewal; for `Never`: the write judged).
#[derive(Clone, Copy, Debug)]
pub struct Death {
    pub at: u64,
    pub how: Ended,
    pub op: usize,
}

/// Per (resource, token): the end of its lease and the first answer that
/// ended it.
#[derive(Default)]
pub struct Lives {
    /// The latest lease end (`u64::MAX`: a request still pending) and the
    /// op that set it.
    lease: HashMap<(u32, u32), (u64, usize)>,
    cut: HashMap<(u32, u32), Death>,
}

impl Lives {
    pub fn new(p: &Prepared) -> Self {
        let mut l = Lives::default();
        for (i, o) in p.ops.iter().enumerate() {
            let renewal = match o.op.command {
                Command::Acquire | Command::Macquire => match o.outcome {
                    None | Some(Outcome::Info { .. }) => true,
                    Some(_) => o.granted().is_some(),
                },
                Command::Extend | Command::Mextend => match o.outcome {
                    None | Some(Outcome::Info { .. }) => true,
                    Some(_) => o.int().is_some_and(|n| n >= 1),
                },
                _ => false,
            };
            let ends = match o.op.command {
                Command::Release | Command::Mrelease if o.int().is_some() => Some(Ended::Released),
                Command::Extend | Command::Mextend if o.int() == Some(0) => Some(Ended::Lost),
                _ => None,
            };
            for &r in &o.res {
                let key = (r, o.token);
                if renewal {
                    let until = o.complete.map_or(u64::MAX, |c| {
                        c.saturating_add(o.op.ttl_ms.unwrap_or(0) * 1000)
                            .saturating_add(LEASE_SLACK_US)
                    });
                    let e = l.lease.entry(key).or_insert((until, i));
                    if until >= e.0 {
                        *e = (until, i);
                    }
                }
                if let (Some(how), Some(at)) = (ends, o.complete) {
                    let e = l.cut.entry(key).or_insert(Death { at, how, op: i });
                    if at < e.at {
                        *e = Death { at, how, op: i };
                    }
                }
            }
        }
        l
    }

    /// When the hold of `token` on `r` surely ended (`None`: it may be
    /// live to the end of the history); `i` is the write asking.
    fn death(&self, r: u32, token: u32, i: usize) -> Option<Death> {
        let Some(&(until, op)) = self.lease.get(&(r, token)) else {
            return Some(Death {
                at: 0,
                how: Ended::Never,
                op: i,
            });
        };
        let expiry = (until < u64::MAX).then_some(Death {
            at: until,
            how: Ended::Expired,
            op,
        });
        match (expiry, self.cut.get(&(r, token)).copied()) {
            (Some(a), Some(b)) => Some(if b.at < a.at { b } else { a }),
            (a, b) => a.or(b),
        }
    }

    /// When every hold the proof may name surely ended: the latest of
    /// their ends (`tokens` empty: no hold ever had the proof).
    pub fn last_death(&self, r: u32, tokens: &[u32], i: usize) -> Option<Death> {
        let mut last = Death {
            at: 0,
            how: Ended::Never,
            op: i,
        };
        for &t in tokens {
            let d = self.death(r, t, i)?;
            if d.at >= last.at {
                last = d;
            }
        }
        Some(last)
    }
}
