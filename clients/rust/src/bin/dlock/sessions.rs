//! `dlock sessions list [--match PATTERN]`, `dlock sessions info ID`,
//! `dlock sessions kill ID`: the sessions (`DLOCK.SESSION`) on the server,
//! or on every master of its cluster (sessions belong to a server, not to
//! a key).

use crate::args::{usage, Args, Item, Parsed};
use crate::backend::{fields, int, text, Backend, Bytes};
use crate::codes;
use crate::list::{cell, explain};
use crate::lockopts::url_option;
use crate::scan;
use crate::status::ttl;
use dlock_client::Error;
use redis::{ConnectionInfo, Value};
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

/// Ids one `LIST` page asks for (the server's largest page).
const PAGE: u32 = 1000;

#[derive(Debug, PartialEq)]
enum Sub {
    List { pattern: Option<Vec<u8>> },
    Info(Vec<u8>),
    Kill(Vec<u8>),
}

struct Opts {
    urls: Vec<String>,
    sub: Sub,
}

/// `None`: `--help` was asked for.
fn parse(mut a: Args, mut urls: Vec<String>) -> Parsed<Option<Opts>> {
    let mut words: Vec<OsString> = Vec::new();
    let mut pattern: Option<OsString> = None;
    while let Some(item) = a.next_item()? {
        match item {
            Item::Opt { name, inline } => {
                if url_option(&mut urls, &name, inline.clone(), &mut a)? {
                    continue;
                }
                match name.as_str() {
                    "help" => return Ok(None),
                    "match" => pattern = Some(a.value(&name, inline)?.into()),
                    _ => return usage(format!("sessions: unknown option --{name}")),
                }
            }
            Item::Pos(p) => words.push(p),
            // An id that starts with `-`: `dlock sessions kill -- -x`.
            Item::DashDash => words.extend(a.take_rest()),
        }
    }
    let mut words = words.into_iter();
    let what = words.next().map(|w| w.to_string_lossy().into_owned());
    let id = words.next().map(OsString::into_vec);
    if words.next().is_some() {
        return usage("sessions: too many arguments");
    }
    let sub = match (what.as_deref(), id) {
        (Some("list"), None) => Sub::List {
            pattern: pattern.take().map(OsString::into_vec),
        },
        (Some("list"), Some(_)) => return usage("sessions list takes no ID (--match PATTERN)"),
        (Some("info"), Some(id)) => Sub::Info(id),
        (Some("kill"), Some(id)) => Sub::Kill(id),
        (Some(w @ ("info" | "kill")), None) => {
            return usage(format!("sessions {w}: ID is missing"))
        }
        (Some(w), _) => {
            return usage(format!(
                "sessions: unknown subcommand {w:?} (list, info, kill)"
            ))
        }
        (None, _) => return usage("sessions: a subcommand is needed (list, info, kill)"),
    };
    if pattern.is_some() {
        return usage("sessions: --match is for sessions list");
    }
    Ok(Some(Opts { urls, sub }))
}

pub fn main(a: Args, urls: Vec<String>) -> i32 {
    let o = match parse(a, urls) {
        Ok(Some(o)) => o,
        Ok(None) => return crate::help::print("sessions"),
        Err(u) => return codes::usage_error(u, "sessions"),
    };
    let backend = match Backend::from_urls(&o.urls) {
        Ok(b) => b,
        Err(e) => return codes::fail(&e.0, e.1),
    };
    let (servers, mut errors) = scan::servers(&backend.urls(), backend.tls());
    let several = servers.len() + errors.len() > 1;
    let code = match &o.sub {
        Sub::List { pattern } => {
            let mut rows = Vec::new();
            for (name, info) in &servers {
                match list(name, info, pattern.as_deref()) {
                    Ok(found) => rows.extend(found),
                    Err(e) => errors.push((name.clone(), e)),
                }
            }
            rows.sort_by(|a, b| (&a.id, &a.server).cmp(&(&b.id, &b.server)));
            if !rows.is_empty() || errors.is_empty() {
                print!("{}", to_table(&rows, several));
            }
            codes::OK
        }
        Sub::Info(id) => {
            let mut found = 0;
            for (name, info) in &servers {
                match session_info(name, info, id) {
                    Ok(Some(s)) => {
                        found += 1;
                        print!("{}", to_text(&s, several));
                    }
                    Ok(None) => {}
                    Err(e) => errors.push((name.clone(), e)),
                }
            }
            none_found(found, id, &errors)
        }
        Sub::Kill(id) => {
            let mut killed = 0;
            for (name, info) in &servers {
                match kill(name, info, id) {
                    Ok(true) => {
                        killed += 1;
                        println!("killed {} on {name}", cell(&Bytes(id.clone()).text()));
                    }
                    Ok(false) => {}
                    Err(e) => errors.push((name.clone(), e)),
                }
            }
            none_found(killed, id, &errors)
        }
    };
    for (server, e) in &errors {
        eprintln!(
            "dlock: sessions: {}",
            explain(server, &without_sessions(server, e))
        );
    }
    errors.first().map_or(code, |(_, e)| codes::of(e))
}

