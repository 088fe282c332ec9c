//! Integration-test harness: throwaway `redis-server` processes with the
//! dlock module loaded. The root crate's test binary (`tests/main.rs`)
//! declares it once for every suite; the client's tests, the history
//! checker and the bench include it by `#[path]`. Shared helpers: `lock` (lock commands, DLOCK.INFO, errors,
//! waiting) and `dump` (DUMP payloads, CRC-64).
//!
//! Design notes:
//! - Each server gets an OS-chosen port and a private temp dir, so any number
//!   of tests (and test binaries) can run in parallel.
//! - Startup is bounded (10 s) and failures panic with the server's own log,
//!   so a module that fails to load fails the test loudly instead of hanging.
//! - `Drop` SIGKILLs the process, so nothing outlives a panicking test.
//! - `DLOCK_VALGRIND=1` runs every server under valgrind's memcheck, with
//!   longer deadlines; `Drop` then stops it gracefully and fails on findings
//!   (see `valgrind.rs` and `make check-memory`).
#![allow(dead_code)]

pub mod aof;
pub mod cluster;
pub mod dump;
pub mod lock;
pub mod repl_stream;
mod valgrind;
pub mod waiter;
use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const START_DEADLINE: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(20);
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// The servers' `dbfilename` (Redis's default, set explicitly).
pub const RDB_NAME: &str = "dump.rdb";

/// The server under test: `DLOCK_SERVER` (a path or a name on `PATH`), else
/// `redis-server`. `make test SERVER=...` sets it
/// (docs/compatibility.md#testing-another-build).
pub fn server_binary() -> std::ffi::OsString {
    std::env::var_os("DLOCK_SERVER").unwrap_or_else(|| "redis-server".into())
}

/// The matching CLI: `DLOCK_CLI`, else `redis-cli`.
pub fn cli_binary() -> std::ffi::OsString {
    std::env::var_os("DLOCK_CLI").unwrap_or_else(|| "redis-cli".into())
}

/// The matching benchmark tool: `DLOCK_BENCHMARK`, else `redis-benchmark`.
pub fn benchmark_binary() -> std::ffi::OsString {
    std::env::var_os("DLOCK_BENCHMARK").unwrap_or_else(|| "redis-benchmark".into())
}

/// The module under test. `DLOCK_MODULE` overrides it, which is handy for
/// testing another build (debug, sanitizer, an older release).
pub fn module_path() -> PathBuf {
    let path = match std::env::var_os("DLOCK_MODULE") {
        Some(p) => PathBuf::from(p),
        None => workspace_root().join("target/release/libdlock.so"),
    };
    assert!(
        path.exists(),
        "module {} not found: run `make build` first (`make test` does it for you)",
        path.display()
    );
    path
}

/// The repository root: this harness also serves the client crate's tests
/// (`clients/rust/tests/`) and the history checker (`history/`), whose
/// manifest directories are below it: the nearest folder up with the
/// workspace's `Cargo.lock`.
pub fn workspace_root() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    dir.ancestors()
        .find(|d| d.join("Cargo.lock").is_file())
        .unwrap_or(dir)
        .to_path_buf()
}

/// The commit checked out now, when this is a git checkout of the project
/// and the build was not told its commit (`DLOCK_GIT_SHA`): a build that
/// kept an old commit after HEAD moved fails here.
pub fn checked_out_commit() -> Option<String> {
    if std::env::var_os("DLOCK_GIT_SHA").is_some() {
        return None;
    }
    let root = workspace_root();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(args)
            .current_dir(&root)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let top = std::path::PathBuf::from(git(&["rev-parse", "--show-toplevel"])?);
    (top.canonicalize().ok()? == root.canonicalize().ok()?)
        .then(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .flatten()
}

/// Polls `f` every 20 ms until it returns true; panics with `what` on timeout.
pub fn wait_until(deadline: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + deadline;
    while !f() {
        assert!(
            Instant::now() < end,
            "timed out after {deadline:?} waiting for {what}"
        );
        sleep(POLL);
    }
}

/// One `field:value` line of `INFO <section>`, or None if absent/unreachable.
pub fn info_field(conn: &mut redis::Connection, section: &str, field: &str) -> Option<String> {
    let info: String = redis::cmd("INFO").arg(section).query(conn).ok()?;
    let prefix = format!("{field}:");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix).map(|v| v.trim().to_string()))
}

