//! What the history exercised: operations by command, flavour and outcome,
//! faults by kind, and the coverage gaps (what never happened).
use super::prep::{OpRec, Prepared};
use super::Report;
use crate::history::{Command, FaultKind, Kind, Mode, Outcome, Value};
use std::collections::BTreeSet;

/// The commands of the locks workload.
const COMMANDS: [Command; 7] = [
    Command::Acquire,
    Command::Release,
    Command::Extend,
    Command::Info,
    Command::Macquire,
    Command::Mrelease,
    Command::Mextend,
];

const FLAVOURS: [&str; 8] = [
    "acquire shared",
    "acquire limit",
    "acquire owner",
    "acquire wait",
    "acquire durable",
    "acquire retry",
    "release probe",
    "macquire wait",
];

const FAULTS: [FaultKind; 10] = [
    FaultKind::Kill9Always,
    FaultKind::Kill9Everysec,
    FaultKind::Failover,
    FaultKind::FailoverStale,
    FaultKind::LostReply,
    FaultKind::ClientPause,
    FaultKind::SlowScript,
    FaultKind::ClientKill,
    FaultKind::ClientUnblock,
    FaultKind::DebugSleep,
];

/// The flavours an operation counts under: each option it used (`left`
/// when it ended because its client left), `plain` when none applies.
pub fn flavours(o: &OpRec) -> Vec<&'static str> {
    let op = o.op;
    let mut v = Vec::new();
    let flags = [
        (op.mode == Mode::Shared, "shared"),
        (op.limit.is_some(), "limit"),
        (op.owner.is_some(), "owner"),
        (op.wait_ms.is_some(), "wait"),
        (op.durable, "durable"),
        (op.retry_of.is_some(), "retry"),
        (op.probe, "probe"),
        (op.since.is_some(), "since"),
        (
            op.session.is_some() && !op.command.is_session() && !op.probe,
            "session",
        ),
        (op.bind, "bind"),
        (op.lock_delay_ms.is_some(), "lockdelay"),
        (
            op.guard.as_ref().is_some_and(|g| g.fence.is_some()),
            "fence",
        ),
        (op.guard.as_ref().is_some_and(|g| g.batch), "batch"),
        (op.guard.as_ref().is_some_and(|g| g.lua), "lua"),
        (o.info_reason() == Some("left"), "left"),
        (op.permits.is_some(), "permits"),
        (op.to.is_some(), "to"),
    ];
    for (on, name) in flags {
        if on {
            v.push(name);
        }
    }
    if v.is_empty() {
        v.push("plain");
    }
    v
}

fn outcome(o: &OpRec) -> &'static str {
    match o.outcome {
        None => "pending",
        Some(Outcome::Ok { value: Value::Nil }) => "nil",
        Some(Outcome::Ok { .. }) => "ok",
        Some(Outcome::Fail { .. }) => "fail",
        Some(Outcome::Info { .. }) => "info",
    }
}

/// Fills `ops`, `by_op`, `faults` and `gaps`.
pub fn count(p: &Prepared, r: &mut Report) {
    r.ops = p.ops.len() as u64;
    for o in &p.ops {
        let cmd = super::command_name(o.op.command);
        let out = outcome(o);
        *r.by_op
            .entry(cmd.to_string())
            .or_default()
            .entry(out.to_string())
            .or_default() += 1;
        for f in flavours(o) {
            *r.by_op
                .entry(format!("{cmd} {f}"))
                .or_default()
                .entry(out.to_string())
                .or_default() += 1;
        }
    }
    for f in &p.faults {
        *r.faults.entry(f.kind).or_default() += 1;
    }
    let mut gaps = Vec::new();
    let mut sent = |names: &[&str]| {
        for name in names {
            if !r.by_op.contains_key(*name) {
                gaps.push(format!("no {name} was sent"));
            }
        }
    };
    if p.ran("locks") {
        sent(&COMMANDS.map(super::command_name));
        sent(&FLAVOURS);
    }
    if p.ran("election") {
        sent(&["observe", "observe since"]);
    }
    for k in FAULTS {
        if !r.faults.contains_key(&k) {
            gaps.push(format!("no {} fault was injected", super::fault_name(k)));
        }
    }
    r.gaps = gaps;
    if !p.ran("locks") {
        return;
    }
    let granted: BTreeSet<&str> = p
        .grants
        .iter()
        .filter(|g| !p.resources[g.res as usize].election)
        .filter(|g| matches!(p.ops[g.op].value(), Some(Value::Fence(_))))
        .map(|g| match p.resources[g.res as usize].kind {
            Kind::Plain => "plain",
            Kind::Rwlock => "rwlock",
            Kind::Semaphore { .. } => "semaphore",
        })
        .collect();
    for k in ["plain", "rwlock", "semaphore"] {
        if !granted.contains(k) {
            r.gaps.push(format!("no {k} resource was ever granted"));
        }
    }
    let locks_wrote =
        (p.writes.iter()).any(|w| w.accepted && !p.resources[w.res as usize].election);
    if !locks_wrote {
        r.gaps
            .push("the fenced sink never accepted a write".to_string());
    }
}

/// What the `handover` and `permits` workloads must have exercised: holds
/// handed over and handovers refused; grants of several permits at once,
/// and resizes both up and down while the semaphore was held.
pub fn handover_permits_gaps(p: &Prepared) -> Vec<String> {
    let mut gaps = Vec::new();
    if p.ran("handover") {
        let to = p.ops.iter().filter(|o| o.op.to.is_some());
        if !to.clone().any(|o| o.int() == Some(1)) {
            gaps.push("no hold was handed over (RELEASE ... TO answered 1)".to_string());
        }
        if !to
            .clone()
            .any(|o| matches!(o.outcome, Some(Outcome::Fail { .. })))
        {
            gaps.push("no handover was refused (RELEASE ... TO answered an error)".to_string());
        }
    }
    if p.ran("permits") {
        let weighted = p.grants.iter().any(|g| {
            let o = &p.ops[g.op];
            o.op.permits.is_some_and(|k| k > 1) && matches!(o.value(), Some(Value::Fence(_)))
        });
        if !weighted {
            gaps.push("no request for several permits was granted".to_string());
        }
        let resized = |up: bool| {
            p.ops.iter().any(|o| {
                let (Some(n), Some(prev)) = (o.op.limit, o.int()) else {
                    return false;
                };
                o.op.command == Command::Resize
                    && (i64::from(n) > prev) == up
                    && i64::from(n) != prev
            })
        };
        if !resized(true) || !resized(false) {
            gaps.push("no held semaphore was resized both up and down".to_string());
        }
    }
    gaps
}
