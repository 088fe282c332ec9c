//! `dlock exec`: run a command while holding a lock; and `dlock elect`:
//! run a command while leading an election (the same, on an exclusive lock
//! whose fence is the leadership's term).

use crate::args::{self, usage, Args, Item, Parsed};
use crate::backend::{Backend, LockSpec, Wait};
use crate::child::{self, Child, Cut};
use crate::codes;
use crate::lockopts::LockOpts;
use crate::reaper;
use crate::signals;
use crate::waitline::WaitLine;
use crate::wanted::OnWanted;
use std::ffi::OsString;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The default `--grace`, lowered to ttl/4 for a ttl under 15 s.
const GRACE: Duration = Duration::from_secs(5);

/// Which of the two commands runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    Exec,
    Elect,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Exec => "exec",
            Mode::Elect => "elect",
        }
    }
}

struct Opts {
    mode: Mode,
    lock: LockOpts,
    grace: Option<Duration>,
    conflict: i32,
    resource: String,
    command: Vec<OsString>,
    on_wanted: Option<Arc<OnWanted>>,
    /// `elect --prefer ID`: hand the lead to candidate ID once it waits.
    prefer: Option<String>,
}

/// `None`: `--help` was asked for.
fn parse(mut a: Args, urls: Vec<String>, mode: Mode) -> Parsed<Option<Opts>> {
    let cmd = mode.name();
    let mut lock = LockOpts::new(urls);
    let mut id: Option<String> = None;
    let mut grace = None;
    let mut conflict = codes::TEMPFAIL;
    let mut resource: Option<String> = None;
    let mut command = Vec::new();
    let mut on_wanted = None;
    let mut prefer: Option<String> = None;
    while let Some(item) = a.next_item()? {
        match item {
            Item::Opt { name, inline } => {
                if lock.option(&name, inline.clone(), &mut a, false)? {
                    continue;
                }
                match name.as_str() {
                    "help" => return Ok(None),
                    "id" if mode == Mode::Elect => {
                        let v = a.value(&name, inline)?;
                        if v.is_empty() || v.contains('/') {
                            return usage(format!("--id {v:?}: not empty, and no '/'"));
                        }
                        id = Some(v);
                    }
                    "prefer" if mode == Mode::Elect => {
                        let v = a.value(&name, inline)?;
                        if v.is_empty() || v.contains('/') {
                            return usage(format!("--prefer {v:?}: not empty, and no '/'"));
                        }
                        prefer = Some(v);
                    }
                    "grace" => grace = Some(args::duration(&name, &a.value(&name, inline)?)?),
                    "on-wanted" => {
                        on_wanted = Some(Arc::new(OnWanted::parse(&a.value(&name, inline)?)?))
                    }
                    "conflict-exit-code" => {
                        let v = a.value(&name, inline)?;
                        conflict = match v.parse::<u8>() {
                            Ok(n) => n.into(),
                            Err(_) => return usage(format!("--{name} {v:?}: not in 0..=255")),
                        };
                    }
                    _ => return usage(format!("{cmd}: unknown option --{name}")),
                }
            }
            Item::Pos(p) if resource.is_none() => resource = Some(args::text("RESOURCE", p)?),
            // After the resource, the first other word starts the command
            // (as with flock(1)); `--` makes that explicit.
            Item::Pos(p) => {
                command.push(p);
                command.extend(a.take_rest());
            }
            Item::DashDash if resource.is_some() => command.extend(a.take_rest()),
            Item::DashDash => return usage(format!("{cmd}: RESOURCE goes before --")),
        }
    }
    let Some(resource) = resource else {
        return usage(format!("{cmd}: RESOURCE and COMMAND are missing"));
    };
    lock.check()?;
    if command.is_empty() {
        return usage(format!(
            "{cmd}: COMMAND is missing (dlock {cmd} RESOURCE -- COMMAND [ARGS...])"
        ));
    }
    if mode == Mode::Elect {
        if lock.shared || lock.limit.is_some() || lock.permits.is_some() {
            return usage(
                "elect: a leader holds the election alone (no --shared, --limit or --permits)",
            );
        }
        // The preferred candidate itself keeps its lead.
        if prefer.is_some() && prefer == id {
            prefer = None;
        }
        // Observers see the id before the '/' of the lease's token.
        if let Some(id) = id {
            lock.token = Some(format!("{id}/{}", uuid::Uuid::new_v4().simple()));
        }
    }
    Ok(Some(Opts {
        mode,
        lock,
        grace,
        conflict,
        resource,
        command,
        on_wanted,
        prefer,
    }))
}

/// The grace period: below ttl/3, the renewal period, so that it never
/// starts while renewals are on time.
fn grace(ttl: Duration, asked: Option<Duration>) -> Parsed<Duration> {
    match asked {
        Some(g) if g >= ttl / 3 => usage(format!(
            "--grace {} must be below a third of --ttl {} (the renewal period)",
            args::show(g),
            args::show(ttl)
        )),
        Some(g) => Ok(g),
        None => Ok(GRACE.min(ttl / 4)),
    }
}