/// The server's `used_memory` after `MEMORY PURGE` (what a memory-flat
/// test compares).
pub fn used_memory_purged(c: &mut redis::Connection) -> i64 {
    let _: redis::Value = redis::cmd("MEMORY").arg("PURGE").query(c).unwrap();
    info_field(c, "memory", "used_memory")
        .expect("INFO memory has no used_memory")
        .parse()
        .unwrap()
}

/// Wall clock in microseconds since the Unix epoch (fences are near it).
pub fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}

/// Wall clock in milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// PING must answer PONG.
pub fn ping(c: &mut redis::Connection) {
    let p: String = redis::cmd("PING").query(c).expect("PING");
    assert_eq!(p, "PONG");
}

pub fn dbsize(c: &mut redis::Connection) -> i64 {
    redis::cmd("DBSIZE").query(c).expect("DBSIZE")
}

/// Connects with `timeout` bounding the whole handshake, then sets it as the
/// read/write timeout. Needed because redis-rs 0.27 bounds only the TCP
/// connect: its setup round trip (CLIENT SETINFO, HELLO 3) has no read
/// timeout and blocks forever on a SIGSTOPped or wedged server. On timeout
/// the helper thread leaks until the server dies and closes the socket.
pub fn connect_within(url: &str, timeout: Duration) -> redis::RedisResult<redis::Connection> {
    let client = redis::Client::open(url)?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(client.get_connection_with_timeout(timeout));
    });
    let c = rx.recv_timeout(timeout).map_err(|_| {
        redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "connection handshake timed out",
        ))
    })??;
    c.set_read_timeout(Some(timeout))?;
    c.set_write_timeout(Some(timeout))?;
    Ok(c)
}

/// Background AOF rewrite, waited for (bounded) and checked.
pub fn rewrite_aof(c: &mut redis::Connection) {
    let _: redis::Value = redis::cmd("BGREWRITEAOF").query(c).unwrap();
    wait_until(Duration::from_secs(20), "AOF rewrite to finish", || {
        info_field(c, "persistence", "aof_rewrite_in_progress").as_deref() == Some("0")
            && info_field(c, "persistence", "aof_rewrite_scheduled").as_deref() == Some("0")
    });
    assert_eq!(
        info_field(c, "persistence", "aof_last_bgrewrite_status").as_deref(),
        Some("ok")
    );
}

/// The next lock event on a connection from `Server::lock_events`; an error
/// when none comes within the connection's read timeout.
pub fn next_lock_event(sub: &mut redis::Connection) -> redis::RedisResult<String> {
    match sub.recv_response()? {
        redis::Value::Array(parts) | redis::Value::Push { data: parts, .. } => match parts.last() {
            Some(redis::Value::BulkString(b)) => Ok(String::from_utf8_lossy(b).into_owned()),
            other => panic!("unexpected message part {other:?}"),
        },
        other => panic!("unexpected message {other:?}"),
    }
}

/// Options for a server; finish with `.start()`.
#[derive(Clone, Debug, Default)]
pub struct ServerBuilder {
    extra: Vec<String>,
    /// Start as a replica of this port (`--replicaof`).
    replica_of_port: Option<u16>,
    module_args: Vec<String>,
    without_module: bool,
    /// Another build of the module than `module_path()` (e.g. a release).
    module: Option<PathBuf>,
    rdb: Option<PathBuf>,
    data_from: Option<PathBuf>,
    /// Environment variables for the server process.
    env: Vec<(String, String)>,
    /// A config file, read before the arguments (`CONFIG REWRITE` writes it).
    config_file: Option<PathBuf>,
    /// Another server binary than `server_binary()`.
    binary: Option<std::ffi::OsString>,
}

