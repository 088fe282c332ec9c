//! From an `Op` to the command sent, and from the reply to a `Value`.
use crate::history::{Command, HoldView, InfoView, Mode, Op, Outcome, Value};
use crate::proxy::Frame;

/// The arguments of the command `op` describes.
pub fn args(op: &Op) -> Vec<String> {
    let mut a: Vec<String> = Vec::new();
    let set = |a: &mut Vec<String>, name: &str| {
        a.push(name.into());
        a.push(op.resources.len().to_string());
        a.extend(op.resources.iter().cloned());
        a.push(op.token.clone());
    };
    let single = |a: &mut Vec<String>, name: &str| {
        a.push(name.into());
        a.push(op.resources[0].clone());
    };
    match op.command {
        Command::Acquire => {
            single(&mut a, "DLOCK.ACQUIRE");
            a.push(op.token.clone());
            a.push(op.ttl_ms.unwrap_or(1000).to_string());
            if op.mode == Mode::Shared {
                a.push("SHARED".into());
            }
            if let Some(n) = op.limit {
                a.extend(["LIMIT".into(), n.to_string()]);
            }
            if let Some(k) = op.permits {
                a.extend(["PERMITS".into(), k.to_string()]);
            }
            if let Some(o) = &op.owner {
                a.extend(["OWNER".into(), o.clone()]);
            }
            if let Some(p) = op.priority {
                a.extend(["PRIORITY".into(), p.to_string()]);
            }
            if let Some(w) = op.wait_ms {
                a.extend(["WAIT".into(), w.to_string()]);
            }
            session(&mut a, op);
        }
        Command::Release => {
            single(&mut a, "DLOCK.RELEASE");
            a.push(op.token.clone());
            if let Some(to) = &op.to {
                a.extend(["TO".into(), to.clone()]);
            }
        }
        Command::Resize => {
            single(&mut a, "DLOCK.RESIZE");
            a.push(op.limit.unwrap_or(2).to_string());
        }
        Command::Extend => {
            single(&mut a, "DLOCK.EXTEND");
            a.push(op.token.clone());
            a.push(op.ttl_ms.unwrap_or(1000).to_string());
        }
        Command::Info => single(&mut a, "DLOCK.INFO"),
        Command::Macquire => {
            set(&mut a, "DLOCK.MACQUIRE");
            a.push(op.ttl_ms.unwrap_or(1000).to_string());
            if op.mode == Mode::Shared {
                a.push("SHARED".into());
            }
            if let Some(w) = op.wait_ms {
                a.extend(["WAIT".into(), w.to_string()]);
            }
            session(&mut a, op);
        }
        Command::Mrelease => set(&mut a, "DLOCK.MRELEASE"),
        Command::Mextend => {
            set(&mut a, "DLOCK.MEXTEND");
            a.push(op.ttl_ms.unwrap_or(1000).to_string());
        }
        Command::Observe => {
            single(&mut a, "DLOCK.OBSERVE");
            if let Some(v) = &op.since {
                a.extend(["SINCE".into(), v.clone()]);
            }
            if let Some(w) = op.wait_ms {
                a.extend(["WAIT".into(), w.to_string()]);
            }
        }
        Command::SessionOpen => {
            a.extend(["DLOCK.SESSION".into(), "OPEN".into(), id(op)]);
            a.push(op.ttl_ms.unwrap_or(1000).to_string());
            if op.bind {
                a.push("BIND".into());
            }
            if let Some(d) = op.lock_delay_ms {
                a.extend(["LOCKDELAY".into(), d.to_string()]);
            }
        }
        Command::SessionKeepalive => {
            a.extend(["DLOCK.SESSION".into(), "KEEPALIVE".into(), id(op)]);
            if let Some(ttl) = op.ttl_ms {
                a.push(ttl.to_string());
            }
        }
        Command::SessionClose => a.extend(["DLOCK.SESSION".into(), "CLOSE".into(), id(op)]),
        Command::SessionKill => a.extend(["DLOCK.SESSION".into(), "KILL".into(), id(op)]),
        // Nothing is sent: the client closes its connection.
        Command::Disconnect => {}
        Command::Guard => guard(&mut a, op),
        Command::SinkRead => {
            let r = &op.resources[0];
            a.extend([
                "EVAL".into(),
                READ_SINK.into(),
                "2".into(),
                sink_key(r),
                count_key(r),
            ]);
        }
    }
    a
}

/// The guarded sink of `resource`: a list in the resource's slot.
pub fn sink_key(resource: &str) -> String {
    format!("{{{resource}}}:sink")
}

/// The counter a guarded batch increments beside its push.
pub fn count_key(resource: &str) -> String {
    format!("{{{resource}}}:count")
}

/// The list and the counter in one atomic read.
const READ_SINK: &str =
    "return {redis.call('LRANGE', KEYS[1], 0, -1), tonumber(redis.call('GET', KEYS[2]) or '0')}";

/// A guard called from Lua: its arguments are the script's.
const GUARD_FROM_LUA: &str = "return redis.call('DLOCK.GUARD', unpack(ARGV))";

/// `DLOCK.GUARD r TOKEN t | FENCE f  RPUSH {r}:sink entry`, or with
/// `batch` `BATCH 2  3 RPUSH {r}:sink entry  2 INCR {r}:count`; with
/// `lua` the same from a script.
fn guard(a: &mut Vec<String>, op: &Op) {
    let Some(g) = &op.guard else {
        return;
    };
    let r = &op.resources[0];
    if g.lua {
        a.extend(["EVAL".into(), GUARD_FROM_LUA.into(), "3".into()]);
        a.extend([r.clone(), sink_key(r), count_key(r)]);
        a.push(r.clone());
    } else {
        a.extend(["DLOCK.GUARD".into(), r.clone()]);
    }
    match g.fence {
        Some(f) => a.extend(["FENCE".into(), f.to_string()]),
        None => a.extend(["TOKEN".into(), op.token.clone()]),
    }
    let push = ["RPUSH".to_string(), sink_key(r), g.entry.clone()];
    if g.batch {
        a.extend(["BATCH".into(), "2".into(), "3".into()]);
        a.extend(push);
        a.extend(["2".into(), "INCR".into(), count_key(r)]);
    } else {
        a.extend(push);
    }
}

