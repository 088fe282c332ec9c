//! `election`: on an election's resource (a plain lock whose holders are
//! leaders and whose fences are their terms) terms rise from each
//! leadership to the next, and observers are never shown a term go back
//! nor told "nothing changed" while another leader held the resource.
//!
//! At most one leader at any instant is the `mutex` rule on the same
//! believed holds, and the leaders' writes are the `sink` rule's; those
//! checkers judge the election's resource like any other.
use super::prep::{OpRec, Prepared};
use super::{Violation, ASYNC_REPLICATION};
use crate::history::{Command, FaultKind, Outcome, Value};
use std::collections::{BTreeMap, HashMap, HashSet};

/// A change that came this long before an observer's wait could end had
/// woken it (µs): the check it queues runs before the wait's end, in due
/// order, on a server that is not stalled.
pub const WAKE_SLACK_US: u64 = 50_000;

/// What the election's checks saw.
#[derive(Debug, Default, Clone)]
pub struct Stats {
    /// Believed leaderships (holds on an election's resource).
    pub leaderships: u64,
    /// Leaderships whose term was compared with the one before it.
    pub terms_judged: u64,
    /// Campaigns granted after waiting in the queue (at least 5 ms).
    pub queued_grants: u64,
    /// Leaders that resigned (`RELEASE` answered 1).
    pub resigned: u64,
    /// Observer replies, and of them those that showed another leader than
    /// the observer's previous reply (a change of term seen).
    pub observed: u64,
    pub terms_shown: u64,
    /// Waits that ran out (nil), and of them those the missed-change rule
    /// judged.
    pub waits_out: u64,
    pub waits_judged: u64,
    /// Observer requests that resumed from a version after a lost reply or
    /// connection.
    pub resumed: u64,
    /// Writes of paused leaders made past their lease: refused, accepted.
    pub late_refused: u64,
    pub late_accepted: u64,
}

pub fn check(p: &Prepared, limits: &mut BTreeMap<&'static str, u64>) -> (Vec<Violation>, Stats) {
    let mut stats = Stats::default();
    let mut out = Vec::new();
    for (r, res) in p.resources.iter().enumerate() {
        if !res.election {
            continue;
        }
        let r = r as u32;
        out.extend(terms_rise(p, r, &mut stats));
        out.extend(observers(p, r, limits, &mut stats));
    }
    for w in &p.writes {
        if w.late && p.resources[w.res as usize].election {
            if w.accepted {
                stats.late_accepted += 1;
            } else {
                stats.late_refused += 1;
            }
        }
    }
    (out, stats)
}

/// Coverage gaps of the election workload.
pub fn gaps(s: &Stats) -> Vec<String> {
    let checks = [
        (s.leaderships, "no candidate led"),
        (
            s.queued_grants,
            "no campaign was granted after waiting in the queue",
        ),
        (s.resigned, "no leader resigned"),
        (s.terms_shown, "no observer was shown a change of leader"),
        (s.waits_out, "no observer's wait ran out"),
        (
            s.waits_judged,
            "the missed-change rule judged no observer's wait",
        ),
        (
            s.late_refused,
            "the sink refused no paused leader's late write",
        ),
    ];
    checks
        .iter()
        .filter(|(n, _)| *n == 0)
        .map(|(_, what)| what.to_string())
        .collect()
}

/// Terms rise: a leadership believed after another one ended has the
/// higher term. Sound by real time like `mutex`: each believed leadership
/// lies within its lease on the server, so if A's ended before B's began,
/// A's grant came before B's (leases of two leaders never overlap), and
/// fences rise with grants.
fn terms_rise(p: &Prepared, r: u32, stats: &mut Stats) -> Vec<Violation> {
    let mut led: Vec<usize> = (0..p.holds.len())
        .filter(|&i| p.holds[i].res == r && p.holds[i].start < p.holds[i].end)
        .collect();
    stats.leaderships += led.len() as u64;
    led.sort_by_key(|&i| (p.holds[i].start, i));
    let mut by_end = led.clone();
    by_end.sort_by_key(|&i| (p.holds[i].end, i));
    let mut out = Vec::new();
    // The highest term (and its leadership) among those ended so far.
    let mut high: Option<(u64, usize)> = None;
    let mut next = 0;
    for &b in &led {
        let hb = &p.holds[b];
        while next < by_end.len() && p.holds[by_end[next]].end <= hb.start {
            let a = by_end[next];
            if high.is_none_or(|(f, _)| p.holds[a].fence > f) {
                high = Some((p.holds[a].fence, a));
            }
            next += 1;
        }
        let Some((f, a)) = high else { continue };
        stats.terms_judged += 1;
        if hb.fence <= f {
            let ha = &p.holds[a];
            let ops = sorted(vec![p.ops[ha.op].id, p.ops[hb.op].id]);
            out.push(Violation {
                checker: "election",
                what: format!(
                    "{}: leader {} (op {}) led in term {} from {}, after leader {} (op {}) had led in term {} until {}: terms must rise",
                    p.resources[r as usize].name,
                    p.names[hb.token as usize],
                    p.ops[hb.op].id,
                    hb.fence,
                    hb.start,
                    p.names[ha.token as usize],
                    p.ops[ha.op].id,
                    ha.fence,
                    ha.end
                ),
                ops,
            });
        }
    }
    for o in &p.ops {
        if o.res.first() != Some(&r) {
            continue;
        }
        match o.op.command {
            Command::Acquire => {
                let queued = o.complete.unwrap_or(0).saturating_sub(o.invoke) >= 5_000;
                if queued && matches!(o.value(), Some(Value::Fence(_))) {
                    stats.queued_grants += 1;
                }
            }
            Command::Release if o.int() == Some(1) => stats.resigned += 1,
            _ => {}
        }
    }
    out
}