impl ServerBuilder {
    /// Extra redis-server argument, appended after the defaults. For config
    /// directives redis-server keeps the last occurrence, so this overrides
    /// defaults (e.g. `.arg("--appendonly").arg("yes")`).
    pub fn arg(mut self, a: impl Into<String>) -> Self {
        self.extra.push(a.into());
        self
    }
    /// AOF persistence with the given `appendfsync` policy.
    pub fn aof(self, fsync: &str) -> Self {
        self.arg("--appendonly")
            .arg("yes")
            .arg("--appendfsync")
            .arg(fsync)
    }
    /// Argument passed to the module's OnLoad. Must not start with `--`, or
    /// redis-server would parse it as a new directive.
    pub fn module_arg(mut self, a: impl Into<String>) -> Self {
        self.module_args.push(a.into());
        self
    }
    /// Load the module at `path` instead of the build under test: for
    /// servers of another release next to this build's (tests/durability/rollback/).
    pub fn module(mut self, path: impl Into<PathBuf>) -> Self {
        self.module = Some(path.into());
        self
    }
    /// An environment variable for the server process (e.g. a preloaded
    /// library's settings).
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }
    /// Start from the config file at `path` (read first, then the
    /// arguments): the file `CONFIG REWRITE` writes, read again by
    /// `restart`.
    pub fn config_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.config_file = Some(path.into());
        self
    }
    /// Run this server binary instead of `server_binary()` (e.g. one
    /// built with TLS, for the client's TLS suite).
    pub fn binary(mut self, path: impl Into<std::ffi::OsString>) -> Self {
        self.binary = Some(path.into());
        self
    }
    /// Plain redis-server, for testing the harness itself.
    pub fn without_module(mut self) -> Self {
        self.without_module = true;
        self
    }
    /// Start on a copy of the RDB file at `path`: it is copied into the
    /// server's fresh dir as its `dbfilename` (`dump.rdb`) before the first
    /// start, so the server loads it at startup (e.g. a fixture written by
    /// an older build, tests/fixtures/). The original is never written.
    pub fn with_rdb(mut self, path: impl Into<PathBuf>) -> Self {
        self.rdb = Some(path.into());
        self
    }
    /// Start on a copy of the data files in `dir` (another server's: its
    /// `dump.rdb` and its `appendonlydir/`, whichever exist), copied before
    /// the first start; the originals are never written. Not the module's
    /// state file: the copy starts as a first run on that data.
    pub fn with_data_from(mut self, dir: impl Into<PathBuf>) -> Self {
        self.data_from = Some(dir.into());
        self
    }
    /// Start as a replica of `master` (`--replicaof`); see `wait_for_sync`.
    pub fn replica_of(self, master: &Server) -> Self {
        self.arg("--replicaof")
            .arg("127.0.0.1")
            .arg(master.port.to_string())
    }
    pub fn start(self) -> Server {
        Server::launch(self)
    }
    /// `start` that returns why the server did not come up (its logs)
    /// instead of panicking: for servers that must refuse to start.
    pub fn try_start(self) -> Result<Server, String> {
        Server::try_launch(self)
    }
}

pub struct Server {
    opts: ServerBuilder,
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

fn unique_dir() -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("dlock-test-{}-{n}-{nanos}", std::process::id()));
    fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

/// A free port from the OS. It is released before redis binds it, so another
/// process can grab it in between; `launch` retries on "Address already in
/// use". Capped at 55535 so that port+10000 (cluster bus) is still valid.
fn free_port() -> u16 {
    loop {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = l.local_addr().unwrap().port();
        if port <= 55535 {
            return port;
        }
    }
}

/// `dump.rdb` and `appendonlydir/` (flat) of `from`, into `to`.
fn copy_data(from: &Path, to: &Path) -> Result<(), String> {
    let copy = |a: &Path, b: &Path| {
        fs::copy(a, b)
            .map(drop)
            .map_err(|e| format!("copy {} to {}: {e}", a.display(), b.display()))
    };
    if from.join(RDB_NAME).exists() {
        copy(&from.join(RDB_NAME), &to.join(RDB_NAME))?;
    }
    let aof = from.join("appendonlydir");
    if aof.is_dir() {
        fs::create_dir_all(to.join("appendonlydir")).map_err(|e| e.to_string())?;
        for f in fs::read_dir(&aof).map_err(|e| e.to_string())? {
            let f = f.map_err(|e| e.to_string())?.path();
            copy(&f, &to.join("appendonlydir").join(f.file_name().unwrap()))?;
        }
    }
    Ok(())
}

