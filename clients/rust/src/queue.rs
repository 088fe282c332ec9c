//! Where requests wait: `DLOCK.POSITION` and `DLOCK.WAITERS` as commands
//! and typed replies, without I/O (the blocking and async lockers run
//! them).

use crate::error::{Error, Result};
use redis::{Cmd, Value};
use std::time::Duration;

/// The most waiters one [`crate::Locker::waiters`] call lists (the
/// server's bound on `COUNT`).
pub const MAX_WAITERS_PAGE: usize = 1000;

/// One request waiting in a resource's queue, as `DLOCK.WAITERS` shows it
/// (docs/commands/dlock.waiters.md).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Waiter {
    /// Its place in the queue: 1 is served next.
    pub position: u64,
    /// The token it waits with (lossy UTF-8 for a binary token).
    pub token: String,
    /// Its `OWNER`, when one was named.
    pub owner: Option<String>,
    /// A `SHARED` request (a reader); else exclusive.
    pub shared: bool,
    /// The `LIMIT` it asks with (1 for a lock).
    pub limit: u32,
    /// How many of the semaphore's permits it asks for (`PERMITS`; 1
    /// when the server shows none).
    pub permits: u32,
    /// For a set request: how many resources it waits for.
    pub set: Option<u32>,
    /// The session it is bound to, if any.
    pub session: Option<String>,
    /// How long it has waited so far.
    pub waited: Duration,
    /// How long its wait has left; `None`: until granted.
    pub timeout: Option<Duration>,
}

fn resource_arg(resource: &str) -> Result<()> {
    if resource.is_empty() {
        return Err(Error::Invalid("resource must not be empty".into()));
    }
    Ok(())
}

/// `DLOCK.POSITION resource token`.
pub(crate) fn position_cmd(resource: &str, token: &str) -> Result<Cmd> {
    resource_arg(resource)?;
    if token.is_empty() {
        return Err(Error::Invalid("token must not be empty".into()));
    }
    let mut c = redis::cmd("DLOCK.POSITION");
    c.arg(resource).arg(token);
    Ok(c)
}

/// The position (1: served next), or `None` when the token does not wait.
pub(crate) fn position_reply(v: Value) -> Result<Option<u64>> {
    match v {
        Value::Nil => Ok(None),
        Value::Int(n) if n >= 1 => Ok(Some(n as u64)),
        other => Err(Error::Server(format!(
            "unexpected DLOCK.POSITION reply {other:?}"
        ))),
    }
}

/// `DLOCK.RESIZE resource n`, `n` from 2 to [`crate::MAX_LIMIT`].
pub(crate) fn resize_cmd(resource: &str, n: u32) -> Result<Cmd> {
    resource_arg(resource)?;
    if !(2..=crate::MAX_LIMIT).contains(&n) {
        return Err(Error::Invalid(format!(
            "a resize takes a limit from 2 to {}, not {n}",
            crate::MAX_LIMIT
        )));
    }
    let mut cmd = redis::cmd("DLOCK.RESIZE");
    cmd.arg(resource).arg(n);
    Ok(cmd)
}

/// The previous limit, or `None` when nothing held the resource.
pub(crate) fn resize_reply(v: Value) -> Result<Option<u32>> {
    match v {
        Value::Nil => Ok(None),
        Value::Int(n) => u32::try_from(n)
            .map(Some)
            .map_err(|_| Error::Server(format!("unexpected DLOCK.RESIZE reply {n}"))),
        other => Err(Error::Server(format!(
            "unexpected DLOCK.RESIZE reply {other:?}"
        ))),
    }
}

/// `DLOCK.WAITERS resource OFFSET offset COUNT count`.
pub(crate) fn waiters_cmd(resource: &str, offset: u64, count: usize) -> Result<Cmd> {
    resource_arg(resource)?;
    if !(1..=MAX_WAITERS_PAGE).contains(&count) {
        return Err(Error::Invalid(format!(
            "count must be from 1 to {MAX_WAITERS_PAGE}, not {count}"
        )));
    }
    if offset > i64::MAX as u64 {
        return Err(Error::Invalid(format!(
            "offset must be at most 2^63-1, not {offset}"
        )));
    }
    let mut c = redis::cmd("DLOCK.WAITERS");
    c.arg(resource)
        .arg("OFFSET")
        .arg(offset)
        .arg("COUNT")
        .arg(count);
    Ok(c)
}

/// The waiters of a `DLOCK.WAITERS` reply (maps in RESP3, flat arrays in
/// RESP2), fields this client does not know skipped.
pub(crate) fn waiters_reply(v: Value) -> Result<Vec<Waiter>> {
    let bad = |what: &dyn std::fmt::Debug| {
        Error::Server(format!("unexpected DLOCK.WAITERS reply: {what:?}"))
    };
    let Value::Array(items) = v else {
        return Err(bad(&v));
    };
    items
        .into_iter()
        .map(|item| {
            let pairs: Vec<(Value, Value)> = match item {
                Value::Map(pairs) => pairs,
                Value::Array(flat) if flat.len() % 2 == 0 => {
                    let mut it = flat.into_iter();
                    std::iter::from_fn(|| Some((it.next()?, it.next()?))).collect()
                }
                other => return Err(bad(&other)),
            };
            waiter_of(pairs).ok_or_else(|| bad(&"a waiter without its fields"))
        })
        .collect()
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(n) => Some(*n),
        _ => None,
    }
}

