//! `dlock resize RESOURCE LIMIT [--json]`: a held semaphore's limit changed
//! while its permits are held (`DLOCK.RESIZE`), the previous and the new
//! limit printed.

use crate::args::{self, usage, Args, Item, Parsed};
use crate::backend::{Backend, Bytes};
use crate::codes;
use crate::lockopts::url_option;
use crate::status::json_field;
use std::ffi::OsString;

struct Opts {
    urls: Vec<String>,
    json: bool,
    resource: String,
    limit: u32,
}

/// `None`: `--help` was asked for.
fn parse(mut a: Args, mut urls: Vec<String>) -> Parsed<Option<Opts>> {
    let mut json = false;
    let mut pos: Vec<OsString> = Vec::new();
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
                    _ => return usage(format!("resize: unknown option --{name}")),
                }
            }
            Item::Pos(p) => pos.push(p),
            Item::DashDash => pos.extend(a.take_rest()),
        }
    }
    let (resource, limit) = positionals(pos)?;
    Ok(Some(Opts {
        urls,
        json,
        resource,
        limit,
    }))
}

/// `RESOURCE LIMIT`, the limit one the server takes (2 to 2^20).
fn positionals(mut pos: Vec<OsString>) -> Parsed<(String, u32)> {
    if pos.len() != 2 {
        return usage("resize takes RESOURCE and LIMIT");
    }
    let limit = args::text("LIMIT", pos.pop().unwrap())?;
    let resource = args::text("RESOURCE", pos.pop().unwrap())?;
    let max = dlock_client::MAX_LIMIT;
    match limit.parse::<u32>() {
        Ok(n) if (2..=max).contains(&n) => Ok((resource, n)),
        _ => usage(format!("LIMIT {limit:?}: not a limit (2 to {max})")),
    }
}

pub fn main(a: Args, urls: Vec<String>) -> i32 {
    let o = match parse(a, urls) {
        Ok(Some(o)) => o,
        Ok(None) => return crate::help::print("resize"),
        Err(u) => return codes::usage_error(u, "resize"),
    };
    let backend = match Backend::from_urls(&o.urls) {
        Ok(b) => b,
        Err(e) => return codes::fail(&e.0, e.1),
    };
    // A semaphore of several permits lives on one server: Redlock's
    // majority grants one holder only.
    let Some(locker) = backend.locker() else {
        return codes::usage_error(
            args::Usage("resize takes one --url (a semaphore lives on one server)".into()),
            "resize",
        );
    };
    let res = &o.resource;
    let previous = match locker.resize(res, o.limit) {
        Ok(p) => p,
        Err(e) => {
            return codes::fail(
                &format!("resize {res}: {}", backend.explain(&e)),
                codes::of(&e),
            )
        }
    };
    let shown = |n: Option<u32>| n.map_or("null".to_string(), |n| n.to_string());
    if o.json {
        println!(
            "{{{},\"previous\":{},\"limit\":{}}}",
            json_field("resource", &Bytes::from(res.as_str())),
            shown(previous),
            shown(previous.map(|_| o.limit))
        );
    }
    match previous {
        Some(p) => {
            if !o.json {
                println!("{res}: limit {p} -> {}", o.limit);
            }
            codes::OK
        }
        None => codes::fail(
            &format!(
                "nothing holds {res}: nothing resized (the next request's --limit sets its limit)"
            ),
            codes::NOT_HELD,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resize_takes_a_resource_and_a_limit_the_server_takes() {
        let p = |v: &[&str]| positionals(v.iter().map(OsString::from).collect());
        assert_eq!(p(&["r", "2"]).unwrap(), ("r".to_string(), 2));
        assert_eq!(p(&["r", "1048576"]).unwrap(), ("r".to_string(), 1 << 20));
        for bad in [
            &["r"][..],
            &["r", "3", "4"],
            &["r", "0"],
            &["r", "1"],
            &["r", "-3"],
            &["r", "x"],
            &["r", "1048577"],
            &["r", "4294967296"],
        ] {
            assert!(p(bad).is_err(), "{bad:?}");
        }
    }
}
