//! Guarded writes (`DLOCK.GUARD`) and the sequencer check (`DLOCK.CHECK`),
//! without I/O: the commands, what a reply or a failure means, and whether
//! to try again. The blocking shell is `blocking.rs`, the async one
//! `aio/guarded.rs`.
//!
//! A guarded write is not idempotent (an `INCR` run twice counts twice): it
//! is tried again only when it surely did not run (no connection, or an
//! error reply: the server runs all of it or none). Once it may have
//! reached the server and its reply was lost, the caller is told so
//! instead. A check is read-only and is retried like any read.

pub(crate) mod blocking;

use crate::error::{Error, Failure, Result};
use crate::retry::Outage;
use redis::{Arg, Cmd, RedisError, Value};
use std::time::{Duration, Instant};

/// `DLOCK.GUARD resource FENCE fence command [arg ...]`.
pub(crate) fn write_cmd(resource: &str, fence: u64, inner: &Cmd) -> Result<Cmd> {
    let mut c = proof("DLOCK.GUARD", resource, fence)?;
    push_inner(&mut c, inner, None)?;
    Ok(c)
}

/// `DLOCK.GUARD resource FENCE fence BATCH count argc command [arg ...] ...`.
pub(crate) fn batch_cmd(resource: &str, fence: u64, inner: &[Cmd]) -> Result<Cmd> {
    if inner.is_empty() {
        return Err(Error::Invalid(
            "a guarded batch needs at least one command".into(),
        ));
    }
    let mut c = proof("DLOCK.GUARD", resource, fence)?;
    c.arg("BATCH").arg(inner.len());
    for (i, one) in inner.iter().enumerate() {
        c.arg(one.args_iter().count());
        push_inner(&mut c, one, Some(i + 1))?;
    }
    Ok(c)
}

/// `DLOCK.CHECK resource FENCE fence`.
pub(crate) fn check_cmd(resource: &str, fence: u64) -> Result<Cmd> {
    proof("DLOCK.CHECK", resource, fence)
}

fn proof(name: &str, resource: &str, fence: u64) -> Result<Cmd> {
    if resource.is_empty() {
        return Err(Error::Invalid("resource must not be empty".into()));
    }
    // The server's fences: 1 to 2^63-1.
    if fence == 0 || fence > i64::MAX as u64 {
        return Err(Error::Invalid(format!(
            "fence {fence} is not a fence (1 to 2^63-1)"
        )));
    }
    let mut c = redis::cmd(name);
    c.arg(resource).arg("FENCE").arg(fence);
    Ok(c)
}

/// Appends `inner`'s words (command `index` of a batch, if any).
fn push_inner(c: &mut Cmd, inner: &Cmd, index: Option<usize>) -> Result<()> {
    let which = || match index {
        Some(i) => format!("command {i} of the batch"),
        None => "the command".to_string(),
    };
    if inner.args_iter().next().is_none() {
        return Err(Error::Invalid(format!("{} is empty", which())));
    }
    for a in inner.args_iter() {
        match a {
            Arg::Simple(b) => {
                c.arg(b);
            }
            Arg::Cursor => {
                return Err(Error::Invalid(format!(
                    "{} has a cursor argument, which a guarded write cannot carry",
                    which()
                )))
            }
        }
    }
    Ok(())
}

/// A `DLOCK.CHECK` reply: live or not.
pub(crate) fn check_reply(v: Value) -> Result<bool> {
    match v {
        Value::Int(1) => Ok(true),
        Value::Int(0) => Ok(false),
        other => Err(Error::Server(format!(
            "unexpected DLOCK.CHECK reply {other:?}"
        ))),
    }
}

/// Error replies that say "not now, try again" (or "elsewhere", handled by
/// the routing): the server ran nothing, and another try may succeed.
/// Every other error reply is the command's own answer.
pub(crate) fn is_transient(e: &RedisError) -> bool {
    e.redirect_node().is_some()
        || matches!(
            e.code(),
            Some("LOADING" | "TRYAGAIN" | "CLUSTERDOWN" | "MASTERDOWN" | "READONLY" | "NOREPLICAS")
        )
}

