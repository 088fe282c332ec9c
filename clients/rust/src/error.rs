//! One error type for the library and the exit codes of the `dlock` tool.

use std::fmt;
use std::time::Duration;

/// What went wrong. "Busy" is not an error: an acquire that was not granted
/// answers `Ok(None)`.
#[derive(Debug)]
pub enum Error {
    /// The request itself is invalid (no server was asked).
    Invalid(String),
    /// No server could be reached, or none answered before the deadline,
    /// after retrying (with the same token) for as long as allowed.
    Unavailable(String),
    /// The server refuses new grants for a while after a restart or failover
    /// that may have lost acknowledged grants (its `QUARANTINE` error).
    Quarantined(String),
    /// Fewer replicas than `min_replicas` acknowledged the grant in time; the
    /// grant was released again.
    TooFewReplicas { acked: i64, wanted: u32 },
    /// The lease ended (expired, deleted by an admin, or taken over) before
    /// the operation: the guard is lost.
    Lost,
    /// The hold's cap (`max_hold`): the server refused an extend past it
    /// (its `MAXHOLD` error, as it was sent), or a same-token retry of the
    /// acquire would have asked past it (not sent; the possible grant is
    /// released). The lease ends at the cap, and a guard is lost with this
    /// reason.
    MaxHold(String),
    /// Redlock: a quorum of the servers could not be reached.
    NoQuorum {
        granted: usize,
        reached: usize,
        nodes: usize,
    },
    /// A guarded write was refused, or a guarded check was not answered,
    /// because the proof is not a live hold on the resource at that
    /// instant (the server's `NOTHELD`): the lease ended, was released or
    /// taken over. Nothing was written. Only this.
    NotHeld,
    /// A guarded write (or check) was refused by the server, or one of its
    /// commands failed: nothing was written (a batch runs all or none).
    /// `code` is the error's code as the server sent it: the inner
    /// command's own (`WRONGTYPE`, `NOPERM`, `OOM`, `CROSSSLOT`, ...), or
    /// `ERR` for a malformed or refused inner command; `message` the rest.
    Refused { code: String, message: String },
    /// Any other error reply from the server, as it was sent.
    Server(String),
    /// The server at this address does not know dlock's commands: the
    /// module is not loaded there.
    ModuleMissing(String),
    /// The server at `addr` refused the login (wrong password or user), or
    /// the user's ACL denies a dlock command (`NOPERM`).
    Denied { addr: String, detail: String },
}

