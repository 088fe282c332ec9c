//! `guard` (docs/history.md, the `guard` rule): a write `DLOCK.GUARD`
//! carried out came from a live holder, and one it refused wrote nothing.
//!
//! A hold (resource, token) is surely not live on the server after the
//! first of:
//! - the completion of a `RELEASE`/`MRELEASE` of its token that was
//!   answered (whatever it answered: the token holds nothing after it);
//! - the completion of an `EXTEND`/`MEXTEND` answered 0 (the server had
//!   lost it: a renewal cannot bring it back);
//! - its lease: the latest completion of a grant or renewal that may have
//!   taken effect (answered, or its outcome unknown) plus its ttl, plus
//!   `LEASE_SLACK_US` (the server counts its absolute deadline in wall-clock
//!   ms; the recorder's clock is a monotonic one).
//!
//! A `FENCE f` proof is a hold of any token granted `f` on the resource
//! (fences are never shared between owners: `fences` checks that).
use super::prep::{OpRec, Prepared};
use super::{Violation, ASYNC_REPLICATION};
use crate::history::{Command, Guarded, Outcome, Value};
use std::collections::{BTreeMap, HashMap};

/// How much later than its deadline the server may still take a lease
/// for live, against the recorder's clock.
pub const LEASE_SLACK_US: u64 = 50_000;

/// What the guarded writes were and how they were judged.
#[derive(Debug, Default)]
pub struct Stats {
    pub writes: u64,
    /// Carried out (a reply, or the entry found in the sink).
    pub accepted: u64,
    pub accepted_fence: u64,
    pub accepted_token: u64,
    pub accepted_batches: u64,
    /// Refused `NOTHELD`.
    pub refused: u64,
    /// Refused with another error (`LOADING`, a reply of the wrong shape).
    pub other_errors: u64,
    /// No reply, and no sink read to tell.
    pub unknown: u64,
    /// Sent after their hold surely ended (released, lost, expired) and
    /// with a known outcome: the stale writes judged.
    pub stale: u64,
    pub stale_refused: u64,
    /// Of the stale writes, by what ended the hold.
    pub after_release: u64,
    pub after_loss: u64,
    pub after_expiry: u64,
    /// Sent and answered while their holder surely held: judged for a
    /// refusal.
    pub live_judged: u64,
    /// Entries the sink reads found.
    pub entries: u64,
}

/// What surely ended a hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ended {
    /// No request of the token on the resource may have been granted.
    Never,
    Released,
    Lost,
    Expired,
}

/// When a hold surely ended, how, and the op that shows it (for
/// `Expired`: its last grant or renewal; for `Never`: the write judged).
#[derive(Clone, Copy, Debug)]
struct Death {
    at: u64,
    how: Ended,
    op: usize,
}

/// Per (resource, token): the end of its lease and the first answer that
/// ended it.
#[derive(Default)]
struct Lives {
    /// The latest lease end (`u64::MAX`: a request still pending) and the
    /// op that set it.
    lease: HashMap<(u32, u32), (u64, usize)>,
    cut: HashMap<(u32, u32), Death>,
}

impl Lives {
    fn new(p: &Prepared) -> Self {
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
    fn last_death(&self, r: u32, tokens: &[u32], i: usize) -> Option<Death> {
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

/// The last answered read of each resource's sink: (op, entries, count).
fn reads<'a>(p: &'a Prepared) -> HashMap<u32, (usize, &'a [String], i64)> {
    let mut out = HashMap::new();
    for (i, o) in p.ops.iter().enumerate() {
        if let (Command::SinkRead, Some(Value::Sink { entries, count })) = (o.op.command, o.value())
        {
            out.insert(o.res[0], (i, &entries[..], *count));
        }
    }
    out
}

fn guarded<'a>(o: &OpRec<'a>) -> Option<&'a Guarded> {
    (o.op.command == Command::Guard)
        .then_some(o.op.guard.as_ref())
        .flatten()
}