/// An error reply that is the command's own answer (see [`is_transient`]):
/// the proof was refused, or a command was refused or failed. Errors the
/// client made up (io, timeouts, parsing) have no code.
pub(crate) fn is_own_error_reply(e: &RedisError) -> bool {
    e.code().is_some() && !is_transient(e) && !crate::error::reached(e)
}

/// What an own error reply means (see [`is_own_error_reply`]).
pub(crate) fn refusal(e: &RedisError) -> Error {
    let code = e.code().unwrap_or("ERR");
    let detail = e.detail().unwrap_or("");
    if code == "NOTHELD" {
        return Error::NotHeld;
    }
    // The unknown-command reply echoes the arguments (the data written
    // among them): not kept.
    let unknown = code == "ERR"
        && detail.starts_with("unknown command")
        && ["'dlock.guard'", "'dlock.check'"]
            .iter()
            .any(|n| detail.to_ascii_lowercase().contains(n));
    if unknown {
        let name = if detail.to_ascii_lowercase().contains("guard") {
            "DLOCK.GUARD"
        } else {
            "DLOCK.CHECK"
        };
        return Error::Refused {
            code: code.into(),
            message: format!(
                "the server does not know {name}: its dlock module is missing or older \
                 than guarded writes"
            ),
        };
    }
    Error::Refused {
        code: code.into(),
        message: detail.into(),
    }
}

/// How one attempt ended.
pub(crate) enum Attempt {
    /// The command's reply.
    Replied(Value),
    /// An own error reply (see [`is_own_error_reply`]): nothing ran.
    Refused(RedisError),
    /// No reply, or a transient one. `may_have_run`: the command was sent
    /// on a connection that was open and no error reply came back.
    Failed {
        failure: Failure,
        may_have_run: bool,
    },
}

/// What to do after an attempt.
pub(crate) enum Next {
    Done(Result<Value>),
    /// Try again after this pause.
    Pause(Duration),
}

/// One guarded write or check, tried until it is answered, or its failures
/// have lasted `retry_for`.
pub(crate) struct Call {
    outage: Outage,
    retry_for: Duration,
    /// A check: retried whether or not an attempt may have run.
    read_only: bool,
}

impl Call {
    pub(crate) fn write(retry_for: Duration) -> Call {
        Call {
            outage: Outage::new(),
            retry_for,
            read_only: false,
        }
    }

    pub(crate) fn check(retry_for: Duration) -> Call {
        Call {
            read_only: true,
            ..Call::write(retry_for)
        }
    }

    pub(crate) fn attempted(&mut self, a: Attempt, now: Instant) -> Next {
        let (e, may_have_run) = match a {
            Attempt::Replied(v) => return Next::Done(Ok(v)),
            Attempt::Refused(e) => return Next::Done(Err(refusal(&e))),
            Attempt::Failed {
                failure: Failure::Fatal(e),
                ..
            } => return Next::Done(Err(e)),
            Attempt::Failed {
                failure,
                may_have_run,
            } => (failure.into_error(), may_have_run),
        };
        if may_have_run && !self.read_only {
            return Next::Done(Err(Error::Unavailable(format!(
                "{e}; the reply of the guarded write was lost: it may or may not have run"
            ))));
        }
        let deadline = crate::limits::after(now, self.retry_for);
        match self.outage.next_pause(self.retry_for, deadline, now) {
            Some(p) => Next::Pause(p),
            None => Next::Done(Err(e)),
        }
    }
}