/// 79 when no server had the session (and none failed to say).
fn none_found(found: usize, id: &[u8], errors: &[(String, Error)]) -> i32 {
    if found == 0 && errors.is_empty() {
        let id = cell(&Bytes(id.to_vec()).text());
        return codes::fail(&format!("no session {id}"), codes::LOST);
    }
    codes::OK
}

/// `DLOCK.SESSION` unknown: a dlock without sessions (or none at all).
fn without_sessions(server: &str, e: &Error) -> Error {
    match e {
        Error::ModuleMissing(_) => Error::Unavailable(format!(
            "{server}: DLOCK.SESSION is unknown there: the dlock module is \
             missing or older than sessions"
        )),
        Error::Unavailable(m) => Error::Unavailable(m.clone()),
        Error::Server(m) => Error::Server(m.clone()),
        Error::Denied { addr, detail } => Error::Denied {
            addr: addr.clone(),
            detail: detail.clone(),
        },
        other => Error::Server(other.to_string()),
    }
}

/// One session as `INFO` describes it.
#[derive(Debug, PartialEq)]
struct Session {
    server: String,
    id: Bytes,
    /// The fields in the server's order (`id` left out).
    fields: Vec<(String, Value)>,
}

impl Session {
    fn int(&self, name: &str) -> i64 {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0, |(_, v)| int(v))
    }
}

fn session_cmd(sub: &str) -> redis::Cmd {
    let mut c = redis::cmd("DLOCK.SESSION");
    c.arg(sub);
    c
}

/// `INFO id`: None when no such session.
fn parse_info(server: &str, id: &[u8], v: Value) -> Result<Option<Session>, Error> {
    if v == Value::Nil {
        return Ok(None);
    }
    let f = fields(v).ok_or_else(|| Error::Server("unexpected DLOCK.SESSION INFO reply".into()))?;
    Ok(Some(Session {
        server: server.to_string(),
        id: Bytes(id.to_vec()),
        fields: f.into_iter().filter(|(n, _)| n != "id").collect(),
    }))
}

fn session_info(name: &str, info: &ConnectionInfo, id: &[u8]) -> Result<Option<Session>, Error> {
    let mut c = scan::connect(info, name)?;
    let v: Value = session_cmd("INFO")
        .arg(id)
        .query(&mut c)
        .map_err(|e| scan::error(e, name))?;
    parse_info(name, id, v)
}

fn kill(name: &str, info: &ConnectionInfo, id: &[u8]) -> Result<bool, Error> {
    let mut c = scan::connect(info, name)?;
    let n: i64 = session_cmd("KILL")
        .arg(id)
        .query(&mut c)
        .map_err(|e| scan::error(e, name))?;
    Ok(n == 1)
}

/// Every session of one server whose id matches `pattern`: `LIST` page by
/// page, each page's `INFO`s pipelined (a session that ended meanwhile is
/// left out).
fn list(name: &str, info: &ConnectionInfo, pattern: Option<&[u8]>) -> Result<Vec<Session>, Error> {
    let mut c = scan::connect(info, name)?;
    let mut after: Option<Vec<u8>> = None;
    let mut out = Vec::new();
    loop {
        let mut cmd = session_cmd("LIST");
        if let Some(a) = &after {
            cmd.arg("AFTER").arg(a);
        }
        if let Some(p) = pattern {
            cmd.arg("MATCH").arg(p);
        }
        cmd.arg("COUNT").arg(PAGE);
        let page: Value = cmd.query(&mut c).map_err(|e| scan::error(e, name))?;
        let (next, ids) = parse_page(page)?;
        if !ids.is_empty() {
            let mut p = redis::pipe();
            for id in &ids {
                p.add_command(session_cmd("INFO").arg(id).clone());
            }
            let infos: Vec<Value> = p.query(&mut c).map_err(|e| scan::error(e, name))?;
            for (id, v) in ids.iter().zip(infos) {
                out.extend(parse_info(name, id, v)?);
            }
        }
        match next {
            Some(n) => after = Some(n),
            None => return Ok(out),
        }
    }
}

/// One `LIST` page: the id to pass as `AFTER` next (None: the last page),
/// and the page's ids.
type Page = (Option<Vec<u8>>, Vec<Vec<u8>>);

/// `[next, [id ...]]`.
fn parse_page(v: Value) -> Result<Page, Error> {
    let bad = || Error::Server("unexpected DLOCK.SESSION LIST reply".into());
    let Value::Array(mut parts) = v else {
        return Err(bad());
    };
    if parts.len() != 2 {
        return Err(bad());
    }
    let ids = parts.pop().ok_or_else(bad)?;
    let next = match parts.pop().ok_or_else(bad)? {
        Value::Nil => None,
        n => Some(crate::backend::bytes(n).ok_or_else(bad)?.0),
    };
    let Value::Array(ids) = ids else {
        return Err(bad());
    };
    let ids = ids
        .into_iter()
        .map(|i| crate::backend::bytes(i).map(|b| b.0).ok_or_else(bad))
        .collect::<Result<_, _>>()?;
    Ok((next, ids))
}

