//! `DLOCK.INFO` as the tests read it: free, reserved for the queue (token
//! nil, fence 0, ttl -2), or held (the plain map or the list form), in
//! RESP2 or RESP3; and snapshots of several resources in one `EXEC`.
use super::common::lock::*;
use super::common::*;
use redis::{ConnectionLike, Value};

/// What `DLOCK.INFO` shows of one resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shown {
    Free,
    /// Nobody holds it, requests are queued: token nil, fence 0, ttl -2.
    Reserved {
        waiters: i64,
    },
    /// Held: every live hold as (token, fence, mode), and the queue.
    Held {
        holds: Vec<(String, i64, String)>,
        waiters: i64,
    },
}

impl Shown {
    pub fn waiters(&self) -> i64 {
        match self {
            Shown::Free => 0,
            Shown::Reserved { waiters } | Shown::Held { waiters, .. } => *waiters,
        }
    }
    pub fn holds(&self) -> &[(String, i64, String)] {
        match self {
            Shown::Held { holds, .. } => holds,
            _ => &[],
        }
    }
    /// The fence of `token`'s hold, if it holds.
    pub fn fence_of(&self, token: &str) -> Option<i64> {
        self.holds().iter().find(|h| h.0 == token).map(|h| h.1)
    }
    /// Held by exactly `token` (plain), with that fence.
    pub fn assert_owner(&self, token: &str, fence: i64) {
        match self {
            Shown::Held { holds, .. } if holds.len() == 1 && holds[0].0 == token => {
                assert_eq!(holds[0].1, fence, "fence of {token}: {self:?}");
            }
            other => panic!("expected a hold of {token} alone, got {other:?}"),
        }
    }
}

pub fn text(v: &Value) -> String {
    String::from_utf8(as_bytes(v)).expect("utf-8")
}

/// The pairs of a RESP3 map or a RESP2 flat array, keys as text.
pub fn pairs(v: &Value) -> Vec<(String, Value)> {
    match v {
        Value::Map(p) => p.iter().map(|(k, v)| (text(k), v.clone())).collect(),
        Value::Array(items) => {
            assert!(items.len() % 2 == 0, "odd flat map {items:?}");
            items
                .chunks(2)
                .map(|p| (text(&p[0]), p[1].clone()))
                .collect()
        }
        other => panic!("expected a map, got {other:?}"),
    }
}

/// Parses any `DLOCK.INFO` reply, checking the field names.
pub fn parse_shown(v: &Value) -> Shown {
    if *v == Value::Nil {
        return Shown::Free;
    }
    let p = pairs(v);
    let keys: Vec<&str> = p.iter().map(|(k, _)| k.as_str()).collect();
    if keys == ["token", "fence", "ttl", "waiters"] {
        let (fence, ttl, waiters) = (as_int(&p[1].1), as_int(&p[2].1), as_int(&p[3].1));
        if p[0].1 == Value::Nil {
            assert_eq!((fence, ttl), (0, -2), "a reserved resource: {v:?}");
            return Shown::Reserved { waiters };
        }
        let holds = vec![(text(&p[0].1), fence, "exclusive".to_string())];
        return Shown::Held { holds, waiters };
    }
    assert_eq!(keys, ["kind", "limit", "waiters", "holds"], "{v:?}");
    let Value::Array(hs) = &p[3].1 else {
        panic!("holds must be an array: {v:?}");
    };
    let holds = hs
        .iter()
        .map(|h| {
            let h = pairs(h);
            let (fence, mode) = (as_int(&h[2].1), text(&h[4].1));
            (text(&h[0].1), fence, mode)
        })
        .collect();
    Shown::Held {
        holds,
        waiters: as_int(&p[2].1),
    }
}

pub fn shown(c: &mut impl ConnectionLike, res: &str) -> Shown {
    let v: Value = redis::cmd("DLOCK.INFO")
        .arg(res)
        .query(c)
        .unwrap_or_else(|e| panic!("DLOCK.INFO {res}: {e}"));
    parse_shown(&v)
}

/// `DLOCK.INFO` of every resource in one `MULTI`/`EXEC`: one instant.
pub fn snapshot(c: &mut impl ConnectionLike, resources: &[&str]) -> Vec<Shown> {
    let mut p = redis::pipe();
    p.atomic();
    for r in resources {
        p.cmd("DLOCK.INFO").arg(*r);
    }
    let vs: Vec<Value> = p.query(c).expect("MULTI/EXEC of DLOCK.INFO");
    vs.iter().map(parse_shown).collect()
}

/// Polls until `n` requests are queued on `res`.
pub fn wait_queue(c: &mut impl ConnectionLike, res: &str, n: i64) {
    wait_until(SOON, &format!("{n} queued on {res}"), || {
        shown(c, res).waiters() == n
    });
}
