//! `docs/bench-contention.svg`: critical sections per second against
//! clients for every scheme, one resource, a panel per critical-section
//! length, log scale; the dashed line is one handoff per dlock handoff
//! latency (plus S). Hand-written like chart.rs.

use std::fmt::Write;

use crate::chart::text;
use crate::contention::Report;
use crate::contention_schemes::Scheme;

const W: f64 = 960.0;

fn color(s: Scheme) -> &'static str {
    match s.short() {
        "dlock" => "#1565c0",
        "poll200" => "#6d4c41",
        "poll10" => "#8e24aa",
        "pubsub" => "#2e7d32",
        _ => "#ef6c00",
    }
}

pub fn render(r: &Report, label: &str, machine: &str) -> String {
    let mut body = String::new();
    text(
        &mut body,
        W / 2.0,
        30.0,
        18.0,
        "middle",
        r#"font-weight="bold""#,
        "Critical sections per second under contention, one resource",
    );
    text(
        &mut body,
        W / 2.0,
        48.0,
        11.0,
        "middle",
        r##"fill="#555""##,
        &format!(
            "{label}; {:.1} s per run; {}",
            r.secs,
            machine.split(" sha=").next().unwrap_or(machine)
        ),
    );
    let mut y = 60.0;
    let mut lengths: Vec<u64> = r.rows.iter().map(|x| x.cs_us).collect();
    lengths.sort();
    lengths.dedup();
    for (i, &s) in lengths.iter().enumerate() {
        y = panel(&mut body, r, s, false, y + 10.0);
        if i == 0 {
            y = panel(&mut body, r, s, true, y + 10.0);
        }
    }
    y = legend(&mut body, r, y);
    let height = y + 10.0;
    format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" viewBox="0 0 {W} {height}" font-family="sans-serif">
<rect width="100%" height="100%" fill="white"/>
{body}</svg>
"#
    )
}

