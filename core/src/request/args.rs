//! Command arguments -> typed requests, or the error the client should see.
//!
//! Every argument arrives as raw bytes (tokens and resource names are
//! binary-safe). `argv[0]` is the command name and `argv[1]` the resource key;
//! the key itself is handled by the server layer, so it is only counted here.

use crate::ask::{Ask, Mode};
use crate::error::Error;
use crate::limits::{MAX_LIMIT, MAX_STORED_TOKEN, MAX_TTL_MS};
use crate::observe::{parse_version, Observe};

/// Operator limits from the module's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest token for a new grant or a new waiter. Lowering it must not
    /// lock out holders whose tokens were accepted before: their RELEASE,
    /// EXTEND and same-token ACQUIRE take any token a lock can store.
    pub max_token: usize,
    /// 0 means unlimited.
    pub max_ttl: u64,
}

impl Limits {
    pub fn ttl(&self, raw: &[u8]) -> Result<u64, Error> {
        let ttl = parse_ttl(raw)?;
        if self.max_ttl > 0 && ttl > self.max_ttl {
            return Err(Error::TtlAboveMax { max: self.max_ttl });
        }
        Ok(ttl)
    }
}

/// The resources of a request: their positions in argv (`DLOCK.ACQUIRE`'s
/// one at 1; a set's at 2 ..= 1 + numkeys).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Members {
    pub first: usize,
    pub count: usize,
}

impl Members {
    /// The one resource of a single-resource command.
    pub const ONE: Members = Members { first: 1, count: 1 };

    pub fn indexes(&self) -> std::ops::Range<usize> {
        self.first..self.first + self.count
    }
}

/// A hold of every member: `DLOCK.ACQUIRE resource token ttl_ms [SHARED]
/// [LIMIT n] [OWNER owner] [WAIT timeout_ms]` (one member), or
/// `DLOCK.MACQUIRE numkeys resource... token ttl_ms [SHARED] [WAIT
/// timeout_ms]` (a set, never `LIMIT` or `OWNER`). A single resource is a
/// set of one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acquire<'a> {
    pub members: Members,
    pub token: &'a [u8],
    pub ttl_ms: u64,
    /// Block until granted or `timeout_ms` passes; `Some(0)` waits forever.
    pub wait_ms: Option<u64>,
    /// `Limits::max_token` when the command arrived: the token may be longer
    /// (up to `MAX_STORED_TOKEN`) only to refresh its own hold.
    pub max_new_token: usize,
    /// `SHARED`: a read hold.
    pub mode: Mode,
    /// `LIMIT n` above 1: a semaphore (`LIMIT 1` is the plain lock: `None`).
    pub limit: Option<u32>,
    /// `OWNER owner`: holds of one owner never exclude each other.
    pub owner: Option<&'a [u8]>,
    /// `SESSION id`: the hold (and the wait) bound to that session.
    pub session: Option<&'a [u8]>,
    /// `MAXHOLD ms`: the longest the hold may live from its grant.
    pub max_hold_ms: Option<u64>,
    /// `PRIORITY p` (0 to `MAX_PRIORITY`, higher first; `None`: 0): where
    /// it waits, aged with its wait (`crate::queue::Rank`).
    pub priority: Option<u16>,
    /// `PERMITS k` above 1 (only with `LIMIT` above 1, k up to it): one
    /// hold counting as k permits (`PERMITS 1` is `None`).
    pub permits: Option<u32>,
}

impl<'a> Acquire<'a> {
    /// A new grant or a new waiter needs a token (and owner) within the configured
    /// limit.
    pub fn check_new_token(&self) -> Result<(), Error> {
        let longest = self.token.len().max(self.owner.map_or(0, <[u8]>::len));
        if longest > self.max_new_token {
            return Err(Error::TokenTooLong {
                max: self.max_new_token,
            });
        }
        Ok(())
    }

    /// No `SHARED`, `LIMIT` above 1 or `OWNER`: the plain lock, with its own
    /// replies, effects and encoding.
    pub fn is_plain(&self) -> bool {
        self.mode == Mode::Exclusive
            && self.limit.is_none()
            && self.owner.is_none()
            && self.session.is_none()
            && self.max_hold_ms.is_none()
    }