pub fn check(p: &Prepared, limits: &mut BTreeMap<&'static str, u64>) -> (Vec<Violation>, Stats) {
    let mut out = Vec::new();
    let mut stats = Stats::default();
    let lives = Lives::new(p);
    // The tokens granted each (resource, fence).
    let mut fenced: HashMap<(u32, u64), Vec<u32>> = HashMap::new();
    for g in &p.grants {
        let tokens = fenced.entry((g.res, g.fence)).or_default();
        if !tokens.contains(&p.ops[g.op].token) {
            tokens.push(p.ops[g.op].token);
        }
    }
    let reads = reads(p);
    // Every entry read, to the guard op that pushed it.
    let mut found: HashMap<(u32, &str), bool> = HashMap::new();
    for (&r, (_, entries, _)) in &reads {
        stats.entries += entries.len() as u64;
        for e in entries.iter() {
            found.insert((r, e.as_str()), false);
        }
    }
    let mut batches_found: HashMap<u32, i64> = HashMap::new();
    for (i, o) in p.ops.iter().enumerate() {
        let Some(g) = guarded(o) else { continue };
        let r = o.res[0];
        stats.writes += 1;
        let read = reads
            .get(&r)
            .filter(|(ri, ..)| p.ops[*ri].invoke >= o.invoke);
        let in_sink = match found.get_mut(&(r, g.entry.as_str())) {
            Some(seen) => {
                *seen = true;
                true
            }
            None => false,
        };
        if in_sink && g.batch {
            *batches_found.entry(r).or_default() += 1;
        }
        let accepted = match o.outcome {
            Some(Outcome::Ok { .. }) => true,
            Some(Outcome::Fail { error }) => {
                if error.starts_with("NOTHELD") {
                    stats.refused += 1;
                } else {
                    stats.other_errors += 1;
                }
                if in_sink {
                    out.push(violation(
                        p,
                        i,
                        None,
                        format!(
                            "the write was refused ({error}) but its entry {} is in the sink",
                            g.entry
                        ),
                    ));
                }
                false
            }
            None | Some(Outcome::Info { .. }) => {
                if !in_sink && read.is_none() {
                    stats.unknown += 1;
                }
                in_sink
            }
        };
        if accepted {
            stats.accepted += 1;
            if g.fence.is_some() {
                stats.accepted_fence += 1;
            } else {
                stats.accepted_token += 1;
            }
            if g.batch {
                stats.accepted_batches += 1;
            }
        }
        let done = o.complete.unwrap_or(u64::MAX);
        // An acknowledged write the sink does not have.
        if let (Some(Outcome::Ok { .. }), Some((ri, ..)), false) = (o.outcome, read, in_sink) {
            if p.lossy_fault("main", o.invoke, p.ops[*ri].invoke) {
                *limits.entry(ASYNC_REPLICATION).or_default() += 1;
            } else {
                out.push(violation(
                    p,
                    i,
                    Some(*ri),
                    format!(
                        "the write was acknowledged but its entry {} is not in the sink",
                        g.entry
                    ),
                ));
            }
        }
        let known = accepted || matches!(o.outcome, Some(Outcome::Fail { .. }));
        if !known {
            continue;
        }
        // When the hold the proof names surely ended.
        let tokens = match g.fence {
            Some(f) => fenced.get(&(r, f)).cloned().unwrap_or_default(),
            None => vec![o.token],
        };
        let death = lives.last_death(r, &tokens, i);
        if let Some(d) = death.filter(|d| o.invoke > d.at) {
            stats.stale += 1;
            match d.how {
                Ended::Released => stats.after_release += 1,
                Ended::Lost => stats.after_loss += 1,
                Ended::Expired => stats.after_expiry += 1,
                Ended::Never => {}
            }
            if !accepted {
                stats.stale_refused += 1;
                continue;
            }
            // A release a failover or an everysec crash lost: the hold
            // is back (asynchronous replication).
            let since = p.ops[d.op].invoke;
            if d.how == Ended::Released && p.lossy_fault("main", since, done) {
                *limits.entry(ASYNC_REPLICATION).or_default() += 1;
                continue;
            }
            let what = if d.how == Ended::Never {
                format!("no hold on the resource was ever granted {}", proof(o, g))
            } else {
                format!(
                    "{} ended for sure at {} ({} op {})",
                    proof(o, g),
                    d.at,
                    match d.how {
                        Ended::Released => "released by",
                        Ended::Lost => "found lost by",
                        _ => "its lease ran out after",
                    },
                    p.ops[d.op].id
                )
            };
            out.push(violation(
                p,
                i,
                (d.how != Ended::Never).then_some(d.op),
                format!(
                    "a stale holder's write was carried out (entry {}): {what}",
                    g.entry
                ),
            ));
            continue;
        }
        // A write sent and answered while its holder surely held.
        let Some(h) = super::sink::believed(p, o.client, o.token, r, o.invoke) else {
            continue;
        };
        let h = &p.holds[h];
        if done >= h.end || g.fence.is_some_and(|f| f != h.fence) {
            continue;
        }
        stats.live_judged += 1;
        if accepted
            || !matches!(o.outcome, Some(Outcome::Fail { error }) if error.starts_with("NOTHELD"))
        {
            continue;
        }
        if p.lossy_fault("main", h.grant_invoke, done) {
            *limits.entry(ASYNC_REPLICATION).or_default() += 1;
            continue;
        }
        out.push(violation(
            p,
            i,
            Some(h.op),
            format!(
                "a live holder's write was refused NOTHELD: {} (op {}, fence {}) believed {}..{}",
                proof(o, g),
                p.ops[h.op].id,
                h.fence,
                h.start,
                h.end
            ),
        ));
    }
    sink_contents(p, &reads, &found, &batches_found, &mut out);
    (out, stats)
}

