//! What the sides of guard.rs send (`write`): a write that only the lock's
//! holder may make, as `DLOCK.GUARD` (the `FENCE` and the `TOKEN` form) and
//! as the Lua script clients run on plain Redis today (the lock a `SET NX
//! PX` key holding the token: `GET` it, compare, then write), and the
//! unguarded `SET` for what the guard itself costs. And the checks that
//! every side is correct on the server under test: before measuring
//! (`self_check`, `probe`) and after each measured run (`set_calls`).
//!
//! Names: resource `{g:<12 digits>}`, its data keys `{g:<12 digits>}:<i>`
//! (one hash tag: in a cluster they share the resource's slot, as
//! `DLOCK.GUARD` requires), owner token `tok:<12 digits>` (cases.rs).

use crate::cases::{owner, TTL};
use crate::common::{self, Server};

/// The single write, as users write it: `GET`-compare, then `SET`. KEYS:
/// lock, data key; ARGV: token, value. `SET`'s reply, or nil (not held).
pub const LUA_SET: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('SET', KEYS[2], ARGV[2]) end";

/// Several writes under one check. KEYS: lock, data keys; ARGV: token, one
/// value per data key. The number of writes, or nil (not held). Cheaper
/// than the guard's reply (an array of every `SET`'s reply) and not all or
/// none on an error in the middle: if anything, in Lua's favour.
pub const LUA_BATCH: &str = "\
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return false
end
for i = 2, #KEYS do
  redis.call('SET', KEYS[i], ARGV[i])
end
return #KEYS - 1";

/// TTL of the populated locks: nothing may expire during a run.
pub const LONG_TTL: &[u8] = b"3600000";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Side {
    /// `DLOCK.GUARD res FENCE f ...`
    Fence,
    /// `DLOCK.GUARD res TOKEN tok ...`
    Token,
    /// `EVALSHA` of `LUA_SET` / `LUA_BATCH` (plain Redis).
    Lua,
    /// `SET key value`, no check at all (plain Redis).
    Set,
}

impl Side {
    /// Whether this side runs on a server with the module.
    pub fn module(self) -> bool {
        matches!(self, Side::Fence | Side::Token)
    }
    pub fn label(self) -> &'static str {
        match self {
            Side::Fence => "FENCE",
            Side::Token => "TOKEN",
            Side::Lua => "Lua",
            Side::Set => "SET",
        }
    }
}

/// Resource `n`: `{g:<12 digits>}`.
pub fn resource(n: u64) -> Vec<u8> {
    let mut b = b"{g:".to_vec();
    push_padded(&mut b, n);
    b.push(b'}');
    b
}

fn push_padded(out: &mut Vec<u8>, n: u64) {
    let mut digits = [b'0'; 12];
    let mut n = n;
    for d in digits.iter_mut().rev() {
        *d = b'0' + (n % 10) as u8;
        n /= 10;
    }
    out.extend_from_slice(&digits);
}

fn push_num(out: &mut Vec<u8>, n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut n = n;
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// RESP written in place, without collecting the arguments first (a batch
/// of 100 is 406 arguments).
struct Resp<'a>(&'a mut Vec<u8>);

impl Resp<'_> {
    fn array(&mut self, len: usize) -> &mut Self {
        self.0.push(b'*');
        push_num(self.0, len as u64);
        self.0.extend_from_slice(b"\r\n");
        self
    }
    fn bulk(&mut self, a: &[u8]) -> &mut Self {
        self.0.push(b'$');
        push_num(self.0, a.len() as u64);
        self.0.extend_from_slice(b"\r\n");
        self.0.extend_from_slice(a);
        self.0.extend_from_slice(b"\r\n");
        self
    }
    fn num(&mut self, n: u64) -> &mut Self {
        let mut b = Vec::with_capacity(20);
        push_num(&mut b, n);
        self.bulk(&b)
    }
    /// Data key `i` of resource `res`: `res:i`.
    fn key(&mut self, res: &[u8], i: usize) -> &mut Self {
        let (mut len, mut rest) = (res.len() + 2, i);
        while rest >= 10 {
            len += 1;
            rest /= 10;
        }
        self.0.push(b'$');
        push_num(self.0, len as u64);
        self.0.extend_from_slice(b"\r\n");
        self.0.extend_from_slice(res);
        self.0.push(b':');
        push_num(self.0, i as u64);
        self.0.extend_from_slice(b"\r\n");
        self
    }
}