    /// What the request asks of the resource's holds.
    pub fn ask(&self) -> Ask<'a> {
        Ask {
            token: self.token,
            owner: self.owner,
            mode: self.mode,
            limit: self.limit,
            ttl_ms: self.ttl_ms,
            session: self.session,
            max_hold_ms: self.max_hold_ms,
            permits: self.permits,
        }
    }
}

/// `WAIT` timeouts share the TTL's ceiling; 0 means no timeout.
pub const MAX_WAIT_MS: u64 = MAX_TTL_MS;

/// `DLOCK.RELEASE resource token [TO waiter_token]`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release<'a> {
    pub token: &'a [u8],
    /// `TO waiter_token`: the queued request the hold is handed over to,
    /// out of turn, in the same step.
    pub to: Option<&'a [u8]>,
}

/// `DLOCK.EXTEND resource token ttl_ms [WANTED]`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extend<'a> {
    pub token: &'a [u8],
    pub ttl_ms: u64,
    /// `WANTED`: the reply also says how many requests wait (a map
    /// instead of the integer).
    pub wanted: bool,
}

/// `DLOCK.APPLY resource token fence deadline_ms [last_fence]`: the internal
/// effect. `deadline_ms` is an absolute unix time in ms; 0 leaves the key's
/// expiry as it is (the AOF rewrite emits the expiry as a separate
/// PEXPIREAT). `last_fence` is the sender's fence high-water mark, so the
/// mark travels with every effect and every rewritten lock; a fresh grant
/// leaves it out, because its fence is the mark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Apply<'a> {
    pub token: &'a [u8],
    pub fence: u64,
    pub deadline_ms: u64,
    pub last_fence: u64,
}

pub fn acquire<'a>(argv: &[&'a [u8]], limits: &Limits) -> Result<Acquire<'a>, Error> {
    let [_, _, token, ttl, options @ ..] = argv else {
        return Err(Error::WrongArity);
    };
    // Checked against `max_token` only where a new grant or waiter would
    // result (`check_new_token`).
    let token = parse_token(token, MAX_STORED_TOKEN)?;
    let mut req = Acquire {
        members: Members::ONE,
        token,
        ttl_ms: 0,
        wait_ms: None,
        max_new_token: limits.max_token,
        mode: Mode::Exclusive,
        limit: None,
        owner: None,
        session: None,
        max_hold_ms: None,
        permits: None,
        priority: None,
    };
    let (mut shared, mut limit, mut permits) = (false, None, None);
    let mut rest = options;
    // Anything unknown, repeated or missing its value is refused rather than
    // silently ignored.
    while let [name, tail @ ..] = rest {
        let is = |option: &[u8]| name.eq_ignore_ascii_case(option);
        rest = match tail {
            _ if is(b"SHARED") && !shared => {
                shared = true;
                tail
            }
            [value, tail @ ..] if is(b"WAIT") && req.wait_ms.is_none() => {
                req.wait_ms = Some(parse_wait(value)?);
                tail
            }
            [value, tail @ ..] if is(b"LIMIT") && limit.is_none() => {
                limit = Some(parse_limit(value)?);
                tail
            }
            [value, tail @ ..] if is(b"OWNER") && req.owner.is_none() => {
                req.owner = Some(parse_owner(value)?);
                tail
            }
            [value, tail @ ..] if is(b"SESSION") && req.session.is_none() => {
                req.session = Some(parse_session_id(value)?);
                tail
            }
            [value, tail @ ..] if is(b"MAXHOLD") && req.max_hold_ms.is_none() => {
                req.max_hold_ms = Some(parse_max_hold(value)?);
                tail
            }
            [value, tail @ ..] if is(b"PERMITS") && permits.is_none() => {
                permits = Some(parse_permits(value)?);
                tail
            }
            [value, tail @ ..] if is(b"PRIORITY") && req.priority.is_none() => {
                req.priority = Some(parse_priority(value)?);
                tail
            }
            _ => return Err(Error::Syntax),
        };
    }
    req.ttl_ms = hold_ttl(ttl, req.session.is_some(), limits)?;
    check_max_hold(req.max_hold_ms, req.session)?;
    if shared {
        req.mode = Mode::Shared;
    }
    // `LIMIT 1` is the plain lock.
    req.limit = limit.filter(|n| *n > 1);
    if req.limit.is_some() && shared {
        return Err(Error::SharedSemaphore);
    }
    if req.limit.is_some() && req.owner.is_some() {
        return Err(Error::OwnerSemaphore);
    }
    if let Some(k) = permits {
        let n = req.limit.ok_or(Error::PermitsNeedLimit)?;
        if k > n {
            return Err(Error::PermitsRange);
        }
    }
    // `PERMITS 1` is one permit, as without it.
    req.permits = permits.filter(|k| *k > 1);
    Ok(req)
}

