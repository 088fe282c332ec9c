//! One error type for everything a command can refuse. Its `Display` is the
//! exact text of the error reply, prefix included, so the command pages
//! (`docs/commands/*.md`, "Errors") and the tests can quote it.

use std::fmt;

use crate::limits::MAX_TTL_MS;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// Wrong argument count; the server layer answers with Redis's own
    /// wrong-number-of-arguments error naming the command.
    WrongArity,
    /// An option the command does not know, or an option without its value.
    Syntax,
    /// `ttl_ms` (or another integer argument) outside its range or not an integer.
    InvalidInteger {
        arg: &'static str,
        min: u64,
        max: u64,
    },
    /// Tokens identify one acquisition; an empty one identifies nothing.
    EmptyToken,
    /// Token longer than the module accepts.
    TokenTooLong { max: usize },
    /// A `DLOCK.QUEUED` pattern longer than the matcher accepts.
    PatternTooLong { max: usize },
    /// The resource key holds a value of another type.
    WrongType,
    /// The fence would pass 2^63-1: refusing beats wrapping to a small fence.
    FenceExhausted,
    /// A client tried a write on a replica (possible with `replica-read-only no`).
    ReadOnlyReplica,
    /// The resource's slot is moving or served elsewhere: the client retries
    /// and follows the cluster's redirect.
    SlotMoved,
    /// A deferred handoff found the server turned replica.
    Demoted,
    /// Grants are refused for a while after a restart or promotion that may
    /// have lost acknowledged grants.
    Quarantine { ms_left: u64 },
    /// A TTL above `dlock.max-ttl`.
    TtlAboveMax { max: u64 },
    /// A configuration value that does not parse.
    BadConfig(&'static str),
    /// A client sent an internal effect command (named) itself.
    ForgedEffect(&'static str),
    /// A malformed internal effect (from a damaged AOF or a newer master).
    BadEffect(&'static str),
    /// The token already holds the resource with another mode, `LIMIT` or
    /// `OWNER`: not a retry, and not a second hold.
    TokenInUse,
    /// A request whose `LIMIT` differs from the held resource's.
    LimitMismatch { limit: u32 },
    /// `SHARED` with `LIMIT` above 1: a semaphore's permits have no modes.
    SharedSemaphore,
    /// `OWNER` with `LIMIT` above 1: each permit is its own owner.
    OwnerSemaphore,
    /// `PERMITS` without `LIMIT` above 1.
    PermitsNeedLimit,
    /// `PERMITS k` with k not from 1 to the request's `LIMIT`.
    PermitsRange,
    /// A same-token `ACQUIRE` naming another `PERMITS` than its hold's.
    PermitsMismatch,
    /// `DLOCK.RESIZE` of a resource held but not as a semaphore.
    ResizeNotSemaphore,
    /// A set names one resource twice.
    DuplicateResource,
    /// `MACQUIRE` with a token that holds part of the set, or holds its
    /// members under different fences (another set) or another mode.
    SetMismatch,
    /// `OWNER ""` names nobody.
    EmptyOwner,
    /// An upgrade to exclusive while other owners hold the resource: refused
    /// at once, never queued (two waiting upgraders would deadlock).
    UpgradeRefused,
    /// `SINCE` with something no `DLOCK.OBSERVE` reply gives.
    BadVersion,
    /// An option's value is not one of the words it takes.
    NotOneOf {
        arg: &'static str,
        words: &'static str,
    },
    /// A session that does not exist (never opened, or ended).
    NoSession,
    /// The token holds the resource under another session, or without
    /// one, or the other way round.
    SessionMismatch,
    /// `EXTEND` of a hold bound to a session: its session's keep-alive
    /// keeps it.
    BoundHold,
    /// A session id empty or over `MAX_SESSION_ID` bytes.
    SessionIdLength,
    /// An `EXTEND` (a `MEXTEND` member, a same-token `ACQUIRE`) whose new
    /// deadline would pass the hold's `MAXHOLD` cap; `ms_left` to the cap.
    MaxHold { ms_left: u64 },
    /// A same-token `ACQUIRE` naming another `MAXHOLD` (or none) than the
    /// one its hold was granted with.
    MaxHoldMismatch,
    /// `MAXHOLD` with `SESSION`: a bound hold has no deadline to cap.
    MaxHoldSession,
    /// `BIND` where no client connection sent the command.
    BindNeedsClient,
    /// `OPEN` of an id whose ended session's holds are still being released.
    SessionEnding,
    /// `LOCKDELAY` out of range.
    LockDelay,
    /// A bound `WAIT` that would close a cycle of sessions waiting for each
    /// other: the cycle's resources, in wait order.
    Deadlock(Vec<Box<[u8]>>),
    /// `DLOCK.GUARD`: the token or fence is not a live hold on the
    /// resource now; nothing was run.
    NotHeld,
    /// `DLOCK.GUARD ... BATCH`: an `argc` out of range, or arguments left
    /// over after `count` commands.
    BatchArgc,
    /// `DLOCK.GUARD`: inner command `index` (1-based) refused before any
    /// ran.
    GuardRefused {
        index: usize,
        command: Box<[u8]>,
        why: &'static str,
    },
    /// `DLOCK.GUARD` in Redis Cluster: inner command `index` names a key in
    /// another slot than the resource's.
    GuardCrossSlot { index: usize },
    /// `DLOCK.GUARD ... BATCH`: command `index` writes more than a batch can
    /// save for undoing; nothing was run.
    GuardTooBig { index: usize },
    /// The server refused to run a guard's command, with this error (its
    /// code first).
    Refused(Box<[u8]>),
    /// `DLOCK.GUARD ... BATCH`: command `index` of `count` failed with the
    /// server's error `text`; the commands before it were undone.
    GuardFailed {
        index: usize,
        count: usize,
        text: Box<[u8]>,
    },
    /// `RELEASE ... TO waiter_token`: that token does not wait on the
    /// resource (never queued, granted, gone, or its `WAIT` ran out).
    NotWaiting,
    /// `RELEASE ... TO waiter_token`: the waiter does not fit while the
    /// resource's other holds stay.
    NotReady,
    /// `RELEASE ... TO waiter_token`, where that token waits as a set
    /// request (`DLOCK.MACQUIRE`).
    HandoverToSet,
    /// `RELEASE ... TO` naming the releasing token itself.
    HandoverToSelf,
    /// Something the server should have provided was missing.
    Internal(&'static str),
}

/// An error reply's code (`WRONGTYPE`, `OOM`) and message; a text without
/// a code is the message of a plain `ERR`.
fn code_and_message(text: &[u8]) -> (String, String) {
    let text = String::from_utf8_lossy(text);
    match text.split_once(' ') {
        Some((code, rest)) if !code.is_empty() && code.bytes().all(|b| b.is_ascii_uppercase()) => {
            (code.to_string(), rest.to_string())
        }
        _ => (String::from("ERR"), text.into_owned()),
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::WrongArity => write!(f, "ERR wrong number of arguments"),
            Error::Syntax => write!(f, "ERR syntax error"),
            Error::NotOneOf { arg, words } => write!(f, "ERR {arg} must be {words}"),
            Error::BadVersion => write!(
                f,
                "ERR version must be 16 hex digits, as a DLOCK.OBSERVE reply gives it"
            ),
            Error::InvalidInteger { arg, min, max } => {
                write!(f, "ERR {arg} must be an integer from {min} to {max}")
            }
            Error::EmptyToken => write!(f, "ERR token must not be empty"),
            Error::TokenTooLong { max } => {
                write!(f, "ERR token is longer than {max} bytes")
            }
            Error::PatternTooLong { max } => {
                write!(f, "ERR pattern is longer than {max} bytes")
            }
            Error::WrongType => write!(
                f,
                "WRONGTYPE Operation against a key holding the wrong kind of value"
            ),
            Error::FenceExhausted => {
                write!(f, "ERR fence counter exhausted: no fence above 2^63-1")
            }
            Error::ReadOnlyReplica => write!(
                f,
                "READONLY dlock: locks are granted, extended and released on the master only"
            ),
            Error::SlotMoved => write!(
                f,
                "TRYAGAIN dlock: the resource's slot is moving or served elsewhere; retry"
            ),
            Error::Demoted => write!(
                f,
                "READONLY dlock: this server became a replica while you waited; retry on the master"
            ),
            Error::Quarantine { ms_left } => write!(
                f,
                "QUARANTINE dlock: new grants are refused for {ms_left} ms more after a restart \
                 or failover that may have lost acknowledged grants"
            ),
            Error::TtlAboveMax { max } => {
                write!(f, "ERR ttl_ms is above dlock.max-ttl ({max})")
            }
            Error::BadConfig(what) => write!(f, "ERR {what}"),
            Error::ForgedEffect(command) => write!(
                f,
                "ERR {command} is internal: accepted only from the master link or the AOF"
            ),
            Error::BadEffect(what) => write!(f, "ERR malformed dlock effect: {what}"),
            Error::TokenInUse => write!(
                f,
                "ERR token already holds this resource with another mode, LIMIT or OWNER"
            ),
            Error::LimitMismatch { limit } => write!(
                f,
                "ERR the resource is held with LIMIT {limit}: requests must ask for the same LIMIT"
            ),
            Error::SharedSemaphore => {
                write!(f, "ERR SHARED cannot be combined with LIMIT above 1")
            }
            Error::OwnerSemaphore => {
                write!(f, "ERR OWNER cannot be combined with LIMIT above 1")
            }
            Error::PermitsNeedLimit => write!(f, "ERR PERMITS needs LIMIT above 1"),
            Error::PermitsRange => {
                write!(f, "ERR PERMITS must be an integer from 1 to LIMIT")
            }
            Error::PermitsMismatch => write!(
                f,
                "ERR token already holds this resource with another PERMITS"
            ),
            Error::ResizeNotSemaphore => write!(
                f,
                "ERR DLOCK.RESIZE applies to a semaphore (LIMIT above 1)"
            ),
            Error::EmptyOwner => write!(f, "ERR owner must not be empty"),
            Error::DuplicateResource => write!(f, "ERR a set names the same resource twice"),
            Error::SetMismatch => write!(
                f,
                "ERR token already holds part of this set, or holds it as another set or mode \
                 (release it with DLOCK.MRELEASE first)"
            ),
            Error::UpgradeRefused => write!(
                f,
                "ERR upgrade refused: other owners hold the resource (an upgrade never waits)"
            ),
            Error::NoSession => write!(
                f,
                "NOSESSION no such session (it ended or was never opened): its holds are released"
            ),
            Error::SessionMismatch => write!(
                f,
                "ERR the token holds this resource under another session (or none)"
            ),
            Error::BoundHold => write!(
                f,
                "ERR the hold is bound to a session: keep the session alive \
                 (DLOCK.SESSION KEEPALIVE)"
            ),
            Error::MaxHold { ms_left } => write!(
                f,
                "MAXHOLD the hold may live {ms_left} ms more: it cannot be extended past its MAXHOLD"
            ),
            Error::MaxHoldMismatch => write!(
                f,
                "ERR token already holds this resource with another MAXHOLD (or none)"
            ),
            Error::MaxHoldSession => write!(
                f,
                "ERR MAXHOLD cannot be combined with SESSION (a session's hold has no deadline)"
            ),
            Error::SessionIdLength => write!(
                f,
                "ERR session id must be 1 to {} bytes",
                crate::limits::MAX_SESSION_ID
            ),
            Error::BindNeedsClient => write!(
                f,
                "ERR BIND needs a client connection (not a script or MULTI from another client)"
            ),
            Error::SessionEnding => write!(
                f,
                "ERR the session with this id ended and its holds are still being released: \
                 open a session with a new id"
            ),
            Error::LockDelay => write!(
                f,
                "ERR LOCKDELAY must be an integer from 0 to {}",
                crate::limits::MAX_LOCK_DELAY_MS
            ),
            Error::Deadlock(resources) => {
                write!(
                    f,
                    "DEADLOCK waiting would close a cycle of sessions waiting for each other, \
                     through"
                )?;
                for r in resources {
                    write!(f, " '{}'", String::from_utf8_lossy(r).escape_debug())?;
                }
                Ok(())
            }
            Error::NotHeld => write!(
                f,
                "NOTHELD dlock: that token or fence is not a live hold on the resource; \
                 nothing was run"
            ),
            Error::BatchArgc => write!(
                f,
                "ERR dlock: BATCH wants count commands, each its argc (at least 1) then \
                 that many arguments, and nothing after them"
            ),
            Error::GuardRefused {
                index,
                command,
                why,
            } => write!(
                f,
                "ERR dlock: command {index} ('{}') {why}; nothing was run",
                String::from_utf8_lossy(command).escape_debug()
            ),
            Error::GuardCrossSlot { index } => write!(
                f,
                "CROSSSLOT dlock: command {index} names a key in another slot than the \
                 resource's (use a hash tag); nothing was run"
            ),
            Error::GuardTooBig { index } => write!(
                f,
                "ERR dlock: command {index} of the BATCH writes more than a batch can undo \
                 ({} keys, {} bytes or {} elements saved in all); put it last or guard it \
                 alone; nothing was run",
                crate::limits::MAX_SAVED_KEYS,
                crate::limits::MAX_SAVED_BYTES,
                crate::limits::MAX_SAVED_ELEMENTS
            ),
            Error::Refused(text) => f.write_str(&String::from_utf8_lossy(text)),
            Error::GuardFailed { index, count, text } => {
                let (code, message) = code_and_message(text);
                write!(
                    f,
                    "{code} dlock: command {index} of {count} failed, so the BATCH was \
                     undone and nothing written: {message}"
                )
            }
            Error::NotWaiting => write!(
                f,
                "NOTWAITING dlock: waiter_token is not queued on the resource (or its WAIT ran out); \
                 nothing was released"
            ),
            Error::NotReady => write!(
                f,
                "NOTREADY dlock: the waiter does not fit while the resource's other holds stay; \
                 nothing was released"
            ),
            Error::HandoverToSet => write!(
                f,
                "ERR TO cannot name a set request (DLOCK.MACQUIRE); nothing was released"
            ),
            Error::HandoverToSelf => write!(f, "ERR TO must name another token than the releaser's"),
            Error::Internal(what) => write!(f, "ERR dlock internal error: {what}"),
        }
    }
}

impl std::error::Error for Error {}

impl Error {
    pub(crate) fn ttl() -> Self {
        Error::InvalidInteger {
            arg: "ttl_ms",
            min: 1,
            max: MAX_TTL_MS,
        }
    }
}
