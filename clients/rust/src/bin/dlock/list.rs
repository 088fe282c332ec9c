//! `dlock list [PATTERN] [--sort KEY] [--json]`: every lock on the server,
//! or on every master of its cluster, with its holders and waiters, and
//! the request its queue serves next with the priority it asked with.

use crate::args::{self, usage, Args, Item, Parsed};
use crate::backend::{Backend, Hold, Info};
use crate::codes;
use crate::lockopts::url_option;
use crate::scan::{self, Listed};
use crate::status::{holds, json_field, quote, state, to_json, ttl};
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

/// The order of the listing.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Sort {
    /// By name (then server): the default, stable from one run to the next.
    Resource,
    /// The lease that ends first, first; holds without a deadline and
    /// locks nobody holds last.
    Ttl,
    /// The lowest fence first: the oldest grant, the lock held longest.
    Fence,
    /// The most waiters first: the contended locks on top.
    Waiters,
}

impl Sort {
    fn parse(s: &str) -> Parsed<Sort> {
        Ok(match s {
            "resource" => Sort::Resource,
            "ttl" => Sort::Ttl,
            "fence" => Sort::Fence,
            "waiters" => Sort::Waiters,
            _ => {
                return usage(format!(
                    "--sort {s:?}: one of resource, ttl, fence, waiters"
                ))
            }
        })
    }
}

struct Opts {
    urls: Vec<String>,
    json: bool,
    sort: Sort,
    pattern: Option<Vec<u8>>,
}

/// `None`: `--help` was asked for.
fn parse(mut a: Args, mut urls: Vec<String>) -> Parsed<Option<Opts>> {
    let mut json = false;
    let mut sort = Sort::Resource;
    let mut pattern: Option<OsString> = None;
    while let Some(item) = a.next_item()? {
        match item {
            Item::Opt { name, inline } => {
                if url_option(&mut urls, &name, inline.clone(), &mut a)? {
                    continue;
                }
                match name.as_str() {
                    "help" => return Ok(None),
                    "json" => {
                        args::flag(&name, inline)?;
                        json = true;
                    }
                    "sort" => sort = Sort::parse(&a.value(&name, inline)?)?,
                    _ => return usage(format!("list: unknown option --{name}")),
                }
            }
            Item::Pos(p) if pattern.is_none() => pattern = Some(p),
            Item::Pos(_) => return usage("list takes one PATTERN"),
            // A pattern that starts with `-`: `dlock list -- -tmp*`.
            Item::DashDash => {
                let rest = a.take_rest();
                if rest.len() > 1 || pattern.is_some() && !rest.is_empty() {
                    return usage("list takes one PATTERN");
                }
                pattern = pattern.or(rest.into_iter().next());
            }
        }
    }
    Ok(Some(Opts {
        urls,
        json,
        sort,
        // A glob of bytes, as `SCAN ... MATCH` takes it.
        pattern: pattern.map(OsString::into_vec),
    }))
}

pub fn main(a: Args, urls: Vec<String>) -> i32 {
    let o = match parse(a, urls) {
        Ok(Some(o)) => o,
        Ok(None) => return crate::help::print("list"),
        Err(u) => return crate::codes::usage_error(u, "list"),
    };
    let backend = match Backend::from_urls(&o.urls) {
        Ok(b) => b,
        Err(e) => return crate::codes::fail(&e.0, e.1),
    };
    let mut listing = scan::list(&backend.urls(), backend.tls(), o.pattern.as_deref());
    sort(&mut listing.locks, o.sort);
    if o.json {
        print!("{}", to_json_array(&listing.locks));
    } else if !listing.locks.is_empty() || listing.errors.is_empty() {
        // The header alone says there is no lock; after an error it would
        // say nothing.
        print!("{}", to_table(&listing.locks, listing.servers > 1));
    }
    // What could not be listed: said after what could.
    for (server, e) in &listing.errors {
        eprintln!("dlock: list: {}", explain(server, e));
    }
    listing
        .errors
        .first()
        .map_or(codes::OK, |(_, e)| codes::of(e))
}

/// An error of one server, named as `dlock status` names it (refusals and
/// a missing module name it themselves).
pub fn explain(server: &str, e: &dlock_client::Error) -> String {
    use dlock_client::Error as E;
    match e {
        E::Unavailable(m) => format!("server {server} unavailable: {m}"),
        E::Server(m) => format!("server {server}: {m}"),
        e => e.to_string(),
    }
}