pub fn main(a: Args, urls: Vec<String>, mode: Mode) -> i32 {
    let cmd = mode.name();
    let opts = match parse(a, urls, mode) {
        Ok(Some(o)) => o,
        Ok(None) => return crate::help::print(cmd),
        Err(u) => return crate::codes::usage_error(u, cmd),
    };
    let grace = match grace(opts.lock.ttl, opts.grace) {
        Ok(g) => g,
        Err(u) => return crate::codes::usage_error(u, cmd),
    };
    let backend = match Backend::from_urls(&opts.lock.urls) {
        Ok(b) => b,
        Err(e) => return crate::codes::fail(&e.0, e.1),
    };
    if mode == Mode::Elect && !matches!(backend, Backend::Single(_)) {
        let u = crate::args::Usage("elect: one --url (a term is one server's fence)".into());
        return crate::codes::usage_error(u, cmd);
    }
    let signals = match signals::install() {
        Ok(s) => s,
        Err(e) => return crate::codes::fail(&format!("cannot set up signals: {e}"), codes::OSERR),
    };
    child::become_subreaper();
    let sessions = backend.clone();
    let code = run(opts, grace, backend, signals);
    // The session the lock was held in (if any) ends now rather than at its
    // ttl; `exit` runs no destructor that would close it.
    sessions.close_sessions(CLOSE);
    code
}

fn run(opts: Opts, grace: Duration, backend: Backend, signals: signals::Signals) -> i32 {
    let res = &opts.resource;
    let spec = LockSpec {
        watchdog: true,
        on_wanted: opts.on_wanted.clone(),
        ..opts.lock.spec(res)
    };
    let line = match spec.wait {
        Wait::No => None,
        _ => WaitLine::start(backend.clone(), res.clone()),
    };
    let acquired = backend.acquire(&spec);
    if let Some(l) = line {
        l.finish();
    }
    let guard = match acquired {
        Ok(Some(g)) => g,
        Ok(None) => {
            let why = match spec.wait {
                Wait::No => "busy".to_string(),
                Wait::For(d) => format!("still busy after {}", args::show(d)),
                Wait::Forever => "busy".to_string(),
            };
            return crate::codes::fail(&format!("{res} is {why}"), opts.conflict);
        }
        Err(e) => {
            let msg = format!("cannot lock {res}: {}", backend.explain(&e));
            return crate::codes::fail(&msg, codes::of(&e));
        }
    };
    signals.forward();
    if let Some(&sig) = signals.pending().first() {
        let _ = release_within(guard, RELEASE);
        eprintln!("dlock: {} before the command started", signals::name(sig));
        return 128 + sig;
    }
    let mut env = vec![
        ("DLOCK_RESOURCE", Some(res.clone())),
        ("DLOCK_TOKEN", Some(guard.token().to_string())),
        ("DLOCK_FENCE", Some(guard.fence().to_string())),
    ];
    if opts.mode == Mode::Elect {
        env.push(("DLOCK_TERM", Some(guard.fence().to_string())));
    }
    env.extend(backend.server_env());
    // Started first, so that the command never runs without it; no reaper,
    // no command.
    let reaper = match reaper::start() {
        Ok(r) => r,
        Err(e) => {
            let _ = release_within(guard, RELEASE);
            return crate::codes::fail(&format!("cannot start the reaper: {e}"), codes::OSERR);
        }
    };
    let child: Child = match child::spawn(&opts.command, &env, signals.original, reaper.end()) {
        Ok(c) => c,
        Err((e, code)) => {
            reaper.dismiss();
            let _ = release_within(guard, RELEASE);
            let what = match code {
                codes::NOT_FOUND => "command not found".to_string(),
                _ => e.to_string(),
            };
            return crate::codes::fail(
                &format!("{}: {what}", opts.command[0].to_string_lossy()),
                code,
            );
        }
    };
    let handed_over = AtomicBool::new(false);
    let ended = std::thread::scope(|scope| {
        // Dropped (the command ended) stops the handover thread.
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        if let (Some(id), Some(locker)) = (&opts.prefer, backend.locker()) {
            let every = opts.lock.ttl / 3;
            let (guard, handed_over) = (&guard, &handed_over);
            scope.spawn(move || {
                // Tried now, then every renewal period, until the lead
                // ends (handed over, lost) or the command does.
                while !guard.is_lost() {
                    if let Ok(true) = locker.hand_over(guard, id) {
                        handed_over.store(true, Ordering::Relaxed);
                        return;
                    }
                    let timed_out = std::sync::mpsc::RecvTimeoutError::Timeout;
                    if stopped.recv_timeout(every) != Err(timed_out) {
                        return;
                    }
                }
            });
        }
        let ended = child.supervise(res, &guard, grace, &signals, opts.on_wanted.as_deref());
        let _ = stop.send(());
        ended
    });
    reaper.dismiss();
    if handed_over.load(Ordering::Relaxed) {
        // The lead went to the preferred candidate: the command was
        // stopped as for a lost lead, on purpose.
        let how = child::describe(ended.status);
        let id = opts.prefer.as_deref().unwrap_or_default();
        eprintln!("dlock: handed the lead on {res} over to {id} (the command {how})");
        return 0;
    }
    let status = codes::of_wait_status(ended.status);
    // Once the lease ended the command (lost, or renewals failing), a
    // release is not needed; try anyway (it may free the resource sooner),
    // but do not wait long for a server that is not answering.

    let patience = match ended.cut {
        Some(_) => LOST_RELEASE,
        None => RELEASE,
    };
    let released = release_within(guard, patience);
    let how = child::describe(ended.status);
    let release_error = |r: &dlock_client::Result<bool>| match r {
        Err(e) => format!("; release: {}", backend.explain(e)),
        Ok(_) => String::new(),
    };
    // Once the lease decided the end, the status is not the command's own
    // (it is often dlock's own SIGTERM or SIGKILL): 79, so that a script
    // tells it from the command's failure or someone else's signal.
    match (ended.cut, &released) {
        (Some(Cut::Lost), _) | (_, Ok(false)) => {
            eprintln!(
                "dlock: the lease on {res} was lost while the command ran (the command {how}){}",
                release_error(&released)
            );
            codes::LOST
        }
        (Some(Cut::Failing), _) => {
            eprintln!(
                "dlock: renewing {res} failed until the lease was about to end (the command {how}){}",
                release_error(&released)
            );
            codes::LOST
        }
        (None, Ok(_)) => status,
        (None, Err(e)) => {
            // Renewed until the group was gone: the command ran under the
            // lock; the lease ends by itself at its deadline.
            eprintln!(
                "dlock: warning: releasing {res} failed ({}); it expires at its deadline",
                backend.explain(e)
            );
            status
        }
    }
}