fn id(op: &Op) -> String {
    op.session.clone().unwrap_or_default()
}

/// `SESSION id` of a bound acquire.
fn session(a: &mut Vec<String>, op: &Op) {
    if let Some(s) = &op.session {
        a.extend(["SESSION".into(), s.clone()]);
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Decodes the reply to `command` (an error reply is `Fail`; a reply of an
/// unexpected shape is `Fail` too, naming it, so it shows in the report).
pub fn decode(command: Command, f: Frame) -> Outcome {
    let value = match (command, f) {
        (_, Frame::Error(e)) => return Outcome::Fail { error: text(&e) },
        (Command::Info, f) => info(&f),
        (Command::Observe, f) => observed(&f),
        (Command::SinkRead, f) => sink(&f),
        // A batch's replies: the push's (the list's length) stands for it.
        (Command::Guard, Frame::Array(Some(items))) => match items.first() {
            Some(Frame::Int(n)) => Some(Value::Int(*n)),
            _ => None,
        },
        (_, Frame::Bulk(None) | Frame::Array(None)) => Some(Value::Nil),
        (Command::Acquire | Command::Macquire, Frame::Int(n)) if n > 0 => {
            Some(Value::Fence(n as u64))
        }
        (_, Frame::Int(n)) => Some(Value::Int(n)),
        _ => None,
    };
    match value {
        Some(value) => Outcome::Ok { value },
        None => Outcome::Fail {
            error: format!("unexpected reply shape to {command:?}"),
        },
    }
}

/// `DLOCK.OBSERVE`: nil when the wait ran out, else `[version, INFO's
/// reply]`.
fn observed(f: &Frame) -> Option<Value> {
    match f {
        Frame::Bulk(None) | Frame::Array(None) => Some(Value::Nil),
        Frame::Array(Some(items)) => match &items[..] {
            [Frame::Bulk(Some(v)) | Frame::Simple(v), shown] => Some(Value::Observed {
                version: text(v),
                holds: match info(shown)? {
                    Value::Holds(view) => Some(view),
                    _ => None,
                },
            }),
            _ => None,
        },
        _ => None,
    }
}

/// The sink read: `[entries, count]`.
fn sink(f: &Frame) -> Option<Value> {
    let Frame::Array(Some(items)) = f else {
        return None;
    };
    let [Frame::Array(list), Frame::Int(count)] = &items[..] else {
        return None;
    };
    let mut entries = Vec::new();
    for e in list.iter().flatten() {
        match e {
            Frame::Bulk(Some(b)) | Frame::Simple(b) => entries.push(text(b)),
            _ => return None,
        }
    }
    Some(Value::Sink {
        entries,
        count: *count,
    })
}

/// A flat RESP2 array of field/value pairs, as (name, value) pairs.
fn pairs(items: &[Frame]) -> Vec<(String, &Frame)> {
    items
        .chunks(2)
        .filter_map(|kv| match kv {
            [Frame::Bulk(Some(k)) | Frame::Simple(k), v] => Some((text(k), v)),
            _ => None,
        })
        .collect()
}

fn field<'a>(p: &[(String, &'a Frame)], name: &str) -> Option<&'a Frame> {
    p.iter().find(|(k, _)| k == name).map(|(_, v)| *v)
}

fn int(f: Option<&Frame>) -> Option<i64> {
    match f? {
        Frame::Int(n) => Some(*n),
        _ => None,
    }
}

fn string(f: Option<&Frame>) -> Option<Option<String>> {
    match f? {
        Frame::Bulk(Some(b)) | Frame::Simple(b) => Some(Some(text(b))),
        Frame::Bulk(None) => Some(None),
        _ => None,
    }
}

/// `DLOCK.INFO`: nil when free; the plain form (token, fence, ttl,
/// waiters; token nil when reserved); the several-holds form (kind, limit,
/// waiters, holds).
fn info(f: &Frame) -> Option<Value> {
    let items = match f {
        Frame::Bulk(None) | Frame::Array(None) => return Some(Value::Nil),
        Frame::Array(Some(items)) => items,
        _ => return None,
    };
    let p = pairs(items);
    let waiters = int(field(&p, "waiters"))?.max(0) as u64;
    let mut holds = Vec::new();
    if let Some(Frame::Array(Some(list))) = field(&p, "holds") {
        for h in list {
            let Frame::Array(Some(h)) = h else {
                return None;
            };
            let hp = pairs(h);
            let mode = match string(field(&hp, "mode"))??.as_str() {
                "shared" => Mode::Shared,
                _ => Mode::Exclusive,
            };
            holds.push(HoldView {
                token: string(field(&hp, "token"))??,
                owner: string(field(&hp, "owner"))??,
                fence: int(field(&hp, "fence"))?.max(0) as u64,
                mode,
                ttl_ms: int(field(&hp, "ttl"))?,
            });
        }
    } else if let Some(token) = string(field(&p, "token"))? {
        holds.push(HoldView {
            owner: token.clone(),
            token,
            fence: int(field(&p, "fence"))?.max(0) as u64,
            mode: Mode::Exclusive,
            ttl_ms: int(field(&p, "ttl"))?,
        });
    }
    Some(Value::Holds(InfoView { holds, waiters }))
}
