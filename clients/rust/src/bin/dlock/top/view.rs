//! What `dlock top` prints of a [`Snapshot`]: the table (`--once`), the
//! full screen of the live view, and the JSON document (`--once --json`).
//! Pure text: the terminal is `term`'s.

use super::data::{By, Live, Row, Snapshot, Totals};
use crate::list::cell;
use crate::status::{json_field, quote};

/// Microseconds as a person reads them: `0`, `850us`, `1.5ms`, `48ms`,
/// `2.35s`.
pub fn us(us: i64) -> String {
    let us = us.max(0);
    if us == 0 {
        "0".into()
    } else if us < 1_000 {
        format!("{us}us")
    } else if us < 10_000 {
        format!("{:.1}ms", us as f64 / 1_000.0)
    } else if us < 1_000_000 {
        format!("{}ms", us / 1_000)
    } else {
        format!("{:.2}s", us as f64 / 1_000_000.0)
    }
}

/// What the ordering counts, for the header.
fn meaning(by: By) -> &'static str {
    match by {
        By::Contended => "requests that found it taken",
        By::Wait => "total time waited",
        By::Expired => "leases that ran out",
    }
}

/// The holders cell: a plain lock's token (8 characters) and how long it
/// has been held; else how many hold it.
fn holders(live: &Live) -> String {
    match live {
        Live::Unknown => "?".into(),
        Live::Free => "0".into(),
        Live::Reserved { .. } => "reserved".into(),
        Live::Lock {
            token8, held_ms, ..
        } => {
            format!("{} {}", cell(token8), us(held_ms.saturating_mul(1_000)))
        }
        Live::Holds { holders, .. } => holders.to_string(),
    }
}

fn opt(n: Option<i64>) -> String {
    n.map_or("?".into(), |n| n.to_string())
}

/// Longest resource name a table shows (the rest as `...`), so one long
/// name does not push every figure off the screen; `--json` has it whole.
const NAME_CHARS: usize = 48;

fn resource(r: &Row) -> String {
    let full = cell(&r.hot.resource.text());
    let name = if full.chars().count() > NAME_CHARS {
        let mut cut: String = full.chars().take(NAME_CHARS - 3).collect();
        cut.push_str("...");
        cut
    } else {
        full
    };
    match r.hot.db {
        0 => name,
        db => format!("{name} (db {db})"),
    }
}

/// The table: a header and one line per hot resource, columns aligned;
/// `NODE` when several nodes were read.
pub fn table(snap: &Snapshot) -> Vec<String> {
    let with_node = snap.nodes.len() > 1;
    let mut rows: Vec<Vec<String>> = vec![[
        "RESOURCE",
        "NODE",
        "HOLDERS",
        "WAITERS",
        "CONTENDED",
        "WAITED",
        "WAIT-P50",
        "WAIT-P99",
        "WAIT-MAX",
        "EXPIRED",
        "TIMEOUTS",
    ]
    .map(String::from)
    .to_vec()];
    for r in &snap.rows {
        let h = &r.hot;
        rows.push(vec![
            resource(r),
            r.node.clone(),
            holders(&r.live),
            opt(r.live.waiters()),
            h.contended.to_string(),
            h.waited.to_string(),
            us(h.wait.p50),
            us(h.wait.p99),
            us(h.wait.max),
            h.expired.to_string(),
            h.wait_timeouts.to_string(),
        ]);
    }
    if !with_node {
        for row in &mut rows {
            row.remove(1);
        }
    }
    let columns = rows[0].len();
    let widths: Vec<usize> = (0..columns)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    rows.iter()
        .map(|row| {
            let mut line = String::new();
            for (i, c) in row.iter().enumerate() {
                line.push_str(&format!("{c:<w$}  ", w = widths[i]));
            }
            line.trim_end().to_string()
        })
        .collect()
}

/// The totals line: grants (and per second, once there was a refresh
/// before), the highest wait p99 and max, expired leases, waits that timed
/// out, clients waiting now.
pub fn totals_line(t: &Totals) -> String {
    let rate = t.rate.map_or(String::new(), |r| format!(" ({r:.1}/s)"));
    format!(
        "grants {}{rate}  wait p99 {}  max {}  expired {}  timeouts {}  waiters {}",
        t.grants,
        us(t.wait_p99),
        us(t.wait_max),
        t.expired,
        t.wait_timeouts,
        t.waiters
    )
}

/// The lines about the nodes: how many answered (several nodes), each one
/// that did not, and each whose statistics are off.
fn node_lines(snap: &Snapshot, t: &Totals) -> Vec<String> {
    let mut out = Vec::new();
    if snap.nodes.len() > 1 {
        out.push(format!("nodes {}/{} up", t.up, snap.nodes.len()));
    }
    for n in &snap.nodes {
        if let Some(e) = &n.error {
            out.push(format!("! {e}"));
        } else if n.stats.as_ref().is_some_and(|s| !s.enabled) {
            out.push(format!("! {}: statistics off (dlock.stats no)", n.name));
        }
    }
    out
}

