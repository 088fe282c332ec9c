//! The report: counts, known limits, gaps, violations with their lines, and
//! last the summary line.
use super::Report;
use crate::history::Event;
use std::collections::{BTreeMap, HashMap, HashSet};

/// How many violations are printed in full, and of those at most how many
/// of one checker (so one kind of finding cannot hide the others).
const SHOWN: usize = 20;
const SHOWN_PER_CHECKER: usize = 5;
const OUTCOMES: [&str; 5] = ["ok", "nil", "fail", "info", "pending"];

impl Report {
    /// Prints the breakdown, the first violations, and last the summary line.
    pub fn print(&self, events: &[Event], took: std::time::Duration) {
        print!("{}", self.render(events, took));
    }

    pub fn render(&self, events: &[Event], took: std::time::Duration) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(s, "operations ({}):", self.ops);
        let _ = writeln!(
            s,
            "  {:<24}{}",
            "command flavour",
            OUTCOMES.map(|o| format!("{o:>9}")).concat()
        );
        for (k, v) in &self.by_op {
            let cols: String = OUTCOMES
                .iter()
                .map(|o| format!("{:>9}", v.get(*o).copied().unwrap_or(0)))
                .collect();
            let _ = writeln!(s, "  {k:<24}{cols}");
        }
        let faults: u64 = self.faults.values().sum();
        let _ = writeln!(s, "faults ({faults}):");
        for (k, n) in &self.faults {
            let _ = writeln!(s, "  {:<24}{n:>9}", super::fault_name(*k));
        }
        let _ = writeln!(s, "known limits (counted, not violations):");
        if self.known_limits.is_empty() {
            let _ = writeln!(s, "  none");
        }
        for (k, n) in &self.known_limits {
            let _ = writeln!(s, "  {n:>7}  {k}");
        }
        let judged: Vec<String> = (self.fifo_judged.iter())
            .map(|(r, n)| format!("{r} {n}"))
            .collect();
        let _ = writeln!(
            s,
            "fifo: {} pairs judged ({})",
            self.fifo_judged.values().sum::<u64>(),
            judged.join(", ")
        );
        for (r, w) in &self.priority {
            let _ = writeln!(
                s,
                "priority: {r}: {} passes within the window seen (allowed); {} waits of priority 0 judged: {} granted, the longest {} ms{}, {} told nil; bound {} ms (priority {} from {} clients, leases up to {} ms)",
                self.fifo_passes.get(r).copied().unwrap_or(0),
                w.granted + w.told_nil,
                w.granted,
                w.longest_us / 1000,
                w.longest_op.map_or(String::new(), |id| format!(" (op {id})")),
                w.told_nil,
                w.bound_us / 1000,
                w.top,
                w.clients,
                w.longest_lease_ms
            );
        }
        if let Some(x) = &self.sessions {
            let _ = writeln!(
                s,
                "sessions: {} sessions, {} bound holds ({} believed through a lock-delay, {} other owners' grants asked for inside one and made after it; {} cut short by a failover or everysec crash), {} probes after an end judged, {} DEADLOCK refusals judged, {} pairs of bound waits judged",
                x.sessions,
                x.bound_holds,
                x.delayed_holds,
                x.delay_waiters,
                x.cut_by_faults,
                x.probes_judged,
                x.deadlocks_judged,
                x.wait_pairs_judged
            );
        }
        if let Some(g) = &self.guard {
            let _ = writeln!(
                s,
                "guard: {} guarded writes: {} carried out ({} by FENCE, {} by TOKEN, {} batches, {} from Lua), {} refused NOTHELD, {} other errors, {} unknown; {} entries read",
                g.writes,
                g.accepted,
                g.accepted_fence,
                g.accepted_token,
                g.accepted_batches,
                g.accepted_lua,
                g.refused,
                g.other_errors,
                g.unknown,
                g.entries
            );
            let _ = writeln!(
                s,
                "  stale writes judged: {} ({} refused): {} after a release, {} after a lease ran out, {} after the hold was found lost; {} writes of live holders judged",
                g.stale,
                g.stale_refused,
                g.after_release,
                g.after_expiry,
                g.after_loss,
                g.live_judged
            );
        }
        if let Some(e) = &self.election {
            let _ = writeln!(
                s,
                "election: {} leaderships ({} queued grants, {} resigned), {} terms judged against the leadership before",
                e.leaderships, e.queued_grants, e.resigned, e.terms_judged
            );
            let _ = writeln!(
                s,
                "  observers: {} replies, {} changes of leader shown, {} resumed after a lost connection, {} waits ran out ({} judged for a missed change)",
                e.observed, e.terms_shown, e.resumed, e.waits_out, e.waits_judged
            );
            let _ = writeln!(
                s,
                "  late writes of paused leaders: {} refused by the sink, {} accepted (no later term had written)",
                e.late_refused, e.late_accepted
            );
        }
        let _ = writeln!(s, "linearizability (per lin resource):");
        for l in &self.linear {
            let _ = writeln!(
                s,
                "  {:<6}{:>9} ops ({} lost replies, {} left out, {} unmodelled): {} in {:?}, {} steps, at most {} states",
                l.resource,
                l.ops,
                l.unknown,
                l.left_out,
                l.unmodeled,
                if l.linearizable { "linearizable" } else { "NOT linearizable" },
                l.took,
                l.steps,
                l.max_states
            );
        }
        let _ = writeln!(s, "coverage gaps ({}):", self.gaps.len());
        for g in &self.gaps {
            let _ = writeln!(s, "  {g}");
        }
        let mut by_checker: BTreeMap<&str, u64> = BTreeMap::new();
        for v in &self.violations {
            *by_checker.entry(v.checker).or_default() += 1;
        }
        let _ = writeln!(s, "violations ({}):", self.violations.len());
        for (k, n) in &by_checker {
            let _ = writeln!(s, "  {k:<24}{n:>9}");
        }
        let shown = self.shown();
        let wanted: HashSet<u64> = shown.iter().flat_map(|v| v.ops.iter().copied()).collect();
        let mut lines: HashMap<u64, Vec<&Event>> = HashMap::new();
        for e in events {
            if let Event::Invoke { id, .. } | Event::Complete { id, .. } = e {
                if wanted.contains(id) {
                    lines.entry(*id).or_default().push(e);
                }
            }
        }
        for (n, v) in shown.iter().enumerate() {
            let v = *v;
            let _ = writeln!(s, "#{} [{}] {}", n + 1, v.checker, v.what);
            for id in &v.ops {
                for e in lines.get(id).into_iter().flatten() {
                    let json = serde_json::to_string(e).unwrap_or_default();
                    let _ = writeln!(s, "    {json}");
                }
            }
        }
        if self.violations.len() > SHOWN {
            let _ = writeln!(s, "... and {} more", self.violations.len() - SHOWN);
        }
        let _ = writeln!(s, "check took {} ms", took.as_millis());
        let _ = writeln!(
            s,
            "history: {} ops, {} faults, {} violations, seed {}",
            self.ops,
            faults,
            self.violations.len(),
            self.seed
        );
        s
    }

    /// The violations printed in full: the first of each checker, in order.
    fn shown(&self) -> Vec<&super::Violation> {
        let mut per: HashMap<&str, usize> = HashMap::new();
        let mut out = Vec::new();
        for v in &self.violations {
            let n = per.entry(v.checker).or_default();
            if *n < SHOWN_PER_CHECKER && out.len() < SHOWN {
                *n += 1;
                out.push(v);
            }
        }
        out
    }
}