/// One panel: critical sections per second (or, with `moved`, only those
/// that changed hands) against clients.
fn panel(svg: &mut String, r: &Report, cs_us: u64, moved: bool, top: f64) -> f64 {
    let value = |x: &crate::contention::Row| if moved { x.handoff_rate() } else { x.rate };
    let (left, right) = (90.0, W - 200.0);
    let (plot_top, plot_h) = (top + 24.0, 240.0);
    let bottom = plot_top + plot_h;
    let title = if cs_us == 0 {
        "S = 0 (empty critical section)".to_string()
    } else {
        format!("S = {cs_us} µs critical section")
    };
    text(
        svg,
        left,
        top + 12.0,
        13.0,
        "start",
        r#"font-weight="bold""#,
        &format!(
            "{title}: {} vs clients, log scale",
            if moved {
                "critical sections that changed hands/s"
            } else {
                "critical sections/s"
            }
        ),
    );
    let rows: Vec<_> = r
        .rows
        .iter()
        .filter(|x| x.cs_us == cs_us && x.resources == 1 && value(x) > 0.0)
        .collect();
    let mut clients: Vec<usize> = rows.iter().map(|x| x.clients).collect();
    clients.sort();
    clients.dedup();
    let limit = r
        .handoff
        .map(|h| 1.0 / (h.as_secs_f64() + cs_us as f64 * 1e-6));
    let hi = rows
        .iter()
        .map(|x| value(x))
        .chain(limit)
        .fold(10.0f64, f64::max)
        .log10()
        .ceil();
    let lo = rows
        .iter()
        .map(|x| value(x))
        .fold(f64::INFINITY, f64::min)
        .max(0.1)
        .log10()
        .floor()
        .min(hi - 1.0);
    let ypos = |v: f64| bottom - (v.max(1e-3).log10() - lo) / (hi - lo) * plot_h;
    for d in (lo as i32)..=(hi as i32) {
        let yy = ypos(10f64.powi(d));
        let _ = writeln!(
            svg,
            r##"<line x1="{left}" x2="{right}" y1="{yy:.1}" y2="{yy:.1}" stroke="#ddd"/>"##
        );
        let label = if d >= 0 {
            format!("{:.0}", 10f64.powi(d))
        } else {
            format!("{}", 10f64.powi(d))
        };
        text(svg, left - 6.0, yy + 4.0, 11.0, "end", "", &label);
    }
    let n = clients.len().max(1) as f64;
    let xpos = |c: usize| {
        let i = clients.iter().position(|&x| x == c).unwrap_or(0) as f64;
        left + 40.0 + i * (right - left - 80.0) / (n - 1.0).max(1.0)
    };
    for &c in &clients {
        let x = xpos(c);
        text(svg, x, bottom + 16.0, 11.0, "middle", "", &c.to_string());
    }
    text(
        svg,
        (left + right) / 2.0,
        bottom + 32.0,
        11.0,
        "middle",
        "",
        "clients",
    );
    let _ = writeln!(
        svg,
        r##"<line x1="{left}" x2="{left}" y1="{plot_top}" y2="{bottom}" stroke="#333"/>"##
    );
    if let Some(l) = limit {
        let yy = ypos(l);
        let _ = writeln!(
            svg,
            r##"<line x1="{left}" x2="{right}" y1="{yy:.1}" y2="{yy:.1}" stroke="#1565c0" stroke-dasharray="6,4"/>"##
        );
        text(
            svg,
            (left + right) / 2.0,
            yy + 13.0,
            10.0,
            "middle",
            r##"fill="#1565c0""##,
            &format!("1 / (handoff + S) = {l:.0}/s"),
        );
    }
    let mut ends: Vec<(f64, f64, String, &str)> = Vec::new();
    for scheme in Scheme::all() {
        let mut pts: Vec<(f64, f64, f64)> = rows
            .iter()
            .filter(|x| x.scheme == scheme)
            .map(|x| (xpos(x.clients), ypos(value(x)), value(x)))
            .collect();
        if pts.is_empty() {
            continue;
        }
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let path: Vec<String> = pts
            .iter()
            .map(|p| format!("{:.1},{:.1}", p.0, p.1))
            .collect();
        let col = color(scheme);
        let _ = writeln!(
            svg,
            r#"<polyline points="{}" fill="none" stroke="{col}" stroke-width="2"/>"#,
            path.join(" ")
        );
        for (x, y, v) in &pts {
            let _ = writeln!(
                svg,
                r#"<circle cx="{x:.1}" cy="{y:.1}" r="3.5" fill="{col}"/>"#
            );
            if scheme == Scheme::Dlock {
                let fill = format!(r#"fill="{col}""#);
                text(svg, *x, y - 7.0, 9.0, "middle", &fill, &format!("{v:.0}"));
            }
        }
        if let Some((x, y, v)) = pts.last() {
            ends.push((*x, *y, format!("{} {v:.0}", scheme.short()), col));
        }
    }
    // Line ends, spread apart vertically so that they stay readable.
    ends.sort_by(|a, b| a.1.total_cmp(&b.1));
    let mut floor = f64::MIN;
    for (x, y, label, col) in ends {
        let y = (y + 4.0).max(floor + 12.0);
        floor = y;
        let fill = format!(r#"fill="{col}""#);
        text(svg, x + 12.0, y, 11.0, "start", &fill, &label);
    }
    bottom + 40.0
}

fn legend(svg: &mut String, r: &Report, top: f64) -> f64 {
    let mut y = top + 6.0;
    for scheme in Scheme::all() {
        if !r.rows.iter().any(|x| x.scheme == scheme) {
            continue;
        }
        let col = color(scheme);
        let _ = writeln!(
            svg,
            r#"<rect x="90" y="{:.1}" width="14" height="4" fill="{col}"/>"#,
            y - 4.0
        );
        text(
            svg,
            110.0,
            y,
            11.0,
            "start",
            "",
            &format!("{}: {}", scheme.short(), scheme.title()),
        );
        y += 15.0;
    }
    y
}
