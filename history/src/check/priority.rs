//! `priority`: on a resource where requests named priorities, how long a
//! request of priority 0 waited, against the bound the aging gives
//! (docs/waiting.md#priorities): it is passed only by requests that
//! arrive within `p_max * aging` of it, after which it waits only for
//! those already ranked ahead. Each client has at most one request in
//! flight, so at most one per client that sent a higher priority there,
//! each held at most its lease. A wait of priority 0 undisturbed by
//! faults that ended later than
//!
//! ```text
//! bound = 2 * AHEAD_US + p_max * aging + clients * longest lease
//! ```
//!
//! after it was sent (granted then, or told nil at its `WAIT` past it) is
//! starvation: one `AHEAD_US` for its arrival, one for the handoffs and
//! its reply on a loaded machine (each write fsynced by `appendfsync
//! always`, a client thread kept from reading). The passes the bound
//! allows are counted by `fifo`.
use super::fifo::{disturbs, hits, priority, AHEAD_US, DEFAULT_AGING_MS, FAULT_MARGIN_US};
use super::prep::{OpRec, Prepared};
use super::Violation;
use crate::history::{Command, Kind, Mode, Value};
use std::collections::{BTreeMap, BTreeSet};

/// What the rule saw on one resource with priorities.
#[derive(Debug, Default, Clone)]
pub struct Seen {
    /// The highest priority named there.
    pub top: u16,
    /// Clients that sent a priority above 0 there.
    pub clients: u64,
    /// The longest lease those asked for (ms).
    pub longest_lease_ms: u64,
    /// The bound on a wait of priority 0 (µs).
    pub bound_us: u64,
    /// Waits of priority 0 judged (no fault near them): granted, or told
    /// nil at their `WAIT`.
    pub granted: u64,
    pub told_nil: u64,
    /// The longest judged wait of priority 0 that was granted (µs), and
    /// its operation.
    pub longest_us: u64,
    pub longest_op: Option<u64>,
}

/// Per resource where some request named a priority above 0.
pub type Stats = BTreeMap<String, Seen>;

/// Candidates as in `fifo`: a first, single, exclusive `ACQUIRE ... WAIT`
/// without `OWNER` or `LIMIT` on a plain resource, from a direct client.
fn candidate(p: &Prepared, o: &OpRec) -> bool {
    o.op.command == Command::Acquire
        && o.res.len() == 1
        && p.resources[o.res[0] as usize].kind == Kind::Plain
        && o.op.mode == Mode::Exclusive
        && o.op.owner.is_none()
        && o.op.limit.is_none()
        && o.op.wait_ms.is_some()
        && o.op.retry_of.is_none()
        && !p.proxied(o.client)
        && o.complete.is_some()
}

pub fn check(p: &Prepared) -> (Vec<Violation>, Stats) {
    let aging_us = p.priority_aging_ms.unwrap_or(DEFAULT_AGING_MS) * 1000;
    let mut stats = Stats::new();
    let mut clients: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
    for o in &p.ops {
        if o.op.command != Command::Acquire || priority(o) == 0 {
            continue;
        }
        let r = o.res[0];
        let seen = stats
            .entry(p.resources[r as usize].name.to_string())
            .or_default();
        seen.top = seen.top.max(priority(o));
        seen.longest_lease_ms = seen.longest_lease_ms.max(o.op.ttl_ms.unwrap_or(0));
        clients.entry(r).or_default().insert(o.client);
    }
    for (r, c) in &clients {
        let seen = stats
            .get_mut(p.resources[*r as usize].name)
            .expect("counted above");
        seen.clients = c.len() as u64;
        seen.bound_us = 2 * AHEAD_US
            + u64::from(seen.top) * aging_us
            + seen.clients * seen.longest_lease_ms * 1000;
    }
    let mut out = Vec::new();
    for o in &p.ops {
        if !candidate(p, o) || priority(o) != 0 || !clients.contains_key(&o.res[0]) {
            continue;
        }
        let res = &p.resources[o.res[0] as usize];
        let seen = stats.get_mut(res.name).expect("counted above");
        let done = o.complete.expect("a candidate completed");
        let from = o.invoke.saturating_sub(FAULT_MARGIN_US);
        if p.fault_overlaps(from, done, |f| {
            disturbs(f, res.group, o, o) || hits(f, res.group, o)
        }) {
            continue;
        }
        let waited = done - o.invoke;
        match o.value() {
            Some(Value::Fence(_)) => {
                seen.granted += 1;
                if waited > seen.longest_us {
                    seen.longest_us = waited;
                    seen.longest_op = Some(o.id);
                }
            }
            Some(Value::Nil) => seen.told_nil += 1,
            _ => continue,
        }
        if waited > seen.bound_us {
            out.push(Violation {
                checker: "priority",
                what: format!(
                    "{}: a request of priority 0 (client {}, sent at {}) waited {} ms and was {}, past the bound of {} ms (2 x {} ms for arrival and reply + priority {} x {} ms of aging + {} clients x a lease of at most {} ms)",
                    res.name,
                    o.client,
                    o.invoke,
                    waited / 1000,
                    if matches!(o.value(), Some(Value::Nil)) { "told nil" } else { "granted" },
                    seen.bound_us / 1000,
                    AHEAD_US / 1000,
                    seen.top,
                    aging_us / 1000,
                    seen.clients,
                    seen.longest_lease_ms
                ),
                ops: vec![o.id],
            });
        }
    }
    (out, stats)
}
