//! `dlock top [--by contended|wait|expired] [--interval D] [--count N]
//! [--once [--json]]`: the hottest resources of the server, or of every
//! master of its cluster, by `DLOCK.STATS HOT`, with their holders and
//! waiters now; a live full-screen view, or one snapshot.

mod data;
mod fetch;
mod term;
#[cfg(test)]
mod tests;
mod view;

use crate::args::{self, usage, Args, Item, Parsed};
use crate::backend::Backend;
use crate::codes;
use crate::list::explain;
use crate::lockopts::url_option;
use data::By;
use fetch::Sources;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use term::{Event, Terminal};

/// The server's most per ordering (`COUNT` 1 to 32).
const MAX_COUNT: u32 = 32;
const INTERVAL: Duration = Duration::from_secs(2);
/// Below this a refresh would mostly measure itself.
const MIN_INTERVAL: Duration = Duration::from_millis(100);

#[derive(Debug)]
struct Opts {
    urls: Vec<String>,
    by: By,
    interval: Duration,
    count: u32,
    once: bool,
    json: bool,
}

/// `None`: `--help` was asked for.
fn parse(mut a: Args, mut urls: Vec<String>) -> Parsed<Option<Opts>> {
    let mut o = Opts {
        urls: Vec::new(),
        by: By::Contended,
        interval: INTERVAL,
        count: 10,
        once: false,
        json: false,
    };
    while let Some(item) = a.next_item()? {
        match item {
            Item::Opt { name, inline } => {
                if url_option(&mut urls, &name, inline.clone(), &mut a)? {
                    continue;
                }
                match name.as_str() {
                    "help" => return Ok(None),
                    "by" => {
                        let v = a.value(&name, inline)?;
                        o.by = By::parse(&v).ok_or_else(|| {
                            args::Usage(format!("--by {v:?}: one of contended, wait, expired"))
                        })?;
                    }
                    "interval" => {
                        let v = a.value(&name, inline)?;
                        o.interval = args::duration(&name, &v)?;
                        if o.interval < MIN_INTERVAL {
                            return usage(format!("--interval {v:?}: at least 100ms"));
                        }
                    }
                    "count" => {
                        let v = a.value(&name, inline)?;
                        o.count = args::count(&name, &v)?;
                        if !(1..=MAX_COUNT).contains(&o.count) {
                            return usage(format!("--count {v:?}: from 1 to {MAX_COUNT}"));
                        }
                    }
                    "once" => {
                        args::flag(&name, inline)?;
                        o.once = true;
                    }
                    "json" => {
                        args::flag(&name, inline)?;
                        o.json = true;
                    }
                    _ => return usage(format!("top: unknown option --{name}")),
                }
            }
            Item::Pos(_) | Item::DashDash => return usage("top takes no arguments"),
        }
    }
    if o.json && !o.once {
        return usage("top: --json is for one snapshot: add --once");
    }
    o.urls = urls;
    Ok(Some(o))
}

pub fn main(a: Args, urls: Vec<String>) -> i32 {
    let o = match parse(a, urls) {
        Ok(Some(o)) => o,
        Ok(None) => return crate::help::print("top"),
        Err(u) => return codes::usage_error(u, "top"),
    };
    let terminal = term::is_tty(libc::STDOUT_FILENO) && term::is_tty(libc::STDIN_FILENO);
    if !o.once && !terminal {
        return codes::usage_error(
            args::Usage(
                "top: the live view needs a terminal; use --once (and --json) for one snapshot"
                    .into(),
            ),
            "top",
        );
    }
    let backend = match Backend::from_urls(&o.urls) {
        Ok(b) => b,
        Err(e) => return codes::fail(&e.0, e.1),
    };
    let urls = backend.urls().into_iter().map(String::from).collect();
    let mut sources = Sources::new(urls, backend.tls().cloned());
    if o.once {
        return once(&mut sources, &o);
    }
    live(&mut sources, &o)
}

/// One snapshot, printed; the nodes not read named on stderr after it,
/// the exit code the first one's.
fn once(sources: &mut Sources, o: &Opts) -> i32 {
    let r = sources.refresh(o.by, o.count as usize);
    if o.json {
        print!("{}", view::json(&r.snapshot));
    } else {
        print!("{}", view::plain(&r.snapshot));
    }
    for (node, e) in &r.errors {
        eprintln!("dlock: top: {}", explain(node, e));
    }
    r.errors.first().map_or(codes::OK, |(_, e)| codes::of(e))
}

fn now_clock() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    view::clock(secs)
}

/// The live view, until `q` or a signal.
fn live(sources: &mut Sources, o: &Opts) -> i32 {
    let mut term = match Terminal::enter() {
        Ok(t) => t,
        Err(e) => return codes::fail(&format!("top: the terminal: {e}"), codes::OSERR),
    };
    let every = args::show(o.interval);
    let mut by = o.by;
    let mut snap = sources.refresh(by, o.count as usize).snapshot;
    let mut clock = now_clock();
    let draw = |term: &Terminal, snap: &data::Snapshot, clock: &str| {
        let (w, h) = term::size();
        term.draw(&view::screen(snap, &every, clock, w, h));
    };
    draw(&term, &snap, &clock);
    let mut next = Instant::now() + o.interval;
    loop {
        let refresh = match term.wait(next.saturating_duration_since(Instant::now())) {
            Event::Tick => true,
            Event::Key(b'q' | b'Q') => break,
            Event::Key(b'r') => true,
            Event::Key(k) => match By::of_key(k) {
                Some(b) => {
                    by = b;
                    // The header says the new ordering at once; its
                    // figures follow.
                    snap.by = by;
                    draw(&term, &snap, &clock);
                    true
                }
                None => false,
            },
            Event::Resized => false,
            Event::Signal(sig) => {
                drop(term);
                crate::signals::die_of(sig);
            }
        };
        if refresh {
            snap = sources.refresh(by, o.count as usize).snapshot;
            clock = now_clock();
            next = Instant::now() + o.interval;
        }
        draw(&term, &snap, &clock);
    }
    drop(term);
    codes::OK
}
