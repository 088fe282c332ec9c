//! What the three sides of sets.rs send (`write`): the plain-Redis side is
//! an all-or-nothing lock of several `SET NX PX` keys as a Lua script
//! (written for this bench, in the manner of the Redlock unlock script).
//! And the checks that every side is correct on the server under test:
//! before measuring (`self_check`, `probe`) and after each measured run
//! (`Counters`).
//!
//! The script is as cheap as an honest one can be: one `EXISTS` of every
//! key, then one `SET ... PX` per key; it gives no fence and does not
//! recognise a retry by the same token (dlock's `MACQUIRE` does both).

use crate::cases::{name, TTL};
use crate::common::{self, Server};
use crate::load;

pub const MEMBERS: usize = 3;
const SUFFIX: [&[u8]; MEMBERS] = [b"}:a", b"}:b", b"}:c"];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Side {
    Set,
    Singles,
    Lua,
}

pub const SIDES: [Side; 3] = [Side::Set, Side::Singles, Side::Lua];

impl Side {
    /// Commands per set and half (acquire or release).
    pub fn per_set(self) -> usize {
        if self == Side::Singles {
            MEMBERS
        } else {
            1
        }
    }
}

/// The members' names of set `n`.
fn members(n: u64) -> [[u8; 20]; MEMBERS] {
    let base = name(b"{set:", n);
    let mut out = [[0u8; 20]; MEMBERS];
    for (o, s) in out.iter_mut().zip(SUFFIX) {
        o[..17].copy_from_slice(base.as_ref());
        o[17..].copy_from_slice(s);
    }
    out
}

/// Appends command `m` (0..side.per_set()) of acquiring or releasing set
/// `n` for token `t`. `sha`: the scripts' (acquire, release).
pub fn write(
    buf: &mut Vec<u8>,
    side: Side,
    acquiring: bool,
    m: usize,
    n: u64,
    t: u64,
    sha: &[String; 2],
) {
    let keys = members(n);
    let [a, b, c] = [&keys[0][..], &keys[1][..], &keys[2][..]];
    let tok = name(b"tok:", t);
    let t = tok.as_ref();
    match (side, acquiring) {
        (Side::Set, true) => {
            load::command(buf, &[b"DLOCK.MACQUIRE", b"3", a, b, c, t, TTL]);
        }
        (Side::Set, false) => load::command(buf, &[b"DLOCK.MRELEASE", b"3", a, b, c, t]),
        (Side::Singles, true) => load::command(buf, &[b"DLOCK.ACQUIRE", &keys[m], t, TTL]),
        (Side::Singles, false) => load::command(buf, &[b"DLOCK.RELEASE", &keys[m], t]),
        (Side::Lua, true) => {
            load::command(buf, &[b"EVALSHA", sha[0].as_bytes(), b"3", a, b, c, t, TTL]);
        }
        (Side::Lua, false) => {
            load::command(buf, &[b"EVALSHA", sha[1].as_bytes(), b"3", a, b, c, t]);
        }
    }
}

/// KEYS: the set's members; ARGV: token, ttl ms. 1 when every key was
/// free and is now set to the token, else 0 and nothing changed.
pub const SET_ACQUIRE: &str = "\
if redis.call('EXISTS', unpack(KEYS)) > 0 then
  return 0
end
for i = 1, #KEYS do
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
end
return 1";

/// KEYS: the set's members; ARGV: token. Compare-and-delete of each key:
/// how many the token held (and are now deleted).
pub const SET_RELEASE: &str = "\
local n = 0
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[1] then
    redis.call('DEL', KEYS[i])
    n = n + 1
  end
end
return n";

fn eval(c: &mut redis::Connection, script: &str, keys: &[&str], argv: &[&str]) -> i64 {
    redis::cmd("EVAL")
        .arg(script)
        .arg(keys.len())
        .arg(keys)
        .arg(argv)
        .query(c)
        .unwrap_or_else(|e| panic!("Lua set lock self-check: {e}"))
}

/// The scripts against `server` (plain Redis): a set is taken whole or not
/// at all, a stranger cannot release, the owner releases every member.
/// Panics on the first wrong answer.
pub fn self_check(server: &Server) {
    let mut c = server.conn();
    let s = "Lua set lock self-check";
    let abc = ["{t}:a", "{t}:b", "{t}:c"];
    let bcd = ["{t}:b", "{t}:c", "{t}:d"];
    assert_eq!(eval(&mut c, SET_ACQUIRE, &abc, &["t1", "5000"]), 1, "{s}");
    let got: Vec<String> = redis::cmd("MGET").arg(&abc).query(&mut c).unwrap();
    assert_eq!(got, ["t1", "t1", "t1"], "{s}: every member set");
    let pttl: i64 = redis::cmd("PTTL").arg("{t}:c").query(&mut c).unwrap();
    assert!(pttl > 0 && pttl <= 5000, "{s}: PX set ({pttl})");
    assert_eq!(eval(&mut c, SET_ACQUIRE, &bcd, &["t2", "5000"]), 0, "{s}");
    assert_eq!(common::dbsize(&mut c), 3, "{s}: nothing of a refused set");
    assert_eq!(eval(&mut c, SET_RELEASE, &abc, &["t2"]), 0, "{s}: stranger");
    assert_eq!(eval(&mut c, SET_RELEASE, &abc, &["t1"]), 3, "{s}: owner");
    assert_eq!(common::dbsize(&mut c), 0, "{s}: released");
    assert_eq!(eval(&mut c, SET_ACQUIRE, &bcd, &["t2", "5000"]), 1, "{s}");
    assert_eq!(eval(&mut c, SET_RELEASE, &bcd, &["t2"]), 3, "{s}: owner");
}