/// The term an observer reply shows (`None`: nobody leads, or the
/// leadership is being handed over).
fn term(o: &OpRec) -> Option<u64> {
    match o.value() {
        Some(Value::Observed {
            holds: Some(view), ..
        }) => view.holds.iter().map(|h| h.fence).max(),
        _ => None,
    }
}

/// The (token, fence) pairs of the state an observer reply shows.
fn shown<'a>(o: &OpRec<'a>) -> HashSet<(&'a str, u64)> {
    match o.outcome {
        Some(Outcome::Ok {
            value: Value::Observed {
                holds: Some(view), ..
            },
        }) => view
            .holds
            .iter()
            .map(|h| (h.token.as_str(), h.fence))
            .collect(),
        _ => HashSet::new(),
    }
}

/// What one observer was shown so far, and the resource's leaderships.
struct Seen<'a, 'h> {
    /// The reply each version came from (the latest).
    versions: HashMap<&'a str, usize>,
    /// Leaderships by start.
    led: &'h [usize],
    /// The longest leadership (bounds the search back).
    longest: u64,
}

/// Per observer (client), its replies in order:
/// - never a lower term after a higher one, nor a term again after the
///   observer was shown another state since it (both mean a state the
///   resource had left came back): a violation unless a failover or an
///   everysec crash of its group, which may lose the change that ended that
///   leadership, was under way between the two replies (asynchronous
///   replication, a known limit);
/// - a wait that ran out (nil) after `SINCE v`: the resource must have
///   stayed in v's state until the wait ended, which is no sooner than the
///   request's invocation plus `WAIT` (the server starts the wait no
///   sooner); `missed` finds where it surely did not. Not judged when a
///   `CLIENT UNBLOCK` of the observer (which answers nil) was under way.
fn observers(
    p: &Prepared,
    r: u32,
    limits: &mut BTreeMap<&'static str, u64>,
    stats: &mut Stats,
) -> Vec<Violation> {
    let mut by_client: HashMap<u32, Vec<usize>> = HashMap::new();
    for (i, o) in p.ops.iter().enumerate() {
        if o.op.command == Command::Observe && o.res.first() == Some(&r) {
            by_client.entry(o.client).or_default().push(i);
        }
    }
    let name = p.resources[r as usize].name;
    let group = p.resources[r as usize].group;
    // Leaderships by start, and the longest one (to bound the search).
    let mut led: Vec<usize> = (0..p.holds.len())
        .filter(|&i| p.holds[i].res == r && p.holds[i].start < p.holds[i].end)
        .collect();
    led.sort_by_key(|&i| p.holds[i].start);
    let longest = (led.iter())
        .map(|&i| p.holds[i].end - p.holds[i].start)
        .max()
        .unwrap_or(0);
    let tokens = Tokens::of(p, r);
    let mut out = Vec::new();
    let mut clients: Vec<_> = by_client.into_iter().collect();
    clients.sort_unstable();
    for (client, list) in clients {
        // The highest term shown so far and the reply that showed it; the
        // previous reply that showed a state; the reply each version came from.
        let mut high: Option<(u64, usize)> = None;
        let mut prev: Option<usize> = None;
        let mut seen = Seen {
            versions: HashMap::new(),
            led: &led,
            longest,
        };
        let mut lost_before = false;
        for &i in &list {
            let o = &p.ops[i];
            if o.op.since.is_some() && lost_before {
                stats.resumed += 1;
            }
            lost_before = o.info_reason().is_some();
            match o.value() {
                Some(Value::Observed { version, .. }) => {
                    stats.observed += 1;
                    let t = term(o);
                    let before = prev.map(|j| term(&p.ops[j]));
                    if t.is_some() && before != Some(t) {
                        stats.terms_shown += 1;
                    }
                    if let (Some(t), Some((h, j))) = (t, high) {
                        let back = t < h || (t == h && before != Some(Some(h)));
                        if back {
                            let done = o.complete.unwrap_or(u64::MAX);
                            if p.lossy_fault(group, p.ops[j].invoke, done) {
                                *limits.entry(ASYNC_REPLICATION).or_default() += 1;
                            } else {
                                out.push(Violation {
                                    checker: "election",
                                    what: format!(
                                        "{name}: observer {client} was shown term {t} (op {}) after term {h} (op {}){}",
                                        o.id,
                                        p.ops[j].id,
                                        if t == h { " had given way to another state" } else { "" }
                                    ),
                                    ops: sorted(vec![p.ops[j].id, o.id]),
                                });
                            }
                        }
                    }
                    if let Some(t) = t {
                        if high.is_none_or(|(h, _)| t > h) {
                            high = Some((t, i));
                        }
                    }
                    prev = Some(i);
                    seen.versions.insert(version.as_str(), i);
                }
                Some(Value::Nil) => {
                    stats.waits_out += 1;
                    if let Some(v) = missed(p, o, &seen, &tokens, stats) {
                        out.push(v);
                    }
                }
                _ => {}
            }
        }
    }
    out
}