/// What one command writes: resource `n` (held by `owner(n)` with fence
/// `fence`), `value` into its data keys 0..writes.
pub struct Write<'a> {
    pub n: u64,
    pub fence: &'a [u8],
    pub value: &'a [u8],
}

/// Appends `side`'s command for `w`: with `batch` 0 the single form (one
/// `SET` of data key 0); else `batch` writes in one command (`BATCH` for
/// the guard, `LUA_BATCH` for Lua; not for `Side::Set`). `sha`: the
/// scripts' (single, batch).
pub fn write(buf: &mut Vec<u8>, side: Side, batch: usize, w: &Write, sha: &[String; 2]) {
    let res = resource(w.n);
    let tok = owner(w.n);
    let mut r = Resp(buf);
    let proof: (&[u8], &[u8]) = match side {
        Side::Token => (b"TOKEN", tok.as_ref()),
        _ => (b"FENCE", w.fence),
    };
    match (side, batch) {
        (Side::Fence | Side::Token, 0) => {
            r.array(7).bulk(b"DLOCK.GUARD").bulk(&res).bulk(proof.0);
            r.bulk(proof.1).bulk(b"SET").key(&res, 0).bulk(w.value);
        }
        (Side::Fence | Side::Token, b) => {
            r.array(6 + 4 * b).bulk(b"DLOCK.GUARD").bulk(&res);
            r.bulk(proof.0).bulk(proof.1).bulk(b"BATCH").num(b as u64);
            for i in 0..b {
                r.bulk(b"3").bulk(b"SET").key(&res, i).bulk(w.value);
            }
        }
        (Side::Lua, 0) => {
            r.array(7)
                .bulk(b"EVALSHA")
                .bulk(sha[0].as_bytes())
                .bulk(b"2");
            r.bulk(&res).key(&res, 0).bulk(tok.as_ref()).bulk(w.value);
        }
        (Side::Lua, b) => {
            r.array(5 + 2 * b).bulk(b"EVALSHA").bulk(sha[1].as_bytes());
            r.num(b as u64 + 1).bulk(&res);
            for i in 0..b {
                r.key(&res, i);
            }
            r.bulk(tok.as_ref());
            for _ in 0..b {
                r.bulk(w.value);
            }
        }
        (Side::Set, _) => {
            r.array(3).bulk(b"SET").key(&res, 0).bulk(w.value);
        }
    }
}

/// Takes resources 0..count for their owners on a fresh server: dlock locks
/// (`module`; returns their fences, as decimal text) or `SET NX PX` keys.
pub fn populate(server: &Server, module: bool, count: u64) -> Vec<Vec<u8>> {
    let mut c = server.conn();
    let mut fences = Vec::with_capacity(if module { count as usize } else { 0 });
    let mut from = 0;
    while from < count {
        let to = (from + 1000).min(count);
        let mut p = redis::pipe();
        for n in from..to {
            let (res, tok) = (resource(n), owner(n));
            if module {
                p.cmd("DLOCK.ACQUIRE")
                    .arg(&res)
                    .arg(tok.as_ref())
                    .arg(LONG_TTL);
            } else {
                p.cmd("SET")
                    .arg(&res)
                    .arg(tok.as_ref())
                    .arg("NX")
                    .arg("PX")
                    .arg(LONG_TTL);
            }
        }
        if module {
            let got: Vec<Option<i64>> = p.query(&mut c).expect("populate: DLOCK.ACQUIRE");
            for f in got {
                let f = f.expect("populate: a lock of a fresh server was busy");
                fences.push(f.to_string().into_bytes());
            }
        } else {
            let got: Vec<Option<String>> = p.query(&mut c).expect("populate: SET NX PX");
            assert!(got.iter().all(Option::is_some), "populate: a key existed");
        }
        from = to;
    }
    fences
}