fn waiter_of(pairs: Vec<(Value, Value)>) -> Option<Waiter> {
    let (mut position, mut token, mut mode, mut limit) = (None, None, None, None);
    let (mut waited, mut timeout) = (None, None);
    let mut w = Waiter {
        position: 0,
        token: String::new(),
        owner: None,
        shared: false,
        limit: 1,
        permits: 1,
        set: None,
        session: None,
        waited: Duration::ZERO,
        timeout: None,
    };
    for (k, v) in &pairs {
        match text(k)?.as_str() {
            "position" => position = int(v).and_then(|n| u64::try_from(n).ok()),
            "token" => token = text(v),
            "owner" => w.owner = Some(text(v)?),
            "mode" => mode = text(v),
            "limit" => limit = int(v).and_then(|n| u32::try_from(n).ok()),
            "permits" => w.permits = int(v).and_then(|n| u32::try_from(n).ok())?,
            "set" => w.set = Some(int(v).and_then(|n| u32::try_from(n).ok())?),
            "session" => w.session = Some(text(v)?),
            "waited" => waited = int(v).and_then(|n| u64::try_from(n).ok()),
            "timeout" => timeout = int(v),
            _ => {}
        }
    }
    w.position = position?;
    w.token = token?;
    w.shared = match mode?.as_str() {
        "shared" => true,
        "exclusive" => false,
        _ => return None,
    };
    w.limit = limit?;
    w.waited = Duration::from_millis(waited?);
    w.timeout = match timeout? {
        -1 => None,
        ms => Some(Duration::from_millis(u64::try_from(ms).ok()?)),
    };
    Some(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn commands_refuse_what_the_server_would() {
        assert!(position_cmd("", "t").is_err());
        assert!(position_cmd("r", "").is_err());
        assert!(position_cmd("r", "t").is_ok());
        assert!(waiters_cmd("r", 0, 0).is_err());
        assert!(waiters_cmd("r", 0, 1001).is_err());
        assert!(waiters_cmd("r", u64::MAX, 10).is_err());
        assert!(waiters_cmd("r", i64::MAX as u64, 1000).is_ok());
        assert!(waiters_cmd("", 0, 10).is_err());
    }

    #[test]
    fn replies_parse_in_resp2_and_resp3() {
        assert_eq!(position_reply(Value::Nil).unwrap(), None);
        assert_eq!(position_reply(Value::Int(3)).unwrap(), Some(3));
        assert!(position_reply(Value::Int(0)).is_err());
        assert!(position_reply(bulk("x")).is_err());
        let fields = vec![
            (bulk("position"), Value::Int(2)),
            (bulk("token"), bulk("t")),
            (bulk("owner"), bulk("o")),
            (bulk("mode"), bulk("shared")),
            (bulk("limit"), Value::Int(1)),
            (bulk("set"), Value::Int(3)),
            (bulk("session"), bulk("s")),
            (bulk("waited"), Value::Int(1500)),
            (bulk("timeout"), Value::Int(-1)),
            (bulk("priority"), Value::Int(7)),
        ];
        let flat: Vec<Value> = fields
            .iter()
            .flat_map(|(k, v)| [k.clone(), v.clone()])
            .collect();
        let expected = Waiter {
            position: 2,
            token: "t".into(),
            owner: Some("o".into()),
            shared: true,
            limit: 1,
            permits: 1,
            set: Some(3),
            session: Some("s".into()),
            waited: Duration::from_millis(1500),
            timeout: None,
        };
        for v in [
            Value::Array(vec![Value::Map(fields.clone())]),
            Value::Array(vec![Value::Array(flat)]),
        ] {
            assert_eq!(waiters_reply(v).unwrap(), std::slice::from_ref(&expected));
        }
        let mut timed = fields.clone();
        timed[8].1 = Value::Int(250);
        let w = waiters_reply(Value::Array(vec![Value::Map(timed)])).unwrap();
        assert_eq!(w[0].timeout, Some(Duration::from_millis(250)));
        let mut weighted = fields.clone();
        weighted[4].1 = Value::Int(5);
        weighted.push((bulk("permits"), Value::Int(3)));
        let w = waiters_reply(Value::Array(vec![Value::Map(weighted.clone())])).unwrap();
        assert_eq!((w[0].limit, w[0].permits), (5, 3));
        weighted.last_mut().unwrap().1 = Value::Int(-1);
        assert!(waiters_reply(Value::Array(vec![Value::Map(weighted)])).is_err());
        let mut bad_mode = fields.clone();
        bad_mode[3].1 = bulk("both");
        assert!(waiters_reply(Value::Array(vec![Value::Map(bad_mode)])).is_err());
        assert!(waiters_reply(Value::Array(vec![Value::Map(fields[1..].to_vec())])).is_err());
        assert!(waiters_reply(Value::Nil).is_err());
        assert_eq!(waiters_reply(Value::Array(vec![])).unwrap(), []);
    }
}
