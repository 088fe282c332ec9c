//! `dlock metrics [--listen ADDR]`: the statistics (`DLOCK.STATS`, its
//! `HOT` tables) and `INFO dlock` of the server, or of every master of its
//! cluster, in the Prometheus text format: printed once, or served over
//! HTTP at each scrape. dlock serves them itself because the usual Redis
//! exporter exports only the INFO fields it knows by name (docs/operations.md,
//! "Metrics for Prometheus").

use crate::args::{usage, Args, Item, Parsed};
use crate::backend::Backend;
use crate::codes;
use crate::list::explain;
use crate::lockopts::url_option;
use crate::metrics_read as read;
use crate::metrics_text::{families, Node, Read};
use crate::prom::render;
use crate::scan;
use dlock_client::{Error, TlsSettings};
use redis::{ConnectionInfo, Value};

/// The entries of each hot table read.
const HOT_COUNT: u32 = 10;
/// The `HOT` orderings, in the order of `Read::hot`.
const HOT_BY: [&str; 3] = ["contended", "wait", "expired"];

struct Opts {
    urls: Vec<String>,
    listen: Option<String>,
}

/// `None`: `--help` was asked for.
fn parse(mut a: Args, mut urls: Vec<String>) -> Parsed<Option<Opts>> {
    let mut listen = None;
    while let Some(item) = a.next_item()? {
        match item {
            Item::Opt { name, inline } => {
                if url_option(&mut urls, &name, inline.clone(), &mut a)? {
                    continue;
                }
                match name.as_str() {
                    "help" => return Ok(None),
                    "listen" => listen = Some(a.value(&name, inline)?),
                    _ => return usage(format!("metrics: unknown option --{name}")),
                }
            }
            Item::Pos(_) | Item::DashDash => return usage("metrics takes no arguments"),
        }
    }
    Ok(Some(Opts { urls, listen }))
}

pub fn main(a: Args, urls: Vec<String>) -> i32 {
    let o = match parse(a, urls) {
        Ok(Some(o)) => o,
        Ok(None) => return crate::help::print("metrics"),
        Err(u) => return codes::usage_error(u, "metrics"),
    };
    let backend = match Backend::from_urls(&o.urls) {
        Ok(b) => b,
        Err(e) => return codes::fail(&e.0, e.1),
    };
    let Some(addr) = o.listen else {
        let (text, errors) = metrics(&backend.urls(), backend.tls());
        print!("{text}");
        // What could not be read: said after what could.
        for (server, e) in &errors {
            eprintln!("dlock: metrics: {}", explain(server, e));
        }
        return errors.first().map_or(codes::OK, |(_, e)| codes::of(e));
    };
    // Before any thread starts (they inherit the blocked signals).
    let stop = match crate::metrics_http::on_signals() {
        Ok(s) => s,
        Err(e) => return codes::fail(&format!("metrics: signals: {e}"), codes::OSERR),
    };
    let listener = match std::net::TcpListener::bind(&addr) {
        Ok(l) => l,
        Err(e) => {
            return codes::fail(
                &format!("metrics: cannot listen on {addr}: {e}"),
                codes::UNAVAILABLE,
            )
        }
    };
    match listener.local_addr() {
        Ok(a) => eprintln!("dlock: metrics: listening on {a}"),
        Err(_) => eprintln!("dlock: metrics: listening on {addr}"),
    }
    let scrape = || {
        let (text, errors) = metrics(&backend.urls(), backend.tls());
        for (server, e) in &errors {
            eprintln!("dlock: metrics: {}", explain(server, e));
        }
        text
    };
    match crate::metrics_http::serve(listener, &stop, &scrape) {
        Ok(()) => codes::OK,
        Err(e) => codes::fail(&format!("metrics: {e}"), codes::OSERR),
    }
}

/// The text of every node (each master of a cluster), and what could not
/// be read, by server.
fn metrics(urls: &[&str], tls: Option<&TlsSettings>) -> (String, Vec<(String, Error)>) {
    let (servers, mut errors) = scan::servers(urls, tls);
    let mut nodes: Vec<Node> = errors
        .iter()
        .map(|(name, _)| Node {
            name: name.clone(),
            read: None,
        })
        .collect();
    // Each node on a thread of its own, as `list` reads them: a slow one
    // delays no other.
    let results: Vec<Result<Read, Error>> = std::thread::scope(|s| {
        let handles: Vec<_> = servers
            .iter()
            .map(|(name, info)| s.spawn(move || read_node(name, info)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::Server("a read failed".into())))
            })
            .collect()
    });
    for ((name, _), r) in servers.iter().zip(results) {
        let read = match r {
            Ok(r) => Some(r),
            Err(e) => {
                errors.push((name.clone(), e));
                None
            }
        };
        nodes.push(Node {
            name: name.clone(),
            read,
        });
    }
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    (render(&families(&nodes)), errors)
}

/// One node's `INFO dlock`, `DLOCK.STATS` and hot tables, in one
/// pipeline on a connection whose every step has a deadline
/// (`scan::connect`).
fn read_node(name: &str, info: &ConnectionInfo) -> Result<Read, Error> {
    let mut c = scan::connect(info, name)?;
    let mut pipe = redis::pipe();
    pipe.cmd("INFO").arg("dlock");
    pipe.cmd("DLOCK.STATS");
    for by in HOT_BY {
        pipe.cmd("DLOCK.STATS")
            .arg("HOT")
            .arg("BY")
            .arg(by)
            .arg("COUNT")
            .arg(HOT_COUNT);
    }
    let replies: Vec<Value> = pipe.query(&mut c).map_err(|e| scan::error(e, name))?;
    let unexpected = |what: &str| Error::Server(format!("unexpected {what} reply from {name}"));
    let mut it = replies.into_iter();
    let mut next = |what: &str| it.next().ok_or_else(|| unexpected(what));
    let info = read::info(next("INFO")?).ok_or_else(|| unexpected("INFO"))?;
    if !info.iter().any(|(k, _)| k.starts_with("dlock_")) {
        return Err(Error::ModuleMissing(name.to_string()));
    }
    let stats = read::stats(next("DLOCK.STATS")?).ok_or_else(|| unexpected("DLOCK.STATS"))?;
    let mut hot: [Vec<read::Hot>; 3] = Default::default();
    for table in &mut hot {
        *table =
            read::hot(next("DLOCK.STATS HOT")?).ok_or_else(|| unexpected("DLOCK.STATS HOT"))?;
    }
    Ok(Read { info, stats, hot })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    #[test]
    fn arguments() {
        let p = |a: &[&str]| parse(Args::new(a.iter().map(OsString::from)), vec![]);
        let o = p(&["--listen", "127.0.0.1:0", "--url", "redis://h:1/"])
            .unwrap()
            .unwrap();
        assert_eq!(o.listen.as_deref(), Some("127.0.0.1:0"));
        assert_eq!(o.urls, ["redis://h:1/"]);
        assert_eq!(
            p(&["--listen=:9487"]).unwrap().unwrap().listen.as_deref(),
            Some(":9487")
        );
        assert_eq!(p(&[]).unwrap().unwrap().listen, None);
        assert!(p(&["--help"]).unwrap().is_none());
        for bad in [&["x"][..], &["--listen"], &["--", "x"], &["--json"]] {
            assert!(p(bad).is_err(), "{bad:?}");
        }
    }
}
