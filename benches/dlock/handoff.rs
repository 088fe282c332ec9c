//! Handoff latency: how long after the holder lets go does a waiting client
//! hold the lock? dlock's blocking WAIT against the waiting schemes clients
//! use today, on the same server in the same run:
//!
//! - polling `SET NX PX` every 200 ms + up to 100 ms jitter, as node-redlock
//!   does by default (release: the Lua compare-and-delete);
//! - a BLPOP signal list, as python-redis-lock does (release: a Lua script
//!   that deletes the lock and pushes a signal the waiter BLPOPs on).
//!
//! Each round: the waiter is known to be waiting, the holder records t0 and
//! releases, the waiter records t1 when it holds the lock. Latency = t1 - t0.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use crate::common::Server;
use crate::stats::Summary;

const UNLOCK: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";

/// python-redis-lock's release: delete if owner, then signal one waiter.
pub const UNLOCK_SIGNAL: &str = "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end \
     redis.call('DEL', KEYS[1]); redis.call('DEL', KEYS[2]); \
     redis.call('LPUSH', KEYS[2], 1); redis.call('PEXPIRE', KEYS[2], 1000); return 1";

pub struct Results {
    pub plain_rtt: Summary,
    pub core_wakeup: Summary,
    pub dlock: Summary,
    pub polling: Summary,
    pub blpop: Summary,
}

pub fn run(server: &Server, rounds: usize, polling_rounds: usize) -> Results {
    Results {
        plain_rtt: plain_rtt(server, rounds),
        core_wakeup: core_wakeup(server, rounds),
        dlock: dlock_wait(server, rounds),
        polling: polling(server, polling_rounds),
        blpop: blpop(server, rounds),
    }
}

fn plain_rtt(server: &Server, rounds: usize) -> Summary {
    let mut c = server.conn();
    let mut samples = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t0 = Instant::now();
        let _: String = redis::cmd("PING").query(&mut c).expect("PING");
        samples.push(t0.elapsed());
    }
    Summary::of(samples)
}

/// Redis's own wake-up of a blocked client, for scale: a thread sits in
/// BLPOP, another client LPUSHes. Any handoff pays this at least once.
fn core_wakeup(server: &Server, rounds: usize) -> Summary {
    let mut pusher = server.conn();
    let mut probe = server.conn();
    let mut samples = Vec::with_capacity(rounds);
    let mut waiter = server.conn();
    for _ in 0..rounds {
        let (tx, rx) = mpsc::channel();
        let t = thread::spawn(move || {
            let _: Option<Vec<String>> = redis::cmd("BLPOP")
                .arg("bench:wake")
                .arg(10)
                .query(&mut waiter)
                .expect("BLPOP");
            let _ = tx.send(Instant::now());
            waiter
        });
        wait_blocked(&mut probe);
        let t0 = Instant::now();
        let _: i64 = redis::cmd("LPUSH")
            .arg("bench:wake")
            .arg(1)
            .query(&mut pusher)
            .expect("LPUSH");
        let t1 = rx.recv().expect("woken");
        samples.push(t1.duration_since(t0));
        waiter = t.join().expect("BLPOP thread");
    }
    Summary::of(samples)
}

fn wait_blocked(probe: &mut redis::Connection) {
    let end = Instant::now() + Duration::from_secs(10);
    while crate::info_u64(probe, "clients", "blocked_clients") < 1 {
        assert!(Instant::now() < end, "client never blocked");
        thread::sleep(Duration::from_micros(50));
    }
}

/// Two clients take turns: one holds, the other waits with WAIT, then roles
/// swap, so every round is a real queued handoff.
pub fn dlock_wait(server: &Server, rounds: usize) -> Summary {
    Summary::of(dlock_wait_on(server, "bench:handoff", rounds))
}

/// `dlock_wait` on the free resource `key`, which stays held afterwards;
/// the latency of each round, in order.
pub fn dlock_wait_on(server: &Server, key: &str, rounds: usize) -> Vec<Duration> {
    let mut holder = server.conn();
    let mut probe = server.conn();
    let mut samples = Vec::with_capacity(rounds);
    let mut held_by = "tok-0".to_string();
    let _: i64 = redis::cmd("DLOCK.ACQUIRE")
        .arg(key)
        .arg(&held_by)
        .arg(60_000)
        .query(&mut holder)
        .expect("first grant");
    let mut waiter = server.conn();
    for round in 1..=rounds {
        let token = format!("tok-{round}");
        let (tx, rx) = mpsc::channel();
        let resource = key.to_string();
        let waiting = thread::spawn(move || {
            let fence: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
                .arg(&resource)
                .arg(&token)
                .arg(60_000)
                .arg("WAIT")
                .arg(10_000)
                .query(&mut waiter)
                .expect("waiting ACQUIRE");
            let _ = tx.send((Instant::now(), fence));
            (waiter, token)
        });
        wait_for_waiters(&mut probe, key);
        let t0 = Instant::now();
        let released: i64 = redis::cmd("DLOCK.RELEASE")
            .arg(key)
            .arg(&held_by)
            .query(&mut holder)
            .expect("RELEASE");
        assert_eq!(released, 1);
        let (t1, fence) = rx.recv().expect("waiter reply");
        assert!(fence.is_some(), "waiter timed out");
        samples.push(t1.duration_since(t0));
        let (conn, token) = waiting.join().expect("waiter thread");
        // The waiter now holds the lock: it becomes the next holder.
        waiter = std::mem::replace(&mut holder, conn);
        held_by = token;
    }
    samples
}

