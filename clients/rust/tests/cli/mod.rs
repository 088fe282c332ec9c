//! The `dlock` binary end to end, against real servers: `exec` (mutual
//! exclusion, exit codes, signals, the lease's end, process groups) and the
//! commands for scripts. Every wait has a deadline, and every process a test
//! starts is killed when the test ends, even when it fails.

use crate::common;

mod elect;
mod errors;
mod exec;
mod guarded;
mod lease;
mod list;
mod metrics;
mod permits;
mod priority;
mod reaper;
mod redlock;
mod resize;
mod scripts;
mod sessions;
mod signals;
mod top;
mod top_live;
mod version;
mod wanted;

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub use common::server::wait_until;
pub use common::{dead_url, holder, Server, SEC};

/// A private directory for one test's files, removed when it ends.
pub struct Dir(PathBuf);

static N: AtomicU64 = AtomicU64::new(0);

impl Dir {
    #[allow(clippy::new_without_default)]
    pub fn new() -> Dir {
        let n = N.fetch_add(1, Ordering::Relaxed);
        let d = std::env::temp_dir().join(format!("dlock-cli-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
    pub fn path(&self, f: &str) -> PathBuf {
        self.0.join(f)
    }
    /// The path as a shell word (the dir has no quotes or spaces).
    pub fn sh(&self, f: &str) -> String {
        self.path(f).display().to_string()
    }
    pub fn exists(&self, f: &str) -> bool {
        self.path(f).exists()
    }
    pub fn read(&self, f: &str) -> String {
        fs::read_to_string(self.path(f))
            .unwrap_or_else(|e| panic!("{f}: {e}"))
            .trim()
            .to_string()
    }
    /// A number the test's shell wrote, once it is there.
    pub fn wait_number(&self, f: &str, within: Duration) -> i64 {
        let mut n = None;
        wait_until(within, f, || {
            n = fs::read_to_string(self.path(f))
                .ok()
                .and_then(|s| s.trim().parse().ok());
            n.is_some()
        });
        n.unwrap()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Makes this test process a subreaper that reaps only its own children:
/// orphans reparented to it stay zombies, as under an init (a container's
/// PID 1) that does not reap. A group whose processes dlock did not reap
/// itself would then never be empty.
fn like_a_lazy_init() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    // SAFETY: a plain prctl on this process.
    ONCE.call_once(|| unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0);
    });
}

/// `dlock` with `DLOCK_URL` set to `url` and nothing else inherited that
/// could change it.
pub fn dlock(url: &str) -> Command {
    like_a_lazy_init();
    let mut c = Command::new(env!("CARGO_BIN_EXE_dlock"));
    c.env("DLOCK_URL", url).stdin(Stdio::null());
    c
}

/// A running `dlock`, its output in files. Dropping it kills it and the
/// process group its command recorded in `group` (the shell's `$$`).
pub struct Dlock {
    child: Child,
    out: PathBuf,
    err: PathBuf,
    group: Option<PathBuf>,
    code: Option<i32>,
}

impl Dlock {
    pub fn spawn(cmd: &mut Command, dir: &Dir, name: &str) -> Dlock {
        let out = dir.path(&format!("{name}.stdout"));
        let err = dir.path(&format!("{name}.stderr"));
        // A test run started in the background by a shell (`cmd &`) has
        // SIGINT and SIGQUIT ignored, and a shell cannot trap a signal it
        // was started with ignored: the signal tests' commands must start
        // with every signal at its default, as from a terminal.
        // SAFETY: only async-signal-safe calls (signal(2)) between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                for sig in [libc::SIGHUP, libc::SIGINT, libc::SIGQUIT, libc::SIGTERM] {
                    libc::signal(sig, libc::SIG_DFL);
                }
                Ok(())
            });
        }
        let child = cmd
            .stdout(fs::File::create(&out).unwrap())
            .stderr(fs::File::create(&err).unwrap())
            .spawn()
            .expect("spawn dlock");
        Dlock {
            child,
            out,
            err,
            group: None,
            code: None,
        }
    }

    /// The file where the command writes its group's id (`echo $$ > f`),
    /// for the cleanup.
    pub fn group_file(mut self, f: PathBuf) -> Dlock {
        self.group = Some(f);
        self
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// The exit code (128+N when killed by signal N), or None if still
    /// running.
    pub fn try_code(&mut self) -> Option<i32> {
        if self.code.is_none() {
            if let Some(s) = self.child.try_wait().unwrap() {
                use std::os::unix::process::ExitStatusExt;
                self.code = Some(s.code().unwrap_or_else(|| 128 + s.signal().unwrap()));
            }
        }
        self.code
    }

    /// Waits for the exit code, at most `within`.
    pub fn wait(&mut self, within: Duration) -> i32 {
        let end = Instant::now() + within;
        loop {
            if let Some(c) = self.try_code() {
                return c;
            }
            assert!(
                Instant::now() < end,
                "dlock still running after {within:?}; stderr:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn stdout(&self) -> String {
        fs::read_to_string(&self.out).unwrap_or_default()
    }
    pub fn stderr(&self) -> String {
        fs::read_to_string(&self.err).unwrap_or_default()
    }
}

impl Drop for Dlock {
    fn drop(&mut self) {
        if self.try_code().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if let Some(pgid) = self
            .group
            .as_ref()
            .and_then(|f| fs::read_to_string(f).ok())
            .and_then(|s| s.trim().parse::<i32>().ok())
        {
            kill(-pgid, libc::SIGKILL);
        }
    }
}

/// A command for run `n` that records, in `dir`, when it started and ended
/// and the fence it was given, holding the lock for `hold` (a sleep
/// argument, e.g. "0.3").
pub fn timed_script(dir: &Dir, n: usize, hold: &str) -> String {
    format!(
        "date +%s%N > {d}.start; echo $DLOCK_FENCE > {d}.fence; sleep {hold}; date +%s%N > {d}.end",
        d = dir.sh(&n.to_string())
    )
}

/// What runs `0..runs` of [`timed_script`] recorded: (start, end, fence),
/// in the order they started.
pub fn spans(dir: &Dir, runs: usize) -> Vec<(i64, i64, u64)> {
    let mut spans: Vec<(i64, i64, u64)> = (0..runs)
        .map(|n| {
            (
                dir.read(&format!("{n}.start")).parse().unwrap(),
                dir.read(&format!("{n}.end")).parse().unwrap(),
                dir.read(&format!("{n}.fence")).parse().unwrap(),
            )
        })
        .collect();
    spans.sort();
    spans
}

/// Runs dlock to the end (at most `within`): (code, stdout, stderr).
pub fn run(cmd: &mut Command, dir: &Dir, within: Duration) -> (i32, String, String) {
    let name = format!("run{}", N.fetch_add(1, Ordering::Relaxed));
    let mut d = Dlock::spawn(cmd, dir, &name);
    let code = d.wait(within);
    (code, d.stdout(), d.stderr())
}

pub fn kill(pid: i32, sig: i32) -> bool {
    // SAFETY: a plain kill(2).
    unsafe { libc::kill(pid, sig) == 0 }
}

/// True while a process with this pid exists and is not a zombie (a
/// zombie reparented to an init that does not reap is dead enough).
pub fn alive(pid: i32) -> bool {
    if !kill(pid, 0) {
        return false;
    }
    let alive = match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // "pid (comm) S ...": the state follows the last ')'.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => false,
    };
    if !alive {
        // An orphan this process adopted (see `like_a_lazy_init`): reaped
        // here, so that no zombie outlives the tests.
        let mut status = 0;
        // SAFETY: waitpid on one pid, without blocking.
        unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    }
    alive
}

/// A server paused (SIGSTOP) until this is dropped: it runs again
/// (SIGCONT) even when the test fails, before the server itself is dropped.
pub struct Paused<'a>(&'a Server);

impl<'a> Paused<'a> {
    pub fn new(server: &'a Server) -> Paused<'a> {
        server.stop();
        Paused(server)
    }
}

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        self.0.cont();
    }
}

/// `DLOCK.ACQUIRE res token ttl_ms EXTRA...`: the fence, None when refused.
pub fn acquire(
    c: &mut redis::Connection,
    res: &[u8],
    token: &[u8],
    ttl_ms: u64,
    extra: &[&str],
) -> Option<u64> {
    redis::cmd("DLOCK.ACQUIRE")
        .arg(res)
        .arg(token)
        .arg(ttl_ms)
        .arg(extra)
        .query(c)
        .unwrap()
}

/// Nanoseconds since the epoch, as `date +%s%N` writes them.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}