/// A session's hold has no ttl of its own: its `ttl_ms` may be 0 and is
/// not held to `dlock.max-ttl`, but must still be a number in range.
pub(crate) fn hold_ttl(raw: &[u8], bound: bool, limits: &Limits) -> Result<u64, Error> {
    if !bound {
        return limits.ttl(raw);
    }
    parse_u64(raw)
        .filter(|t| *t <= crate::limits::MAX_TTL_MS)
        .ok_or(Error::ttl())
}

/// `MAXHOLD ms`: 1 to `MAX_TTL_MS`, like a ttl (and not held to
/// `dlock.max-ttl`: the lease granted is the smaller of the two).
pub(crate) fn parse_max_hold(raw: &[u8]) -> Result<u64, Error> {
    parse_u64(raw)
        .filter(|ms| (1..=MAX_TTL_MS).contains(ms))
        .ok_or(Error::InvalidInteger {
            arg: "MAXHOLD",
            min: 1,
            max: MAX_TTL_MS,
        })
}

/// A hold bound to a session has no deadline for `MAXHOLD` to cap.
pub(crate) fn check_max_hold(max_hold: Option<u64>, session: Option<&[u8]>) -> Result<(), Error> {
    if max_hold.is_some() && session.is_some() {
        return Err(Error::MaxHoldSession);
    }
    Ok(())
}

/// A session id: opaque bytes, 1 to `MAX_SESSION_ID`.
pub fn parse_session_id(raw: &[u8]) -> Result<&[u8], Error> {
    if raw.is_empty() || raw.len() > crate::limits::MAX_SESSION_ID {
        return Err(Error::SessionIdLength);
    }
    Ok(raw)
}

fn parse_limit(raw: &[u8]) -> Result<u32, Error> {
    parse_u64(raw)
        .filter(|n| (1..=u64::from(MAX_LIMIT)).contains(n))
        .map(|n| n as u32)
        .ok_or(Error::InvalidInteger {
            arg: "LIMIT",
            min: 1,
            max: MAX_LIMIT as u64,
        })
}

/// `PERMITS k`: at least 1 (its upper bound, `LIMIT`, is checked once
/// every option is read).
fn parse_permits(raw: &[u8]) -> Result<u32, Error> {
    parse_u64(raw)
        .filter(|k| (1..=u64::from(MAX_LIMIT)).contains(k))
        .map(|k| k as u32)
        .ok_or(Error::PermitsRange)
}

/// Owners are opaque bytes, like tokens; `max_token` applies to new holds.
fn parse_owner(raw: &[u8]) -> Result<&[u8], Error> {
    if raw.is_empty() {
        return Err(Error::EmptyOwner);
    }
    parse_token(raw, MAX_STORED_TOKEN)
}

/// `PRIORITY p`: 0 to `MAX_PRIORITY`.
pub(crate) fn parse_priority(raw: &[u8]) -> Result<u16, Error> {
    let max = crate::limits::MAX_PRIORITY;
    parse_u64(raw)
        .filter(|p| *p <= u64::from(max))
        .map(|p| p as u16)
        .ok_or(Error::InvalidInteger {
            arg: "PRIORITY",
            min: 0,
            max: u64::from(max),
        })
}

