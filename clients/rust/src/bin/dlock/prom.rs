//! The Prometheus text exposition format, version 0.0.4
//! (<https://prometheus.io/docs/instrumenting/exposition_formats/>): a
//! family's `# HELP` and `# TYPE` lines, then its samples, every family's
//! lines together (a scraper refuses a family seen twice).

/// The `Content-Type` of the format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Type {
    Counter,
    Gauge,
    Summary,
}

impl Type {
    fn name(self) -> &'static str {
        match self {
            Type::Counter => "counter",
            Type::Gauge => "gauge",
            Type::Summary => "summary",
        }
    }
}

/// One line of a family: the family's name with `suffix` (`_sum`,
/// `_count` of a summary; empty otherwise), its labels in order, its value
/// as the format writes it.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub suffix: &'static str,
    pub labels: Vec<(&'static str, String)>,
    pub value: String,
}

#[derive(Debug, PartialEq)]
pub struct Family {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Type,
    pub samples: Vec<Sample>,
}

impl Family {
    pub fn new(name: &'static str, kind: Type, help: &'static str) -> Family {
        Family {
            name,
            help,
            kind,
            samples: Vec::new(),
        }
    }

    pub fn add(&mut self, labels: Vec<(&'static str, String)>, value: String) {
        self.add_with(labels, "", value);
    }

    pub fn add_with(
        &mut self,
        labels: Vec<(&'static str, String)>,
        suffix: &'static str,
        value: String,
    ) {
        self.samples.push(Sample {
            suffix,
            labels,
            value,
        });
    }
}

/// The families in order; a family without samples is left out (its
/// HELP and TYPE alone would announce a metric nobody reports).
pub fn render(families: &[Family]) -> String {
    let mut out = String::new();
    for f in families.iter().filter(|f| !f.samples.is_empty()) {
        out.push_str(&format!("# HELP {} {}\n", f.name, escape_help(f.help)));
        out.push_str(&format!("# TYPE {} {}\n", f.name, f.kind.name()));
        for s in &f.samples {
            out.push_str(f.name);
            out.push_str(s.suffix);
            if !s.labels.is_empty() {
                let labels: Vec<String> = s
                    .labels
                    .iter()
                    .map(|(k, v)| format!("{k}=\"{}\"", escape_label(v)))
                    .collect();
                out.push('{');
                out.push_str(&labels.join(","));
                out.push('}');
            }
            out.push(' ');
            out.push_str(&s.value);
            out.push('\n');
        }
    }
    out
}

/// A label value as the format quotes it: `\`, `"` and a line feed
/// escaped; anything else, as it is.
pub fn escape_label(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// HELP text: `\` and a line feed escaped (a quote is not, there).
fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

/// Microseconds as seconds, in decimal and exact (no float rounding):
/// 1530 → `0.00153`.
pub fn seconds(us: u64) -> String {
    let whole = us / 1_000_000;
    let frac = us % 1_000_000;
    if frac == 0 {
        return whole.to_string();
    }
    let digits = format!("{frac:06}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label("plain:1"), "plain:1");
        assert_eq!(escape_label("a\"b"), "a\\\"b");
        assert_eq!(escape_label("a\\b"), "a\\\\b");
        assert_eq!(escape_label("a\nb"), "a\\nb");
        assert_eq!(escape_label("\\\"\n"), "\\\\\\\"\\n");
        // Not escaped by the format: a tab, a carriage return, Unicode.
        assert_eq!(escape_label("\t\r\u{fffd}é"), "\t\r\u{fffd}é");
        assert_eq!(escape_help("a\\b\nc\"d"), "a\\\\b\\nc\"d");
    }

    #[test]
    fn seconds_are_exact() {
        assert_eq!(seconds(0), "0");
        assert_eq!(seconds(1), "0.000001");
        assert_eq!(seconds(1530), "0.00153");
        assert_eq!(seconds(2_000_000), "2");
        assert_eq!(seconds(2_500_000), "2.5");
        assert_eq!(seconds(u64::MAX), "18446744073709.551615");
    }

    #[test]
    fn families_render_with_help_type_and_labels() {
        let mut c = Family::new("dlock_grants_total", Type::Counter, "Grants.");
        c.add(
            vec![("node", "h:1".into()), ("kind", "lock".into())],
            "3".into(),
        );
        let mut s = Family::new("dlock_wait_seconds", Type::Summary, "Waits\\.");
        s.add(
            vec![("node", "h:\"1".into()), ("quantile", "0.5".into())],
            "0.1".into(),
        );
        s.add_with(vec![("node", "h:\"1".into())], "_sum", "2".into());
        s.add_with(vec![("node", "h:\"1".into())], "_count", "4".into());
        let empty = Family::new("dlock_unused", Type::Gauge, "None.");
        let mut bare = Family::new("dlock_bare", Type::Gauge, "No label.");
        bare.add(vec![], "1".into());
        assert_eq!(
            render(&[c, empty, s, bare]),
            "# HELP dlock_grants_total Grants.\n\
             # TYPE dlock_grants_total counter\n\
             dlock_grants_total{node=\"h:1\",kind=\"lock\"} 3\n\
             # HELP dlock_wait_seconds Waits\\\\.\n\
             # TYPE dlock_wait_seconds summary\n\
             dlock_wait_seconds{node=\"h:\\\"1\",quantile=\"0.5\"} 0.1\n\
             dlock_wait_seconds_sum{node=\"h:\\\"1\"} 2\n\
             dlock_wait_seconds_count{node=\"h:\\\"1\"} 4\n\
             # HELP dlock_bare No label.\n\
             # TYPE dlock_bare gauge\n\
             dlock_bare 1\n"
        );
        assert_eq!(render(&[]), "");
    }
}
