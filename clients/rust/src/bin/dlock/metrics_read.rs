//! What `dlock metrics` reads from a server, parsed into plain structs:
//! `DLOCK.STATS` (docs/commands/dlock.stats.md), `DLOCK.STATS HOT`, and
//! the `INFO dlock` section (docs/operations.md). A map (RESP3) or a flat
//! field/value array (RESP2); fields read by name, unknown ones ignored; a
//! counter the server does not give is None (left out, not reported as 0);
//! a missing figure of a distribution is 0.

use crate::backend::{bytes, fields, int, text};
use redis::Value;

/// The kinds `DLOCK.STATS` reports apart (`total` is their sum, left out).
pub const KINDS: [&str; 3] = ["lock", "shared", "semaphore"];

/// The counters of one kind, by their names in the reply.
pub const COUNTERS: [&str; 8] = [
    "grants",
    "waited",
    "handovers",
    "contended",
    "wait_timeouts",
    "releases",
    "expired",
    "revoked",
];

/// A distribution, in microseconds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Dist {
    pub count: u64,
    pub sum: u64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub max: u64,
}

/// The figures of one kind.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Figures {
    /// In the order of [`COUNTERS`]; None: not in the reply.
    pub counters: [Option<u64>; 8],
    pub wait: Dist,
    pub hold: Dist,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    pub enabled: bool,
    /// Those of [`KINDS`] the reply has, in that order.
    pub kinds: Vec<(&'static str, Figures)>,
}

/// One entry of a `HOT` table.
#[derive(Clone, Debug, PartialEq)]
pub struct Hot {
    /// The name's bytes as UTF-8, invalid sequences replaced (a label
    /// value must be UTF-8).
    pub resource: String,
    pub db: i64,
    /// The figure the table is ordered by (microseconds for `wait`),
    /// counted since the resource entered the table: its `score` less the
    /// `error` it inherited then.
    pub score: u64,
}

/// A figure as a count: a negative or missing one is 0.
fn count(v: Option<&Value>) -> u64 {
    v.map_or(0, |v| u64::try_from(int(v)).unwrap_or(0))
}

fn get<'a>(f: &'a [(String, Value)], name: &str) -> Option<&'a Value> {
    f.iter().find(|(n, _)| n == name).map(|(_, v)| v)
}

fn dist(v: Option<&Value>) -> Dist {
    let f = v.cloned().and_then(fields).unwrap_or_default();
    let c = |n: &str| count(get(&f, n));
    Dist {
        count: c("count"),
        sum: c("sum"),
        p50: c("p50"),
        p90: c("p90"),
        p99: c("p99"),
        max: c("max"),
    }
}

fn figures(v: Value) -> Option<Figures> {
    let f = fields(v)?;
    let mut counters = [None; COUNTERS.len()];
    for (slot, name) in counters.iter_mut().zip(COUNTERS) {
        *slot = get(&f, name).map(|v| count(Some(v)));
    }
    Some(Figures {
        counters,
        wait: dist(get(&f, "wait")),
        hold: dist(get(&f, "hold")),
    })
}

/// `DLOCK.STATS`; None: not a map.
pub fn stats(v: Value) -> Option<Stats> {
    let f = fields(v)?;
    let mut kinds = Vec::new();
    for kind in KINDS {
        if let Some(v) = get(&f, kind) {
            kinds.push((kind, figures(v.clone())?));
        }
    }
    Some(Stats {
        enabled: count(get(&f, "enabled")) == 1,
        kinds,
    })
}

/// `DLOCK.STATS HOT ...`; None: not an array of maps.
pub fn hot(v: Value) -> Option<Vec<Hot>> {
    let Value::Array(entries) = v else {
        return None;
    };
    entries
        .into_iter()
        .map(|e| {
            let f = fields(e)?;
            let name = get(&f, "resource").cloned().and_then(bytes)?;
            Some(Hot {
                resource: String::from_utf8_lossy(&name.0).into_owned(),
                db: get(&f, "db").map_or(0, int),
                score: count(get(&f, "score")).saturating_sub(count(get(&f, "error"))),
            })
        })
        .collect()
}

/// `INFO dlock`: its `field:value` lines, in order (section headers and
/// blank lines left out). None: not a string.
pub fn info(v: Value) -> Option<Vec<(String, String)>> {
    let t = text(v)?;
    Some(
        t.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect(),
    )
}

/// A numeric `INFO` field (None: missing or not a number).
pub fn info_number(info: &[(String, String)], name: &str) -> Option<i64> {
    info.iter()
        .find(|(k, _)| k == name)
        .and_then(|(_, v)| v.parse().ok())
}

#[cfg(test)]
pub mod tests {
    use super::*;

    pub fn bulk(s: &[u8]) -> Value {
        Value::BulkString(s.to_vec())
    }

    /// A map as RESP3 sends it, or the flat array of RESP2.
    pub fn map(resp3: bool, pairs: Vec<(&str, Value)>) -> Value {
        if resp3 {
            Value::Map(
                pairs
                    .into_iter()
                    .map(|(k, v)| (bulk(k.as_bytes()), v))
                    .collect(),
            )
        } else {
            Value::Array(
                pairs
                    .into_iter()
                    .flat_map(|(k, v)| [bulk(k.as_bytes()), v])
                    .collect(),
            )
        }
    }