pub type Result<T> = std::result::Result<T, Error>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Invalid(m) => write!(f, "invalid request: {m}"),
            Error::Unavailable(m) => write!(f, "server unavailable: {m}"),
            Error::Quarantined(m) => write!(f, "server in restart quarantine: {m}"),
            Error::TooFewReplicas { acked, wanted } => write!(
                f,
                "only {acked} of {wanted} replicas acknowledged the grant in time (released)"
            ),
            Error::Lost => write!(f, "the lease was lost"),
            Error::MaxHold(m) => write!(f, "the hold reached its cap: {m}"),
            Error::NoQuorum {
                granted,
                reached,
                nodes,
            } => write!(
                f,
                "no quorum: granted on {granted}, reached {reached} of {nodes} servers"
            ),
            Error::NotHeld => write!(
                f,
                "not a live hold: the lock is no longer held (nothing was written)"
            ),
            Error::Refused { code, message } => write!(f, "refused: {code} {message}"),
            Error::Server(m) => write!(f, "server error: {m}"),
            Error::ModuleMissing(addr) => write!(
                f,
                "the dlock module is not loaded on {}: load it with `loadmodule \
                 /path/to/libdlock.so` in the server's config, or `MODULE LOAD \
                 /path/to/libdlock.so`",
                or_the_server(addr)
            ),
            Error::Denied { addr, detail } => {
                write!(f, "{detail} on {}", or_the_server(addr))?;
                if detail.starts_with("authentication failed") {
                    write!(f, ": check the user and password in the URL")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for Error {}

/// How a failed server call is handled.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Try again (same token) while the deadline allows: the connection broke
    /// or timed out, or the server is loading, failing over or resharding.
    Retry(Error),
    /// Redis Cluster: the slot lives elsewhere (`MOVED`) or is moving (`ASK`).
    Moved {
        addr: String,
    },
    Ask {
        addr: String,
    },
    /// An answer that retrying will not change.
    Fatal(Error),
}

impl From<redis::RedisError> for Failure {
    fn from(e: redis::RedisError) -> Failure {
        use redis::ErrorKind as K;
        if let Some((addr, _slot)) = e.redirect_node() {
            return match e.kind() {
                K::Ask => Failure::Ask {
                    addr: addr.to_string(),
                },
                _ => Failure::Moved {
                    addr: addr.to_string(),
                },
            };
        }
        if is_refused_handshake(&e) {
            return Failure::Fatal(Error::Unavailable(format!("TLS handshake refused: {e}")));
        }
        if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() {
            return Failure::Retry(Error::Unavailable(e.to_string()));
        }
        if let Some(refused) = refusal(&e) {
            return Failure::Fatal(refused);
        }
        match e.kind() {
            K::BusyLoadingError
            | K::TryAgain
            | K::ClusterDown
            | K::MasterDown
            | K::ReadOnly
            | K::IoError
            | K::ClusterConnectionNotFound => Failure::Retry(Error::Unavailable(e.to_string())),
            _ => match e.code() {
                Some("QUARANTINE") => Failure::Fatal(Error::Quarantined(detail(&e))),
                // A waiter's server became a replica (a failover): the new
                // master may grant it.
                Some("UNBLOCKED") => Failure::Retry(Error::Unavailable(detail(&e))),
                // Too few replicas for `min-replicas-to-write`: a master
                // that lost its replicas (its replica was promoted, or a
                // partition), or one whose replicas are reconnecting.
                Some("NOREPLICAS") => Failure::Retry(Error::Unavailable(detail(&e))),
                _ => Failure::Fatal(Error::Server(detail(&e))),
            },
        }
    }
}

impl Error {
    /// The message, naming the server it came from (once).
    fn at(self, addr: &str) -> Error {
        let named = |m: String| {
            if m.starts_with(addr) {
                m
            } else {
                format!("{addr}: {m}")
            }
        };
        match self {
            Error::Unavailable(m) => Error::Unavailable(named(m)),
            Error::Quarantined(m) => Error::Quarantined(named(m)),
            Error::ModuleMissing(a) if a.is_empty() => Error::ModuleMissing(addr.to_string()),
            Error::Denied { addr: a, detail } if a.is_empty() => Error::Denied {
                addr: addr.to_string(),
                detail,
            },
            other => other,
        }
    }
}

impl Failure {
    /// The failure, its message naming the server `addr`.
    pub(crate) fn at(self, addr: &str) -> Failure {
        match self {
            Failure::Retry(e) => Failure::Retry(e.at(addr)),
            Failure::Fatal(e) => Failure::Fatal(e.at(addr)),
            other => other,
        }
    }

    pub(crate) fn into_error(self) -> Error {
        match self {
            Failure::Retry(e) | Failure::Fatal(e) => e,
            Failure::Moved { addr } | Failure::Ask { addr } => {
                Error::Unavailable(format!("redirected to {addr} too many times"))
            }
        }
    }
}

/// A server that cannot serve dlock's commands to this client: the module is
/// missing (the unknown-command reply echoes the arguments, the token
/// among them, so it is not kept), or the login or the command is refused.
/// The address is filled in where the server is known
/// ([`Failure::at`]).
fn refusal(e: &redis::RedisError) -> Option<Error> {
    let denied = |detail: String| {
        Some(Error::Denied {
            addr: String::new(),
            detail,
        })
    };
    if e.kind() == redis::ErrorKind::AuthenticationFailed {
        return denied("authentication failed".into());
    }
    match (e.code(), e.detail()) {
        (Some("ERR"), Some(d))
            if d.starts_with("unknown command")
                && d.get(17..23)
                    .is_some_and(|c| c.eq_ignore_ascii_case("dlock.")) =>
        {
            Some(Error::ModuleMissing(String::new()))
        }
        (Some("WRONGPASS"), _) => denied("authentication failed".into()),
        (Some("MAXHOLD"), Some(d)) => Some(Error::MaxHold(format!("MAXHOLD {d}"))),
        (Some(c @ ("NOPERM" | "NOAUTH")), Some(d)) => denied(format!("{c} {d}")),
        _ => None,
    }
}

fn or_the_server(addr: &str) -> &str {
    if addr.is_empty() {
        "the server"
    } else {
        addr
    }
}

fn detail(e: &redis::RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(c), Some(d)) => format!("{c} {d}"),
        _ => e.to_string(),
    }
}

/// Whole milliseconds of a duration, for a command argument.
pub(crate) fn millis(d: Duration) -> u64 {
    d.as_millis().min(u64::MAX as u128) as u64
}

/// How rustls words the handshake failures that retrying will not change:
/// the server's certificate failed verification, or the server ended the
/// handshake with an alert (it refused this client's certificate, or its
/// lack of one). `RedisError` shows its io error only through the
/// deprecated `cause`, whose lifetime forbids a downcast: the text is
/// matched, and the test below pins it to rustls's own errors.
const REFUSED_HANDSHAKE: [&str; 3] = [
    "invalid peer certificate",
    "received fatal alert",
    "peer sent no certificates",
];

/// A refused handshake (see [`REFUSED_HANDSHAKE`]).
pub(crate) fn is_refused_handshake(e: &redis::RedisError) -> bool {
    e.is_io_error() && {
        let text = e.to_string();
        REFUSED_HANDSHAKE.iter().any(|r| text.contains(r))
    }
}

/// Whether a command that failed with `e` may have been run by the server:
/// its reply was lost (the connection broke or timed out), rather than an
/// error reply, which the server sends instead of running it.
pub(crate) fn reached(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_timeout() || e.is_connection_dropped()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rustls_handshake_refusals_are_recognised() {
        use rustls::{AlertDescription, CertificateError, Error as Tls};
        let io = |t: Tls| {
            redis::RedisError::from(std::io::Error::new(std::io::ErrorKind::InvalidData, t))
        };
        for t in [
            Tls::InvalidCertificate(CertificateError::UnknownIssuer),
            Tls::InvalidCertificate(CertificateError::NotValidForName),
            Tls::AlertReceived(AlertDescription::CertificateRequired),
            Tls::AlertReceived(AlertDescription::UnknownCA),
            Tls::NoCertificatesPresented,
        ] {
            assert!(is_refused_handshake(&io(t.clone())), "{t}");
        }
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert!(!is_refused_handshake(&redis::RedisError::from(refused)));
    }
}
