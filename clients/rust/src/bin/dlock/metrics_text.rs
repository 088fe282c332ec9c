//! What `dlock metrics` read from each node, as Prometheus metric
//! families (docs/operations.md, "Metrics for Prometheus", lists them):
//! one family per figure, a sample per node (and kind, or hot resource).

use crate::metrics_read::{info_number, Dist, Hot, Stats};
use crate::prom::{seconds, Family, Type};
use std::collections::HashSet;

/// What one node answered.
#[derive(Debug, Default)]
pub struct Read {
    pub info: Vec<(String, String)>,
    pub stats: Stats,
    /// `DLOCK.STATS HOT BY contended`, `BY wait`, `BY expired`.
    pub hot: [Vec<Hot>; 3],
}

/// A node (`host:port`) and what it answered; None: it could not be read
/// (`dlock_up` 0, and nothing else from it).
#[derive(Debug)]
pub struct Node {
    pub name: String,
    pub read: Option<Read>,
}

/// The family of each counter of `metrics_read::COUNTERS`, in its order.
const COUNTER_FAMILIES: [(&str, &str); 8] = [
    (
        "dlock_grants_total",
        "Grants, to a command or to a queued waiter.",
    ),
    (
        "dlock_waited_total",
        "Grants to a request that had waited in the queue.",
    ),
    (
        "dlock_handovers_total",
        "Grants out of turn by RELEASE ... TO (counted in waited too when the target waited).",
    ),
    (
        "dlock_contended_total",
        "Requests that found the resource taken.",
    ),
    (
        "dlock_wait_timeouts_total",
        "Queued requests that left without a grant.",
    ),
    ("dlock_releases_total", "Holds ended by their holder."),
    ("dlock_expired_total", "Holds whose lease ran out."),
    (
        "dlock_revoked_total",
        "Grants revoked because their reply could not be delivered.",
    ),
];

/// `INFO dlock` fields exported as they are: (field, family, type, help).
const INFO_FAMILIES: [(&str, &str, Type, &str); 7] = [
    (
        "dlock_locks",
        "dlock_locks",
        Type::Gauge,
        "Lock keys alive.",
    ),
    (
        "dlock_waiters",
        "dlock_waiters",
        Type::Gauge,
        "Clients waiting, on all resources.",
    ),
    (
        "dlock_observers",
        "dlock_observers",
        Type::Gauge,
        "Observers waiting, on all resources.",
    ),
    (
        "dlock_sessions",
        "dlock_sessions",
        Type::Gauge,
        "Sessions live now.",
    ),
    (
        "dlock_deferred_jobs",
        "dlock_deferred_jobs",
        Type::Gauge,
        "Work queued for a later turn of the event loop.",
    ),
    (
        "dlock_eviction_can_free_locks",
        "dlock_eviction_can_free_locks",
        Type::Gauge,
        "1 if the server's maxmemory-policy can evict lock keys.",
    ),
    (
        "dlock_evicted_locks",
        "dlock_evicted_locks_total",
        Type::Counter,
        "Held locks evicted by maxmemory-policy since start.",
    ),
];

fn node(n: &Node) -> Vec<(&'static str, String)> {
    vec![("node", n.name.clone())]
}

fn with(n: &Node, more: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    let mut l = node(n);
    l.extend(more.iter().map(|(k, v)| (*k, v.to_string())));
    l
}

/// A distribution: its quantiles, `_sum` and `_count` in the summary `s`,
/// its max in `max`.
fn summary(s: &mut Family, max: &mut Family, n: &Node, kind: &str, d: &Dist) {
    for (q, v) in [("0.5", d.p50), ("0.9", d.p90), ("0.99", d.p99)] {
        s.add(with(n, &[("kind", kind), ("quantile", q)]), seconds(v));
    }
    s.add_with(with(n, &[("kind", kind)]), "_sum", seconds(d.sum));
    s.add_with(with(n, &[("kind", kind)]), "_count", d.count.to_string());
    max.add(with(n, &[("kind", kind)]), seconds(d.max));
}