/// Per token on one resource: its `RELEASE`s answered 1 and the last
/// invocation of an `ACQUIRE` of it.
#[derive(Default)]
struct Tokens {
    released: HashMap<String, Vec<usize>>,
    last_acquire: HashMap<String, u64>,
}

impl Tokens {
    fn of(p: &Prepared, r: u32) -> Tokens {
        let mut t = Tokens::default();
        for (i, o) in p.ops.iter().enumerate() {
            if o.res.first() != Some(&r) {
                continue;
            }
            let token = o.op.token.clone();
            match o.op.command {
                Command::Release if o.int() == Some(1) => {
                    t.released.entry(token).or_default().push(i)
                }
                Command::Acquire => {
                    t.last_acquire.insert(token, o.invoke);
                }
                _ => {}
            }
        }
        t
    }
}

/// The missed-change rule for one wait that ran out (see `observers`):
/// the state at the wait's end surely differed from the one `SINCE` named
/// when (a) a leader that state did not show held the resource (believed)
/// from 50 ms before the wait could end until after the nil came back, or
/// (b) a leader that state showed had resigned for sure (its `RELEASE`
/// answered 1 by 50 ms before the wait could end), and its token was not
/// asked for again since. Not judged across a failover or an everysec crash that may
/// have lost that grant or release: one under way from the request that
/// was answered the grant (the master that answered it had the hold) or
/// the release, to the nil.
fn missed(
    p: &Prepared,
    o: &OpRec,
    seen: &Seen,
    tokens: &Tokens,
    stats: &mut Stats,
) -> Option<Violation> {
    let (Some(since), Some(wait), Some(done)) = (&o.op.since, o.op.wait_ms, o.complete) else {
        return None;
    };
    let &from = seen.versions.get(since.as_str())?;
    let unblocked = p.fault_overlaps(o.invoke, done, |f| {
        f.kind == FaultKind::ClientUnblock && f.client == Some(o.client)
    });
    if unblocked {
        return None;
    }
    stats.waits_judged += 1;
    let before = shown(&p.ops[from]);
    let ends_no_sooner = o.invoke + wait * 1000;
    let res = &p.resources[o.res[0] as usize];
    let name = res.name;
    let lossy = |from: u64| p.lossy_fault(res.group, from, done);
    let what = |change: String, by: usize| {
        Violation {
        checker: "election",
        what: format!(
            "{name}: observer {} waited for a change from version {since} (shown by op {}) and was told nil at {}, its wait ending no sooner than {ends_no_sooner}, while {change}",
            o.client,
            p.ops[from].id,
            done,
        ),
        ops: sorted(vec![p.ops[from].id, p.ops[by].id, o.id]),
    }
    };
    let led = &seen.led;
    let n = led.partition_point(|&h| p.holds[h].start + WAKE_SLACK_US <= ends_no_sooner);
    let other = led[..n]
        .iter()
        .rev()
        .take_while(|&&h| p.holds[h].start + seen.longest >= done)
        .map(|&h| &p.holds[h])
        .find(|h| {
            h.end > done
                && !before.contains(&(p.names[h.token as usize], h.fence))
                && !lossy(p.ops[h.op].invoke)
        });
    if let Some(h) = other {
        let change = format!(
            "leader {} (op {}, term {}) led from {} to {}",
            p.names[h.token as usize], p.ops[h.op].id, h.fence, h.start, h.end
        );
        return Some(what(change, h.op));
    }
    for (token, fence) in before {
        let Some(list) = tokens.released.get(token) else {
            continue;
        };
        let again = tokens.last_acquire.get(token).copied().unwrap_or(0);
        let sure = list.iter().copied().find(|&x| {
            let rel = &p.ops[x];
            rel.complete
                .is_some_and(|c| c + WAKE_SLACK_US <= ends_no_sooner && rel.invoke > again)
                && !lossy(rel.invoke)
        });
        if let Some(x) = sure {
            let change = format!(
                "leader {token} (term {fence}) had resigned (op {} answered 1 at {})",
                p.ops[x].id,
                p.ops[x].complete.unwrap_or(0)
            );
            return Some(what(change, x));
        }
    }
    None
}

fn sorted(mut ids: Vec<u64>) -> Vec<u64> {
    ids.sort_unstable();
    ids.dedup();
    ids
}
