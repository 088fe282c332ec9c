//! The lock schemes of the contention section (contention.rs), each as one
//! client would run it: acquire (blocking until held) and release, with a
//! fresh random token per acquisition. Every client has its own command
//! connection (and, for the pub/sub scheme, its own subscriber connection,
//! as a separate process would).
//!
//! - `dlock`: `DLOCK.ACQUIRE res tok 30000 WAIT 30000` + `DLOCK.RELEASE`;
//!   the server queues waiters and hands the lock to the next one.
//! - `poll200` / `poll10`: `SET res tok NX PX 30000`, on refusal sleep and
//!   retry (node-redlock's defaults: 200 ms ± 100 ms; and an aggressive
//!   10 ms poller); release: the Lua compare-and-delete. Retries forever
//!   (node-redlock gives up after 10 by default).
//! - `pubsub`: Redisson's scheme: a script sets the lock or returns its
//!   PTTL; on refusal the client SUBSCRIBEs to the lock's channel, retries,
//!   and waits for a message (or the remaining TTL) between retries, then
//!   UNSUBSCRIBEs once it holds. Release: compare-and-delete + `PUBLISH`.
//!   Redisson keeps a hash with a reentrancy count; a plain string is used
//!   here (cheaper, if anything).
//! - `blpop`: python-redis-lock's scheme: `SET NX PX`, on refusal `BLPOP`
//!   the signal list (timeout: the lock's TTL) and retry; release:
//!   compare-and-delete, `DEL` + `LPUSH` + `PEXPIRE 1000` the signal list.
//!
//! Scripts go through `EVALSHA` (redis::Script), as redis-py's
//! `register_script` and Redisson do.

use std::time::Duration;

use crate::load::Rng;

/// TTL of every lock (ms): nothing expires during a run.
pub const TTL_MS: u64 = 30_000;
/// Longest a client blocks server-side before trying again (ms).
const BLOCK_MS: u64 = 30_000;

const UNLOCK: &str = crate::cases::UNLOCK;
/// Redisson's tryAcquire, on a string: nil when taken, else the PTTL.
const PUBSUB_LOCK: &str = "if redis.call('SET',KEYS[1],ARGV[1],'NX','PX',ARGV[2]) then \
     return nil end return redis.call('PTTL',KEYS[1])";
/// Redisson's unlock: compare-and-delete, then tell the subscribers.
const PUBSUB_UNLOCK: &str = "if redis.call('GET',KEYS[1])~=ARGV[1] then return 0 end \
     redis.call('DEL',KEYS[1]) redis.call('PUBLISH',KEYS[2],0) return 1";
/// python-redis-lock's unlock (`UNLOCK_SIGNAL` of handoff.rs).
const SIGNAL_UNLOCK: &str = crate::handoff::UNLOCK_SIGNAL;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Scheme {
    Dlock,
    /// Polling `SET NX PX`: base delay and ± jitter, ms.
    Poll(u64, u64),
    PubSub,
    Blpop,
}

impl Scheme {
    pub fn all() -> [Scheme; 5] {
        [
            Scheme::Dlock,
            Scheme::Poll(200, 100),
            Scheme::Poll(10, 0),
            Scheme::PubSub,
            Scheme::Blpop,
        ]
    }

    /// Short name (`DLOCK_BENCH_CONTENTION_SCHEMES`).
    pub fn short(self) -> &'static str {
        match self {
            Scheme::Dlock => "dlock",
            Scheme::Poll(200, _) => "poll200",
            Scheme::Poll(..) => "poll10",
            Scheme::PubSub => "pubsub",
            Scheme::Blpop => "blpop",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Scheme::Dlock => "dlock `ACQUIRE ... WAIT`",
            Scheme::Poll(200, _) => "`SET NX PX` polling 200±100 ms (node-redlock)",
            Scheme::Poll(..) => "`SET NX PX` polling 10 ms",
            Scheme::PubSub => "pub/sub (Redisson)",
            Scheme::Blpop => "BLPOP signal list (python-redis-lock)",
        }
    }

    pub fn is_polling(self) -> bool {
        matches!(self, Scheme::Poll(..))
    }

    /// The dlock scheme needs the module; the others run on plain servers.
    pub fn module(self) -> bool {
        self == Scheme::Dlock
    }
}

/// One client's connections and script handles.
pub struct Client {
    scheme: Scheme,
    conn: redis::Connection,
    sub: Option<redis::Connection>,
    unlock: redis::Script,
    pubsub_lock: redis::Script,
    pubsub_unlock: redis::Script,
    signal_unlock: redis::Script,
    /// Releases that found someone else's token (must stay 0).
    pub lost: u64,
}

/// Key names of one resource of one run.
pub struct Names {
    pub key: String,
    channel: String,
    signal: String,
}

