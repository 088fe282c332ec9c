//! The commands for scripts that manage a lease themselves: `acquire`
//! (prints the token and fence, and leaves the lock held), `extend` and
//! `release` (by token).

use crate::args::{self, usage, Args, Item, Parsed};
use crate::backend::{Backend, Wait};
use crate::codes;
use crate::lockopts::{url_option, LockOpts, TTL};
use std::ffi::OsString;
use std::time::Duration;

/// `None`: `--help` was asked for.
fn parse_acquire(mut a: Args, urls: Vec<String>) -> Parsed<Option<(LockOpts, i32, String)>> {
    let mut lock = LockOpts::new(urls);
    let mut conflict = codes::TEMPFAIL;
    let mut resource = None;
    while let Some(item) = a.next_item()? {
        match item {
            Item::Opt { name, inline } => {
                if lock.option(&name, inline.clone(), &mut a, true)? {
                    continue;
                }
                match name.as_str() {
                    "help" => return Ok(None),
                    "conflict-exit-code" => {
                        let v = a.value(&name, inline)?;
                        conflict = match v.parse::<u8>() {
                            Ok(n) => n.into(),
                            Err(_) => return usage(format!("--{name} {v:?}: not in 0..=255")),
                        };
                    }
                    _ => return usage(format!("acquire: unknown option --{name}")),
                }
            }
            Item::Pos(p) if resource.is_none() => resource = Some(args::text("RESOURCE", p)?),
            _ => return usage("acquire takes one RESOURCE"),
        }
    }
    lock.check()?;
    match resource {
        Some(r) => Ok(Some((lock, conflict, r))),
        None => usage("acquire: RESOURCE is missing"),
    }
}

pub fn acquire(a: Args, urls: Vec<String>) -> i32 {
    let (lock, conflict, res) = match parse_acquire(a, urls) {
        Ok(Some(p)) => p,
        Ok(None) => return crate::help::print("acquire"),
        Err(u) => return crate::codes::usage_error(u, "acquire"),
    };
    let backend = match Backend::from_urls(&lock.urls) {
        Ok(b) => b,
        Err(e) => return crate::codes::fail(&e.0, e.1),
    };
    let spec = lock.spec(&res);
    match backend.acquire(&spec) {
        Ok(Some(guard)) => {
            println!("{} {}", guard.token(), guard.fence());
            // The lease outlives this process: the script extends and
            // releases it by token. Forgetting the guard skips the release
            // on drop (it has no watchdog; nothing else is left behind).
            std::mem::forget(guard);
            codes::OK
        }
        Ok(None) => {
            let why = match spec.wait {
                Wait::For(d) => format!("still busy after {}", args::show(d)),
                _ => "busy".to_string(),
            };
            crate::codes::fail(&format!("{res} is {why}"), conflict)
        }
        Err(e) => crate::codes::fail(
            &format!("cannot lock {res}: {}", backend.explain(&e)),
            codes::of(&e),
        ),
    }
}

/// `RESOURCE TOKEN` and the options of `extend` (`--ttl`) or `release`.
struct ByToken {
    urls: Vec<String>,
    ttl: Duration,
    resource: String,
    token: String,
}

fn parse_by_token(mut a: Args, mut urls: Vec<String>, cmd: &str) -> Parsed<Option<ByToken>> {
    let mut ttl = TTL;
    let mut pos: Vec<OsString> = Vec::new();
    while let Some(item) = a.next_item()? {
        match item {
            Item::Opt { name, inline } => {
                if url_option(&mut urls, &name, inline.clone(), &mut a)? {
                    continue;
                }
                match name.as_str() {
                    "help" => return Ok(None),
                    "ttl" if cmd == "extend" => {
                        ttl = args::duration(&name, &a.value(&name, inline)?)?;
                        if ttl.is_zero() {
                            return usage("--ttl must be at least 1ms");
                        }
                    }
                    _ => return usage(format!("{cmd}: unknown option --{name}")),
                }
            }
            Item::Pos(p) => pos.push(p),
            Item::DashDash => pos.extend(a.take_rest()),
        }
    }
    if pos.len() != 2 {
        return usage(format!("{cmd} takes RESOURCE and TOKEN"));
    }
    let token = args::text("TOKEN", pos.pop().unwrap())?;
    let resource = args::text("RESOURCE", pos.pop().unwrap())?;
    if token.is_empty() {
        return usage("TOKEN must not be empty");
    }
    Ok(Some(ByToken {
        urls,
        ttl,
        resource,
        token,
    }))
}

