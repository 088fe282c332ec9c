//! `docs/bench.svg`, hand-written: the handoff latencies on a log scale and
//! every judged ratio against its goal. No dependency, no script, no font
//! beyond the viewer's sans-serif.

use std::fmt::Write;

use crate::handoff::Results;
use crate::{Goal, Verdict};

const W: f64 = 960.0;
const GOOD: &str = "#2e7d32";
const BAD: &str = "#c62828";
const GOOD_LIGHT: &str = "#a5d6a7";
const BAD_LIGHT: &str = "#ef9a9a";

pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('`', "")
}

pub fn text(svg: &mut String, x: f64, y: f64, size: f64, anchor: &str, extra: &str, s: &str) {
    let _ = writeln!(
        svg,
        r#"<text x="{x:.1}" y="{y:.1}" font-size="{size}" text-anchor="{anchor}" {extra}>{}</text>"#,
        esc(s)
    );
}

pub fn render(handoff: Option<(&str, &Results)>, verdicts: &[Verdict], machine: &str) -> String {
    let mut body = String::new();
    let mut y = 30.0;
    text(
        &mut body,
        W / 2.0,
        y,
        18.0,
        "middle",
        r#"font-weight="bold""#,
        "dlock benchmark",
    );
    y += 18.0;
    text(
        &mut body,
        W / 2.0,
        y,
        11.0,
        "middle",
        r##"fill="#555""##,
        machine,
    );
    y += 20.0;
    if let Some((label, h)) = handoff {
        y = latency_panel(&mut body, label, h, y);
    }
    if !verdicts.is_empty() {
        y = ratio_panel(&mut body, verdicts, y + 10.0);
    }
    let height = y + 10.0;
    format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" viewBox="0 0 {W} {height}" font-family="sans-serif">
<rect width="100%" height="100%" fill="white"/>
{body}</svg>
"#
    )
}

/// Grouped bars, p50 and p99 per scheme, log scale 0.01 ms .. 1000 ms.
fn latency_panel(svg: &mut String, config: &str, h: &Results, top: f64) -> f64 {
    let (left, right) = (90.0, W - 30.0);
    let (plot_top, plot_h) = (top + 30.0, 220.0);
    let bottom = plot_top + plot_h;
    text(
        svg,
        left,
        top + 12.0,
        13.0,
        "start",
        r#"font-weight="bold""#,
        &format!("Handoff latency, release to waiter holding the lock, ms, log scale ({config})"),
    );
    let (lo, hi) = (-2.0f64, 3.0f64); // log10 ms
    let ypos = |ms: f64| {
        let l = ms.max(10f64.powf(lo)).log10().min(hi);
        bottom - (l - lo) / (hi - lo) * plot_h
    };
    for d in (lo as i32)..=(hi as i32) {
        let v = 10f64.powi(d);
        let yy = ypos(v);
        let _ = writeln!(
            svg,
            r##"<line x1="{left}" x2="{right}" y1="{yy:.1}" y2="{yy:.1}" stroke="#ddd"/>"##
        );
        let label = if v < 1.0 {
            format!("{v}")
        } else {
            format!("{v:.0}")
        };
        text(svg, left - 6.0, yy + 4.0, 11.0, "end", "", &label);
    }
    let _ = writeln!(
        svg,
        r##"<line x1="{left}" x2="{left}" y1="{plot_top}" y2="{bottom}" stroke="#333"/>"##
    );
    let schemes = [
        ("PING round trip (for scale)", &h.plain_rtt, "#78909c"),
        ("dlock ACQUIRE ... WAIT", &h.dlock, "#1565c0"),
        ("BLPOP signal list", &h.blpop, "#ef6c00"),
        ("polling SET NX PX (200 ms + jitter)", &h.polling, "#6d4c41"),
    ];
    let group = (right - left) / schemes.len() as f64;
    let bar = 46.0;
    for (i, (name, s, color)) in schemes.iter().enumerate() {
        let cx = left + group * (i as f64 + 0.5);
        for (j, (q, label, opacity)) in [(0.5, "p50", 1.0), (0.99, "p99", 0.5)]
            .into_iter()
            .enumerate()
        {
            let ms = s.quantile(q).as_secs_f64() * 1000.0;
            let x = cx - bar - 2.0 + j as f64 * (bar + 4.0);
            let yy = ypos(ms);
            let _ = writeln!(
                svg,
                r#"<rect x="{x:.1}" y="{yy:.1}" width="{bar}" height="{:.1}" fill="{color}" fill-opacity="{opacity}"/>"#,
                bottom - yy
            );
            text(
                svg,
                x + bar / 2.0,
                yy - 4.0,
                10.0,
                "middle",
                "",
                &format!("{label} {}", fmt_ms(ms)),
            );
        }
        text(svg, cx, bottom + 16.0, 12.0, "middle", "", name);
    }
    text(
        svg,
        left,
        bottom + 34.0,
        10.0,
        "start",
        r##"fill="#555""##,
        "Solid: p50; light: p99.",
    );
    bottom + 44.0
}