fn parse_wait(raw: &[u8]) -> Result<u64, Error> {
    parse_u64(raw)
        .filter(|t| *t <= MAX_WAIT_MS)
        .ok_or(Error::InvalidInteger {
            arg: "timeout_ms",
            min: 0,
            max: MAX_WAIT_MS,
        })
}

/// Any token a lock can hold: `max_token` limits new grants only (the
/// waiter a `TO` names is queued, so its token was accepted).
pub fn release<'a>(argv: &[&'a [u8]], _limits: &Limits) -> Result<Release<'a>, Error> {
    let (token, to) = match argv {
        [_, _, token] => (token, None),
        [_, _, token, to, waiter] if to.eq_ignore_ascii_case(b"TO") => (token, Some(waiter)),
        [_, _, _, _, _] => return Err(Error::Syntax),
        _ => return Err(Error::WrongArity),
    };
    let token = parse_token(token, MAX_STORED_TOKEN)?;
    let to = to.map(|w| parse_token(w, MAX_STORED_TOKEN)).transpose()?;
    if to == Some(token) {
        return Err(Error::HandoverToSelf);
    }
    Ok(Release { token, to })
}

/// Any token a lock can hold: `max_token` limits new grants only.
pub fn extend<'a>(argv: &[&'a [u8]], limits: &Limits) -> Result<Extend<'a>, Error> {
    let [_, _, token, ttl, options @ ..] = argv else {
        return Err(Error::WrongArity);
    };
    Ok(Extend {
        token: parse_token(token, MAX_STORED_TOKEN)?,
        ttl_ms: limits.ttl(ttl)?,
        wanted: parse_wanted(options)?,
    })
}

/// The options after an extend's `ttl_ms`: nothing, or `WANTED` once
/// (any case); anything else is refused rather than ignored.
pub fn parse_wanted(options: &[&[u8]]) -> Result<bool, Error> {
    match options {
        [] => Ok(false),
        [option] if option.eq_ignore_ascii_case(b"WANTED") => Ok(true),
        _ => Err(Error::Syntax),
    }
}

/// `DLOCK.OBSERVE resource [SINCE version] [WAIT timeout_ms]`, options in
/// any order, each at most once.
pub fn observe(argv: &[&[u8]]) -> Result<Observe, Error> {
    let [_, _, options @ ..] = argv else {
        return Err(Error::WrongArity);
    };
    let mut req = Observe {
        since: None,
        wait_ms: None,
    };
    let mut rest = options;
    while let [name, value, tail @ ..] = rest {
        let is = |option: &[u8]| name.eq_ignore_ascii_case(option);
        if is(b"SINCE") && req.since.is_none() {
            req.since = Some(parse_version(value)?);
        } else if is(b"WAIT") && req.wait_ms.is_none() {
            req.wait_ms = Some(parse_wait(value)?);
        } else {
            return Err(Error::Syntax);
        }
        rest = tail;
    }
    if !rest.is_empty() {
        return Err(Error::Syntax);
    }
    Ok(req)
}

pub fn info(argv: &[&[u8]]) -> Result<(), Error> {
    match argv {
        [_, _] => Ok(()),
        _ => Err(Error::WrongArity),
    }
}

/// `DLOCK.QUEUED [pattern]` -> the glob pattern, if any. Every byte string
/// is a pattern, as for `SCAN ... MATCH`.
pub fn queued<'a>(argv: &[&'a [u8]]) -> Result<Option<&'a [u8]>, Error> {
    match argv {
        [_] => Ok(None),
        [_, pattern] => Ok(Some(pattern)),
        _ => Err(Error::WrongArity),
    }
}

