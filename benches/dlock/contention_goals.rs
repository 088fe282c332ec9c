//! The contention section's goals, judged on one configuration's
//! report: at 32 clients, S = 0, one resource, dlock >= 10x the best polling
//! scheme and within 2x of one handoff per handoff latency; strictly fair on
//! one resource; the lowest server CPU per critical section.

use crate::contention::{Report, Row};
use crate::contention_schemes::Scheme;
use crate::pass;

/// The headline setting: clients, S µs, resources.
pub const HEADLINE: (usize, u64, usize) = (32, 0, 1);

pub struct Goal {
    pub what: String,
    pub figure: String,
    pub target: &'static str,
    pub met: bool,
}

pub fn goals(r: &Report) -> Vec<Goal> {
    let (c, s, res) = HEADLINE;
    let mut out = Vec::new();
    let Some(d) = r.find(Scheme::Dlock, c, s, res) else {
        return out;
    };
    let best_poll = r
        .rows
        .iter()
        .filter(|x| x.scheme.is_polling() && (x.clients, x.cs_us, x.resources) == HEADLINE)
        .max_by(|a, b| a.rate.total_cmp(&b.rate));
    if let Some(p) = best_poll {
        let ratio = d.rate / p.rate;
        out.push(Goal {
            what: format!(
                "dlock vs best polling ({}), {c} clients, S = 0, one resource",
                p.scheme.short()
            ),
            figure: format!("{:.0} / {:.0} cs/s = {ratio:.1}x", d.rate, p.rate),
            target: ">= 10x",
            met: ratio >= 10.0,
        });
    }
    let best_moving = r
        .rows
        .iter()
        .filter(|x| x.scheme.is_polling() && (x.clients, x.cs_us, x.resources) == HEADLINE)
        .max_by(|a, b| a.handoff_rate().total_cmp(&b.handoff_rate()));
    if let Some(p) = best_moving {
        let ratio = d.handoff_rate() / p.handoff_rate().max(1e-9);
        out.push(Goal {
            what: format!(
                "(same, counting only critical sections that changed hands; best: {})",
                p.scheme.short()
            ),
            figure: format!(
                "{:.0} / {:.0} per s = {ratio:.1}x",
                d.handoff_rate(),
                p.handoff_rate()
            ),
            target: ">= 10x",
            met: ratio >= 10.0,
        });
    }
    if let Some(h) = r.handoff {
        let limit = 1.0 / h.as_secs_f64();
        let ratio = d.rate / limit;
        out.push(Goal {
            what: format!("dlock vs 1 / handoff latency, {c} clients, S = 0, one resource"),
            figure: format!("{:.0} / {limit:.0} cs/s = {ratio:.2}x", d.rate),
            target: ">= 0.5x",
            met: ratio >= 0.5,
        });
    }
    let fair: Vec<&Row> = r
        .rows
        .iter()
        .filter(|x| x.scheme == Scheme::Dlock && x.resources == 1)
        .collect();
    if let Some(worst) = fair
        .iter()
        .max_by(|a, b| a.worst_deviation().total_cmp(&b.worst_deviation()))
    {
        out.push(Goal {
            what: format!(
                "dlock fairness, every client within 10% of the mean, one resource ({} settings)",
                fair.len()
            ),
            figure: format!(
                "worst {:.1}% (C = {}, S = {} µs), {} starved",
                worst.worst_deviation() * 100.0,
                worst.clients,
                worst.cs_us,
                fair.iter().map(|x| x.starved()).sum::<usize>()
            ),
            target: "<= 10%",
            met: worst.worst_deviation() <= 0.10,
        });
    }
    let others = |row: &Row| {
        r.rows
            .iter()
            .filter(|x| {
                x.scheme != Scheme::Dlock
                    && (x.clients, x.cs_us, x.resources) == (row.clients, row.cs_us, row.resources)
            })
            .min_by(|a, b| a.cpu_us.total_cmp(&b.cpu_us))
            .map(|x| (x.scheme, x.cpu_us))
    };
    if let Some((scheme, cpu)) = others(d) {
        let dlock_rows: Vec<&Row> = r
            .rows
            .iter()
            .filter(|x| x.scheme == Scheme::Dlock)
            .collect();
        let lowest = dlock_rows
            .iter()
            .filter(|x| others(x).is_none_or(|(_, o)| x.cpu_us <= o))
            .count();
        out.push(Goal {
            what: format!(
                "dlock lowest server CPU per critical section, {c} clients, S = 0, one resource"
            ),
            figure: format!(
                "{:.1} µs vs {:.1} µs ({}); lowest in {lowest} of {} settings",
                d.cpu_us,
                cpu,
                scheme.short(),
                dlock_rows.len()
            ),
            target: "lowest",
            met: d.cpu_us <= cpu,
        });
    }
    let overlaps: u64 = r.rows.iter().map(|x| x.overlaps + x.lost).sum();
    out.push(Goal {
        what: "overlaps and lost releases, every scheme and setting".into(),
        figure: overlaps.to_string(),
        target: "0",
        met: overlaps == 0,
    });
    out
}

pub fn print(r: &Report) {
    let goals = goals(r);
    if goals.is_empty() {
        return;
    }
    println!("| goal | figure | target | result |");
    println!("| --- | --- | --- | --- |");
    for g in goals {
        println!(
            "| {} | {} | {} | {} |",
            g.what,
            g.figure,
            g.target,
            pass(g.met)
        );
    }
    println!();
}