/// `--once`: the totals, the nodes' state, then the table.
pub fn plain(snap: &Snapshot) -> String {
    let t = snap.totals();
    let mut lines = vec![
        format!("by {}: {}", snap.by.name(), meaning(snap.by)),
        totals_line(&t),
    ];
    lines.extend(node_lines(snap, &t));
    lines.push(String::new());
    lines.extend(table(snap));
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

/// The live view, `width` x `height`: the cursor home, each line cut to
/// the width and cleared to its end, the rest of the screen cleared.
/// `clock` is the refresh's time, `every` the interval as written.
pub fn screen(snap: &Snapshot, every: &str, clock: &str, width: usize, height: usize) -> String {
    let t = snap.totals();
    let mut lines = vec![
        format!(
            "dlock top - by {} ({}) - every {every} - {clock}",
            snap.by.name(),
            meaning(snap.by)
        ),
        "keys: c contended, w wait, e expired, r refresh, q quit".to_string(),
        totals_line(&t),
    ];
    lines.extend(node_lines(snap, &t));
    lines.push(String::new());
    lines.extend(table(snap));
    let mut out = String::from("\x1b[H");
    // The last line is left empty: writing to it could scroll the screen.
    for line in lines.iter().take(height.saturating_sub(1).max(1)) {
        out.extend(line.chars().take(width.max(1)));
        out.push_str("\x1b[K\r\n");
    }
    out.push_str("\x1b[J");
    out
}

fn num(n: Option<i64>) -> String {
    n.map_or("null".into(), |n| n.to_string())
}

fn rate(r: Option<f64>) -> String {
    r.map_or("null".into(), |r| format!("{r:.3}"))
}

/// `--once --json`: one object, `{"by":..,"nodes":[..],"totals":{..},
/// "resources":[..]}`, the fields as docs/cli.md lists them.
pub fn json(snap: &Snapshot) -> String {
    let t = snap.totals();
    let nodes: Vec<String> = snap
        .nodes
        .iter()
        .map(|n| {
            let s = n.stats.as_ref();
            format!(
                "{{\"node\":{},\"up\":{},\"error\":{},\"enabled\":{},\"since\":{},\
                 \"grants\":{},\"grants_per_s\":{},\"expired\":{},\"wait_timeouts\":{},\
                 \"wait_p99_us\":{},\"wait_max_us\":{},\"waiters\":{}}}",
                quote(&n.name),
                s.is_some(),
                n.error.as_deref().map_or("null".into(), quote),
                s.map_or("null".into(), |s| s.enabled.to_string()),
                num(s.map(|s| s.since)),
                num(s.map(|s| s.grants)),
                rate(n.rate),
                num(s.map(|s| s.expired)),
                num(s.map(|s| s.wait_timeouts)),
                num(s.map(|s| s.wait.p99)),
                num(s.map(|s| s.wait.max)),
                num(s.map(|s| s.waiters)),
            )
        })
        .collect();
    let totals = format!(
        "{{\"nodes\":{},\"up\":{},\"grants\":{},\"grants_per_s\":{},\"wait_p99_us\":{},\
         \"wait_max_us\":{},\"expired\":{},\"wait_timeouts\":{},\"waiters\":{}}}",
        snap.nodes.len(),
        t.up,
        t.grants,
        rate(t.rate),
        t.wait_p99,
        t.wait_max,
        t.expired,
        t.wait_timeouts,
        t.waiters
    );
    let resources: Vec<String> = snap
        .rows
        .iter()
        .map(|r| {
            let h = &r.hot;
            let (holder, held) = match &r.live {
                Live::Lock {
                    token8, held_ms, ..
                } => (quote(token8), held_ms.to_string()),
                _ => ("null".into(), "null".into()),
            };
            format!(
                "{{{},\"node\":{},\"db\":{},\"score\":{},\"error\":{},\"holders\":{},\
                 \"holder\":{holder},\"held_ms\":{held},\"waiters\":{},\"contended\":{},\
                 \"waited\":{},\"wait_p50_us\":{},\"wait_p99_us\":{},\"wait_max_us\":{},\
                 \"expired\":{},\"wait_timeouts\":{}}}",
                json_field("resource", &h.resource),
                quote(&r.node),
                h.db,
                h.score,
                h.error,
                num(r.live.holders().map(|n| n as i64)),
                num(r.live.waiters()),
                h.contended,
                h.waited,
                h.wait.p50,
                h.wait.p99,
                h.wait.max,
                h.expired,
                h.wait_timeouts
            )
        })
        .collect();
    let list = |items: Vec<String>| {
        if items.is_empty() {
            "[]".to_string()
        } else {
            format!("[\n{}\n]", items.join(",\n"))
        }
    };
    format!(
        "{{\"by\":\"{}\",\n\"nodes\":{},\n\"totals\":{totals},\n\"resources\":{}}}\n",
        snap.by.name(),
        list(nodes),
        list(resources)
    )
}

/// `HH:MM:SS UTC` of a unix time in seconds.
pub fn clock(unix_secs: u64) -> String {
    let s = unix_secs % 86_400;
    format!("{:02}:{:02}:{:02} UTC", s / 3600, s / 60 % 60, s % 60)
}
