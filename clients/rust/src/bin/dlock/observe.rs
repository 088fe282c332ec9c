//! `dlock observe NAME [--json] [--count N]`: who leads an election (who
//! holds the lock on NAME), one line now and one per change, from
//! `DLOCK.OBSERVE`: the server answers when the holder changes, nothing is
//! polled.

use crate::args::{self, usage, Args, Item, Parsed};
use crate::backend::Backend;
use crate::codes;
use crate::lockopts::{url_option, RETRY_FOR};
use crate::status::quote;
use dlock_client::Leader;
use std::io::Write;
use std::time::Instant;

struct Opts {
    urls: Vec<String>,
    json: bool,
    count: Option<u32>,
    name: String,
}

/// `None`: `--help` was asked for.
fn parse(mut a: Args, mut urls: Vec<String>) -> Parsed<Option<Opts>> {
    let (mut json, mut count, mut name) = (false, None, None);
    while let Some(item) = a.next_item()? {
        match item {
            Item::Opt { name: opt, inline } => {
                if url_option(&mut urls, &opt, inline.clone(), &mut a)? {
                    continue;
                }
                match opt.as_str() {
                    "help" => return Ok(None),
                    "json" => {
                        args::flag(&opt, inline)?;
                        json = true;
                    }
                    "count" => {
                        let n = args::count(&opt, &a.value(&opt, inline)?)?;
                        if n == 0 {
                            return usage("--count must be at least 1");
                        }
                        count = Some(n);
                    }
                    _ => return usage(format!("observe: unknown option --{opt}")),
                }
            }
            Item::Pos(p) if name.is_none() => name = Some(args::text("NAME", p)?),
            _ => return usage("observe takes one NAME"),
        }
    }
    let Some(name) = name else {
        return usage("observe: NAME is missing");
    };
    Ok(Some(Opts {
        urls,
        json,
        count,
        name,
    }))
}

/// One line: `leader ID term N`, `nobody`, or `handing-over`; with
/// `--json`, `{"leader":"ID","term":N,"token":"..."}`, `{"leader":null}`
/// or `{"leader":null,"handing_over":true}`.
pub fn line(leader: &Leader, json: bool) -> String {
    match (leader, json) {
        (Leader::Leads { id, term, .. }, false) => format!("leader {id} term {term}"),
        (Leader::Nobody, false) => "nobody".into(),
        (Leader::HandingOver, false) => "handing-over".into(),
        (Leader::Leads { id, term, token }, true) => format!(
            "{{\"leader\":{},\"term\":{term},\"token\":{}}}",
            quote(id),
            quote(token)
        ),
        (Leader::Nobody, true) => "{\"leader\":null}".into(),
        (Leader::HandingOver, true) => "{\"leader\":null,\"handing_over\":true}".into(),
    }
}

pub fn main(a: Args, urls: Vec<String>) -> i32 {
    let o = match parse(a, urls) {
        Ok(Some(o)) => o,
        Ok(None) => return crate::help::print("observe"),
        Err(u) => return crate::codes::usage_error(u, "observe"),
    };
    let backend = match Backend::from_urls(&o.urls) {
        Ok(b) => b,
        Err(e) => return crate::codes::fail(&e.0, e.1),
    };
    let Some(locker) = backend.locker() else {
        let u = args::Usage("observe: one --url (each server has its own holders)".into());
        return crate::codes::usage_error(u, "observe");
    };
    let mut changes = locker.election(o.name.clone()).observe();
    let mut shown = 0u32;
    let mut failing_since: Option<Instant> = None;
    let stdout = std::io::stdout();
    loop {
        match changes.next_leader() {
            Ok(leader) => {
                failing_since = None;
                let mut out = stdout.lock();
                if writeln!(out, "{}", line(&leader, o.json))
                    .and_then(|_| out.flush())
                    .is_err()
                {
                    // The reader went away (a closed pipe): done.
                    return codes::OK;
                }
                shown += 1;
                if o.count.is_some_and(|n| shown >= n) {
                    return codes::OK;
                }
            }
            // A server that went away is retried, as the lock commands do,
            // for up to 5 s in a row; the next answer resumes from the last
            // leader shown (a change meanwhile is shown at once).
            Err(e) => {
                let since = *failing_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= RETRY_FOR || codes::of(&e) != codes::UNAVAILABLE {
                    // A connection error names the server and how to name
                    // another; the server's own refusals speak for themselves.
                    let why = match &e {
                        dlock_client::Error::Unavailable(_) => backend.explain(&e),
                        e => e.to_string(),
                    };
                    return crate::codes::fail(
                        &format!("cannot observe {}: {why}", o.name),
                        codes::of(&e),
                    );
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_say_who_leads_in_text_and_json() {
        let l = Leader::Leads {
            id: "w\"7".into(),
            term: 42,
            token: "w\"7/ab".into(),
        };
        assert_eq!(line(&l, false), "leader w\"7 term 42");
        assert_eq!(
            line(&l, true),
            r#"{"leader":"w\"7","term":42,"token":"w\"7/ab"}"#
        );
        assert_eq!(line(&Leader::Nobody, false), "nobody");
        assert_eq!(line(&Leader::Nobody, true), r#"{"leader":null}"#);
        assert_eq!(line(&Leader::HandingOver, false), "handing-over");
    }
}