/// The holders' smallest remaining ttl (None: no holder has a deadline).
fn first_deadline(info: &Info) -> Option<i64> {
    holds(info)
        .2
        .iter()
        .map(|h| h.ttl_ms)
        .filter(|t| *t >= 0)
        .min()
}

/// The holders' lowest fence (None: nobody holds it).
fn lowest_fence(info: &Info) -> Option<u64> {
    info.fences().into_iter().min()
}

fn sort(locks: &mut [Listed], by: Sort) {
    // Ascending; (true, _) for a lock without the value sorts it last.
    let primary = |l: &Listed| -> (bool, i128) {
        match by {
            Sort::Resource => (false, 0),
            Sort::Ttl => first_deadline(&l.info).map_or((true, 0), |t| (false, t.into())),
            Sort::Fence => lowest_fence(&l.info).map_or((true, 0), |f| (false, f.into())),
            Sort::Waiters => (false, -i128::from(l.info.waiters())),
        }
    };
    // Each key computed once: a semaphore's holds are not copied per
    // comparison.
    locks.sort_by_cached_key(|l| (primary(l), l.resource.clone(), l.server.clone()));
}

/// A cell of the table: control characters escaped (`\n`, `\xNN`), so
/// that one lock stays on its line.
pub fn cell(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() && (c as u32) < 0x100 => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out
}

/// The kind as docs/lock-kinds.md names it. `DLOCK.INFO` says `rwlock` for
/// every resource of limit 1 in its list form: with a shared hold it is a
/// read-write lock; with exclusive holds only, they are one owner's
/// reentrant holds (another owner's exclusive hold would exclude them).
fn shown_kind(kind: &str, hs: &[Hold]) -> String {
    match kind {
        "rwlock" if !hs.is_empty() && hs.iter().all(|h| h.mode == "exclusive") => "reentrant",
        "rwlock" => "read-write",
        other => other,
    }
    .into()
}

/// A semaphore's holds are permits, not exclusive holds.
fn shown_mode(kind: &str, mode: String) -> String {
    if kind == "semaphore" && mode == "exclusive" {
        "permit".into()
    } else {
        mode
    }
}

