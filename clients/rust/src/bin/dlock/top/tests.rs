//! `dlock top`'s pure parts: replies read (RESP3 maps and RESP2 flat
//! arrays, fields by name), nodes merged and sorted, the text, the screen
//! and the JSON.

use super::data::*;
use super::view;
use super::{parse, Opts};
use crate::args::Args;
use crate::backend::Bytes;
use redis::Value;
use std::ffi::OsString;

fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

/// A map in RESP3 (`map`), else a flat RESP2 array.
fn obj(map: bool, f: Vec<(&str, Value)>) -> Value {
    if map {
        Value::Map(f.into_iter().map(|(k, v)| (bulk(k), v)).collect())
    } else {
        Value::Array(f.into_iter().flat_map(|(k, v)| [bulk(k), v]).collect())
    }
}

fn dist_v(map: bool, p50: i64, p99: i64, max: i64) -> Value {
    obj(
        map,
        vec![
            ("count", Value::Int(3)),
            ("sum", Value::Int(9)),
            ("p50", Value::Int(p50)),
            ("p90", Value::Int(p99)),
            ("p99", Value::Int(p99)),
            ("max", Value::Int(max)),
        ],
    )
}

fn stats_v(map: bool) -> Value {
    let figures = |grants| {
        obj(
            map,
            vec![
                ("grants", Value::Int(grants)),
                ("waited", Value::Int(2)),
                ("expired", Value::Int(4)),
                ("wait_timeouts", Value::Int(5)),
                ("a_field_from_later", Value::Int(7)),
                ("wait", dist_v(map, 10, 2000, 3000)),
                ("hold", dist_v(map, 1, 1, 1)),
            ],
        )
    };
    obj(
        map,
        vec![
            ("since", Value::Int(1_796_000_000_000)),
            ("enabled", Value::Int(1)),
            ("memory", Value::Int(147_456)),
            ("total", figures(100)),
            ("lock", figures(60)),
        ],
    )
}

fn hot_v(map: bool, name: &str, db: i64, score: i64) -> Value {
    obj(
        map,
        vec![
            ("resource", bulk(name)),
            ("db", Value::Int(db)),
            ("score", Value::Int(score)),
            ("error", Value::Int(1)),
            ("contended", Value::Int(score)),
            ("waited", Value::Int(2)),
            ("wait_timeouts", Value::Int(1)),
            ("expired", Value::Int(0)),
            ("wait", dist_v(map, 1500, 48_100, 95_000)),
        ],
    )
}

#[test]
fn stats_and_hot_are_read_in_both_protocols() {
    for map in [true, false] {
        let s = parse_stats(stats_v(map)).unwrap();
        assert_eq!(
            s,
            NodeStats {
                enabled: true,
                since: 1_796_000_000_000,
                grants: 100,
                expired: 4,
                wait_timeouts: 5,
                wait: Dist {
                    count: 3,
                    p50: 10,
                    p99: 2000,
                    max: 3000
                },
                waiters: 0,
            },
            "map {map}"
        );
        let hot = parse_hot(Value::Array(vec![
            hot_v(map, "a", 0, 9),
            hot_v(map, "b", 3, 4),
        ]))
        .unwrap();
        assert_eq!(hot.len(), 2);
        assert_eq!((hot[0].resource.text(), hot[0].score), ("a".into(), 9));
        assert_eq!(
            (hot[1].db, hot[1].wait.p99, hot[1].wait.max),
            (3, 48_100, 95_000)
        );
        assert_eq!(
            (hot[1].error, hot[1].waited, hot[1].wait_timeouts),
            (1, 2, 1)
        );
    }
    assert_eq!(parse_stats(Value::Int(1)), None);
    assert_eq!(parse_stats(obj(true, vec![("since", Value::Int(1))])), None);
    assert_eq!(parse_hot(Value::Nil), None);
    assert_eq!(
        parse_hot(Value::Array(vec![obj(true, vec![("db", Value::Int(0))])])),
        None
    );
    assert_eq!(parse_hot(Value::Array(vec![])), Some(vec![]));
}

#[test]
fn info_time_and_holders_are_read() {
    let info = "# dlock\r\ndlock_locks:3\r\ndlock_waiters:7\r\ndlock_observers:0\r\n";
    assert_eq!(info_waiters(info), 7);
    assert_eq!(info_waiters("# dlock\r\n"), 0);
    assert_eq!(
        time_us(&Value::Array(vec![bulk("1796000000"), bulk("250")])),
        Some(1_796_000_000_000_250)
    );
    assert_eq!(time_us(&Value::Nil), None);
    let lock = obj(
        false,
        vec![
            ("token", bulk("0123456789abcdef")),
            ("fence", Value::Int(1_000_000)),
            ("ttl", Value::Int(500)),
            ("waiters", Value::Int(2)),
        ],
    );
    assert_eq!(
        Live::of(lock, 3_500_000),
        Live::Lock {
            token8: "01234567".into(),
            held_ms: 2500,
            waiters: 2
        }
    );
    assert_eq!(Live::of(Value::Nil, 0), Live::Free);
    assert_eq!(Live::of(Value::Int(3), 0), Live::Unknown);
    let reserved = obj(
        true,
        vec![
            ("token", Value::Nil),
            ("fence", Value::Int(0)),
            ("ttl", Value::Int(-2)),
            ("waiters", Value::Int(4)),
        ],
    );
    assert_eq!(Live::of(reserved, 9), Live::Reserved { waiters: 4 });
    let hold = |t: &str| obj(true, vec![("token", bulk(t)), ("fence", Value::Int(1))]);
    let sem = obj(
        true,
        vec![
            ("kind", bulk("semaphore")),
            ("limit", Value::Int(3)),
            ("waiters", Value::Int(1)),
            ("holds", Value::Array(vec![hold("x"), hold("y")])),
        ],
    );
    let live = Live::of(sem, 9);
    assert_eq!((live.holders(), live.waiters()), (Some(2), Some(1)));
    assert!(is_cut(&Bytes([vec![b'x'; 256], b"...".to_vec()].concat())));
    assert!(!is_cut(&"short...".into()));
}