pub fn wait_for_waiters(c: &mut redis::Connection, key: &str) {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let info: Vec<redis::Value> = redis::cmd("DLOCK.INFO")
            .arg(key)
            .query(c)
            .unwrap_or_default();
        let queued = info.chunks(2).any(|kv| {
            kv.first() == Some(&redis::Value::BulkString(b"waiters".to_vec()))
                && kv.get(1) == Some(&redis::Value::Int(1))
        });
        if queued {
            return;
        }
        assert!(Instant::now() < end, "waiter never queued");
        thread::sleep(Duration::from_micros(50));
    }
}

/// The holder sets, the waiter polls every 200 ms + jitter; t0 is taken
/// once the waiter's first try has been refused.
fn polling(server: &Server, rounds: usize) -> Summary {
    let mut holder = server.conn();
    let mut samples = Vec::with_capacity(rounds);
    let mut jitter = Jitter(0x2545_f491_4f6c_dd1d);
    for round in 0..rounds {
        let key = "bench:poll";
        let _ = set_nx(&mut holder, key, "holder");
        let mut waiter = server.conn();
        let (tx, rx) = mpsc::channel::<()>();
        let delays: Vec<u64> = (0..64).map(|_| 200 + jitter.next() % 101).collect();
        let token = format!("w-{round}");
        let t = thread::spawn(move || {
            let mut refused_once = Some(tx);
            for d in delays {
                let ok = set_nx(&mut waiter, key, &token);
                if ok {
                    let now = Instant::now();
                    unlock(&mut waiter, key, &token);
                    return now;
                }
                if let Some(tx) = refused_once.take() {
                    let _ = tx.send(());
                }
                thread::sleep(Duration::from_millis(d));
            }
            panic!("polling waiter never got the lock");
        });
        rx.recv().expect("first refusal");
        // Release at a random point of the waiter's sleep, as in real life.
        thread::sleep(Duration::from_millis(jitter.next() % 200));
        let t0 = Instant::now();
        unlock(&mut holder, key, "holder");
        let t1 = t.join().expect("polling waiter");
        samples.push(t1.duration_since(t0));
    }
    Summary::of(samples)
}

/// python-redis-lock's scheme: SET NX PX, and on failure BLPOP the signal
/// list, then try again.
fn blpop(server: &Server, rounds: usize) -> Summary {
    let mut holder = server.conn();
    let mut probe = server.conn();
    let mut samples = Vec::with_capacity(rounds);
    let (key, signal) = ("bench:blpop", "bench:blpop:signal");
    for round in 0..rounds {
        let _ = set_nx(&mut holder, key, "holder");
        let mut waiter = server.conn();
        let token = format!("w-{round}");
        let t = thread::spawn(move || loop {
            let ok = set_nx(&mut waiter, key, &token);
            if ok {
                let now = Instant::now();
                unlock(&mut waiter, key, &token);
                return now;
            }
            let _: Option<Vec<String>> = redis::cmd("BLPOP")
                .arg(signal)
                .arg(5)
                .query(&mut waiter)
                .expect("BLPOP");
        });
        wait_blocked(&mut probe);
        let t0 = Instant::now();
        let _: i64 = redis::cmd("EVAL")
            .arg(UNLOCK_SIGNAL)
            .arg(2)
            .arg(key)
            .arg(signal)
            .arg("holder")
            .query(&mut holder)
            .expect("unlock + signal");
        let t1 = t.join().expect("BLPOP waiter");
        samples.push(t1.duration_since(t0));
    }
    Summary::of(samples)
}

/// `SET key token NX PX ttl_ms`: whether the lock was taken.
pub fn set_nx_px(c: &mut redis::Connection, key: &str, token: &str, ttl_ms: u64) -> bool {
    let ok: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg(token)
        .arg("NX")
        .arg("PX")
        .arg(ttl_ms)
        .query(c)
        .expect("SET NX PX");
    ok.is_some()
}

fn set_nx(c: &mut redis::Connection, key: &str, token: &str) -> bool {
    set_nx_px(c, key, token, 60_000)
}

/// The Lua compare-and-delete release.
fn unlock(c: &mut redis::Connection, key: &str, token: &str) {
    let _: i64 = redis::cmd("EVAL")
        .arg(UNLOCK)
        .arg(1)
        .arg(key)
        .arg(token)
        .query(c)
        .expect("unlock");
}

/// xorshift64: reproducible jitter without a dependency.
struct Jitter(u64);

impl Jitter {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

pub fn print(r: &Results) {
    println!("### Handoff latency\n");
    println!("Time from the holder's release to the waiter holding the lock.\n");
    println!("| scheme | rounds | p50 ms | p99 ms | max ms |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    for (name, s) in [
        ("plain command round trip (PING), for scale", &r.plain_rtt),
        (
            "Redis's own BLPOP wake-up by LPUSH, for scale",
            &r.core_wakeup,
        ),
        ("dlock `ACQUIRE ... WAIT` (direct handoff)", &r.dlock),
        ("BLPOP signal list (python-redis-lock)", &r.blpop),
        (
            "polling `SET NX PX` every 200 ms + 0-100 ms jitter (node-redlock)",
            &r.polling,
        ),
    ] {
        println!(
            "| {name} | {} | {} | {} | {} |",
            s.count(),
            s.ms(0.5),
            s.ms(0.99),
            s.ms(1.0)
        );
    }
    println!();
}