/// `cmdstat_set` calls so far: every side's writes are `SET`s (the
/// script's and the guard's inner ones included).
pub fn set_calls(c: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(c)
        .expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_set:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn get(c: &mut redis::Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(c).expect("GET")
}

/// The scripts against `server` (plain Redis): the holder writes, a
/// stranger writes nothing. Panics on the first wrong answer.
pub fn self_check(server: &Server) {
    let mut c = server.conn();
    let s = "Lua guarded-write self-check";
    let _: () = redis::cmd("SET")
        .arg("{l}")
        .arg("t1")
        .arg("NX")
        .arg("PX")
        .arg(TTL)
        .query(&mut c)
        .unwrap();
    let eval = |c: &mut redis::Connection, script: &str, keys: &[&str], argv: &[&str]| {
        redis::cmd("EVAL")
            .arg(script)
            .arg(keys.len())
            .arg(keys)
            .arg(argv)
            .query::<redis::Value>(c)
            .unwrap_or_else(|e| panic!("{s}: {e}"))
    };
    let ok = eval(&mut c, LUA_SET, &["{l}", "{l}:0"], &["t1", "a"]);
    assert_eq!(ok, redis::Value::Okay, "{s}: the holder's SET");
    let nil = eval(&mut c, LUA_SET, &["{l}", "{l}:0"], &["t2", "b"]);
    assert_eq!(nil, redis::Value::Nil, "{s}: a stranger's SET");
    assert_eq!(get(&mut c, "{l}:0").as_deref(), Some("a"), "{s}: kept");
    let keys = ["{l}", "{l}:0", "{l}:1", "{l}:2"];
    let n = eval(&mut c, LUA_BATCH, &keys, &["t1", "x", "y", "z"]);
    assert_eq!(n, redis::Value::Int(3), "{s}: the holder's batch");
    let nil = eval(&mut c, LUA_BATCH, &keys, &["t2", "p", "q", "r"]);
    assert_eq!(nil, redis::Value::Nil, "{s}: a stranger's batch");
    let got: Vec<String> = redis::cmd("MGET").arg(&keys[1..]).query(&mut c).unwrap();
    assert_eq!(got, ["x", "y", "z"], "{s}: the holder's values kept");
    assert_eq!(common::dbsize(&mut c), 4, "{s}");
}

/// Whether this build has `DLOCK.GUARD` as the bench uses it: `Err` with
/// the reason to print when it does not. Checks both proofs, a batch and a
/// refusal on the way.
pub fn probe(server: &Server) -> Result<(), String> {
    let mut c = server.conn();
    let fence: i64 = match redis::cmd("DLOCK.ACQUIRE")
        .arg("{p}")
        .arg("t1")
        .arg(TTL)
        .query::<Option<i64>>(&mut c)
    {
        Ok(Some(f)) => f,
        other => return Err(format!("`DLOCK.ACQUIRE {{p}} t1 30000` answered {other:?}")),
    };
    let guard = |c: &mut redis::Connection, proof: &[&str], rest: &[&str]| {
        redis::cmd("DLOCK.GUARD")
            .arg("{p}")
            .arg(proof)
            .arg(rest)
            .query::<redis::Value>(c)
    };
    let fence = fence.to_string();
    match guard(&mut c, &["FENCE", &fence], &["SET", "{p}:0", "a"]) {
        Ok(redis::Value::Okay) => {}
        Err(e) if e.to_string().to_lowercase().contains("unknown command") => {
            return Err("this build has no `DLOCK.GUARD`".into())
        }
        other => return Err(format!("`DLOCK.GUARD ... FENCE f SET` answered {other:?}")),
    }
    match guard(&mut c, &["TOKEN", "t1"], &["SET", "{p}:1", "b"]) {
        Ok(redis::Value::Okay) => {}
        other => return Err(format!("`DLOCK.GUARD ... TOKEN t SET` answered {other:?}")),
    }
    let batch = [
        "BATCH", "2", "3", "SET", "{p}:2", "c", "3", "SET", "{p}:3", "d",
    ];
    match guard(&mut c, &["FENCE", &fence], &batch) {
        Ok(redis::Value::Array(v)) if v == [redis::Value::Okay, redis::Value::Okay] => {}
        other => return Err(format!("`DLOCK.GUARD ... BATCH 2` answered {other:?}")),
    }
    match guard(&mut c, &["TOKEN", "t2"], &["SET", "{p}:0", "z"]) {
        Err(e) if e.code() == Some("NOTHELD") => {}
        other => return Err(format!("a stranger's `DLOCK.GUARD` answered {other:?}")),
    }
    let got: Vec<Option<String>> = redis::cmd("MGET")
        .arg(&["{p}:0", "{p}:1", "{p}:2", "{p}:3"])
        .query(&mut c)
        .map_err(|e| e.to_string())?;
    let want = ["a", "b", "c", "d"].map(|v| Some(v.to_string()));
    if got != want {
        return Err(format!("after the probe's writes the keys hold {got:?}"));
    }
    Ok(())
}
