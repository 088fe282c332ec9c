//! `DLOCK.GUARD` with real processes and real faults: a holder process
//! frozen (SIGSTOP) past its lease while another takes over and writes, a
//! failover to a promoted replica, and a lock moved to another node by
//! resharding in Redis Cluster. In each, a stale holder's guarded writes
//! are refused and the data shows only a live holder's writes; replicas and
//! the AOF receive the inner writes, never the guard.
//!
//! The holder is a `redis-cli` process fed on its stdin: its commands can be
//! queued while it is frozen, so they are in flight when it resumes, as a
//! paused client's writes are.
//!
//! - `paused.rs` — the paused holder, every proof form (TOKEN, FENCE), single
//!   writes and BATCH;
//! - `failover.rs` — the holder's master killed, its replica promoted;
//! - `resharding.rs` — MOVED, ASK, the lock migrated with its slot, CROSSSLOT.
use crate::common;

mod failover;
mod paused;
mod resharding;

use common::*;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Bound on any one reply or state change.
const DEADLINE: Duration = Duration::from_secs(15);

// ---------------------------------------------------------------- commands

/// `DLOCK.GUARD res TOKEN tok | FENCE n` as arguments; append the write.
pub fn guard(res: &str, proof: &Proof) -> Vec<String> {
    let mut a = vec!["DLOCK.GUARD".to_string(), res.to_string()];
    a.extend(proof.args());
    a
}

/// The proof a guarded write carries.
#[derive(Clone, Debug)]
pub enum Proof {
    Token(String),
    Fence(i64),
}

impl Proof {
    fn args(&self) -> [String; 2] {
        match self {
            Proof::Token(t) => ["TOKEN".into(), t.clone()],
            Proof::Fence(f) => ["FENCE".into(), f.to_string()],
        }
    }
}

/// `DLOCK.GUARD res <proof> write...`.
pub fn guarded(res: &str, proof: &Proof, write: &[&str]) -> Vec<String> {
    let mut a = guard(res, proof);
    a.extend(write.iter().map(|s| s.to_string()));
    a
}

/// `DLOCK.GUARD res <proof> BATCH n argc cmd args... ...`.
pub fn guarded_batch(res: &str, proof: &Proof, writes: &[&[&str]]) -> Vec<String> {
    let mut a = guard(res, proof);
    a.push("BATCH".into());
    a.push(writes.len().to_string());
    for w in writes {
        a.push(w.len().to_string());
        a.extend(w.iter().map(|s| s.to_string()));
    }
    a
}

/// `DLOCK.CHECK res <proof>`: 1 for a live hold, else 0.
pub fn check(c: &mut impl redis::ConnectionLike, res: &str, proof: &Proof) -> i64 {
    redis::cmd("DLOCK.CHECK")
        .arg(res)
        .arg(&proof.args())
        .query(c)
        .unwrap_or_else(|e| panic!("DLOCK.CHECK {res} {proof:?}: {e}"))
}

/// `args` as a command for a redis-rs connection.
pub fn cmd(args: &[String]) -> redis::Cmd {
    let mut c = redis::cmd(&args[0]);
    c.arg(&args[1..]);
    c
}