/// One line per holder (one for a lock nobody holds), the lock's columns
/// repeated on each, so that a line found by `grep` says which lock it is.
/// `SERVER` when several servers were scanned.
pub fn to_table(locks: &[Listed], with_server: bool) -> String {
    let mut rows: Vec<Vec<String>> = vec![[
        "SERVER", "RESOURCE", "KIND", "STATE", "HOLDERS", "WAITERS", "MODE", "FENCE", "TTL",
        "TOKEN", "OWNER", "PRIORITY", "NEXT",
    ]
    .map(String::from)
    .to_vec()];
    for l in locks {
        let (kind, limit, hs) = holds(&l.info);
        let holders = if kind == "semaphore" {
            format!("{}/{limit}", hs.len())
        } else {
            hs.len().to_string()
        };
        let lock = [
            l.server.clone(),
            cell(&l.resource.text()),
            shown_kind(&kind, &hs),
            state(&l.info).to_string(),
            holders,
            l.info.waiters().to_string(),
        ];
        let next = l.next.as_ref().map_or("-".into(), |t| cell(&t.text()));
        let priority = match (&l.next, l.next_priority) {
            (Some(_), Some(p)) => p.to_string(),
            _ => "-".into(),
        };
        if hs.is_empty() {
            let mut row = lock.to_vec();
            row.extend(["-"; 5].map(String::from));
            row.push(priority.clone());
            row.push(next.clone());
            rows.push(row);
        }
        for h in hs {
            let mut row = lock.to_vec();
            row.extend([
                shown_mode(&kind, h.mode),
                h.fence.to_string(),
                ttl(h.ttl_ms),
                cell(&h.token.text()),
                h.owner.as_ref().map_or("-".into(), |o| cell(&o.text())),
                priority.clone(),
                next.clone(),
            ]);
            rows.push(row);
        }
    }
    let skip = usize::from(!with_server);
    let columns = rows[0].len();
    let widths: Vec<usize> = (0..columns)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        let mut line = String::new();
        for i in skip..columns {
            if i + 1 == columns {
                line.push_str(&row[i]);
            } else {
                line.push_str(&format!("{:<w$}  ", row[i], w = widths[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// One JSON document: an array with one object per lock, one per line,
/// each as `dlock status --json` prints it with its `server` first.
pub fn to_json_array(locks: &[Listed]) -> String {
    if locks.is_empty() {
        return "[]\n".into();
    }
    let objects: Vec<String> = locks
        .iter()
        .map(|l| {
            let object = to_json(&l.resource, &l.info);
            let next = l
                .next
                .as_ref()
                .map_or("\"next\":null".into(), |t| json_field("next", t));
            let priority = match (&l.next, l.next_priority) {
                (Some(_), Some(p)) => p.to_string(),
                _ => "null".into(),
            };
            format!(
                "{{\"server\":{},{},{next},\"next_priority\":{priority}}}",
                quote(&l.server),
                &object[1..object.len() - 1]
            )
        })
        .collect();
    format!("[\n{}\n]\n", objects.join(",\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Bytes;

    fn lock(resource: &str, fence: u64, ttl_ms: i64, waiters: i64) -> Listed {
        Listed {
            server: "s:1".into(),
            resource: resource.into(),
            info: Info::Lock {
                token: Some(format!("t-{resource}").into()),
                fence,
                ttl_ms,
                waiters,
            },
            next: None,
            next_priority: None,
        }
    }

    fn reserved(resource: &str, waiters: i64) -> Listed {
        Listed {
            server: "s:1".into(),
            resource: resource.into(),
            info: Info::Lock {
                token: None,
                fence: 0,
                ttl_ms: -2,
                waiters,
            },
            next: None,
            next_priority: None,
        }
    }

    fn order(mut locks: Vec<Listed>, by: Sort) -> Vec<String> {
        sort(&mut locks, by);
        locks.into_iter().map(|l| l.resource.text()).collect()
    }

    fn sample() -> Vec<Listed> {
        vec![
            lock("c", 30, 500, 0),
            reserved("a", 2),
            lock("b", 10, -1, 1),
            lock("d", 20, 100, 1),
        ]
    }

    #[test]
    fn every_sort_order() {
        assert_eq!(order(sample(), Sort::Resource), ["a", "b", "c", "d"]);
        // Soonest deadline first; no deadline, then nobody holding, last
        // (by name).
        assert_eq!(order(sample(), Sort::Ttl), ["d", "c", "a", "b"]);
        assert_eq!(order(sample(), Sort::Fence), ["b", "d", "c", "a"]);
        assert_eq!(order(sample(), Sort::Waiters), ["a", "b", "d", "c"]);
        for bad in ["", "name", "TTL", "fence "] {
            assert!(Sort::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn arguments() {
        let p = |a: &[&str]| parse(Args::new(a.iter().map(OsString::from)), vec![]);
        let o = p(&["--sort=ttl", "--json", "job:*"]).unwrap().unwrap();
        assert_eq!((o.sort, o.json), (Sort::Ttl, true));
        assert_eq!(o.pattern.as_deref(), Some(&b"job:*"[..]));
        let o = p(&["--", "-x*"]).unwrap().unwrap();
        assert_eq!(o.pattern.as_deref(), Some(&b"-x*"[..]));
        assert_eq!(p(&[]).unwrap().unwrap().pattern, None);
        assert!(p(&["--help"]).unwrap().is_none());
        for bad in [
            &["a", "b"][..],
            &["a", "--", "b"],
            &["--", "a", "b"],
            &["--sort"],
            &["--sort", "size"],
            &["--json=yes"],
            &["--limit", "3"],
            &["-x"],
        ] {
            assert!(p(bad).is_err(), "{bad:?}");
        }
        // Not UTF-8: a pattern is bytes.
        let raw = OsString::from_vec(vec![b'a', 0xff, b'*']);
        let o = parse(Args::new([raw]), vec![]).unwrap().unwrap();
        assert_eq!(o.pattern.as_deref(), Some(&[b'a', 0xff, b'*'][..]));
    }

    #[test]
    fn a_table_line_per_holder() {
        let rw = Listed {
            server: "s:1".into(),
            resource: "rw\nx".into(),
            info: Info::Holds {
                kind: "semaphore".into(),
                limit: 3,
                waiters: 0,
                holds: ["h1", "h2"]
                    .map(|t| Hold {
                        token: t.into(),
                        owner: Some(format!("{t}-owner").into()),
                        fence: 5,
                        ttl_ms: 1500,
                        mode: "exclusive".into(),
                    })
                    .into(),
            },
            next: None,
            next_priority: None,
        };
        let mut b = reserved("b", 3);
        b.next = Some(Bytes(b"w1".to_vec()));
        b.next_priority = Some(7);
        let t = to_table(&[lock("a", 7, 2000, 1), b, rw], false);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 5, "{t}");
        let words = |l: &str| l.split_whitespace().map(String::from).collect::<Vec<_>>();
        assert_eq!(
            words(lines[0]),
            [
                "RESOURCE", "KIND", "STATE", "HOLDERS", "WAITERS", "MODE", "FENCE", "TTL", "TOKEN",
                "OWNER", "PRIORITY", "NEXT"
            ]
        );
        assert_eq!(
            words(lines[1]),
            [
                "a",
                "lock",
                "held",
                "1",
                "1",
                "exclusive",
                "7",
                "2.000s",
                "t-a",
                "-",
                "-",
                "-"
            ]
        );
        assert_eq!(
            words(lines[2]),
            ["b", "lock", "reserved", "0", "3", "-", "-", "-", "-", "-", "7", "w1"]
        );
        assert_eq!(
            words(lines[4]),
            [
                "rw\\nx",
                "semaphore",
                "held",
                "2/3",
                "0",
                "permit",
                "5",
                "1.500s",
                "h2",
                "h2-owner",
                "-",
                "-"
            ]
        );
        // Columns line up.
        let at = |l: &str| l.find("held");
        assert_eq!(at(lines[1]), at(lines[3]));
        assert!(to_table(&[], true).starts_with("SERVER  RESOURCE"));
    }

    #[test]
    fn kinds_and_modes_as_the_docs_name_them() {
        let hold = |token: &str, owner: &str, mode: &str| Hold {
            token: token.into(),
            owner: Some(owner.into()),
            fence: 5,
            ttl_ms: 1500,
            mode: mode.into(),
        };
        let resource = |name: &str, kind: &str, holds: Vec<Hold>| Listed {
            server: "s:1".into(),
            resource: name.into(),
            info: Info::Holds {
                kind: kind.into(),
                limit: if kind == "semaphore" { 3 } else { 1 },
                waiters: 0,
                holds,
            },
            next: None,
            next_priority: None,
        };
        let t = to_table(
            &[
                resource(
                    "a",
                    "rwlock",
                    vec![hold("t1", "o", "exclusive"), hold("t2", "o", "exclusive")],
                ),
                resource(
                    "b",
                    "rwlock",
                    vec![hold("t3", "o", "exclusive"), hold("t4", "o", "shared")],
                ),
                resource("c", "rwlock", vec![]),
                resource("d", "semaphore", vec![hold("t5", "t5", "exclusive")]),
            ],
            false,
        );
        let kind_and_mode: Vec<(String, String)> = t
            .lines()
            .skip(1)
            .map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                (w[1].to_string(), w[5].to_string())
            })
            .collect();
        let want = [
            ("reentrant", "exclusive"),
            ("reentrant", "exclusive"),
            ("read-write", "exclusive"),
            ("read-write", "shared"),
            ("read-write", "-"),
            ("semaphore", "permit"),
        ]
        .map(|(k, m)| (k.to_string(), m.to_string()));
        assert_eq!(kind_and_mode, want, "{t}");
    }

    #[test]
    fn json_is_one_array() {
        assert_eq!(to_json_array(&[]), "[]\n");
        let mut b = reserved("b", 3);
        b.next = Some(Bytes(b"w".to_vec()));
        b.next_priority = Some(0);
        let j = to_json_array(&[lock("a\"\\", 7, 2000, 1), b]);
        assert_eq!(
            j,
            "[\n\
             {\"server\":\"s:1\",\"resource\":\"a\\\"\\\\\",\"state\":\"held\",\"kind\":\"lock\",\"limit\":1,\"waiters\":1,\"holds\":[{\"token\":\"t-a\\\"\\\\\",\"owner\":null,\"fence\":7,\"ttl_ms\":2000,\"mode\":\"exclusive\"}],\"next\":null,\"next_priority\":null},\n\
             {\"server\":\"s:1\",\"resource\":\"b\",\"state\":\"reserved\",\"kind\":\"lock\",\"limit\":1,\"waiters\":3,\"holds\":[],\"next\":\"w\",\"next_priority\":0}\n\
             ]\n"
        );
    }
}
