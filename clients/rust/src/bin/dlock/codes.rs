//! Exit codes, and the messages that go with them. dlock's own codes follow sysexits(3) where one fits; the
//! lease-lost code is just past that range, so it claims no sysexits
//! meaning and stays clear of the codes children use most (1, 2, 3), of
//! 126/127 (the shell's "cannot execute"/"not found") and of 128+N (died
//! of signal N). A child may exit with any of these codes itself: dlock
//! says on stderr when the code is its own.

use crate::args::Usage;
use dlock_client::Error;

pub const OK: i32 = 0;
/// check: the fence is not a live hold (as test(1) answers false).
pub const NOT_LIVE: i32 = 1;
/// resize: nothing holds the resource, so it has no limit to change.
pub const NOT_HELD: i32 = 1;
pub const USAGE: i32 = 64; // EX_USAGE
pub const UNAVAILABLE: i32 = 69; // EX_UNAVAILABLE
pub const SOFTWARE: i32 = 70; // EX_SOFTWARE: an unexpected server reply
pub const OSERR: i32 = 71; // EX_OSERR: fork, wait, ... failed
pub const TEMPFAIL: i32 = 75; // EX_TEMPFAIL: busy, or the wait ran out
pub const NOPERM: i32 = 77; // EX_NOPERM: login or command refused
pub const LOST: i32 = 79; // the lease was lost (or the token holds nothing)
pub const CANNOT_EXECUTE: i32 = 126;
pub const NOT_FOUND: i32 = 127;

/// The exit code for a library error.
pub fn of(e: &Error) -> i32 {
    match e {
        Error::Invalid(_) => USAGE,
        Error::Unavailable(_)
        | Error::Quarantined(_)
        | Error::TooFewReplicas { .. }
        | Error::NoQuorum { .. }
        // A server without the module cannot serve locks at all.
        | Error::ModuleMissing(_) => UNAVAILABLE,
        Error::Denied { .. } => NOPERM,
        Error::Lost | Error::MaxHold(_) => LOST,
        _ => SOFTWARE,
    }
}

/// The exit code of a wait status: the child's code, or 128+N for signal N.
pub fn of_wait_status(status: libc::c_int) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        SOFTWARE
    }
}

/// The exit-code table of `dlock --help`.
pub const TABLE: &str = "\
EXIT STATUS
    0      success (exec: the command's own status is passed through)
    1      check: the fence is not a live hold on the resource; resize:
           nothing holds the resource (nothing changed)
    1..    exec: the command's exit status
    128+N  exec: the command died of signal N
    64     usage error: bad option, duration, URL, TLS file, --grace not
           below ttl/3 (EX_USAGE)
    69     server unreachable, timed out, TLS handshake refused (certificate
           not trusted or not for the URL's host, client certificate
           missing or refused), in restart quarantine, without the
           dlock module, or (Redlock) no majority reachable (EX_UNAVAILABLE);
           list: a server or master not listed (the others are printed)
    70     unexpected server reply (EX_SOFTWARE)
    71     cannot start or wait for the command (EX_OSERR)
    75     lock busy with --no-wait, or the wait ran out (EX_TEMPFAIL;
           exec --conflict-exit-code changes it)
    77     authentication failed (user or password in the URL), or the
           user's ACL denies a dlock command (EX_NOPERM; see PERMISSIONS)
    79     the lease was lost: a renewal or the final release answered 0, or
           renewals failed until only --grace was left (exec, elect: whatever
           the command's status, 0 or the signal dlock ended it with);
           extend/release: the token holds nothing there
    126    exec: the command is not executable
    127    exec: the command was not found
    A command may exit with any of these codes itself; dlock says on stderr
    when the code is its own.
";

/// Prints a usage error with a hint; returns 64.
pub fn usage_error(u: Usage, command: &str) -> i32 {
    let hint = if command.is_empty() {
        "dlock --help".to_string()
    } else {
        format!("dlock {command} --help")
    };
    eprintln!("dlock: {}\nTry '{hint}'.", u.0);
    USAGE
}

/// Prints `dlock: msg`; returns `code`.
pub fn fail(msg: &str, code: i32) -> i32 {
    eprintln!("dlock: {msg}");
    code
}