impl Server {
    /// A server with the module loaded and default options.
    pub fn start() -> Server {
        ServerBuilder::default().start()
    }
    pub fn builder() -> ServerBuilder {
        ServerBuilder::default()
    }

    fn launch(opts: ServerBuilder) -> Server {
        Server::try_launch(opts).unwrap_or_else(|e| panic!("{e}"))
    }

    fn try_launch(opts: ServerBuilder) -> Result<Server, String> {
        let mut s = Server {
            opts,
            port: 0,
            dir: unique_dir(),
            child: None,
        };
        if let Some(rdb) = &s.opts.rdb {
            fs::copy(rdb, s.dir.join(RDB_NAME))
                .map_err(|e| format!("copy {} into {}: {e}", rdb.display(), s.dir.display()))?;
        }
        if let Some(from) = &s.opts.data_from {
            copy_data(from, &s.dir)?;
        }
        for attempt in 1..=5 {
            s.port = free_port();
            match s.spawn_and_wait() {
                Ok(()) => return Ok(s),
                Err(e) if attempt < 5 && e.contains("Address already in use") => continue,
                // Dropping `s` kills the process and removes the dir.
                Err(e) => return Err(e),
            }
        }
        unreachable!()
    }

    fn args(&self) -> Vec<String> {
        let dir = self.dir.display().to_string();
        let mut a: Vec<String> = Vec::new();
        if let Some(file) = &self.opts.config_file {
            a.push(file.display().to_string());
        }
        a.extend(["--port".into(), self.port.to_string()]);
        for s in [
            "--bind",
            "127.0.0.1",
            "--dir",
            &dir,
            "--save",
            "",
            "--appendonly",
            "no",
        ] {
            a.push(s.into());
        }
        a.push("--dbfilename".into());
        a.push(RDB_NAME.into());
        a.push("--logfile".into());
        a.push(format!("{dir}/redis.log"));
        for s in ["--daemonize", "no", "--enable-debug-command", "yes"] {
            a.push(s.into());
        }
        // Redis 7 defaults to diskless sync and waits 5 s for more replicas
        // before each full sync; tests want replicas in sync at once.
        a.push("--repl-diskless-sync-delay".into());
        a.push("0".into());
        if !self.opts.without_module {
            a.push("--loadmodule".into());
            let module = self.opts.module.clone().unwrap_or_else(module_path);
            a.push(module.display().to_string());
            a.extend(self.opts.module_args.iter().cloned());
        }
        if let Some(port) = self.opts.replica_of_port {
            a.extend(["--replicaof".into(), "127.0.0.1".into(), port.to_string()]);
        }
        a.extend(self.opts.extra.iter().cloned());
        a
    }

    /// Spawns redis-server and waits until it answers PING and has finished
    /// loading its RDB/AOF. On failure returns a message including the logs.
    fn spawn_and_wait(&mut self) -> Result<(), String> {
        self.spawn()?;
        self.wait_started()
    }

    fn spawn(&mut self) -> Result<(), String> {
        // Errors before the logfile is opened (bad arguments) go to stderr.
        let out = fs::File::create(self.dir.join("stdout.log")).unwrap();
        let binary = self.opts.binary.clone().unwrap_or_else(server_binary);
        let child = valgrind::command(&self.dir, &binary)
            .args(self.args())
            .envs(self.opts.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .map_err(|e| format!("cannot spawn {}: {e}", binary.to_string_lossy()))?;
        self.child = Some(child);
        Ok(())
    }

    fn wait_started(&mut self) -> Result<(), String> {
        let deadline = valgrind::scale(START_DEADLINE);
        let end = Instant::now() + deadline;
        loop {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                self.child = None;
                return Err(self.failure(&format!("redis-server exited ({status})")));
            }
            if self.ready() {
                return Ok(());
            }
            if Instant::now() >= end {
                self.kill9();
                return Err(self.failure(&format!("redis-server not ready after {deadline:?}")));
            }
            sleep(POLL);
        }
    }

