//! The plain-Redis sides of holds.rs: a read lock in Redisson's data layout
//! and an expirable semaphore on a sorted set, as Lua scripts written for
//! this bench (not copied from any client), and a self-check that they are
//! correct on the server under test.
//!
//! Read lock, in the layout of Redisson's `RedissonReadLock`: the lock key
//! is a hash with a `mode` field (`read` or `write`) and one field per
//! holder with its reentrancy count; each hold of a reader also has a
//! timeout key `{lock}:<holder>:rwlock_timeout:<n>` with the hold's TTL,
//! and the hash lives as long as its longest hold. Releasing the last hold
//! of a reader while others remain walks the other holders' timeout keys to
//! set the hash's TTL to the longest one left. Where Redis allows it, calls
//! are merged (one `HSET` of two fields, `SET ... PX` instead of `SET` +
//! `PEXPIRE`), and nothing is published for waiters: if anything this is
//! cheaper than Redisson's own scripts.
//!
//! Semaphore: the key is a sorted set of permit ids scored by their expiry
//! (server time, ms). Acquire drops expired permits and adds one if fewer
//! than `n` are left; release is a plain `ZREM`.

use crate::common::Server;

/// KEYS: lock, `{lock}:<holder>:rwlock_timeout`; ARGV: ttl ms, holder,
/// `<holder>:write` (the holder's write field: a writer may also read).
/// 1 granted, 0 refused.
pub const READ_ACQUIRE: &str = "\
local mode = redis.call('HGET', KEYS[1], 'mode')
if mode == false then
  redis.call('HSET', KEYS[1], 'mode', 'read', ARGV[2], 1)
  redis.call('SET', KEYS[2] .. ':1', 1, 'PX', ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return 1
end
if mode == 'read' or (mode == 'write' and redis.call('HEXISTS', KEYS[1], ARGV[3]) == 1) then
  local n = redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
  redis.call('SET', KEYS[2] .. ':' .. n, 1, 'PX', ARGV[1])
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[1]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[1])
  end
  return 1
end
return 0";

/// KEYS: lock, `{lock}:<holder>:rwlock_timeout`, `{lock}` (the prefix of
/// every holder's timeout keys); ARGV: holder. 1 released, 0 not held.
pub const READ_RELEASE: &str = "\
local mode = redis.call('HGET', KEYS[1], 'mode')
if mode == false or redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return 0
end
local n = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
if n == 0 then
  redis.call('HDEL', KEYS[1], ARGV[1])
end
redis.call('DEL', KEYS[2] .. ':' .. (n + 1))
if redis.call('HLEN', KEYS[1]) > 1 then
  local longest = -3
  local all = redis.call('HGETALL', KEYS[1])
  for i = 1, #all, 2 do
    local count = tonumber(all[i + 1])
    if count then
      for c = count, 1, -1 do
        local left = redis.call('PTTL', KEYS[3] .. ':' .. all[i] .. ':rwlock_timeout:' .. c)
        if left > longest then longest = left end
      end
    end
  end
  if longest > 0 then
    redis.call('PEXPIRE', KEYS[1], longest)
    return 1
  end
  if mode == 'write' then
    return 1
  end
end
redis.call('DEL', KEYS[1])
return 1";

