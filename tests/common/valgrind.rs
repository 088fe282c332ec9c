//! Memcheck support for the harness (`make check-memory`).
//!
//! With `DLOCK_VALGRIND=1` every redis-server runs under valgrind's memcheck,
//! logging to `<server dir>/valgrind.<pid>.log`. `Server`'s `Drop` stops the
//! server gracefully (SIGTERM) so valgrind writes its leak summary, then
//! `findings` scans the logs. Any memory error (invalid read/write/free,
//! mismatched free, use of uninitialised values) fails the check wherever it
//! is; a "definitely lost" block fails it only if its allocation stack is in
//! the module (Debian's redis-server links jemalloc statically, so the
//! server's own heap is invisible to valgrind anyway, and the module is only
//! tracked when built with `--features system-alloc`).
//!
//! Findings panic in `Drop` (unless the thread is already panicking) and are
//! appended to `$DLOCK_VALGRIND_REPORT` when it is set, so a finding can not
//! be lost to a swallowed panic. The server's dir is then kept for the full
//! logs. `kill9` leaves no leak summary: a crashed server's leaks are not
//! checked, but errors it logged before the crash are.
//!
//! Environment:
//! - `DLOCK_VALGRIND=1`: enable.
//! - `DLOCK_VALGRIND_REPORT=<file>`: append findings there as well.
//! - `DLOCK_VALGRIND_ARGS="..."`: extra valgrind options (whitespace-split),
//!   e.g. `--track-origins=yes` when debugging a finding.
//!
//! `tests/valgrind.supp` (always passed) suppresses known false positives in
//! redis-server itself.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Error kinds that fail the check wherever they are reported. These are the
/// first lines of memcheck's error blocks.
const ERROR_KINDS: &[&str] = &[
    "Invalid read",
    "Invalid write",
    "Invalid free",
    "Mismatched free",
    "Conditional jump",
    "Use of uninitialised value",
    "Syscall param",
];

/// A frame in the module: the object path when there is no debug info, the
/// demangled (or mangled) Rust path when there is.
const MODULE_FRAMES: &[&str] = &["libdlock", "dlock::", "_ZN5dlock"];

pub fn enabled() -> bool {
    std::env::var_os("DLOCK_VALGRIND").is_some_and(|v| v == "1")
}

/// Deadlines and IO timeouts under valgrind: the server runs 10-50x slower,
/// and startup, leak checking at exit and forked RDB/AOF children add more.
pub fn scale(d: Duration) -> Duration {
    if enabled() {
        (d * 6).max(Duration::from_secs(60))
    } else {
        d
    }
}

/// `redis-server` itself, or valgrind running it with logs in `dir`.
pub fn command(dir: &Path, server: &std::ffi::OsStr) -> Command {
    if !enabled() {
        return Command::new(server);
    }
    let mut c = Command::new("valgrind");
    c.args([
        "--tool=memcheck",
        "--leak-check=full",
        "--show-leak-kinds=definite",
        "--errors-for-leak-kinds=definite",
        "--track-origins=no",
        "--error-exitcode=99",
    ]);
    // %p: the forked RDB/AOF children (which run the module's save
    // callbacks) get logs of their own.
    c.arg(format!("--log-file={}/valgrind.%p.log", dir.display()));
    // Known false positives in redis-server itself (see the file).
    let supp = super::workspace_root().join("tests/valgrind.supp");
    c.arg(format!("--suppressions={}", supp.display()));
    if let Some(extra) = std::env::var_os("DLOCK_VALGRIND_ARGS") {
        c.args(extra.to_string_lossy().split_whitespace());
    }
    c.arg(server);
    c
}

/// The failing blocks of every valgrind log in `dir`, each prefixed with its
/// file name; empty when clean (or when valgrind is off).
pub fn findings(dir: &Path) -> Vec<String> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut logs: Vec<_> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("valgrind.") && n.ends_with(".log"))
        })
        .collect();
    logs.sort();
    let mut out = Vec::new();
    for log in logs {
        let text = fs::read_to_string(&log).unwrap_or_default();
        let name = log.file_name().unwrap().to_string_lossy().into_owned();
        for block in scan(&text) {
            out.push(format!("{name}:\n{block}"));
        }
    }
    out
}

/// Splits a memcheck log into blank-line separated blocks (without the
/// `==pid== ` prefixes) and keeps the failing ones.
pub fn scan(log: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut block: Vec<&str> = Vec::new();
    let lines = log.lines().map(strip_pid).chain(std::iter::once(""));
    for line in lines {
        if !line.trim().is_empty() {
            block.push(line);
            continue;
        }
        if let Some(first) = block.first() {
            let is_error = ERROR_KINDS.iter().any(|k| first.starts_with(k));
            let is_module_leak = first.contains("are definitely lost")
                && block
                    .iter()
                    .any(|l| MODULE_FRAMES.iter().any(|m| l.contains(m)));
            if is_error || is_module_leak {
                found.push(block.join("\n"));
            }
        }
        block.clear();
    }
    found
}

/// `==123== text` -> `text`; `==123==` -> ``.
fn strip_pid(line: &str) -> &str {
    let Some(rest) = line.strip_prefix("==") else {
        return line;
    };
    match rest.split_once("==") {
        Some((pid, tail)) if !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()) => {
            tail.strip_prefix(' ').unwrap_or(tail)
        }
        _ => line,
    }
}

/// Reports findings for the server in `dir`: appends them to
/// `$DLOCK_VALGRIND_REPORT` and returns the panic message, or None if clean.
pub fn report(dir: &Path, findings: &[String]) -> Option<String> {
    if findings.is_empty() {
        return None;
    }
    let test = std::thread::current()
        .name()
        .unwrap_or("<unnamed thread>")
        .to_string();
    let msg = format!(
        "valgrind: {} finding(s) in test `{test}` (logs kept in {}):\n\n{}\n",
        findings.len(),
        dir.display(),
        findings.join("\n\n")
    );
    if let Some(path) = std::env::var_os("DLOCK_VALGRIND_REPORT") {
        let file = fs::OpenOptions::new().create(true).append(true).open(&path);
        if let Ok(mut f) = file {
            let _ = writeln!(f, "{msg}");
        }
    }
    Some(msg)
}