fn fmt_ms(ms: f64) -> String {
    if ms >= 10.0 {
        format!("{ms:.0}")
    } else if ms >= 1.0 {
        format!("{ms:.1}")
    } else {
        format!("{ms:.2}")
    }
}

/// One row per comparison; a bar per configuration; the goal as a tick.
fn ratio_panel(svg: &mut String, verdicts: &[Verdict], top: f64) -> f64 {
    let mut rows: Vec<&str> = Vec::new();
    for v in verdicts {
        if !rows.contains(&v.what.as_str()) {
            rows.push(&v.what);
        }
    }
    let mut configs: Vec<&str> = Vec::new();
    for v in verdicts {
        if !configs.contains(&v.config) {
            configs.push(v.config);
        }
    }
    let (label_w, left, right) = (400.0, 410.0, W - 40.0);
    text(
        svg,
        20.0,
        top + 12.0,
        14.0,
        "start",
        r#"font-weight="bold""#,
        "dlock / baseline ratios against the goals (tick: goal; green PASS, red MISS)",
    );
    let mut legend = String::from("Bars, top to bottom: ");
    for (i, c) in configs.iter().enumerate() {
        if i > 0 {
            legend.push_str(", ");
        }
        legend.push_str(match *c {
            "aof" => "appendonly everysec (judged, solid)",
            "none" => "no persistence (light)",
            other => other,
        });
    }
    legend.push_str(". Memory: lower is better.");
    text(
        svg,
        20.0,
        top + 28.0,
        11.0,
        "start",
        r##"fill="#555""##,
        &legend,
    );
    let max = verdicts
        .iter()
        .flat_map(|v| [v.ratio, v.goal.value()])
        .fold(2.5f64, f64::max)
        * 1.08;
    let xpos = |r: f64| left + r.clamp(0.0, max) / max * (right - left);
    let bar_h = 10.0;
    let row_h = configs.len() as f64 * (bar_h + 2.0) + 12.0;
    let plot_top = top + 40.0;
    let plot_bottom = plot_top + rows.len() as f64 * row_h;
    // Grid every 0.5x.
    let mut g = 0.0;
    while g <= max {
        let x = xpos(g);
        let stroke = if (g - 1.0f64).abs() < 1e-9 {
            "#888"
        } else {
            "#e0e0e0"
        };
        let _ = writeln!(
            svg,
            r#"<line x1="{x:.1}" x2="{x:.1}" y1="{plot_top:.1}" y2="{plot_bottom:.1}" stroke="{stroke}"/>"#
        );
        text(
            svg,
            x,
            plot_bottom + 14.0,
            10.0,
            "middle",
            "",
            &format!("{g}x"),
        );
        g += 0.5;
    }
    for (i, what) in rows.iter().enumerate() {
        let y0 = plot_top + i as f64 * row_h + 6.0;
        let mid = y0 + (row_h - 12.0) / 2.0;
        text(svg, label_w, mid + 4.0, 11.0, "end", "", what);
        let mut goal: Option<Goal> = None;
        for (j, c) in configs.iter().enumerate() {
            let Some(v) = verdicts.iter().find(|v| v.what == *what && v.config == *c) else {
                continue;
            };
            goal = Some(v.goal);
            let ok = v.goal.met(v.ratio);
            let judged = *c == "aof";
            let fill = match (ok, judged) {
                (true, true) => GOOD,
                (false, true) => BAD,
                (true, false) => GOOD_LIGHT,
                (false, false) => BAD_LIGHT,
            };
            let y = y0 + j as f64 * (bar_h + 2.0);
            let x1 = xpos(v.ratio);
            let _ = writeln!(
                svg,
                r#"<rect x="{left}" y="{y:.1}" width="{:.1}" height="{bar_h}" fill="{fill}"/>"#,
                x1 - left
            );
            // Keep the figure clear of the goal tick.
            let gx = xpos(v.goal.value());
            let lx = if x1 < gx + 2.0 && gx - x1 < 32.0 {
                gx + 5.0
            } else {
                x1 + 4.0
            };
            text(
                svg,
                lx,
                y + bar_h - 1.0,
                10.0,
                "start",
                "",
                &format!("{:.2}x", v.ratio),
            );
        }
        if let Some(g) = goal {
            let x = xpos(g.value());
            let _ = writeln!(
                svg,
                r##"<line x1="{x:.1}" x2="{x:.1}" y1="{:.1}" y2="{:.1}" stroke="#000" stroke-width="2"/>"##,
                y0 - 3.0,
                y0 + row_h - 9.0
            );
        }
    }
    plot_bottom + 24.0
}