    pub fn dist_value(resp3: bool, base: i64) -> Value {
        map(
            resp3,
            ["count", "sum", "p50", "p90", "p99", "max"]
                .iter()
                .enumerate()
                .map(|(i, n)| (*n, Value::Int(base + i as i64)))
                .collect(),
        )
    }

    /// Figures whose counters are base, base+1, ... in the order of
    /// COUNTERS, an unknown field among them.
    pub fn figures_value(resp3: bool, base: i64) -> Value {
        let mut pairs: Vec<(&str, Value)> = COUNTERS
            .iter()
            .enumerate()
            .map(|(i, n)| (*n, Value::Int(base + i as i64)))
            .collect();
        pairs.insert(3, ("future_field", Value::Int(-5)));
        pairs.push(("wait", dist_value(resp3, base * 10)));
        pairs.push(("hold", dist_value(resp3, base * 100)));
        map(resp3, pairs)
    }

    pub fn stats_value(resp3: bool) -> Value {
        map(
            resp3,
            vec![
                ("since", Value::Int(1_796_000_000_000)),
                ("enabled", Value::Int(1)),
                ("memory", Value::Int(147_456)),
                ("total", figures_value(resp3, 1000)),
                ("lock", figures_value(resp3, 1)),
                ("shared", figures_value(resp3, 2)),
                ("semaphore", figures_value(resp3, 3)),
            ],
        )
    }

    #[test]
    fn stats_in_both_protocols() {
        for resp3 in [false, true] {
            let s = stats(stats_value(resp3)).unwrap();
            assert!(s.enabled);
            let kinds: Vec<&str> = s.kinds.iter().map(|(k, _)| *k).collect();
            assert_eq!(kinds, KINDS, "total is not a kind");
            let lock = &s.kinds[0].1;
            assert_eq!(lock.counters, [1, 2, 3, 4, 5, 6, 7, 8].map(Some));
            assert_eq!(
                lock.wait,
                Dist {
                    count: 10,
                    sum: 11,
                    p50: 12,
                    p90: 13,
                    p99: 14,
                    max: 15
                }
            );
            assert_eq!(lock.hold.max, 105);
            assert_eq!(s.kinds[2].1.counters[0], Some(3));
        }
        // A kind missing, counting off, figures missing: what is there (a
        // negative count as 0).
        let s = stats(map(
            true,
            vec![
                ("enabled", Value::Int(0)),
                ("shared", map(true, vec![("grants", Value::Int(-3))])),
            ],
        ))
        .unwrap();
        assert!(!s.enabled);
        assert_eq!(s.kinds.len(), 1);
        let mut want = Figures::default();
        want.counters[0] = Some(0);
        assert_eq!(s.kinds[0].1, want);
        for bad in [
            Value::Nil,
            Value::Int(3),
            map(true, vec![("lock", Value::Int(1))]),
        ] {
            assert_eq!(stats(bad.clone()), None, "{bad:?}");
        }
    }

    #[test]
    fn hot_tables_keep_any_bytes() {
        for resp3 in [false, true] {
            let entry = |name: &[u8], db: i64, score: i64| {
                map(
                    resp3,
                    vec![
                        ("resource", bulk(name)),
                        ("db", Value::Int(db)),
                        // What it inherited on entering is not its own.
                        ("score", Value::Int(score + 111)),
                        ("error", Value::Int(111)),
                        ("wait", dist_value(resp3, 0)),
                    ],
                )
            };
            let v = Value::Array(vec![
                entry(b"orders:42", 0, 640_000),
                entry(b"a\"b\\c\nd\xff", 3, 2),
            ]);
            let h = hot(v).unwrap();
            assert_eq!(
                h,
                [
                    Hot {
                        resource: "orders:42".into(),
                        db: 0,
                        score: 640_000
                    },
                    Hot {
                        resource: "a\"b\\c\nd\u{fffd}".into(),
                        db: 3,
                        score: 2
                    }
                ]
            );
        }
        assert_eq!(hot(Value::Array(vec![])), Some(vec![]));
        assert_eq!(hot(Value::Nil), None);
        assert_eq!(hot(Value::Array(vec![Value::Int(1)])), None);
        let no_name = map(true, vec![("db", Value::Int(0))]);
        assert_eq!(hot(Value::Array(vec![no_name])), None);
    }

    #[test]
    fn info_fields() {
        let v = bulk(b"# dlock\r\ndlock_version:0.4.0\r\ndlock_locks:3\r\n\r\ndlock_quarantine_reason:none\r\n");
        let i = info(v).unwrap();
        assert_eq!(i.len(), 3);
        assert_eq!(info_number(&i, "dlock_locks"), Some(3));
        assert_eq!(info_number(&i, "dlock_version"), None);
        assert_eq!(info_number(&i, "dlock_waiters"), None);
        let verbatim = Value::VerbatimString {
            format: redis::VerbatimFormat::Text,
            text: "dlock_waiters:2\n".into(),
        };
        assert_eq!(
            info_number(&info(verbatim).unwrap(), "dlock_waiters"),
            Some(2)
        );
        assert_eq!(info(Value::Int(1)), None);
    }
}
