//! `lost`: a believed hold the server no longer had before its bound.
use super::prep::Prepared;
use super::{Violation, ASYNC_REPLICATION};
use std::collections::BTreeMap;

/// Each loss found while reconstructing beliefs (`RELEASE`/`EXTEND` answered
/// 0, `MEXTEND` 0 or `MRELEASE` fewer than its members, completed before
/// the hold's bound at that moment) is a violation, unless:
/// - the hold is on `main`, no durable grant or refresh covered the reply's
///   completion (`durable_bound`), and a `failover`, `failover_stale` or
///   `kill9_everysec` was under way at some time between the invocation of
///   the hold's last grant or renewal answered before the reply (the
///   grant's first try) and the reply's completion: counted as the
///   asynchronous-replication limit instead. Under way, not started: such a
///   fault is recorded as started before its kill (`failover_stale` stops
///   the replica 250 to 800 ms before it, `kill9_everysec` switches to
///   `everysec` 200 ms before it), so a grant made after its start can
///   still be lost in it. A durable grant lost before its durable bound is
///   always a violation (an acknowledged `EXTEND` or refresh that shortened
///   the lease moves that bound in: replicas keep only the shorter lease);
///   `kill9_always` never explains a loss.
pub fn check(p: &Prepared, limits: &mut BTreeMap<&'static str, u64>) -> Vec<Violation> {
    let mut out = Vec::new();
    for l in &p.losses {
        let h = &p.holds[l.hold];
        let o = &p.ops[l.op];
        let done = o.complete.unwrap_or(o.invoke);
        let res = &p.resources[h.res as usize];
        let durable = h.durable_bound.is_some_and(|b| done < b);
        let explained = !durable && res.group == "main" && p.lossy_fault("main", l.since, done);
        if explained {
            *limits.entry(ASYNC_REPLICATION).or_default() += 1;
            continue;
        }
        let mut ops = vec![p.ops[h.op].id, o.id];
        ops.sort_unstable();
        out.push(Violation {
            checker: "lost",
            what: format!(
                "{}: {} of token {} answered {} at {}, before the hold's bound {} ({}grant op {}, fence {}){}",
                res.name,
                super::command_name(o.op.command),
                p.names[h.token as usize],
                o.int().unwrap_or(0),
                done,
                h.bound,
                if durable { "durable " } else { "" },
                p.ops[h.op].id,
                h.fence,
                if durable || res.group != "main" {
                    ""
                } else {
                    ": no failover or everysec crash in between"
                }
            ),
            ops,
        });
    }
    out
}