impl Names {
    pub fn new(run: usize, resource: usize) -> Names {
        let key = format!("c{run}:lock:{resource}");
        Names {
            channel: format!("redisson_lock__channel:{{{key}}}"),
            signal: format!("{key}:signal"),
            key,
        }
    }
}

impl Client {
    pub fn new(scheme: Scheme, server: &crate::common::Server) -> Client {
        let conn = server.conn();
        // Blocking calls may last up to BLOCK_MS; the harness's 10 s read
        // timeout would cut them.
        let slack = Some(Duration::from_millis(BLOCK_MS + 10_000));
        conn.set_read_timeout(slack).expect("read timeout");
        let sub = (scheme == Scheme::PubSub).then(|| server.conn());
        Client {
            scheme,
            conn,
            sub,
            unlock: redis::Script::new(UNLOCK),
            pubsub_lock: redis::Script::new(PUBSUB_LOCK),
            pubsub_unlock: redis::Script::new(PUBSUB_UNLOCK),
            signal_unlock: redis::Script::new(SIGNAL_UNLOCK),
            lost: 0,
        }
    }

    /// Blocks until this client holds `names.key` under `token`.
    pub fn acquire(&mut self, names: &Names, token: &str, rng: &mut Rng) {
        match self.scheme {
            Scheme::Dlock => loop {
                let fence: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
                    .arg(&names.key)
                    .arg(token)
                    .arg(TTL_MS)
                    .arg("WAIT")
                    .arg(BLOCK_MS)
                    .query(&mut self.conn)
                    .expect("DLOCK.ACQUIRE");
                if fence.is_some() {
                    return;
                }
            },
            Scheme::Poll(base, jitter) => {
                while !set_nx(&mut self.conn, &names.key, token) {
                    let d = if jitter == 0 {
                        base
                    } else {
                        base - jitter + rng.below(2 * jitter + 1)
                    };
                    std::thread::sleep(Duration::from_millis(d));
                }
            }
            Scheme::PubSub => {
                if self.pubsub_try(names, token).is_none() {
                    return;
                }
                let sub = self.sub.as_mut().expect("subscriber connection");
                let mut ps = sub.as_pubsub();
                ps.subscribe(&names.channel).expect("SUBSCRIBE");
                loop {
                    let ttl: Option<i64> = self
                        .pubsub_lock
                        .key(&names.key)
                        .arg(token)
                        .arg(TTL_MS)
                        .invoke(&mut self.conn)
                        .expect("Redisson tryAcquire");
                    let Some(ttl) = ttl else { break };
                    let wait = Duration::from_millis(ttl.clamp(1, BLOCK_MS as i64) as u64);
                    ps.set_read_timeout(Some(wait)).expect("read timeout");
                    match ps.get_message() {
                        Ok(_) => {}
                        Err(e) if e.is_timeout() => {}
                        Err(e) => panic!("pub/sub wait: {e}"),
                    }
                }
                ps.set_read_timeout(Some(Duration::from_secs(10)))
                    .expect("read timeout");
                // Dropping `ps` UNSUBSCRIBEs, as Redisson does once it holds.
            }
            Scheme::Blpop => {
                while !set_nx(&mut self.conn, &names.key, token) {
                    let _: Option<(String, String)> = redis::cmd("BLPOP")
                        .arg(&names.signal)
                        .arg(BLOCK_MS / 1000)
                        .query(&mut self.conn)
                        .expect("BLPOP");
                }
            }
        }
    }

    /// Redisson's first try: `None` when taken, else the PTTL.
    fn pubsub_try(&mut self, names: &Names, token: &str) -> Option<i64> {
        self.pubsub_lock
            .key(&names.key)
            .arg(token)
            .arg(TTL_MS)
            .invoke(&mut self.conn)
            .expect("Redisson tryAcquire")
    }

    pub fn release(&mut self, names: &Names, token: &str) {
        let released: i64 = match self.scheme {
            Scheme::Dlock => redis::cmd("DLOCK.RELEASE")
                .arg(&names.key)
                .arg(token)
                .query(&mut self.conn)
                .expect("DLOCK.RELEASE"),
            Scheme::Poll(..) => self
                .unlock
                .key(&names.key)
                .arg(token)
                .invoke(&mut self.conn)
                .expect("unlock"),
            Scheme::PubSub => self
                .pubsub_unlock
                .key(&names.key)
                .key(&names.channel)
                .arg(token)
                .invoke(&mut self.conn)
                .expect("Redisson unlock"),
            Scheme::Blpop => self
                .signal_unlock
                .key(&names.key)
                .key(&names.signal)
                .arg(token)
                .invoke(&mut self.conn)
                .expect("python-redis-lock unlock"),
        };
        if released != 1 {
            self.lost += 1;
        }
    }
}

fn set_nx(c: &mut redis::Connection, key: &str, token: &str) -> bool {
    crate::handoff::set_nx_px(c, key, token, TTL_MS)
}