/// Effects come from our own master or AOF, but a damaged file or a forged
/// stream must still not be able to store nonsense.
pub fn apply<'a>(argv: &[&'a [u8]]) -> Result<Apply<'a>, Error> {
    let (token, fence, deadline, last_fence) = match argv {
        [_, _, token, fence, deadline] => (token, fence, deadline, None),
        [_, _, token, fence, deadline, last] => (token, fence, deadline, Some(last)),
        _ => return Err(Error::WrongArity),
    };
    if token.is_empty() || token.len() > MAX_STORED_TOKEN {
        return Err(Error::BadEffect("token length"));
    }
    let fence = parse_fence(fence).ok_or(Error::BadEffect("fence"))?;
    let last_fence = match last_fence {
        Some(raw) => parse_fence(raw).ok_or(Error::BadEffect("last_fence"))?,
        None => fence,
    };
    let deadline_ms = parse_u64(deadline)
        .filter(|d| *d <= i64::MAX as u64)
        .ok_or(Error::BadEffect("deadline"))?;
    Ok(Apply {
        token,
        fence,
        deadline_ms,
        last_fence,
    })
}

/// A parsed `DLOCK.META`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    pub longest_ttl: u64,
    pub lossy: bool,
    /// Unix ms at which the writer's running quarantine ends; 0 = none,
    /// which is what two arguments say: writers leave the argument out when
    /// no quarantine runs (what releases without it read), and releases
    /// without it never ran one that outlived a restart.
    pub quarantine_until: u64,
}

/// `DLOCK.META longest_ttl_ms lossy [quarantine_until_ms]`.
pub fn meta(argv: &[&[u8]]) -> Result<Meta, Error> {
    let (longest, lossy, until) = match argv {
        [_, longest, lossy] => (longest, lossy, None),
        [_, longest, lossy, until] => (longest, lossy, Some(until)),
        _ => return Err(Error::WrongArity),
    };
    let longest_ttl = parse_u64(longest)
        .filter(|t| *t <= MAX_TTL_MS)
        .ok_or(Error::BadEffect("longest_ttl"))?;
    let lossy = match *lossy {
        b"0" => false,
        b"1" => true,
        _ => return Err(Error::BadEffect("lossy")),
    };
    let quarantine_until = match until {
        Some(raw) => parse_u64(raw)
            .filter(|u| *u <= i64::MAX as u64)
            .ok_or(Error::BadEffect("quarantine_until"))?,
        None => 0,
    };
    Ok(Meta {
        longest_ttl,
        lossy,
        quarantine_until,
    })
}

fn parse_fence(raw: &[u8]) -> Option<u64> {
    parse_u64(raw).filter(|f| (1..=crate::fence::MAX_FENCE).contains(f))
}

fn parse_token(token: &[u8], max: usize) -> Result<&[u8], Error> {
    if token.is_empty() {
        Err(Error::EmptyToken)
    } else if token.len() > max {
        Err(Error::TokenTooLong { max })
    } else {
        Ok(token)
    }
}

fn parse_ttl(raw: &[u8]) -> Result<u64, Error> {
    parse_u64(raw)
        .filter(|ttl| (1..=MAX_TTL_MS).contains(ttl))
        .ok_or_else(Error::ttl)
}

/// Plain decimal digits only: no sign, no spaces, no exponent, no fraction,
/// so "1.5", "-5", " 5" and "5e3" are all refused rather than guessed at.
pub fn parse_u64(raw: &[u8]) -> Option<u64> {
    if raw.is_empty() || raw.len() > 20 {
        return None;
    }
    raw.iter().try_fold(0u64, |acc, &b| {
        if b.is_ascii_digit() {
            acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))
        } else {
            None
        }
    })
}

#[cfg(test)]
mod tests;

/// `DLOCK.RESIZE resource n`: the new limit, from 2 to `MAX_LIMIT`.
pub fn resize(argv: &[&[u8]]) -> Result<u32, Error> {
    let [_, _, n] = argv else {
        return Err(Error::WrongArity);
    };
    parse_u64(n)
        .filter(|n| (2..=u64::from(MAX_LIMIT)).contains(n))
        .map(|n| n as u32)
        .ok_or(Error::InvalidInteger {
            arg: "n",
            min: 2,
            max: MAX_LIMIT as u64,
        })
}