/// A reply as the caller's type. The write ran: a reply that does not
/// convert says so.
pub(crate) fn convert<T: redis::FromRedisValue>(v: Value) -> Result<T> {
    redis::from_owned_redis_value(v).map_err(|e| {
        Error::Server(format!(
            "the guarded write ran, but its reply does not convert to the type asked for: {e}"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(c: &Cmd) -> Vec<String> {
        c.args_iter()
            .map(|a| match a {
                Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
                Arg::Cursor => "<cursor>".into(),
            })
            .collect()
    }

    #[test]
    fn builds_the_single_and_batch_forms() {
        let set = redis::cmd("SET").arg("k").arg("v").clone();
        assert_eq!(
            args(&write_cmd("r", 7, &set).unwrap()),
            ["DLOCK.GUARD", "r", "FENCE", "7", "SET", "k", "v"]
        );
        let incr = redis::cmd("INCR").arg("n").clone();
        assert_eq!(
            args(&batch_cmd("r", 7, &[set, incr]).unwrap()),
            [
                "DLOCK.GUARD",
                "r",
                "FENCE",
                "7",
                "BATCH",
                "2",
                "3",
                "SET",
                "k",
                "v",
                "2",
                "INCR",
                "n"
            ]
        );
        assert_eq!(
            args(&check_cmd("r", 9).unwrap()),
            ["DLOCK.CHECK", "r", "FENCE", "9"]
        );
    }

    #[test]
    fn refuses_what_cannot_be_sent() {
        let set = redis::cmd("SET").arg("k").arg("v").clone();
        let invalid = |r: Result<Cmd>| assert!(matches!(r, Err(Error::Invalid(_))));
        invalid(batch_cmd("r", 1, &[]));
        invalid(write_cmd("r", 1, &Cmd::new()));
        invalid(batch_cmd("r", 1, &[set.clone(), Cmd::new()]));
        invalid(write_cmd("", 1, &set));
        invalid(check_cmd("", 1));
        invalid(check_cmd("r", 0));
        invalid(write_cmd("r", 1 << 63, &set));
        let mut scan = redis::cmd("SCAN");
        scan.cursor_arg(0);
        invalid(write_cmd("r", 1, &scan));
    }

    fn reply(code: &str, detail: &str) -> RedisError {
        let resp = format!("-{code} {detail}\r\n");
        let v = redis::parse_redis_value(resp.as_bytes()).unwrap();
        v.extract_error().unwrap_err()
    }

    #[test]
    fn error_replies_mean_what_they_say() {
        assert!(matches!(
            refusal(&reply("NOTHELD", "dlock: not a live hold")),
            Error::NotHeld
        ));
        let wrongtype = reply("WRONGTYPE", "Operation against a key");
        assert!(is_own_error_reply(&wrongtype));
        match refusal(&wrongtype) {
            Error::Refused { code, message } => {
                assert_eq!(code, "WRONGTYPE");
                assert_eq!(message, "Operation against a key");
            }
            other => panic!("{other:?}"),
        }
        let unknown = reply(
            "ERR",
            "unknown command 'DLOCK.GUARD', with args beginning with: 'secret'",
        );
        let shown = refusal(&unknown).to_string();
        assert!(shown.contains("does not know DLOCK.GUARD"), "{shown}");
        assert!(!shown.contains("secret"), "{shown}");
        assert!(!is_own_error_reply(&reply("LOADING", "loading")));
        assert!(!is_own_error_reply(&reply("READONLY", "replica")));
    }

    #[test]
    fn a_write_whose_reply_was_lost_is_not_sent_again() {
        let lost = || Failure::Retry(Error::Unavailable("timed out".into()));
        let now = Instant::now();
        let mut w = Call::write(Duration::from_secs(2));
        let unsent = Attempt::Failed {
            failure: lost(),
            may_have_run: false,
        };
        assert!(matches!(w.attempted(unsent, now), Next::Pause(_)));
        let sent = Attempt::Failed {
            failure: lost(),
            may_have_run: true,
        };
        match w.attempted(sent, now) {
            Next::Done(Err(Error::Unavailable(m))) => assert!(m.contains("may or may not"), "{m}"),
            _ => panic!("a write that may have run was retried"),
        }
        let mut c = Call::check(Duration::from_secs(2));
        let sent = Attempt::Failed {
            failure: lost(),
            may_have_run: true,
        };
        assert!(matches!(c.attempted(sent, now), Next::Pause(_)));
        let mut none = Call::write(Duration::ZERO);
        let unsent = Attempt::Failed {
            failure: lost(),
            may_have_run: false,
        };
        assert!(matches!(none.attempted(unsent, now), Next::Done(Err(_))));
    }
}