/// Whether this build has the set commands: `Err` with the reason to print
/// when it does not. Checks all or nothing and one fence on the way.
pub fn probe(server: &Server) -> Result<(), String> {
    let mut c = server.conn();
    let macquire = |c: &mut redis::Connection, keys: &[&str], tok: &str| {
        redis::cmd("DLOCK.MACQUIRE")
            .arg(keys.len())
            .arg(keys)
            .arg(tok)
            .arg(30000)
            .query::<Option<i64>>(c)
    };
    let abc = ["{p}:a", "{p}:b", "{p}:c"];
    let fence = match macquire(&mut c, &abc, "t1") {
        Ok(Some(f)) if f > 0 => f,
        Ok(other) => return Err(format!("`DLOCK.MACQUIRE 3 ...` answered {other:?}")),
        Err(e) if e.to_string().to_lowercase().contains("unknown command") => {
            return Err("this build has no `DLOCK.MACQUIRE` (it has no sets of resources)".into())
        }
        Err(e) => return Err(format!("`DLOCK.MACQUIRE 3 ...` failed: {e}")),
    };
    let fences: Vec<i64> = abc
        .iter()
        .map(|k| {
            let info: Vec<redis::Value> = redis::cmd("DLOCK.INFO").arg(*k).query(&mut c)?;
            Ok(match info.get(3) {
                Some(redis::Value::Int(f)) => *f,
                _ => 0,
            })
        })
        .collect::<redis::RedisResult<_>>()
        .map_err(|e| format!("`DLOCK.INFO` failed: {e}"))?;
    if fences != [fence; 3] {
        return Err(format!("members' fences {fences:?}, not {fence}"));
    }
    let busy = macquire(&mut c, &["{p}:c", "{p}:d", "{p}:e"], "t2");
    let size = common::dbsize(&mut c);
    if !matches!(busy, Ok(None)) || size != 3 {
        return Err(format!("a set with a busy member: {busy:?}, {size} keys"));
    }
    match redis::cmd("DLOCK.MRELEASE")
        .arg(3)
        .arg(&abc)
        .arg("t1")
        .query::<i64>(&mut c)
    {
        Ok(3) if common::dbsize(&mut c) == 0 => Ok(()),
        other => Err(format!("`DLOCK.MRELEASE 3 ...` answered {other:?}")),
    }
}

/// Server counters read around a measured run, to check that the workload
/// did what it claims: every granted set was released member by member by
/// its owner (not by expiry), and nothing is left.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counters {
    grants: u64,
    releases: u64,
    sets: u64,
    dels: u64,
    expired: u64,
}

/// The server's `used_cpu_user + used_cpu_sys`, µs.
pub fn cpu_us(c: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("cpu").query(c).expect("INFO cpu");
    let field = |name: &str| -> f64 {
        let prefix = format!("{name}:");
        info.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    };
    ((field("used_cpu_user") + field("used_cpu_sys")) * 1e6) as u64
}

fn cmdstat(info: &str, cmd: &str) -> u64 {
    let prefix = format!("cmdstat_{cmd}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

impl Counters {
    pub fn read(c: &mut redis::Connection) -> Counters {
        let info: String = redis::cmd("INFO").arg("everything").query(c).expect("INFO");
        let field = |name: &str| -> f64 {
            let prefix = format!("{name}:");
            info.lines()
                .find_map(|l| l.strip_prefix(&prefix))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0.0)
        };
        Counters {
            grants: field("dlock_grants") as u64,
            releases: field("dlock_releases") as u64,
            sets: cmdstat(&info, "set"),
            dels: cmdstat(&info, "del"),
            expired: field("expired_keys") as u64,
        }
    }

    /// Panics unless the run from `self` to `after` granted something and
    /// released exactly what it granted: `members` releases per dlock grant
    /// (1 for single locks, 3 for a set), one script `DEL` per script
    /// `SET`, a whole number of sets, no expiry, an empty database.
    pub fn check(self, after: Counters, c: &mut redis::Connection, members: u64, what: &str) {
        let (grants, releases) = (after.grants - self.grants, after.releases - self.releases);
        let (sets, dels) = (after.sets - self.sets, after.dels - self.dels);
        let moved = if grants > 0 {
            releases == grants * members && sets == 0
        } else {
            sets > 0 && dels == sets && sets.is_multiple_of(3)
        };
        let left = common::dbsize(c);
        assert!(
            moved && left == 0 && after.expired == self.expired,
            "{what}: {grants} grants, {releases} releases, {sets} SETs, {dels} DELs, \
             {} expired, {left} keys left",
            after.expired - self.expired
        );
    }
}