/// The write side, for the self-check only. KEYS: lock; ARGV: ttl ms,
/// `<holder>:write`. 1 granted, 0 refused.
const WRITE_ACQUIRE: &str = "\
local mode = redis.call('HGET', KEYS[1], 'mode')
if mode == false then
  redis.call('HSET', KEYS[1], 'mode', 'write', ARGV[2], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return 1
end
if mode == 'write' and redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then
  redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return 1
end
return 0";

/// KEYS: semaphore; ARGV: ttl ms, permit id, n. 1 granted, 0 refused.
pub const SEM_ACQUIRE: &str = "\
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. now)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[1]), ARGV[2])
  return 1
end
return 0";

/// `{lock}:<holder>:rwlock_timeout`, the prefix of a holder's timeout keys.
pub fn timeout_prefix(out: &mut Vec<u8>, lock: &[u8], holder: &[u8]) {
    out.clear();
    out.push(b'{');
    out.extend_from_slice(lock);
    out.extend_from_slice(b"}:");
    out.extend_from_slice(holder);
    out.extend_from_slice(b":rwlock_timeout");
}

/// Script calls on one connection, for the self-check.
struct Lua(redis::Connection);

impl Lua {
    fn eval(&mut self, script: &str, keys: &[&str], argv: &[&str]) -> i64 {
        redis::cmd("EVAL")
            .arg(script)
            .arg(keys.len())
            .arg(keys)
            .arg(argv)
            .query(&mut self.0)
            .unwrap_or_else(|e| panic!("Lua self-check: {e}"))
    }
    fn read(&mut self, who: &str, ttl: &str) -> i64 {
        let (p, w) = (
            format!("{{L}}:{who}:rwlock_timeout"),
            format!("{who}:write"),
        );
        self.eval(READ_ACQUIRE, &["L", &p], &[ttl, who, &w])
    }
    fn unread(&mut self, who: &str) -> i64 {
        let p = format!("{{L}}:{who}:rwlock_timeout");
        self.eval(READ_RELEASE, &["L", &p, "{L}"], &[who])
    }
    fn write(&mut self, who: &str, ttl: &str) -> i64 {
        self.eval(WRITE_ACQUIRE, &["L"], &[ttl, &format!("{who}:write")])
    }
    fn permits(&mut self, ids: &[&str], ttl: &str) -> Vec<i64> {
        ids.iter()
            .map(|id| self.eval(SEM_ACQUIRE, &["S"], &[ttl, id, "3"]))
            .collect()
    }
    fn flush(&mut self) {
        let _: () = redis::cmd("FLUSHALL").query(&mut self.0).unwrap();
    }
}

/// The scripts against `server` (plain Redis): readers coexist and keep a
/// writer out until the last one leaves or expires, reentrancy counts, a
/// stranger cannot release; a semaphore never grants more than n permits,
/// and released or expired permits free their place. Panics on the first
/// wrong answer.
pub fn self_check(server: &Server) {
    let mut l = Lua(server.conn());
    let r = "Lua read lock self-check";
    let steps = [
        ("r1 reads", l.read("r1", "5000"), 1),
        ("r2 reads too", l.read("r2", "5000"), 1),
        ("r1 reenters", l.read("r1", "5000"), 1),
        ("a writer waits for the readers", l.write("w", "5000"), 0),
        ("a stranger cannot release", l.unread("x"), 0),
        ("r1 leaves once", l.unread("r1"), 1),
        ("r1 leaves", l.unread("r1"), 1),
        ("the writer waits for r2", l.write("w", "5000"), 0),
        ("r2 leaves", l.unread("r2"), 1),
        ("the writer enters", l.write("w", "5000"), 1),
        ("a reader waits for the writer", l.read("r3", "5000"), 0),
        ("the writer may also read", l.read("w", "5000"), 1),
    ];
    for (what, got, want) in steps {
        assert_eq!(got, want, "{r}: {what}");
    }
    l.flush();
    assert_eq!(
        [l.read("r1", "100"), l.read("r2", "5000")],
        [1, 1],
        "{r}: readers"
    );
    std::thread::sleep(std::time::Duration::from_millis(150));
    assert_eq!(l.write("w", "5000"), 0, "{r}: a writer waits for r2");
    assert_eq!(l.unread("r2"), 1, "{r}: r2 leaves");
    assert_eq!(
        l.write("w", "5000"),
        1,
        "{r}: r1 expired, the writer enters"
    );
    let s = "Lua semaphore self-check";
    assert_eq!(
        l.permits(&["p1", "p2", "p3", "p4"], "100"),
        [1, 1, 1, 0],
        "{s}: n = 3"
    );
    let zrem: i64 = redis::cmd("ZREM")
        .arg("S")
        .arg("p2")
        .query(&mut l.0)
        .unwrap();
    assert_eq!(zrem, 1, "{s}: ZREM releases");
    assert_eq!(
        l.permits(&["p4", "p5"], "100"),
        [1, 0],
        "{s}: a release frees one place"
    );
    std::thread::sleep(std::time::Duration::from_millis(150));
    let after = l.permits(&["p6", "p7", "p8", "p9"], "5000");
    assert_eq!(
        after,
        [1, 1, 1, 0],
        "{s}: expired permits free their places"
    );
    l.flush();
}