/// `LRANGE key 0 -1`.
pub fn list(c: &mut impl redis::ConnectionLike, key: &str) -> Vec<String> {
    redis::cmd("LRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .query(c)
        .expect("LRANGE")
}

/// `GET key`.
pub fn get(c: &mut impl redis::ConnectionLike, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(c).expect("GET")
}

/// `DLOCK.ACQUIRE res tok 60000 [options]` retried until granted: while an
/// earlier holder's lease runs (nil) or a promotion quarantine refuses grants.
pub fn grant_when_free(c: &mut redis::Connection, res: &str, tok: &str, options: &[&str]) -> i64 {
    let end = Instant::now() + DEADLINE;
    loop {
        let r = redis::cmd("DLOCK.ACQUIRE")
            .arg(res)
            .arg(tok)
            .arg(60_000)
            .arg(options)
            .query(c);
        match r {
            Ok(Some(f)) => return f,
            Ok(None) => {}
            Err(e) if e.code() == Some("QUARANTINE") => {}
            Err(e) => panic!("DLOCK.ACQUIRE {res} {tok}: {e}"),
        }
        assert!(
            Instant::now() < end,
            "{res} not granted to {tok} within {DEADLINE:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

// ---------------------------------------------------------------- a client process

/// A `redis-cli` process (`--no-raw`: typed replies, one reply item a line)
/// reading commands from a pipe: a client in a process of its own, which
/// can be frozen with SIGSTOP while its next commands wait in the pipe.
pub struct CliProcess {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    markers: u64,
}

impl CliProcess {
    pub fn spawn(server: &Server) -> CliProcess {
        let mut child = Command::new(cli_binary())
            .args(["--no-raw", "-h", "127.0.0.1", "-p"])
            .arg(server.port().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-cli");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        // A thread reads the replies, so every read has a deadline.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        CliProcess {
            child,
            stdin,
            lines,
            markers: 0,
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Writes `args` (no spaces or quotes in them) to the process, followed
    /// by an `ECHO` of a marker that ends its replies; does not wait.
    pub fn submit(&mut self, args: &[String]) -> u64 {
        for a in args {
            assert!(
                !a.is_empty() && !a.contains([' ', '"', '\'', '\n']),
                "argument {a:?} would be split"
            );
        }
        self.submit_lines(&[args.join(" ")])
    }

    /// Writes `lines` (commands as redis-cli reads them, quotes and all)
    /// and then the marker; the replies of all of them end at the marker.
    /// For a `MULTI` ... `EXEC` block, which would queue a marker inside it.
    pub fn submit_lines(&mut self, lines: &[String]) -> u64 {
        self.markers += 1;
        let mut text = String::new();
        for l in lines {
            assert!(!l.contains('\n'), "{l:?} is more than one line");
            text.push_str(l);
            text.push('\n');
        }
        text.push_str(&format!("ECHO cli-marker-{}\n", self.markers));
        self.stdin
            .write_all(text.as_bytes())
            .and_then(|()| self.stdin.flush())
            .expect("write to redis-cli");
        self.markers
    }

    /// The reply lines of the command submitted with `marker` (the earlier
    /// ones' must have been read).
    pub fn replies(&mut self, marker: u64) -> Vec<String> {
        let end = format!("\"cli-marker-{marker}\"");
        let deadline = Instant::now() + DEADLINE;
        let mut out = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l == end => return out,
                // redis-cli's note after a command that took over 0.5 s (a
                // loaded machine), not a reply.
                Ok(l) if is_elapsed_note(&l) => {}
                Ok(l) => out.push(l),
                Err(e) => panic!("redis-cli: no reply to command {marker} ({e}); so far {out:?}"),
            }
        }
    }

    /// Runs `args` and returns its reply lines.
    pub fn run(&mut self, args: &[String]) -> Vec<String> {
        let m = self.submit(args);
        self.replies(m)
    }

    /// Runs a command whose reply is one line.
    pub fn run1(&mut self, args: &[String]) -> String {
        let mut r = self.run(args);
        assert_eq!(r.len(), 1, "{args:?}: one reply line expected, got {r:?}");
        r.remove(0)
    }

    /// SIGSTOP, and waits until the kernel shows the process stopped.
    pub fn stop(&self) {
        self.signal(libc::SIGSTOP);
        let end = Instant::now() + DEADLINE;
        while self.state() != Some('T') {
            assert!(
                Instant::now() < end,
                "redis-cli {} never stopped",
                self.pid()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    pub fn cont(&self) {
        self.signal(libc::SIGCONT);
    }

    fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) on our own, not yet reaped, child.
        let rc = unsafe { libc::kill(self.pid(), sig) };
        assert_eq!(rc, 0, "kill({}, {sig})", self.pid());
    }

    /// The state letter of /proc/<pid>/stat (R, S, T, ...).
    fn state(&self) -> Option<char> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).ok()?;
        // `pid (comm) S ...`: the state follows the last ')'.
        stat.rsplit_once(')')?.1.trim_start().chars().next()
    }
}

impl Drop for CliProcess {
    fn drop(&mut self) {
        self.cont();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------- MONITOR

/// A `MONITOR` connection: the commands a server executes, as its lines.
pub struct Monitor {
    r: BufReader<TcpStream>,
}

impl Monitor {
    pub fn attach(s: &Server) -> Monitor {
        let tcp = TcpStream::connect(("127.0.0.1", s.port())).expect("connect for MONITOR");
        tcp.set_read_timeout(Some(DEADLINE)).unwrap();
        let mut w = tcp.try_clone().unwrap();
        w.write_all(b"MONITOR\r\n").unwrap();
        let mut m = Monitor {
            r: BufReader::new(tcp),
        };
        assert_eq!(m.line(), "+OK", "MONITOR");
        m
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        self.r.read_line(&mut l).expect("MONITOR line");
        assert!(!l.is_empty(), "MONITOR connection closed");
        l.trim_end().to_string()
    }

    /// Every line up to (without) the first that contains `marker`.
    pub fn until(&mut self, marker: &str) -> Vec<String> {
        let mut out = Vec::new();
        loop {
            let l = self.line();
            if l.contains(marker) {
                return out;
            }
            out.push(l);
        }
    }
}

/// `(0.51s)`: what redis-cli prints after a slow command.
fn is_elapsed_note(line: &str) -> bool {
    line.strip_prefix('(')
        .and_then(|l| l.strip_suffix("s)"))
        .is_some_and(|n| n.parse::<f64>().is_ok())
}