fn row(node: &str, name: &str, score: i64) -> Row {
    Row {
        node: node.into(),
        hot: Hot {
            resource: name.into(),
            score,
            contended: score,
            ..Hot::default()
        },
        live: Live::Free,
    }
}

#[test]
fn nodes_merge_by_score() {
    let rows = vec![
        row("n2", "b", 5),
        row("n1", "a", 9),
        row("n1", "c", 5),
        row("n2", "d", 1),
        row("n1", "b", 5),
    ];
    let names: Vec<(String, String)> = merge(rows, 4)
        .into_iter()
        .map(|r| (r.hot.resource.text(), r.node))
        .collect();
    let want = [("a", "n1"), ("b", "n1"), ("b", "n2"), ("c", "n1")];
    assert_eq!(names, want.map(|(r, n)| (r.to_string(), n.to_string())));
}

fn stats(grants: i64, since: i64) -> NodeStats {
    NodeStats {
        grants,
        since,
        ..NodeStats::default()
    }
}

#[test]
fn rates_and_totals() {
    assert_eq!(rate(&stats(10, 1), &stats(30, 1), 2.0), Some(10.0));
    assert_eq!(rate(&stats(10, 1), &stats(30, 2), 2.0), None, "reset");
    assert_eq!(rate(&stats(10, 1), &stats(5, 1), 2.0), None, "fewer");
    let node = |name: &str, s: Option<NodeStats>, rate: Option<f64>| Node {
        name: name.into(),
        error: s.is_none().then(|| format!("server {name} unavailable")),
        stats: s,
        rate,
    };
    let mut a = stats(10, 1);
    a.wait.p99 = 300;
    a.waiters = 2;
    let mut b = stats(5, 1);
    b.wait.p99 = 100;
    b.expired = 3;
    b.waiters = 1;
    let snap = Snapshot {
        by: By::Wait,
        nodes: vec![
            node("n1", Some(a), Some(1.5)),
            node("n2", Some(b), Some(2.0)),
            node("n3", None, None),
        ],
        rows: vec![],
    };
    let t = snap.totals();
    assert_eq!(
        (t.grants, t.rate, t.wait_p99, t.expired, t.waiters, t.up),
        (15, Some(3.5), 300, 3, 3, 2)
    );
    let text = view::plain(&snap);
    assert!(text.contains("grants 15 (3.5/s)"), "{text}");
    assert!(text.contains("nodes 2/3 up"), "{text}");
    assert!(text.contains("! server n3 unavailable"), "{text}");
}

fn sample() -> Snapshot {
    let mut held = row("127.0.0.1:7000", "orders:42", 7);
    held.live = Live::Lock {
        token8: "4ac096c3".into(),
        held_ms: 1500,
        waiters: 2,
    };
    held.hot.wait = Dist {
        count: 3,
        p50: 1500,
        p99: 48_100,
        max: 95_000,
    };
    let mut other = row("127.0.0.1:7001", "b\"\n", 3);
    other.hot.db = 2;
    other.live = Live::Unknown;
    Snapshot {
        by: By::Contended,
        nodes: vec![Node {
            name: "127.0.0.1:7000".into(),
            stats: Some(stats(20, 1)),
            error: None,
            rate: None,
        }],
        rows: vec![held, other],
    }
}

