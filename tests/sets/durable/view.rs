//! A set as clients see it: `DLOCK.INFO` of its members (either form: a
//! plain lock, or the list of holds; a member reserved for its queue shows
//! no hold), read one member at a time or all in one `MULTI`.
use super::*;

/// One live hold as `DLOCK.INFO` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    pub token: Vec<u8>,
    pub fence: i64,
    pub ttl: i64,
    pub shared: bool,
}

/// `DLOCK.INFO` of a resource, either form: its live holds (none for a
/// resource reserved for its queue) and its waiters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    pub holds: Vec<Shown>,
    pub waiters: i64,
}

pub fn pairs(v: &Value) -> Vec<(String, Value)> {
    let flat = match v {
        Value::Array(items) => items
            .chunks(2)
            .map(|p| (p[0].clone(), p[1].clone()))
            .collect::<Vec<_>>(),
        Value::Map(m) => m.clone(),
        other => panic!("expected a map, got {other:?}"),
    };
    flat.into_iter()
        .map(|(k, v)| (String::from_utf8(as_bytes(&k)).unwrap(), v))
        .collect()
}

pub fn parse_view(v: &Value) -> Option<View> {
    if *v == Value::Nil {
        return None;
    }
    let p = pairs(v);
    let names: Vec<&str> = p.iter().map(|(k, _)| k.as_str()).collect();
    if names == ["token", "fence", "ttl", "waiters"] {
        let waiters = as_int(&p[3].1);
        if p[0].1 == Value::Nil {
            // Reserved for its queue: never shown as free.
            assert_eq!((as_int(&p[1].1), as_int(&p[2].1)), (0, -2), "{v:?}");
            return Some(View {
                holds: Vec::new(),
                waiters,
            });
        }
        let hold = Shown {
            token: as_bytes(&p[0].1),
            fence: as_int(&p[1].1),
            ttl: as_int(&p[2].1),
            shared: false,
        };
        return Some(View {
            holds: vec![hold],
            waiters,
        });
    }
    assert_eq!(names, ["kind", "limit", "waiters", "holds"], "{v:?}");
    let Value::Array(hs) = &p[3].1 else {
        panic!("holds: {v:?}")
    };
    let holds = hs
        .iter()
        .map(|h| {
            let f = pairs(h);
            let names: Vec<&str> = f.iter().map(|(k, _)| k.as_str()).collect();
            assert_eq!(names, ["token", "owner", "fence", "ttl", "mode"], "{h:?}");
            Shown {
                token: as_bytes(&f[0].1),
                fence: as_int(&f[2].1),
                ttl: as_int(&f[3].1),
                shared: as_bytes(&f[4].1) == b"shared",
            }
        })
        .collect();
    Some(View {
        holds,
        waiters: as_int(&p[2].1),
    })
}

pub fn view(c: &mut impl ConnectionLike, key: &str) -> Option<View> {
    let v: Value = redis::cmd("DLOCK.INFO").arg(key).query(c).unwrap();
    parse_view(&v)
}

/// Requests queued on `key` (0 when free).
pub fn queued(c: &mut impl ConnectionLike, key: &str) -> i64 {
    view(c, key).map_or(0, |v| v.waiters)
}

pub fn wait_queued(c: &mut impl ConnectionLike, key: &str, n: i64) {
    wait_until(SOON, &format!("{n} queued on {key}"), || {
        queued(c, key) == n
    });
}

/// `DLOCK.INFO` of every member in one `MULTI` (one moment), bracketed by
/// the test's clock: (views, ms before, ms after).
pub fn views_at_once(c: &mut Connection, members: &[&str]) -> (Vec<Option<View>>, i64, i64) {
    let mut pipe = redis::pipe();
    pipe.atomic();
    for m in members {
        pipe.cmd("DLOCK.INFO").arg(*m);
    }
    let t0 = now_ms();
    let replies: Vec<Value> = pipe.query(c).unwrap();
    let t1 = now_ms();
    (replies.iter().map(parse_view).collect(), t0, t1)
}

/// `tok` holds every member (shared or not), with one fence and one
/// absolute deadline: each member's ttl, read in one `MULTI` between `t0`
/// and `t1`, puts its deadline in `[t0 + ttl, t1 + ttl]`, and those ranges
/// must meet (1 ms of rounding either side). Returns the fence.
pub fn assert_set(c: &mut Connection, members: &[&str], tok: &str, shared: bool) -> i64 {
    let (views, t0, t1) = views_at_once(c, members);
    let mut fence = None;
    let (mut lo, mut hi) = (i64::MIN, i64::MAX);
    for (m, v) in members.iter().zip(&views) {
        let v = v
            .as_ref()
            .unwrap_or_else(|| panic!("{m}: not held (set of {tok})"));
        let mine: Vec<&Shown> = v
            .holds
            .iter()
            .filter(|h| h.token == tok.as_bytes())
            .collect();
        assert_eq!(mine.len(), 1, "{m}: one hold of {tok}: {v:?}");
        let h = mine[0];
        assert_eq!(h.shared, shared, "{m}: mode of {tok}'s hold: {v:?}");
        assert!(h.ttl > 0, "{m}: {tok}'s hold has a deadline: {v:?}");
        assert_eq!(
            *fence.get_or_insert(h.fence),
            h.fence,
            "{m}: one fence for the set"
        );
        lo = lo.max(t0 + h.ttl - 1);
        hi = hi.min(t1 + h.ttl + 1);
    }
    assert!(
        lo <= hi,
        "the members of {tok}'s set end at different times: {views:?} read in [{t0}, {t1}]"
    );
    fence.unwrap()
}

/// Nobody holds any member of `members` with `tok` (a member may be free
/// or held by others).
pub fn assert_no_hold_of(c: &mut Connection, members: &[&str], tok: &str) {
    for m in members {
        if let Some(v) = view(c, m) {
            assert!(
                v.holds.iter().all(|h| h.token != tok.as_bytes()),
                "{m} holds {tok}: {v:?}"
            );
        }
    }
}
