//! `guard` (docs/history.md, the `guard` rule): a write `DLOCK.GUARD`
//! carried out came from a live holder, and one it refused wrote nothing.
//!
//! When each hold surely ended is `hold_lives.rs`'s; a `FENCE f` proof
//! names every hold granted `f` on the resource (fences are never shared
//! between owners: `fences` checks that).
use super::hold_lives::{Ended, Lives};
use super::prep::{OpRec, Prepared};
use super::{Violation, ASYNC_REPLICATION};
use crate::history::{Command, Guarded, Outcome, Value};
use std::collections::{BTreeMap, HashMap};

/// What the guarded writes were and how they were judged.
#[derive(Debug, Default)]
pub struct Stats {
    pub writes: u64,
    /// Carried out (a reply, or the entry found in the sink).
    pub accepted: u64,
    pub accepted_fence: u64,
    pub accepted_token: u64,
    pub accepted_batches: u64,
    pub accepted_lua: u64,
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
    for (&r, &(ri, entries, _)) in &reads {
        stats.entries += entries.len() as u64;
        for e in entries.iter() {
            if found.insert((r, e.as_str()), false).is_some() {
                out.push(Violation {
                    checker: "guard",
                    what: format!(
                        "{}: the sink holds {e} twice: a guarded write was carried out twice",
                        p.resources[r as usize].name
                    ),
                    ops: vec![p.ops[ri].id],
                });
            }
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
            if g.lua {
                stats.accepted_lua += 1;
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
    gap(
        s.accepted_lua == 0,
        "no guarded write from Lua was carried out",
    );
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