    fn ready(&self) -> bool {
        let probe = if valgrind::enabled() { 10 } else { 1 };
        let Ok(mut c) = connect_within(&self.url(), Duration::from_secs(probe)) else {
            return false;
        };
        let pong: Result<String, _> = redis::cmd("PING").query(&mut c);
        pong.as_deref() == Ok("PONG")
            && info_field(&mut c, "persistence", "loading").as_deref() == Some("0")
    }

    fn failure(&self, what: &str) -> String {
        let stdout = fs::read_to_string(self.dir.join("stdout.log")).unwrap_or_default();
        format!(
            "{what}; port {}, dir {}\n--- redis.log ---\n{}\n--- stdout/stderr ---\n{stdout}",
            self.port,
            self.dir.display(),
            self.log()
        )
    }

    pub fn port(&self) -> u16 {
        self.port
    }
    pub fn dir(&self) -> &Path {
        &self.dir
    }
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("server is not running").id() as i32
    }
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }

    fn connect(&self, url: &str) -> redis::Connection {
        connect_within(url, valgrind::scale(IO_TIMEOUT))
            .unwrap_or_else(|e| panic!("connect to {url}: {e}"))
    }
    /// RESP2 connection with 10 s timeouts, so a wedged server fails the test.
    pub fn conn(&self) -> redis::Connection {
        self.connect(&self.url())
    }
    /// Turns lock events (class `d`) on and returns a connection subscribed
    /// to `__keyspace@0__:<key>`, reading with `timeout`.
    pub fn lock_events(&self, key: &str, timeout: Duration) -> redis::Connection {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("notify-keyspace-events")
            .arg("Kd")
            .query(&mut self.conn())
            .unwrap();
        let mut sub = self.conn();
        sub.set_read_timeout(Some(timeout)).unwrap();
        let _: () = redis::cmd("SUBSCRIBE")
            .arg(format!("__keyspace@0__:{key}"))
            .query(&mut sub)
            .unwrap();
        sub
    }
    /// RESP3 connection (the client sends HELLO 3 on connect).
    pub fn conn_resp3(&self) -> redis::Connection {
        self.connect(&format!("{}?protocol=resp3", self.url()))
    }

    fn signal(&self, sig: libc::c_int) {
        // SAFETY: plain kill(2) on our own child's pid.
        let rc = unsafe { libc::kill(self.pid(), sig) };
        assert_eq!(rc, 0, "kill({}, {sig}) failed", self.pid());
    }
    /// Crash: SIGKILL, keeping the dir (and its RDB/AOF) for `restart`.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
    /// kill -9, start again on the same data, and connect: a crash and the
    /// restart after it.
    pub fn crash_and_restart(&mut self) -> redis::Connection {
        self.kill9();
        self.restart();
        self.conn()
    }
    /// Graceful stop via SIGTERM. Note: redis 7 waits up to `shutdown-timeout`
    /// (default 10 s) for lagging replicas before exiting.
    pub fn shutdown(&mut self) {
        if let Err(e) = self.terminate() {
            panic!("{e}");
        }
    }
    /// `shutdown` without the panic: SIGTERM, wait (10 s, or 60 s under
    /// valgrind), then SIGKILL and an error if it did not exit.
    fn terminate(&mut self) -> Result<(), String> {
        let Some(mut c) = self.child.take() else {
            return Ok(());
        };
        // SIGCONT first: a SIGSTOPped server would never handle SIGTERM.
        unsafe {
            libc::kill(c.id() as i32, libc::SIGCONT);
            libc::kill(c.id() as i32, libc::SIGTERM);
        }
        let wait = valgrind::scale(Duration::from_secs(10));
        let end = Instant::now() + wait;
        while c.try_wait().unwrap().is_none() {
            if Instant::now() >= end {
                let _ = c.kill();
                let _ = c.wait();
                return Err(self.failure(&format!("redis-server ignored SIGTERM for {wait:?}")));
            }
            sleep(POLL);
        }
        Ok(())
    }
    /// Starts again on the same port, dir and args (a running server is shut
    /// down gracefully first; call `kill9` before for crash semantics).
    pub fn restart(&mut self) {
        self.shutdown();
        // redis sets SO_REUSEADDR, but someone else may have taken the port.
        if let Err(e) = self.spawn_and_wait() {
            panic!("restart failed: {e}");
        }
    }
    /// `restart` without waiting for the server to answer or to finish
    /// loading: for tests that race the startup (clients retrying through
    /// `-LOADING`). Follow with `wait_ready`.
    pub fn respawn(&mut self) {
        self.shutdown();
        if let Err(e) = self.spawn() {
            panic!("respawn failed: {e}");
        }
    }
    /// Waits (bounded) until a `respawn`ed server answers and has loaded
    /// its data; panics with the logs if it does not.
    pub fn wait_ready(&mut self) {
        if let Err(e) = self.wait_started() {
            panic!("server not ready: {e}");
        }
    }
    /// Freeze the process (SIGSTOP): simulates a GC-like pause or partition.
    pub fn stop(&self) {
        self.signal(libc::SIGSTOP);
    }
    pub fn cont(&self) {
        self.signal(libc::SIGCONT);
    }

    /// Starts from now on (`restart`, `respawn`) come up as a replica of
    /// `127.0.0.1:port`, or as a master with `None`: a failed-over master
    /// restarts as a replica, never for a moment a master with its old data.
    pub fn start_as_replica_of(&mut self, port: Option<u16>) {
        self.opts.replica_of_port = port;
    }
    /// Make this running server a replica of `master`.
    pub fn replica_of(&self, master: &Server) {
        let _: () = redis::cmd("REPLICAOF")
            .arg("127.0.0.1")
            .arg(master.port)
            .query(&mut self.conn())
            .expect("REPLICAOF");
    }
    /// Waits until the initial sync with the master has completed.
    pub fn wait_for_sync(&self, deadline: Duration) {
        let mut c = self.conn();
        wait_until(deadline, "replica sync", || {
            info_field(&mut c, "replication", "master_link_status").as_deref() == Some("up")
                && info_field(&mut c, "replication", "master_sync_in_progress").as_deref()
                    == Some("0")
        });
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if valgrind::enabled() {
            // Graceful, so that valgrind writes the leak summary.
            let stopped = self.terminate();
            let mut findings = valgrind::findings(&self.dir);
            if let Err(e) = stopped {
                findings.push(format!("server did not stop under valgrind: {e}"));
            }
            if let Some(msg) = valgrind::report(&self.dir, &findings) {
                // Keep the dir (with the full logs); never panic while
                // unwinding, which would abort the test binary.
                if std::thread::panicking() {
                    eprintln!("{msg}");
                } else {
                    panic!("{msg}");
                }
                return;
            }
        }
        self.kill9();
        if std::env::var_os("DLOCK_KEEP_TMP").is_some() {
            eprintln!("DLOCK_KEEP_TMP: kept {}", self.dir.display());
        } else {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// Runs `cmds` in one MULTI/EXEC; EXEC's replies, errors included (`query`
/// would turn an error inside EXEC's reply into an `Err`).
pub fn transaction(c: &mut redis::Connection, cmds: &[redis::Cmd]) -> Vec<redis::Value> {
    use redis::ConnectionLike;
    let _: () = redis::cmd("MULTI").query(c).unwrap();
    for q in cmds {
        let r: String = q.query(c).unwrap();
        assert_eq!(r, "QUEUED");
    }
    match c
        .req_packed_command(&redis::cmd("EXEC").get_packed_command())
        .unwrap()
    {
        redis::Value::Array(v) => v,
        other => panic!("EXEC answered {other:?}"),
    }
}
