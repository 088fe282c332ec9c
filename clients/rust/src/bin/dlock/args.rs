//! Hand-written argument parsing: long options (`--ttl 30s`, `--ttl=30s`),
//! positionals, `--`, and durations with units.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::time::Duration;

/// A usage error: printed with a hint, exit 64 (EX_USAGE).
#[derive(Debug)]
pub struct Usage(pub String);

pub type Parsed<T> = Result<T, Usage>;

pub fn usage<T>(msg: impl Into<String>) -> Parsed<T> {
    Err(Usage(msg.into()))
}

/// One item of the command line.
pub enum Item {
    /// `--name` or `--name=value` (`-h` is `--help`).
    Opt {
        name: String,
        inline: Option<String>,
    },
    /// Anything else (including `-` alone).
    Pos(OsString),
    /// `--`: what follows is not for dlock.
    DashDash,
}

/// The arguments left to parse.
pub struct Args {
    rest: VecDeque<OsString>,
}

impl Args {
    pub fn new(args: impl IntoIterator<Item = OsString>) -> Args {
        Args {
            rest: args.into_iter().collect(),
        }
    }

    pub fn next_item(&mut self) -> Parsed<Option<Item>> {
        let Some(a) = self.rest.pop_front() else {
            return Ok(None);
        };
        if a == "--" {
            return Ok(Some(Item::DashDash));
        }
        let Some(s) = a.to_str() else {
            return Ok(Some(Item::Pos(a)));
        };
        if s == "-h" {
            return Ok(Some(Item::Opt {
                name: "help".into(),
                inline: None,
            }));
        }
        if let Some(long) = s.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n.to_string(), Some(v.to_string())),
                None => (long.to_string(), None),
            };
            return Ok(Some(Item::Opt { name, inline }));
        }
        if s.len() > 1 && s.starts_with('-') {
            return usage(format!("unknown option '{s}' (options are long: --name)"));
        }
        Ok(Some(Item::Pos(a)))
    }

    /// The value of option `--name`: inline (`--name=v`) or the next argument.
    pub fn value(&mut self, name: &str, inline: Option<String>) -> Parsed<String> {
        if let Some(v) = inline {
            return Ok(v);
        }
        match self.rest.pop_front() {
            Some(v) => v
                .into_string()
                .or_else(|v| usage(format!("--{name}: not UTF-8: {v:?}"))),
            None => usage(format!("--{name} needs a value")),
        }
    }

    /// Everything not parsed yet, as it was given.
    pub fn take_rest(&mut self) -> Vec<OsString> {
        self.rest.drain(..).collect()
    }
}

/// An option that takes no value must not be given one (`--shared=yes`).
pub fn flag(name: &str, inline: Option<String>) -> Parsed<()> {
    match inline {
        None => Ok(()),
        Some(_) => usage(format!("--{name} takes no value")),
    }
}

/// A positional argument that must be UTF-8 (a resource, a token).
pub fn text(what: &str, a: OsString) -> Parsed<String> {
    a.into_string()
        .or_else(|a| usage(format!("{what} is not UTF-8: {a:?}")))
}

/// `500ms`, `30s`, `1.5s`, `2m`, `1h`; `0` alone. A number without a unit
/// is refused: Redis counts milliseconds and flock(1) seconds, so a bare
/// `30` would be a guess either way.
pub fn duration(name: &str, s: &str) -> Parsed<Duration> {
    let bad = |why: &str| usage(format!("--{name} {s:?}: {why} (e.g. 500ms, 30s, 2m, 1h)"));
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let ms_per_unit: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "" => return bad("a unit is needed"),
        _ => return bad("unknown unit"),
    };
    let (whole, frac) = num.split_once('.').unwrap_or((num, ""));
    if whole.is_empty() && frac.is_empty() || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return bad("not a number");
    }
    let whole: u64 = if whole.is_empty() {
        0
    } else {
        match whole.parse() {
            Ok(n) => n,
            Err(_) => return bad("too large"),
        }
    };
    let Some(mut ms) = whole.checked_mul(ms_per_unit) else {
        return bad("too large");
    };
    // The fraction, to whole milliseconds (digits past a millisecond are dropped).
    let mut scale = ms_per_unit;
    for d in frac.bytes() {
        if scale < 10 {
            break;
        }
        scale /= 10;
        ms += u64::from(d - b'0') * scale;
    }
    // The server's largest ttl and wait: 2^47 ms.
    if ms > 1 << 47 {
        return bad("too large");
    }
    Ok(Duration::from_millis(ms))
}

/// A duration as the user would write it back: `1.5s`, `250ms`, `2m`.
pub fn show(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1_000 {
        format!("{ms}ms")
    } else if ms.is_multiple_of(60_000) && ms < 3_600_000 {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(3_600_000) {
        format!("{}h", ms / 3_600_000)
    } else if ms.is_multiple_of(1_000) {
        format!("{}s", ms / 1_000)
    } else {
        format!("{:.1}s", ms as f64 / 1_000.0)
    }
}

pub fn count(name: &str, s: &str) -> Parsed<u32> {
    s.parse()
        .or_else(|_| usage(format!("--{name} {s:?}: not a whole number")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn durations_need_a_unit() {
        let d = |s| duration("ttl", s).map_err(|u| u.0);
        assert_eq!(d("500ms").unwrap(), ms(500));
        assert_eq!(d("30s").unwrap(), ms(30_000));
        assert_eq!(d("1.5s").unwrap(), ms(1_500));
        assert_eq!(d(".25s").unwrap(), ms(250));
        assert_eq!(d("2m").unwrap(), ms(120_000));
        assert_eq!(d("1h").unwrap(), ms(3_600_000));
        assert_eq!(d("0").unwrap(), ms(0));
        assert_eq!(d("0s").unwrap(), ms(0));
        for bad in [
            "30",
            "",
            "s",
            "1.2.3s",
            "-1s",
            "5d",
            "1e3ms",
            "99999999999999999999h",
        ] {
            assert!(d(bad).is_err(), "{bad}");
        }
        assert!(d("30").unwrap_err().contains("a unit is needed"));
    }

    #[test]
    fn durations_show_as_written() {
        for s in ["250ms", "30s", "1.5s", "2m", "1h", "90s"] {
            assert_eq!(show(duration("x", s).unwrap()), s);
        }
    }

    #[test]
    fn items_split_long_options_and_positionals() {
        let mut a = Args::new(["--ttl=5s", "--no-wait", "res", "--", "ls"].map(OsString::from));
        assert!(
            matches!(a.next_item().unwrap(), Some(Item::Opt { name, inline: Some(v) }) if name == "ttl" && v == "5s")
        );
        assert!(
            matches!(a.next_item().unwrap(), Some(Item::Opt { name, inline: None }) if name == "no-wait")
        );
        assert!(matches!(a.next_item().unwrap(), Some(Item::Pos(p)) if p == "res"));
        assert!(matches!(a.next_item().unwrap(), Some(Item::DashDash)));
        assert_eq!(a.take_rest(), [OsString::from("ls")]);
        assert!(Args::new([OsString::from("-x")]).next_item().is_err());
    }
}