#[test]
fn the_table_and_the_screen() {
    let t = view::table(&sample());
    let words: Vec<Vec<&str>> = t.iter().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(
        words[0],
        [
            "RESOURCE",
            "HOLDERS",
            "WAITERS",
            "CONTENDED",
            "WAITED",
            "WAIT-P50",
            "WAIT-P99",
            "WAIT-MAX",
            "EXPIRED",
            "TIMEOUTS"
        ]
    );
    assert_eq!(
        words[1],
        [
            "orders:42",
            "4ac096c3",
            "1.50s",
            "2",
            "7",
            "0",
            "1.5ms",
            "48ms",
            "95ms",
            "0",
            "0"
        ]
    );
    assert_eq!(words[2][..3], ["b\"\\n", "(db", "2)"]);
    assert_eq!(words[2][3], "?");
    assert_eq!(
        [view::us(0), view::us(850), view::us(2_345_678)],
        ["0", "850us", "2.35s"]
    );
    let s = view::screen(&sample(), "2s", "07:00:00 UTC", 30, 6);
    assert!(s.starts_with("\x1b[H"), "{s:?}");
    assert!(s.ends_with("\x1b[J"), "{s:?}");
    let lines: Vec<&str> = s.split("\x1b[K\r\n").collect();
    // 5 lines (the last row of the window left free) and the clear.
    assert_eq!(lines.len(), 6, "{s:?}");
    assert_eq!(lines[0], "\x1b[Hdlock top - by contended (requ");
    assert!(lines.iter().all(|l| l.chars().count() <= 33), "{s:?}");
    let mut several = sample();
    several.nodes.push(several.nodes[0].clone());
    let t = view::table(&several);
    let header: Vec<&str> = t[0].split_whitespace().take(2).collect();
    assert_eq!(header, ["RESOURCE", "NODE"]);
    assert!(t[1].contains("127.0.0.1:7000"), "{t:?}");
    assert_eq!(
        view::clock(1_796_000_000 + 3_600 * 24 * 3 + 59),
        "00:54:19 UTC"
    );
}

#[test]
fn json_has_stable_fields() {
    let j = view::json(&sample());
    let want = "{\"by\":\"contended\",\n\
        \"nodes\":[\n{\"node\":\"127.0.0.1:7000\",\"up\":true,\"error\":null,\"enabled\":false,\"since\":1,\
        \"grants\":20,\"grants_per_s\":null,\"expired\":0,\"wait_timeouts\":0,\"wait_p99_us\":0,\
        \"wait_max_us\":0,\"waiters\":0}\n],\n\
        \"totals\":{\"nodes\":1,\"up\":1,\"grants\":20,\"grants_per_s\":null,\"wait_p99_us\":0,\
        \"wait_max_us\":0,\"expired\":0,\"wait_timeouts\":0,\"waiters\":0},\n\
        \"resources\":[\n\
        {\"resource\":\"orders:42\",\"node\":\"127.0.0.1:7000\",\"db\":0,\"score\":7,\"error\":0,\
        \"holders\":1,\"holder\":\"4ac096c3\",\"held_ms\":1500,\"waiters\":2,\"contended\":7,\
        \"waited\":0,\"wait_p50_us\":1500,\"wait_p99_us\":48100,\"wait_max_us\":95000,\
        \"expired\":0,\"wait_timeouts\":0},\n\
        {\"resource\":\"b\\\"\\n\",\"node\":\"127.0.0.1:7001\",\"db\":2,\"score\":3,\"error\":0,\
        \"holders\":null,\"holder\":null,\"held_ms\":null,\"waiters\":null,\"contended\":3,\
        \"waited\":0,\"wait_p50_us\":0,\"wait_p99_us\":0,\"wait_max_us\":0,\
        \"expired\":0,\"wait_timeouts\":0}\n]}\n";
    assert_eq!(j, want);
    let empty = Snapshot {
        by: By::Wait,
        nodes: vec![],
        rows: vec![],
    };
    assert!(view::json(&empty).contains("\"resources\":[]}"));
}

#[test]
fn options() {
    let p = |a: &[&str]| parse(Args::new(a.iter().map(OsString::from)), vec![]);
    let o: Opts = p(&[
        "--by",
        "wait",
        "--count=5",
        "--interval",
        "500ms",
        "--once",
        "--json",
    ])
    .unwrap()
    .unwrap();
    assert_eq!((o.by, o.count, o.once, o.json), (By::Wait, 5, true, true));
    assert_eq!(o.interval.as_millis(), 500);
    let o = p(&[]).unwrap().unwrap();
    assert_eq!(
        (o.by, o.count, o.interval.as_secs()),
        (By::Contended, 10, 2)
    );
    assert!(p(&["--help"]).unwrap().is_none());
    for bad in [
        &["--by", "size"][..],
        &["--count", "0"],
        &["--count", "33"],
        &["--interval", "2"],
        &["--interval", "10ms"],
        &["--json"],
        &["--once=yes"],
        &["x"],
        &["--what"],
    ] {
        assert!(p(bad).is_err(), "{bad:?}");
    }
    for (k, by) in [(b'c', By::Contended), (b'w', By::Wait), (b'e', By::Expired)] {
        assert_eq!(By::of_key(k), Some(by));
        assert_eq!(By::parse(by.name()), Some(by));
    }
    assert_eq!(By::of_key(b'x'), None);
}

/// A name longer than the table shows is cut there, so the figures stay on
/// the screen; the JSON keeps it whole.
#[test]
fn a_long_name_is_cut_in_the_table_only() {
    let mut snap = sample();
    let long = "a".repeat(1000);
    snap.rows[0] = row("127.0.0.1:7000", &long, 9);
    let t = view::table(&snap);
    assert!(t.iter().all(|l| l.len() < 200), "{t:?}");
    let first = t[1].split_whitespace().next().unwrap();
    assert_eq!(first, format!("{}...", "a".repeat(45)));
    assert!(view::json(&snap).contains(&long));
}