/// `extend` or `release`: 0 done, 79 the token holds nothing there.
pub fn by_token(a: Args, urls: Vec<String>, cmd: &'static str) -> i32 {
    let o = match parse_by_token(a, urls, cmd) {
        Ok(Some(o)) => o,
        Ok(None) => return crate::help::print(cmd),
        Err(u) => return crate::codes::usage_error(u, cmd),
    };
    let backend = match Backend::from_urls(&o.urls) {
        Ok(b) => b,
        Err(e) => return crate::codes::fail(&e.0, e.1),
    };
    let (res, token) = (&o.resource, &o.token);
    let done = if cmd == "extend" {
        backend.extend(res, token, o.ttl)
    } else {
        backend.release(res, token)
    };
    match done {
        Ok(true) => codes::OK,
        Ok(false) => crate::codes::fail(
            &format!("{res} is not held by token {token} (expired, released or taken over)"),
            codes::LOST,
        ),
        Err(e) => crate::codes::fail(
            &format!("{cmd} {res}: {}", backend.explain(&e)),
            codes::of(&e),
        ),
    }
}

/// `dlock check RESOURCE FENCE`: the sequencer check. Exit 0 when FENCE is
/// a live hold on RESOURCE now, 1 when not (as test(1) and grep(1) answer),
/// and dlock's own codes for errors.
pub fn check(mut a: Args, mut urls: Vec<String>) -> i32 {
    let mut pos: Vec<OsString> = Vec::new();
    let parsed: Parsed<bool> = (|| {
        while let Some(item) = a.next_item()? {
            match item {
                Item::Opt { name, inline } => {
                    if url_option(&mut urls, &name, inline.clone(), &mut a)? {
                        continue;
                    }
                    match name.as_str() {
                        "help" => return Ok(false),
                        _ => return usage(format!("check: unknown option --{name}")),
                    }
                }
                Item::Pos(p) => pos.push(p),
                Item::DashDash => pos.extend(a.take_rest()),
            }
        }
        Ok(true)
    })();
    match parsed {
        Ok(true) => {}
        Ok(false) => return crate::help::print("check"),
        Err(u) => return crate::codes::usage_error(u, "check"),
    }
    let (res, fence) = match check_args(pos) {
        Ok(p) => p,
        Err(u) => return crate::codes::usage_error(u, "check"),
    };
    let backend = match Backend::from_urls(&urls) {
        Ok(b) => b,
        Err(e) => return crate::codes::fail(&e.0, e.1),
    };
    match backend.check(&res, fence) {
        Ok(true) => codes::OK,
        Ok(false) => codes::NOT_LIVE,
        Err(e) => crate::codes::fail(
            &format!("check {res}: {}", backend.explain(&e)),
            codes::of(&e),
        ),
    }
}

/// `RESOURCE FENCE`, the fence a number from 1 to 2^63-1.
fn check_args(mut pos: Vec<OsString>) -> Parsed<(String, u64)> {
    if pos.len() != 2 {
        return usage("check takes RESOURCE and FENCE");
    }
    let fence = args::text("FENCE", pos.pop().unwrap())?;
    let resource = args::text("RESOURCE", pos.pop().unwrap())?;
    match fence.parse::<u64>() {
        Ok(f) if (1..=i64::MAX as u64).contains(&f) => Ok((resource, f)),
        _ => usage(format!("FENCE {fence:?}: not a fence (1 to 2^63-1)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_takes_a_resource_and_a_fence() {
        let p = |v: &[&str]| check_args(v.iter().map(OsString::from).collect());
        assert_eq!(p(&["r", "42"]).unwrap(), ("r".to_string(), 42));
        for bad in [
            &["r"][..],
            &["r", "1", "2"],
            &["r", "0"],
            &["r", "-1"],
            &["r", "x"],
            &["r", "9223372036854775808"],
        ] {
            assert!(p(bad).is_err(), "{bad:?}");
        }
    }
}