/// The families, in the order docs/operations.md lists them.
pub fn families(nodes: &[Node]) -> Vec<Family> {
    let mut up = Family::new(
        "dlock_up",
        Type::Gauge,
        "1 if the node answered every query of this scrape, else 0.",
    );
    let mut enabled = Family::new(
        "dlock_stats_enabled",
        Type::Gauge,
        "1 while dlock.stats is yes (the statistics are counted), else 0.",
    );
    let mut counters: Vec<Family> = COUNTER_FAMILIES
        .iter()
        .map(|(name, help)| Family::new(name, Type::Counter, help))
        .collect();
    let mut wait = Family::new("dlock_wait_seconds", Type::Summary, "Waits from joining the queue to the grant (0 for a grant at once), since the statistics were reset.");
    let mut wait_max = Family::new(
        "dlock_wait_max_seconds",
        Type::Gauge,
        "The longest wait since the statistics were reset.",
    );
    let mut hold = Family::new(
        "dlock_hold_seconds",
        Type::Summary,
        "Holds from the grant to their end, since the statistics were reset.",
    );
    let mut hold_max = Family::new(
        "dlock_hold_max_seconds",
        Type::Gauge,
        "The longest hold since the statistics were reset.",
    );
    let mut info: Vec<Family> = INFO_FAMILIES
        .iter()
        .map(|(_, name, kind, help)| Family::new(name, *kind, help))
        .collect();
    let mut q_active = Family::new(
        "dlock_quarantine_active",
        Type::Gauge,
        "1 while a restart quarantine holds grants back, else 0.",
    );
    let mut q_left = Family::new(
        "dlock_quarantine_seconds_left",
        Type::Gauge,
        "Seconds until grants resume (0: no quarantine).",
    );
    let mut q_unbounded = Family::new(
        "dlock_quarantine_unbounded",
        Type::Gauge,
        "1 if a possible loss of grants could not be bounded.",
    );
    // With whether the table's score is microseconds (`BY wait`).
    let mut hot = [
        (Family::new("dlock_hot_contended", Type::Gauge, "Requests that found the resource taken, for the 10 most contended resources (counted since the resource entered the hot table)."), false),
        (Family::new("dlock_hot_wait_seconds_total", Type::Counter, "Time requests waited for the resource, for the 10 resources waited for longest (counted since the resource entered the hot table)."), true),
        (Family::new("dlock_hot_expired", Type::Gauge, "Leases on the resource that ran out, for the 10 resources with the most (counted since the resource entered the hot table)."), false),
    ];
    for n in nodes {
        up.add(node(n), u8::from(n.read.is_some()).to_string());
        let Some(r) = &n.read else { continue };
        enabled.add(node(n), u8::from(r.stats.enabled).to_string());
        for (kind, f) in &r.stats.kinds {
            // A counter the server does not give is left out, not 0.
            for (family, v) in counters.iter_mut().zip(f.counters) {
                if let Some(v) = v {
                    family.add(with(n, &[("kind", kind)]), v.to_string());
                }
            }
            summary(&mut wait, &mut wait_max, n, kind, &f.wait);
            summary(&mut hold, &mut hold_max, n, kind, &f.hold);
        }
        // A field an older module lacks is left out, not reported as 0.
        for (family, (field, ..)) in info.iter_mut().zip(INFO_FAMILIES) {
            if let Some(v) = info_number(&r.info, field) {
                family.add(node(n), v.to_string());
            }
        }
        if let Some(ms) = info_number(&r.info, "dlock_quarantine_ms_left") {
            let ms = u64::try_from(ms).unwrap_or(0);
            q_active.add(node(n), u8::from(ms > 0).to_string());
            q_left.add(node(n), seconds(ms.saturating_mul(1000)));
        }
        if let Some(v) = info_number(&r.info, "dlock_quarantine_unbounded") {
            q_unbounded.add(node(n), v.to_string());
        }
        for ((family, in_us), table) in hot.iter_mut().zip(&r.hot) {
            // Two names that differ only in bytes that are not UTF-8 get
            // one label value: the hotter one (first) is kept, as a
            // scraper refuses a series twice.
            let mut seen = HashSet::new();
            for h in table.iter().filter(|h| seen.insert((&h.resource, h.db))) {
                let value = if *in_us {
                    seconds(h.score)
                } else {
                    h.score.to_string()
                };
                let db = h.db.to_string();
                family.add(with(n, &[("resource", &h.resource), ("db", &db)]), value);
            }
        }
    }
    let mut all = vec![up, enabled];
    all.extend(counters);
    all.extend([wait, wait_max, hold, hold_max]);
    all.extend(info);
    all.extend([q_active, q_left, q_unbounded]);
    all.extend(hot.map(|(f, _)| f));
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics_read::{self, tests::stats_value};
    use crate::prom::render;

    fn read() -> Read {
        let mut stats = metrics_read::stats(stats_value(true)).unwrap();
        // The shared kind's handovers not in the reply.
        stats.kinds[1].1.counters[2] = None;
        Read {
            info: vec![
                ("dlock_version".into(), "0.4.0".into()),
                ("dlock_locks".into(), "2".into()),
                ("dlock_quarantine_ms_left".into(), "1500".into()),
                ("dlock_quarantine_unbounded".into(), "0".into()),
                ("dlock_evicted_locks".into(), "4".into()),
            ],
            stats,
            hot: [
                vec![
                    Hot {
                        resource: "a\"b\\c\nd".into(),
                        db: 0,
                        score: 7,
                    },
                    Hot {
                        resource: "a\"b\\c\nd".into(),
                        db: 0,
                        score: 5,
                    },
                ],
                vec![Hot {
                    resource: "w".into(),
                    db: 2,
                    score: 1_500_000,
                }],
                vec![],
            ],
        }
    }

    #[test]
    fn every_family_with_its_samples() {
        let nodes = [
            Node {
                name: "h:1".into(),
                read: Some(read()),
            },
            Node {
                name: "h:2".into(),
                read: None,
            },
        ];
        let t = render(&families(&nodes));
        let has = |line: &str| assert!(t.lines().any(|l| l == line), "no {line:?} in\n{t}");
        has("dlock_up{node=\"h:1\"} 1");
        has("dlock_up{node=\"h:2\"} 0");
        has("dlock_stats_enabled{node=\"h:1\"} 1");
        has("# TYPE dlock_grants_total counter");
        has("dlock_grants_total{node=\"h:1\",kind=\"lock\"} 1");
        has("dlock_revoked_total{node=\"h:1\",kind=\"semaphore\"} 10");
        has("# TYPE dlock_wait_seconds summary");
        // lock's wait: count 10, sum 11, p50 12 ... max 15 (microseconds).
        has("dlock_wait_seconds{node=\"h:1\",kind=\"lock\",quantile=\"0.99\"} 0.000014");
        has("dlock_wait_seconds_sum{node=\"h:1\",kind=\"lock\"} 0.000011");
        has("dlock_wait_seconds_count{node=\"h:1\",kind=\"lock\"} 10");
        has("dlock_hold_max_seconds{node=\"h:1\",kind=\"shared\"} 0.000205");
        has("dlock_locks{node=\"h:1\"} 2");
        has("dlock_evicted_locks_total{node=\"h:1\"} 4");
        has("dlock_quarantine_active{node=\"h:1\"} 1");
        has("dlock_quarantine_seconds_left{node=\"h:1\"} 1.5");
        has("dlock_quarantine_unbounded{node=\"h:1\"} 0");
        has("dlock_hot_contended{node=\"h:1\",resource=\"a\\\"b\\\\c\\nd\",db=\"0\"} 7");
        has("dlock_hot_wait_seconds_total{node=\"h:1\",resource=\"w\",db=\"2\"} 1.5");
        // The total is no kind; a second series of one name is left out;
        // fields the server did not give, and empty tables, are left out.
        assert!(!t.contains("kind=\"total\""), "{t}");
        has("dlock_handovers_total{node=\"h:1\",kind=\"lock\"} 3");
        assert!(
            !t.contains("dlock_handovers_total{node=\"h:1\",kind=\"shared\"}"),
            "{t}"
        );
        assert_eq!(t.matches("dlock_hot_contended{").count(), 1, "{t}");
        for absent in ["dlock_waiters", "dlock_hot_expired", "dlock_version"] {
            assert!(!t.contains(absent), "{absent} in\n{t}");
        }
        // Every family once, its lines together, HELP before TYPE.
        let mut names = Vec::new();
        let mut current = "";
        for l in t.lines() {
            if let Some(rest) = l.strip_prefix("# HELP ") {
                current = rest.split(' ').next().unwrap();
                assert!(!names.contains(&current), "{current} twice");
                names.push(current);
            } else if !l.starts_with("# TYPE ") {
                assert!(l.starts_with(current), "{l} outside its family");
            }
        }
        // A counter's name ends in _total.
        for l in t.lines().filter(|l| l.ends_with(" counter")) {
            assert!(l.split(' ').nth(2).unwrap().ends_with("_total"), "{l}");
        }
    }

    #[test]
    fn nodes_that_could_not_be_read_give_dlock_up_alone() {
        let t = render(&families(&[Node {
            name: "x:1".into(),
            read: None,
        }]));
        assert_eq!(
            t,
            "# HELP dlock_up 1 if the node answered every query of this scrape, else 0.\n\
             # TYPE dlock_up gauge\n\
             dlock_up{node=\"x:1\"} 0\n"
        );
        assert_eq!(render(&families(&[])), "");
    }
}
