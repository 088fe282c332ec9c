//! `liveness`: every operation completed in time, no `WAIT` was cut short,
//! every probe found nothing. FIFO is in `fifo.rs`.
use super::prep::{OpRec, Prepared};
use super::{Violation, CLOSING_CONNECTION, DROPPED_REPLY, SERVER_DIED};
use crate::history::{Command, FaultKind, Outcome, Value};
use std::collections::{BTreeMap, HashMap};

/// How much earlier than its `WAIT` a nil may come (timer granularity).
const NIL_SLACK_US: u64 = 1_000;

pub fn check(p: &Prepared, limits: &mut BTreeMap<&'static str, u64>) -> Vec<Violation> {
    let mut out = Vec::new();
    // The last acquire of each (client, token): the waiter a probe asks about.
    let mut waiter: HashMap<(u32, u32), usize> = HashMap::new();
    for (i, o) in p.ops.iter().enumerate() {
        let v = |what: String| Violation {
            checker: "liveness",
            what,
            ops: vec![o.id],
        };
        let name = super::command_name(o.op.command);
        match o.outcome {
            None => out.push(v(format!(
                "{name} of client {} invoked at {} never completed",
                o.client, o.invoke
            ))),
            Some(Outcome::Info { reason }) if reason == "timeout" => out.push(v(format!(
                "{name} of client {}: no reply within wait + 30 s",
                o.client
            ))),
            _ => {}
        }
        match o.op.command {
            Command::Acquire | Command::Macquire => {
                waiter.insert((o.client, o.token), i);
                if let Some(w) = early_nil(p, o) {
                    out.push(v(w));
                }
            }
            Command::Observe => {
                if let Some(w) = early_nil(p, o) {
                    out.push(v(w));
                }
            }
            // A probe: `RELEASE`, `MRELEASE`, `EXTEND` or `MEXTEND` of a
            // token whose waiter got no grant must find nothing.
            Command::Release | Command::Mrelease | Command::Extend | Command::Mextend
                if o.op.probe && o.op.session.is_none() =>
            {
                if let Some(n) = o.int().filter(|&n| n >= 1) {
                    let w = waiter.get(&(o.client, o.token)).map(|&w| &p.ops[w]);
                    if let Some(x) = probe(p, o, w, n, limits) {
                        out.push(x);
                    }
                }
            }
            _ => {}
        }
    }
    for id in &p.completes_without_invoke {
        out.push(Violation {
            checker: "liveness",
            what: format!("op {id} completed but was never invoked (or completed twice)"),
            ops: vec![*id],
        });
    }
    out
}

/// A `WAIT` told nil before its timeout, with no `CLIENT UNBLOCK` of its
/// client under way in between (`WAIT 0` waits forever: any nil is early).
/// Under way, not started: the fault is recorded as started before the
/// `CLIENT UNBLOCK` is sent, and the client may have begun a new `WAIT`
/// meanwhile, which the unblock then hits.
fn early_nil(p: &Prepared, o: &OpRec) -> Option<String> {
    let wait = o.op.wait_ms?;
    let (Some(Value::Nil), Some(done)) = (o.value(), o.complete) else {
        return None;
    };
    let took = done.saturating_sub(o.invoke);
    if wait != 0 && took + NIL_SLACK_US >= wait * 1000 {
        return None;
    }
    let unblocked = p.fault_overlaps(o.invoke, done, |f| {
        f.kind == FaultKind::ClientUnblock && f.client == Some(o.client)
    });
    (!unblocked).then(|| {
        format!(
            "{} WAIT {} of client {} told nil after {} ms, before its timeout, and nobody unblocked it",
            super::command_name(o.op.command),
            wait,
            o.client,
            took / 1000
        )
    })
}

/// A probe that found a hold: a grant after its waiter was told nil or
/// left. A waiter that left (closed its own connection), one whose reply
/// went through the lost-reply proxy, and one whose server was killed while
/// it waited had a grant the server may rightly have made.
fn probe(
    p: &Prepared,
    o: &OpRec,
    w: Option<&OpRec>,
    n: i64,
    limits: &mut BTreeMap<&'static str, u64>,
) -> Option<Violation> {
    let mut ops = vec![o.id];
    if let Some(w) = w {
        if matches!(w.value(), Some(v) if *v != Value::Nil) {
            return None; // it was granted: the probe rightly found it
        }
        ops.insert(0, w.id);
        if let Some(reason) = w.info_reason() {
            if reason == "left" {
                *limits.entry(CLOSING_CONNECTION).or_default() += 1;
                return None;
            }
            if p.proxied(w.client) {
                *limits.entry(DROPPED_REPLY).or_default() += 1;
                return None;
            }
            let died = p.fault_overlaps(w.invoke, w.complete.unwrap_or(u64::MAX), |f| {
                matches!(
                    f.kind,
                    FaultKind::Kill9Always
                        | FaultKind::Kill9Everysec
                        | FaultKind::Failover
                        | FaultKind::FailoverStale
                )
            });
            if died {
                *limits.entry(SERVER_DIED).or_default() += 1;
                return None;
            }
        }
    }
    let how = match w.and_then(|w| w.outcome) {
        Some(Outcome::Ok { .. }) => "told nil".to_string(),
        Some(Outcome::Fail { error }) => format!("failed ({error})"),
        Some(Outcome::Info { reason }) => format!("ended without a reply ({reason})"),
        None => "still pending".to_string(),
    };
    Some(Violation {
        checker: "liveness",
        what: format!(
            "{}: probe {} of token {} by client {} answered {n}: granted after its waiter was told nil or left (the waiter {})",
            o.op.resources.join(","),
            super::command_name(o.op.command),
            p.names[o.token as usize],
            o.client,
            if w.is_some() { how } else { "was never sent".to_string() }
        ),
        ops,
    })
}