/// Every entry in a sink was pushed by a guarded write, and each sink's
/// counter counts the batches whose entries it holds (all or none).
fn sink_contents(
    p: &Prepared,
    reads: &HashMap<u32, (usize, &[String], i64)>,
    found: &HashMap<(u32, &str), bool>,
    batches: &HashMap<u32, i64>,
    out: &mut Vec<Violation>,
) {
    let mut strays: Vec<(&u32, &str)> = found
        .iter()
        .filter(|(_, seen)| !**seen)
        .map(|((r, e), _)| (r, *e))
        .collect();
    strays.sort_unstable();
    for (r, e) in strays {
        let (ri, ..) = reads[r];
        out.push(Violation {
            checker: "guard",
            what: format!(
                "{}: the sink holds {e}, which no guarded write pushed",
                p.resources[*r as usize].name
            ),
            ops: vec![p.ops[ri].id],
        });
    }
    let mut rs: Vec<&u32> = reads.keys().collect();
    rs.sort_unstable();
    for r in rs {
        let (ri, _, count) = reads[r];
        let n = batches.get(r).copied().unwrap_or(0);
        if count != n {
            out.push(Violation {
                checker: "guard",
                what: format!(
                    "{}: the sink's counter is {count} but it holds the entries of {n} batches: a batch was applied in part",
                    p.resources[*r as usize].name
                ),
                ops: vec![p.ops[ri].id],
            });
        }
    }
}

fn proof(o: &OpRec, g: &Guarded) -> String {
    match g.fence {
        Some(f) => format!("FENCE {f} (token {})", o.op.token),
        None => format!("TOKEN {}", o.op.token),
    }
}

fn violation(p: &Prepared, i: usize, other: Option<usize>, what: String) -> Violation {
    let o = &p.ops[i];
    let mut ops = vec![o.id];
    ops.extend(other.map(|j| p.ops[j].id));
    ops.sort_unstable();
    ops.dedup();
    Violation {
        checker: "guard",
        what: format!(
            "{}: op {} of client {}: {what}",
            p.resources[o.res[0] as usize].name, o.id, o.client
        ),
        ops,
    }
}

/// What a guarded-sink workload must have exercised.
pub fn gaps(s: &Stats, read: bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut gap = |none: bool, what: &str| {
        if none {
            out.push(what.to_string());
        }
    };
    gap(
        s.accepted_fence == 0,
        "no guarded write proven by FENCE was carried out",
    );
    gap(
        s.accepted_token == 0,
        "no guarded write proven by TOKEN was carried out",
    );
    gap(s.accepted_batches == 0, "no guarded BATCH was carried out");
    gap(s.refused == 0, "no guarded write was refused NOTHELD");
    gap(
        s.after_release == 0,
        "no guarded write after a release was judged",
    );
    gap(
        s.after_expiry == 0,
        "no guarded write after a lease ran out was judged",
    );
    gap(
        s.live_judged == 0,
        "no guarded write of a live holder was judged",
    );
    gap(!read, "no guarded sink was read");
    out
}
