//! Handing an election's lead to a chosen candidate: `DLOCK.RELEASE
//! resource token TO waiter_token` as a command and a typed reply, and the
//! candidate's token found in `DLOCK.WAITERS` pages, without I/O (the
//! blocking and async elections run them).

use crate::error::{Error, Result};
use crate::queue::Waiter;
use redis::{Cmd, RedisResult, Value};

/// Why a handover's leader stops leading, as its guard's loss reason.
pub(crate) const HANDED_OVER: &str = "handed over to another candidate (RELEASE ... TO)";

/// How the server answered a handover.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HandedOver {
    /// The candidate leads now: this leadership ended.
    Yes,
    /// The candidate could not be granted now (`NOTWAITING`: it no longer
    /// waits; `NOTREADY`): nothing changed, the leader still leads.
    Refused,
    /// The leader held nothing any more: its leadership was lost.
    NotHeld,
}

/// The `id` a candidate is preferred by: what its election's token starts
/// with, before the `/` (see `election::candidate_token`).
pub(crate) fn check_id(id: &str) -> Result<()> {
    if id.is_empty() || id.contains('/') {
        return Err(Error::Invalid(format!(
            "a candidate id must be non-empty, without '/': {id:?}"
        )));
    }
    Ok(())
}

/// The token of candidate `id` among a page of waiters, the first in line.
pub(crate) fn candidate_in(page: &[Waiter], id: &str) -> Option<String> {
    page.iter()
        .find(|w| w.set.is_none() && w.token.split_once('/').is_some_and(|(i, _)| i == id))
        .map(|w| w.token.clone())
}

/// `DLOCK.RELEASE resource token TO to`.
pub(crate) fn handover_cmd(resource: &str, token: &str, to: &str) -> Cmd {
    let mut c = redis::cmd("DLOCK.RELEASE");
    c.arg(resource).arg(token).arg("TO").arg(to);
    c
}

/// Whether the server's refusal is one that changes nothing and leaves
/// the leader leading.
pub(crate) fn is_refusal(e: &redis::RedisError) -> bool {
    matches!(e.code(), Some("NOTWAITING" | "NOTREADY"))
}

/// Whether an error the client reported is such a refusal (the async
/// API reports the server's errors as text).
#[cfg(feature = "tokio")]
pub(crate) fn is_refusal_error(e: &Error) -> bool {
    matches!(e, Error::Server(m) if m.contains("NOTWAITING dlock:") || m.contains("NOTREADY dlock:"))
}

/// The reply to a handover, its refusals (`is_refusal`) already turned
/// into `Value::Nil`.
pub(crate) fn handover_reply(v: RedisResult<Value>) -> Result<HandedOver> {
    match v {
        Ok(Value::Int(1)) => Ok(HandedOver::Yes),
        Ok(Value::Int(0)) => Ok(HandedOver::NotHeld),
        Ok(Value::Nil) => Ok(HandedOver::Refused),
        Ok(other) => Err(Error::Server(format!(
            "unexpected DLOCK.RELEASE ... TO reply {other:?}"
        ))),
        Err(e) => Err(Error::Server(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn waiter(token: &str, set: Option<u32>) -> Waiter {
        Waiter {
            position: 1,
            token: token.into(),
            owner: None,
            shared: false,
            limit: 1,
            permits: 1,
            set,
            session: None,
            waited: Duration::ZERO,
            timeout: None,
        }
    }

    #[test]
    fn the_candidate_is_found_by_its_id_only() {
        let page = [
            waiter("w1x/a", None),
            waiter("w1/b", Some(2)),
            waiter("w1", None),
            waiter("w1/c", None),
            waiter("w1/d", None),
        ];
        assert_eq!(candidate_in(&page, "w1").as_deref(), Some("w1/c"));
        assert_eq!(candidate_in(&page, "w2"), None);
        assert!(check_id("").is_err() && check_id("a/b").is_err());
        assert!(check_id("w1").is_ok());
    }

    #[test]
    fn replies_are_told_apart_and_garbage_is_an_error() {
        assert_eq!(handover_reply(Ok(Value::Int(1))).unwrap(), HandedOver::Yes);
        assert_eq!(
            handover_reply(Ok(Value::Int(0))).unwrap(),
            HandedOver::NotHeld
        );
        assert_eq!(handover_reply(Ok(Value::Nil)).unwrap(), HandedOver::Refused);
        assert!(handover_reply(Ok(Value::Int(7))).is_err());
    }
}