/// The longest wait for the final release: the library's own bound (a
/// 2 s reply timeout, retries for 2 s) and some slack; less once the lease
/// is known lost.
const RELEASE: Duration = Duration::from_secs(5);
const LOST_RELEASE: Duration = Duration::from_secs(2);
/// The longest wait for the session's `CLOSE` (one reply).
const CLOSE: Duration = Duration::from_secs(2);

/// Releases on a thread of its own, waiting at most `patience`: a release
/// (or the watchdog it first stops) can hang on a server that accepts
/// connections but does not answer (stopped, wedged), and dlock must
/// still exit. The thread dies with the process.
fn release_within(guard: dlock_client::Guard, patience: Duration) -> dlock_client::Result<bool> {
    let (tx, rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("dlock-release".into())
        .spawn(move || {
            let _ = tx.send(guard.release());
        });
    if let Err(e) = spawned {
        return Err(dlock_client::Error::Unavailable(format!(
            "cannot release: {e}"
        )));
    }
    rx.recv_timeout(patience).unwrap_or_else(|_| {
        Err(dlock_client::Error::Unavailable(format!(
            "no answer within {}",
            args::show(patience)
        )))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(v: &[&str]) -> Parsed<Option<Opts>> {
        parse(Args::new(v.iter().map(OsString::from)), vec![], Mode::Exec)
    }

    #[test]
    fn the_command_starts_after_the_resource() {
        let o = p(&["--ttl", "5s", "res", "ls", "--ttl", "x"])
            .unwrap()
            .unwrap();
        assert_eq!(o.resource, "res");
        assert_eq!(o.command, ["ls", "--ttl", "x"]);
        assert_eq!(o.lock.ttl, Duration::from_secs(5));
        let o = p(&["res", "--no-wait", "--", "sh", "-c", "x"])
            .unwrap()
            .unwrap();
        assert_eq!(o.command, ["sh", "-c", "x"]);
        assert_eq!(o.lock.wait, Wait::No);
        assert!(p(&["res"]).is_err());
        assert!(p(&["--", "ls"]).is_err());
        assert!(p(&["--conflict-exit-code", "256", "r", "ls"]).is_err());
        assert!(p(&["--help"]).unwrap().is_none());
    }

    #[test]
    fn grace_stays_below_a_third_of_the_ttl() {
        let s = Duration::from_secs;
        assert!(grace(s(30), Some(s(10))).is_err());
        assert_eq!(grace(s(30), Some(s(9))).unwrap(), s(9));
        assert_eq!(grace(s(30), None).unwrap(), s(5));
        assert_eq!(grace(s(4), None).unwrap(), s(1));
    }
}