/// One line per session: its id, time left, holds and waits, whether it
/// is bound to its connection; `SERVER` first when several servers were
/// read.
fn to_table(sessions: &[Session], with_server: bool) -> String {
    let mut rows: Vec<Vec<String>> = vec![["SERVER", "SESSION", "TTL", "HOLDS", "WAITS", "BOUND"]
        .map(String::from)
        .to_vec()];
    for s in sessions {
        rows.push(vec![
            s.server.clone(),
            cell(&s.id.text()),
            ttl(s.int("ttl")),
            s.int("holds").to_string(),
            s.int("waits").to_string(),
            if s.int("bound") == 1 { "yes" } else { "no" }.into(),
        ]);
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
            line.push_str(&format!("{:<w$}  ", row[i], w = widths[i]));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `INFO`'s fields, one per line (durations as dlock shows them).
fn to_text(s: &Session, with_server: bool) -> String {
    let mut out = format!("session {}", cell(&s.id.text()));
    if with_server {
        out.push_str(&format!(" on {}", s.server));
    }
    out.push('\n');
    for (name, v) in &s.fields {
        let shown = match name.as_str() {
            "ttl" | "session-ttl" | "lock-delay" => ttl(int(v)),
            "bound" => if int(v) == 1 { "yes" } else { "no" }.into(),
            _ => match v {
                Value::Int(n) => n.to_string(),
                v => text(v.clone()).map_or_else(|| format!("{v:?}"), |t| cell(&t)),
            },
        };
        out.push_str(&format!("  {name}: {shown}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn arguments() {
        let p = |a: &[&str]| parse(Args::new(a.iter().map(OsString::from)), vec![]);
        let sub = |a: &[&str]| p(a).unwrap().unwrap().sub;
        assert_eq!(sub(&["list"]), Sub::List { pattern: None });
        assert_eq!(
            sub(&["list", "--match", "w-*"]),
            Sub::List {
                pattern: Some(b"w-*".to_vec())
            }
        );
        assert_eq!(sub(&["info", "s1"]), Sub::Info(b"s1".to_vec()));
        assert_eq!(sub(&["kill", "--", "-x"]), Sub::Kill(b"-x".to_vec()));
        assert!(p(&["--help"]).unwrap().is_none());
        for bad in [
            &[][..],
            &["lst"],
            &["list", "x"],
            &["info"],
            &["kill"],
            &["kill", "a", "b"],
            &["info", "a", "--match", "x"],
            &["list", "--match"],
            &["list", "--json"],
        ] {
            assert!(p(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn pages_and_infos_are_read() {
        let page = Value::Array(vec![bulk("s2"), Value::Array(vec![bulk("s1"), bulk("s2")])]);
        assert_eq!(
            parse_page(page).unwrap(),
            (Some(b"s2".to_vec()), vec![b"s1".to_vec(), b"s2".to_vec()])
        );
        let last = Value::Array(vec![Value::Nil, Value::Array(vec![])]);
        assert_eq!(parse_page(last).unwrap(), (None, vec![]));
        assert!(parse_page(Value::Int(1)).is_err());
        assert_eq!(parse_info("s:1", b"x", Value::Nil).unwrap(), None);
        assert!(parse_info("s:1", b"x", Value::Int(3)).is_err());
    }

    #[test]
    fn a_table_line_per_session_and_info_a_line_per_field() {
        let info = Value::Array(vec![
            bulk("id"),
            bulk("w\n1"),
            bulk("ttl"),
            Value::Int(9500),
            bulk("deadline"),
            Value::Int(1795309961824),
            bulk("session-ttl"),
            Value::Int(10000),
            bulk("lock-delay"),
            Value::Int(0),
            bulk("bound"),
            Value::Int(1),
            bulk("holds"),
            Value::Int(2),
            bulk("waits"),
            Value::Int(0),
        ]);
        let s = parse_info("s:1", b"w\n1", info).unwrap().unwrap();
        let t = to_table(std::slice::from_ref(&s), false);
        let words: Vec<Vec<&str>> = t.lines().map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(words[0], ["SESSION", "TTL", "HOLDS", "WAITS", "BOUND"]);
        assert_eq!(words[1], ["w\\n1", "9.500s", "2", "0", "yes"]);
        assert!(to_table(&[], true).starts_with("SERVER  SESSION"));
        let text = to_text(&s, true);
        assert!(text.starts_with("session w\\n1 on s:1\n"), "{text}");
        assert!(text.contains("  session-ttl: 10.000s\n"), "{text}");
        assert!(text.contains("  holds: 2\n"), "{text}");
        assert!(!text.contains("  id:"), "{text}");
    }
}
