//! Fault injection: lost replies (a proxy that drops the connection after the
//! server executed a command but before the client hears the answer), clients
//! paused past their lease writing to fenced storage, a master SIGKILLed under
//! load and its replica promoted, and corrupt DUMP payloads handed to the
//! loader.
//!
//! Schedules are seeded (`FAULTS_SEED` overrides the seed; every test prints
//! the one it used) and every wait is bounded.
mod common;
mod proxy;

use common::*;
use proxy::{Dropped, Frame, Proxy, Rng};
use redis::{RedisError, RedisResult, Value};
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Mutex;
use std::thread::{self, sleep};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

// ---------------------------------------------------------------- helpers

const IO: Duration = Duration::from_secs(10);

fn seed(test: u64) -> u64 {
    let base = std::env::var("FAULTS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x00d1_0c4f_a017_5eed);
    base ^ test.wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

fn connect(url: &str) -> redis::Connection {
    connect_within(url, IO).unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

fn acquire(
    c: &mut redis::Connection,
    res: &str,
    tok: &str,
    ttl_ms: u64,
) -> RedisResult<Option<i64>> {
    redis::cmd("DLOCK.ACQUIRE")
        .arg(res)
        .arg(tok)
        .arg(ttl_ms)
        .query(c)
}

fn release(c: &mut redis::Connection, res: &str, tok: &str) -> RedisResult<i64> {
    redis::cmd("DLOCK.RELEASE").arg(res).arg(tok).query(c)
}

fn extend(c: &mut redis::Connection, res: &str, tok: &str, ttl_ms: u64) -> RedisResult<i64> {
    redis::cmd("DLOCK.EXTEND")
        .arg(res)
        .arg(tok)
        .arg(ttl_ms)
        .query(c)
}

/// `WAIT 1 1000`: how many replicas acknowledged this client's writes.
fn wait1(c: &mut redis::Connection) -> RedisResult<i64> {
    redis::cmd("WAIT").arg(1).arg(1000).query(c)
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Info {
    token: Vec<u8>,
    fence: i64,
    ttl: i64,
    waiters: i64,
}

fn int(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        other => panic!("expected an integer, got {other:?}"),
    }
}

fn info(c: &mut redis::Connection, res: &str) -> Option<Info> {
    let v: Value = redis::cmd("DLOCK.INFO")
        .arg(res)
        .query(c)
        .unwrap_or_else(|e| panic!("DLOCK.INFO {res}: {e}"));
    let items = match v {
        Value::Nil => return None,
        Value::Array(items) => items,
        other => panic!("DLOCK.INFO {res}: unexpected reply {other:?}"),
    };
    assert_eq!(items.len(), 8, "DLOCK.INFO {res}: {items:?}");
    let mut m = BTreeMap::new();
    for pair in items.chunks(2) {
        let name = match &pair[0] {
            Value::BulkString(b) => String::from_utf8(b.clone()).unwrap(),
            Value::SimpleString(s) => s.clone(),
            other => panic!("field name {other:?}"),
        };
        m.insert(name, pair[1].clone());
    }
    let token = match &m["token"] {
        Value::BulkString(b) => b.clone(),
        other => panic!("token {other:?}"),
    };
    Some(Info {
        token,
        fence: int(&m["fence"]),
        ttl: int(&m["ttl"]),
        waiters: int(&m["waiters"]),
    })
}

fn ping(c: &mut redis::Connection) {
    let p: String = redis::cmd("PING").query(c).expect("PING");
    assert_eq!(p, "PONG");
}

fn dbsize(c: &mut redis::Connection) -> i64 {
    redis::cmd("DBSIZE").query(c).expect("DBSIZE")
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}

/// Joins a scoped thread, re-raising its panic (with its own message).
fn join<T>(h: thread::ScopedJoinHandle<'_, T>) -> T {
    h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))
}

// ------------------------------------------------- 1. lost replies (proxy)

const LR_RES: &str = "lr-res";
const LR_TTL: u64 = 5_000;
const LR_THREADS: usize = 8;
const LR_ROUNDS: usize = 100;
/// Chance, per DLOCK.ACQUIRE / DLOCK.RELEASE through the proxy, that the
/// server's reply is withheld and the connection dropped.
const LR_DROP_PER_MILLE: u64 = 150;

fn lock_command(args: &[Vec<u8>]) -> bool {
    args.first().is_some_and(|a| {
        a.eq_ignore_ascii_case(b"DLOCK.ACQUIRE") || a.eq_ignore_ascii_case(b"DLOCK.RELEASE")
    })
}

struct Hold {
    start: Instant,
    end: Instant,
    fence: i64,
    token: String,
}

#[derive(Default)]
struct LrStats {
    holds: Vec<Hold>,
    /// ACQUIRE replies lost that carried a fence (the grant happened).
    lost_grants: u64,
    /// Rounds with at least one lost grant reply.
    rounds_with_lost_grant: u64,
    /// ...and the retry with the same token then returned that same fence.
    regrants_same_fence: u64,
    lost_nils: u64,
    /// RELEASE replies lost that carried 1 (the release happened).
    lost_releases: u64,
    /// A retried RELEASE answered 0 because the lost one had released.
    zero_after_lost_release: u64,
    polls: u64,
}

/// The replies the proxy dropped for `cmd` with this token (argument 2).
fn drops_for(p: &Proxy, cmd: &[u8], tok: &str) -> Vec<Dropped> {
    p.dropped_where(|d| d.arg(0).eq_ignore_ascii_case(cmd) && d.arg(2) == tok.as_bytes())
}

fn lost_reply_client(t: usize, p: &Proxy, direct_url: &str, deadline: Instant) -> LrStats {
    let mut st = LrStats::default();
    let mut rng = Rng::new(seed(1) ^ (t as u64 + 1));
    let mut direct = connect(direct_url);
    let mut pc: Option<redis::Connection> = None;
    for round in 0..LR_ROUNDS {
        let tok = format!("c{t}-r{round}");

        // ACQUIRE until a definite answer, always with the same token.
        let mut lost_fence: Option<i64> = None;
        let mut errors = 0;
        let fence = loop {
            assert!(Instant::now() < deadline, "{tok}: acquire loop timed out");
            let c = pc.get_or_insert_with(|| connect(&p.url()));
            match acquire(c, LR_RES, &tok, LR_TTL) {
                Ok(Some(f)) => {
                    if let Some(lost) = lost_fence {
                        assert_eq!(
                            f, lost,
                            "{tok}: retry after a lost grant returned another fence"
                        );
                        st.regrants_same_fence += 1;
                    }
                    break f;
                }
                Ok(None) => {
                    assert!(
                        lost_fence.is_none(),
                        "{tok}: granted fence {lost_fence:?} (reply lost), but the retry got nil"
                    );
                    st.polls += 1;
                    sleep(Duration::from_micros(500 + rng.below(1500)));
                }
                Err(e) => {
                    pc = None;
                    errors += 1;
                    let d = drops_for(p, b"DLOCK.ACQUIRE", &tok);
                    assert_eq!(
                        d.len(),
                        errors,
                        "{tok}: client error `{e}` that the proxy did not cause"
                    );
                    match d.last().unwrap().reply {
                        Frame::Int(f) => {
                            match lost_fence {
                                Some(lost) => {
                                    assert_eq!(f, lost, "{tok}: two lost grants, two fences")
                                }
                                None => st.rounds_with_lost_grant += 1,
                            }
                            lost_fence = Some(f);
                            st.lost_grants += 1;
                        }
                        Frame::Bulk(None) => {
                            assert!(lost_fence.is_none(), "{tok}: lost grant, then lost nil");
                            st.lost_nils += 1;
                        }
                        ref other => panic!("{tok}: unexpected ACQUIRE reply {other:?}"),
                    }
                }
            }
        };

        // Critical section, on a direct (never dropped) connection.
        let start = Instant::now();
        let i = info(&mut direct, LR_RES).unwrap_or_else(|| panic!("{tok}: granted, yet free"));
        assert_eq!(
            (i.token.as_slice(), i.fence),
            (tok.as_bytes(), fence),
            "{tok}: DLOCK.INFO disagrees with the grant"
        );
        let v: Option<u64> = redis::cmd("GET")
            .arg("lr-counter")
            .query(&mut direct)
            .unwrap();
        let _: () = redis::cmd("SET")
            .arg("lr-counter")
            .arg(v.unwrap_or(0) + 1)
            .query(&mut direct)
            .unwrap();
        let end = Instant::now();
        st.holds.push(Hold {
            start,
            end,
            fence,
            token: tok.clone(),
        });

        // RELEASE until a definite answer, same token.
        let mut released = false; // a lost RELEASE reply said 1
        let mut errors = 0;
        loop {
            assert!(Instant::now() < deadline, "{tok}: release loop timed out");
            let c = pc.get_or_insert_with(|| connect(&p.url()));
            match release(c, LR_RES, &tok) {
                Ok(1) => {
                    assert!(!released, "{tok}: released twice");
                    break;
                }
                Ok(0) => {
                    assert!(
                        released,
                        "{tok}: RELEASE answered 0 though no earlier RELEASE took effect: \
                         the lock was lost while held"
                    );
                    st.zero_after_lost_release += 1;
                    break;
                }
                Ok(n) => panic!("{tok}: RELEASE answered {n}"),
                Err(e) => {
                    pc = None;
                    errors += 1;
                    let d = drops_for(p, b"DLOCK.RELEASE", &tok);
                    assert_eq!(
                        d.len(),
                        errors,
                        "{tok}: client error `{e}` that the proxy did not cause"
                    );
                    match d.last().unwrap().reply {
                        Frame::Int(1) => {
                            assert!(!released, "{tok}: two RELEASEs answered 1");
                            released = true;
                            st.lost_releases += 1;
                        }
                        Frame::Int(0) => assert!(released, "{tok}: lost RELEASE said 0"),
                        ref other => panic!("{tok}: unexpected RELEASE reply {other:?}"),
                    }
                }
            }
        }
        if let Some(i) = info(&mut direct, LR_RES) {
            assert_ne!(i.token, tok.as_bytes(), "{tok}: still held after release");
        }
    }
    st
}

#[test]
fn lost_replies_idempotent_retries_keep_mutual_exclusion() {
    let s = Server::start();
    let p = Proxy::start(s.port(), seed(1), LR_DROP_PER_MILLE, lock_command);
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(40);
    let stats: Vec<LrStats> = thread::scope(|sc| {
        let handles: Vec<_> = (0..LR_THREADS)
            .map(|t| {
                let (p, url) = (&p, s.url());
                sc.spawn(move || lost_reply_client(t, p, &url, deadline))
            })
            .collect();
        handles.into_iter().map(join).collect()
    });
    let elapsed = t0.elapsed();

    let sum = |f: fn(&LrStats) -> u64| stats.iter().map(f).sum::<u64>();
    let mut holds: Vec<&Hold> = stats.iter().flat_map(|s| &s.holds).collect();
    holds.sort_by_key(|h| h.start);
    for w in holds.windows(2) {
        assert!(
            w[0].end < w[1].start,
            "overlapping holds: {} (fence {}) and {} (fence {})",
            w[0].token,
            w[0].fence,
            w[1].token,
            w[1].fence
        );
        assert!(
            w[0].fence < w[1].fence,
            "fences not increasing in hold order: {} {} then {} {}",
            w[0].token,
            w[0].fence,
            w[1].token,
            w[1].fence
        );
    }
    let mut c = s.conn();
    let counter: u64 = redis::cmd("GET").arg("lr-counter").query(&mut c).unwrap();
    assert_eq!(holds.len(), LR_THREADS * LR_ROUNDS);
    assert_eq!(counter, holds.len() as u64, "lost or doubled increments");
    assert_eq!(info(&mut c, LR_RES), None, "lock left held at the end");

    let drops = p.drop_count();
    eprintln!(
        "lost replies (seed {:#x}): {} holds in {elapsed:?}; {drops} dropped connections \
         ({} replies delivered, {} connections); lost grant replies {} in {} rounds (the \
         retry returned the same fence in {}), lost nils {}, lost releases {} (retry answered 0: {}), nil polls {}",
        seed(1),
        holds.len(),
        p.forwarded(),
        p.connections(),
        sum(|s| s.lost_grants),
        sum(|s| s.rounds_with_lost_grant),
        sum(|s| s.regrants_same_fence),
        sum(|s| s.lost_nils),
        sum(|s| s.lost_releases),
        sum(|s| s.zero_after_lost_release),
        sum(|s| s.polls),
    );
    // Honesty: the faults happened, on both paths that matter.
    assert!(drops > 0, "no reply was dropped");
    assert!(sum(|s| s.lost_grants) > 0, "no grant reply was lost");
    assert_eq!(
        sum(|s| s.rounds_with_lost_grant),
        sum(|s| s.regrants_same_fence)
    );
    assert!(sum(|s| s.lost_releases) > 0, "no release reply was lost");
    assert_eq!(sum(|s| s.lost_releases), sum(|s| s.zero_after_lost_release));
}

// ------------------------------------------- 2. paused clients, fenced storage

const FS_RES: &str = "fs-res";
const FS_TTL: Duration = Duration::from_millis(100);
/// A write less than TTL - margin after the ACQUIRE was sent is certainly
/// inside the lease (the server's deadline is at least send + TTL - 1 ms).
const FS_MARGIN: Duration = Duration::from_millis(20);
const FS_WORKERS: usize = 4;
const FS_RUN: Duration = Duration::from_millis(2_000);

struct Grant {
    send: Instant,
    recv: Instant,
    fence: i64,
}

struct Write {
    fence: i64,
    paused: bool,
    /// From sending the ACQUIRE to the write (inside the storage lock).
    since_send: Duration,
    accepted: bool,
    /// Highest fence any client had received when the write happened.
    max_granted: i64,
}

/// Storage that accepts a write only with a fence above every fence it has
/// accepted before (the classic fencing-token check).
#[derive(Default)]
struct Storage {
    last_fence: i64,
    value: u64,
    writes: Vec<Write>,
}

#[test]
fn paused_holders_are_fenced_off_by_storage() {
    let s = Server::start();
    let storage = Mutex::new(Storage::default());
    let grants = Mutex::new(Vec::<Grant>::new());
    let max_granted = AtomicI64::new(0);
    let t0 = Instant::now();
    let end = t0 + FS_RUN;
    let hard_end = end + Duration::from_secs(15);
    thread::scope(|sc| {
        let handles: Vec<_> = (0..FS_WORKERS)
            .map(|t| {
                let (storage, grants, max_granted) = (&storage, &grants, &max_granted);
                let url = s.url();
                sc.spawn(move || {
                    let mut rng = Rng::new(seed(2) ^ (t as u64 + 1));
                    let mut c = connect(&url);
                    for i in 0.. {
                        let tok = format!("w{t}-{i}");
                        let (send, fence) = loop {
                            if Instant::now() >= end {
                                return;
                            }
                            let send = Instant::now();
                            match acquire(&mut c, FS_RES, &tok, FS_TTL.as_millis() as u64).unwrap()
                            {
                                Some(f) => break (send, f),
                                None => sleep(Duration::from_millis(1)),
                            }
                        };
                        let recv = Instant::now();
                        max_granted.fetch_max(fence, Ordering::SeqCst);
                        grants.lock().unwrap().push(Grant { send, recv, fence });
                        // A quarter of the holders stall past their lease.
                        let paused = rng.below(4) == 0;
                        if paused {
                            sleep(Duration::from_millis(150 + rng.below(151)));
                        }
                        {
                            let mut st = storage.lock().unwrap();
                            // Load first: if the write is still inside the
                            // lease at `since_send`, it was at the load too.
                            let max_granted = max_granted.load(Ordering::SeqCst);
                            let since_send = send.elapsed();
                            let accepted = fence > st.last_fence;
                            if accepted {
                                st.last_fence = fence;
                                st.value += 1;
                            }
                            st.writes.push(Write {
                                fence,
                                paused,
                                since_send,
                                accepted,
                                max_granted,
                            });
                        }
                        let r = release(&mut c, FS_RES, &tok).unwrap();
                        assert!(r == 0 || r == 1, "RELEASE answered {r}");
                        assert!(Instant::now() < hard_end, "worker {t} overran");
                    }
                })
            })
            .collect();
        handles.into_iter().for_each(join);
    });
    let elapsed = t0.elapsed();
    let st = storage.into_inner().unwrap();
    let mut grants = grants.into_inner().unwrap();

    // Fences are unique, and a grant requested after another grant's reply
    // arrived carries a larger fence.
    let unique: HashSet<i64> = grants.iter().map(|g| g.fence).collect();
    assert_eq!(unique.len(), grants.len(), "a fence was granted twice");
    grants.sort_by_key(|g| g.recv);
    let mut prefix_max = Vec::with_capacity(grants.len());
    let mut m = i64::MIN;
    for g in &grants {
        m = m.max(g.fence);
        prefix_max.push(m);
    }
    for b in &grants {
        let before = grants.partition_point(|a| a.recv < b.send);
        if before > 0 {
            assert!(
                prefix_max[before - 1] < b.fence,
                "fence {} was requested after fence {} was granted, yet is not larger",
                b.fence,
                prefix_max[before - 1]
            );
        }
    }

    let valid = |w: &&Write| w.since_send + FS_MARGIN < FS_TTL;
    let mut certainly_valid = 0;
    for w in st.writes.iter().filter(valid) {
        certainly_valid += 1;
        assert!(
            w.accepted,
            "write with fence {} {:?} after its ACQUIRE, inside the lease, was rejected",
            w.fence, w.since_send
        );
        assert_eq!(
            w.fence, w.max_granted,
            "a later fence was granted while fence {} was still inside its lease",
            w.fence
        );
    }
    let rejected = st.writes.iter().filter(|w| !w.accepted).count();
    let paused = st.writes.iter().filter(|w| w.paused).count();
    let paused_rejected = st.writes.iter().filter(|w| w.paused && !w.accepted).count();
    // A stale write the storage still accepted: its successor had been
    // granted but had not written yet. Fencing cannot stop that (the writes
    // still land in fence order); it is reported, not failed.
    let slipped = st
        .writes
        .iter()
        .filter(|w| w.accepted && w.fence < w.max_granted)
        .count();
    eprintln!(
        "fenced storage (seed {:#x}): {} grants, {} writes in {elapsed:?}: {} accepted, \
         {rejected} rejected as stale ({paused_rejected} of {paused} paused writers); \
         {certainly_valid} writes certainly inside their lease, all accepted; \
         {slipped} stale writes accepted before the successor wrote",
        seed(2),
        grants.len(),
        st.writes.len(),
        st.value,
    );
    assert!(rejected > 0, "the pauses produced no stale writer");
    assert!(certainly_valid > 0, "no write happened inside its lease");
}

// --------------------------------------------- 3. master SIGKILL under load

const MK_WORKERS: usize = 4;
const MK_TTL: u64 = 30_000;

struct Acked {
    res: String,
    tok: String,
    fence: i64,
    release_sent: bool,
}

#[derive(Default)]
struct MkStats {
    acked: Vec<Acked>,
    grants: u64,
    unacked: u64,
    extends: u64,
    releases: u64,
}

fn mk_worker(t: usize, url: &str, killed: &AtomicBool, max_pre: &AtomicI64) -> MkStats {
    let mut st = MkStats::default();
    let mut rng = Rng::new(seed(3) ^ (t as u64 + 1));
    let mut c = connect(url);
    let hard_end = Instant::now() + Duration::from_secs(30);
    // Errors are expected only once the master is being killed.
    let dead = |e: RedisError| {
        assert!(
            killed.load(Ordering::SeqCst),
            "worker {t}: {e} before the kill"
        );
    };
    for i in 0.. {
        assert!(Instant::now() < hard_end, "worker {t} never saw the kill");
        let (res, tok) = (format!("k{t}-{i}"), format!("tok{t}-{i}"));
        let fence = match acquire(&mut c, &res, &tok, MK_TTL) {
            Ok(Some(f)) => f,
            Ok(None) => panic!("{res} is new, yet not granted"),
            Err(e) => {
                dead(e);
                return st;
            }
        };
        max_pre.fetch_max(fence, Ordering::SeqCst);
        st.grants += 1;
        match wait1(&mut c) {
            Ok(n) if n >= 1 => {}
            Ok(_) => {
                st.unacked += 1;
                continue;
            }
            Err(e) => {
                dead(e);
                return st;
            }
        }
        st.acked.push(Acked {
            res: res.clone(),
            tok: tok.clone(),
            fence,
            release_sent: false,
        });
        if rng.below(3) == 0 {
            match extend(&mut c, &res, &tok, MK_TTL).and_then(|n| wait1(&mut c).map(|_| n)) {
                Ok(n) => assert_eq!(n, 1, "EXTEND {res} by its owner"),
                Err(e) => {
                    dead(e);
                    return st;
                }
            }
            st.extends += 1;
        }
        if rng.below(2) == 0 {
            // From here on the lock may or may not be held after the kill.
            st.acked.last_mut().unwrap().release_sent = true;
            match release(&mut c, &res, &tok).and_then(|n| wait1(&mut c).map(|_| n)) {
                Ok(n) => assert_eq!(n, 1, "RELEASE {res} by its owner"),
                Err(e) => {
                    dead(e);
                    return st;
                }
            }
            st.releases += 1;
        }
    }
    unreachable!()
}

/// What one worker saw on the promoted replica.
struct PostStats {
    grants: u64,
    min_fence: i64,
    /// ACQUIREs of free locks refused by the promotion quarantine.
    quarantined: u64,
    first_grant: Option<Instant>,
}

/// New owners on fresh resources on the promoted replica: refused while the
/// promotion quarantine runs, then granted for `MK_POST` more.
fn mk_post_worker(t: usize, url: &str) -> PostStats {
    let mut c = connect(url);
    let give_up = Instant::now() + Duration::from_secs(15);
    let mut st = PostStats {
        grants: 0,
        min_fence: i64::MAX,
        quarantined: 0,
        first_grant: None,
    };
    loop {
        let n = st.grants;
        let (res, tok) = (format!("p{t}-{n}"), format!("ptok{t}-{n}"));
        match acquire(&mut c, &res, &tok, MK_TTL) {
            Ok(Some(f)) => {
                let first = *st.first_grant.get_or_insert_with(Instant::now);
                st.min_fence = st.min_fence.min(f);
                st.grants += 1;
                assert_eq!(release(&mut c, &res, &tok).unwrap(), 1);
                if first.elapsed() > MK_POST {
                    return st;
                }
            }
            Ok(None) => panic!("{res} is new, yet not granted"),
            Err(e) if e.to_string().contains("QUARANTINE") => {
                assert!(st.first_grant.is_none(), "quarantined after a grant: {e}");
                assert!(Instant::now() < give_up, "quarantine never ended: {e}");
                st.quarantined += 1;
                sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("ACQUIRE {res} on the promoted replica: {e}"),
        }
    }
}

const MK_POST: Duration = Duration::from_millis(500);
/// The promotion quarantine set on the replica, when this build has one.
const MK_QUARANTINE: Duration = Duration::from_millis(500);

#[test]
fn master_kill_loses_no_acknowledged_lock_and_fences_keep_rising() {
    let mut m = Server::builder().arg("--appendonly").arg("yes").start();
    let r = Server::builder()
        .arg("--appendonly")
        .arg("yes")
        .replica_of(&m)
        .start();
    r.wait_for_sync(Duration::from_secs(20));
    // A build with a promotion quarantine refuses new grants after an
    // unplanned failover (for the longest TTL by default: 30 s here). Keep
    // it short, and check it is honoured.
    let quarantine: Option<Duration> = redis::cmd("CONFIG")
        .arg("SET")
        .arg("dlock.restart-quarantine")
        .arg(MK_QUARANTINE.as_millis() as u64)
        .query::<()>(&mut r.conn())
        .ok()
        .map(|()| MK_QUARANTINE);
    let killed = AtomicBool::new(false);
    let max_pre = AtomicI64::new(0);
    let url = m.url();
    let t0 = Instant::now();
    let stats: Vec<MkStats> = thread::scope(|sc| {
        let handles: Vec<_> = (0..MK_WORKERS)
            .map(|t| {
                let (url, killed, max_pre) = (&url, &killed, &max_pre);
                sc.spawn(move || mk_worker(t, url, killed, max_pre))
            })
            .collect();
        sleep(Duration::from_millis(1_500));
        killed.store(true, Ordering::SeqCst);
        m.kill9();
        handles.into_iter().map(join).collect()
    });
    let max_pre = max_pre.into_inner();

    let mut c = r.conn();
    let promote_sent = Instant::now();
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut c)
        .unwrap();
    let promoted_at = promote_sent - t0;
    let held: Vec<&Acked> = stats
        .iter()
        .flat_map(|s| &s.acked)
        .filter(|a| !a.release_sent)
        .collect();
    let mut lost = vec![];
    // New owners (fresh resources) start at once, while the main thread
    // checks the old owners' locks.
    let post: Vec<PostStats> = thread::scope(|sc| {
        let handles: Vec<_> = (0..MK_WORKERS)
            .map(|t| {
                let url = r.url();
                sc.spawn(move || mk_post_worker(t, &url))
            })
            .collect();
        assert_eq!(
            info_field(&mut c, "replication", "role").as_deref(),
            Some("master")
        );
        // Every acknowledged grant whose RELEASE was never sent must be
        // there: same owner, same fence, still with a deadline.
        for a in &held {
            match info(&mut c, &a.res) {
                Some(i) if i.token == a.tok.as_bytes() && i.fence == a.fence && i.ttl > 0 => {}
                other => lost.push(format!("{} {} {}: {other:?}", a.res, a.tok, a.fence)),
            }
        }
        // The owner's idempotent retry on the new master gets its fence
        // back; anyone else is refused.
        if lost.is_empty() {
            for a in held.iter().take(50) {
                let f = acquire(&mut c, &a.res, &a.tok, MK_TTL).unwrap();
                assert_eq!(f, Some(a.fence), "{}: owner's retry after failover", a.res);
                let other = acquire(&mut c, &a.res, "intruder", MK_TTL).unwrap();
                assert_eq!(other, None, "{}: granted twice after failover", a.res);
            }
        }
        handles.into_iter().map(join).collect()
    });
    let post_grants: u64 = post.iter().map(|p| p.grants).sum();
    let post_min = post.iter().map(|p| p.min_fence).min().unwrap();
    let quarantined: u64 = post.iter().map(|p| p.quarantined).sum();
    let first_grant = post.iter().filter_map(|p| p.first_grant).min().unwrap();

    let sum = |f: fn(&MkStats) -> u64| stats.iter().map(f).sum::<u64>();
    let acked: usize = stats.iter().map(|s| s.acked.len()).sum();
    eprintln!(
        "master kill (seed {:#x}): before the kill {} grants ({acked} acknowledged by the \
         replica, {} not within 1 s), {} extends, {} releases; promoted at {promoted_at:?}; \
         {} acknowledged and still held, {} of them lost on the new master; quarantine \
         {quarantine:?}: {quarantined} refusals, first new grant {:?} after promotion; \
         {post_grants} new grants, lowest fence {post_min} vs highest before {max_pre}",
        seed(3),
        sum(|s| s.grants),
        sum(|s| s.unacked),
        sum(|s| s.extends),
        sum(|s| s.releases),
        held.len(),
        lost.len(),
        first_grant - promote_sent,
    );
    assert!(
        lost.is_empty(),
        "acknowledged locks lost in failover:\n{}",
        lost.join("\n")
    );
    assert!(
        !held.is_empty(),
        "no acknowledged lock was held at the kill"
    );
    assert!(post_grants > 0, "nothing granted after promotion");
    assert!(
        post_min > max_pre,
        "new master granted {post_min}, not above {max_pre} granted before the kill"
    );
    if let Some(q) = quarantine {
        // The quarantine starts at the promotion, after `promote_sent`; the
        // module counts whole wall-clock ms (5 ms of slack for that).
        assert!(
            first_grant + Duration::from_millis(5) >= promote_sent + q,
            "a new owner was granted {:?} after promotion, inside the {q:?} quarantine",
            first_grant - promote_sent
        );
    }
}

// ----------------------------------------- 4. corrupt payloads to the loader

/// Redis's CRC-64 (Jones polynomial, reflected, init 0), as used by DUMP.
fn crc64(data: &[u8]) -> u64 {
    const POLY: u64 = 0x95ac_9329_ac4b_c9b5;
    let mut crc = 0u64;
    for &b in data {
        crc ^= u64::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ POLY
            } else {
                crc >> 1
            };
        }
    }
    crc
}

/// `body | rdb version (2 bytes) | crc64 (8 bytes)`: a payload whose footer
/// is valid, so the server hands the body to the loader.
fn seal(body: &[u8], version: [u8; 2]) -> Vec<u8> {
    let mut p = body.to_vec();
    p.extend_from_slice(&version);
    let crc = crc64(&p);
    p.extend_from_slice(&crc.to_le_bytes());
    p
}

fn restore(c: &mut redis::Connection, key: &str, payload: &[u8], replace: bool) -> RedisResult<()> {
    let mut cmd = redis::cmd("RESTORE");
    cmd.arg(key).arg(0).arg(payload);
    if replace {
        cmd.arg("REPLACE");
    }
    cmd.query(c)
}

const MAX_FENCE: u64 = i64::MAX as u64;
const RDB_TYPE_MODULE_2: u8 = 7;
const OPCODE_STRING: u8 = 5;
const OPCODE_EOF: u8 = 0;
/// 10 = type byte, then the 64-bit module id (0x81 + 8 bytes big endian).
const HEADER: usize = 10;

/// The DUMP of a lock, checked against the layout the crafted payloads
/// assume: `07 | 81 id(8) | 05 len fence(8 LE) token | 00`.
struct Layout {
    body: Vec<u8>,
    ver: [u8; 2],
}

impl Layout {
    fn of(c: &mut redis::Connection, res: &str, tok: &str, fence: i64) -> Layout {
        let p: Vec<u8> = redis::cmd("DUMP").arg(res).query(c).unwrap();
        let n = p.len() - 10;
        let (body, ver) = (p[..n].to_vec(), [p[n], p[n + 1]]);
        assert_eq!(seal(&body, ver), p, "CRC-64 helper disagrees with DUMP");
        let mut want = vec![RDB_TYPE_MODULE_2];
        want.extend_from_slice(&body[1..HEADER]);
        want.extend_from_slice(&[OPCODE_STRING, 8 + tok.len() as u8]);
        want.extend_from_slice(&(fence as u64).to_le_bytes());
        want.extend_from_slice(tok.as_bytes());
        want.push(OPCODE_EOF);
        assert_eq!(body, want, "unexpected DUMP layout");
        assert_eq!(body[1], 0x81, "module id as a 64-bit length");
        Layout { body, ver }
    }
    fn header(&self) -> Vec<u8> {
        self.body[..HEADER].to_vec()
    }
    /// Header, then a string opcode with `len` encoded as given, then rest.
    fn with(&self, len_enc: &[u8], rest: &[u8]) -> Vec<u8> {
        let mut b = self.header();
        b.push(OPCODE_STRING);
        b.extend_from_slice(len_enc);
        b.extend_from_slice(rest);
        b
    }
    /// A complete, well-formed value for (fence, token), then `tail`.
    fn value(&self, fence: u64, tok: &[u8], tail: &[u8]) -> Vec<u8> {
        let mut s = fence.to_le_bytes().to_vec();
        s.extend_from_slice(tok);
        assert!(s.len() < 64);
        let mut b = self.with(&[s.len() as u8], &s);
        b.extend_from_slice(tail);
        b
    }
}

/// Bodies (valid envelope and CRC) that must all be refused.
fn corrupt_bodies(l: &Layout, rng: &mut Rng) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = vec![];
    // Truncated so that even the bytes of the footer (RESTORE parses the
    // whole payload) cannot complete the value: certain short reads.
    let string_end = l.body.len() - 1;
    for cut in 1..l.body.len() {
        if cut + 10 < string_end {
            v.push((format!("truncated to {cut} bytes"), l.body[..cut].to_vec()));
        }
    }
    // Header, then garbage where an opcode should be.
    for op in [0u8, 1, 2, 3, 4, 6, 0x3f, 0x80, 0xc0, 0xff] {
        let mut b = l.header();
        b.push(op);
        let mut g = rng.bytes(24);
        g[0] |= 1; // after 80 (32-bit length): never 5
        b.extend(g);
        v.push((format!("opcode {op:#x} then garbage"), b));
    }
    // Lengths that overrun the payload.
    let g = rng.bytes(20);
    v.push(("length 60, 20 bytes".into(), l.with(&[60], &g)));
    v.push((
        "length 2^24 (32-bit encoding), 20 bytes".into(),
        l.with(&[0x80, 0x01, 0, 0, 0], &g),
    ));
    v.push((
        "length 2^64-1 (64-bit encoding)".into(),
        l.with(&[0x81, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff], &g),
    ));
    v.push((
        "length 16383 (14-bit encoding), 20 bytes".into(),
        l.with(&[0x7f, 0xff], &g),
    ));
    // Strings that arrive whole but do not decode to a lease.
    v.push(("empty string".into(), l.with(&[0], &[OPCODE_EOF])));
    v.push((
        "7 bytes (fence cut)".into(),
        l.with(&[7], &[1, 2, 3, 4, 5, 6, 7, 0]),
    ));
    v.push((
        "fence only, no token".into(),
        l.with(&[8], &[1, 0, 0, 0, 0, 0, 0, 0, 0]),
    ));
    v.push(("fence 0".into(), l.value(0, b"garbage", &[OPCODE_EOF])));
    v.push((
        "fence 2^63".into(),
        l.value(MAX_FENCE + 1, b"garbage", &[OPCODE_EOF]),
    ));
    v.push((
        "fence 2^64-1".into(),
        l.value(u64::MAX, b"garbage", &[OPCODE_EOF]),
    ));
    for i in 0..8 {
        // Random fence with the top bit set, random token.
        let n = 8 + 1 + rng.below(40) as usize;
        let mut s = rng.bytes(n);
        s[7] |= 0x80;
        let mut b = l.with(&[s.len() as u8], &s);
        b.push(OPCODE_EOF);
        v.push((format!("random fence >= 2^63 #{i}"), b));
    }
    // A token above the stored-token cap (1 MiB): 32-bit length encoding.
    let big = 8 + (1 << 20) + 1;
    let mut s = 1u64.to_le_bytes().to_vec();
    s.resize(big, b'x');
    let mut b = l.with(&[0x80], &(big as u32).to_be_bytes());
    b.extend_from_slice(&s);
    b.push(OPCODE_EOF);
    v.push(("token of 1 MiB + 1".into(), b));
    // Encoding versions the module cannot know (low 10 bits of the module
    // id): 0, and anything above the one it writes.
    let current = u16::from_be_bytes([l.body[8] & 0x03, l.body[9]]);
    for encver in [0u16, current + 1, 1023] {
        let mut b = l.body.clone();
        b[8] = (b[8] & !0x03) | (encver >> 8) as u8;
        b[9] = encver as u8;
        v.push((format!("encoding version {encver}"), b));
    }
    // A module id no loaded module has.
    let mut b = l.body.clone();
    b[3] ^= 0x40;
    v.push(("unknown module id".into(), b));
    // A whole value, then no proper EOF marker.
    for tail in [&[0x05u8, 0x01, 0x41][..], &[0x02, 0x00], &[0xff; 6]] {
        v.push((
            format!("valid value, then {tail:02x?} instead of EOF"),
            l.value(1_000, b"tok", tail),
        ));
    }
    v.push((
        "valid value, no EOF marker (payload ends)".into(),
        l.value(1_000, b"tok", &[]),
    ));
    // Pure garbage after the header.
    for i in 0..8 {
        let mut b = l.header();
        let n = 1 + rng.below(60) as usize;
        let mut g = rng.bytes(n);
        // Never a length-encoded 5 (the string opcode): 05, 40 05, C5, ...
        if matches!(g[0], 0x05 | 0x40 | 0x80 | 0x81 | 0xc5) {
            g[0] = 0x17;
        }
        b.extend(g);
        v.push((format!("garbage body #{i}"), b));
    }
    v
}

fn last_fence(c: &mut redis::Connection) -> u64 {
    info_field(c, "dlock", "dlock_last_fence")
        .and_then(|v| v.parse().ok())
        .expect("INFO dlock: dlock_last_fence")
}

#[test]
fn corrupt_restore_payloads_are_refused_and_change_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    let fence = acquire(&mut c, "res", "tok-A", 600_000).unwrap().unwrap();
    let _: () = redis::cmd("SET")
        .arg("plain")
        .arg("v")
        .query(&mut c)
        .unwrap();
    let l = Layout::of(&mut c, "res", "tok-A", fence);
    let before = info(&mut c, "res").unwrap();
    let size = dbsize(&mut c);
    let mut rng = Rng::new(seed(4));
    let cases = corrupt_bodies(&l, &mut rng);
    let mut accepted = vec![];
    for (i, (what, body)) in cases.iter().enumerate() {
        let payload = seal(body, l.ver);
        let key = format!("bad{i}");
        let r = restore(&mut c, &key, &payload, false);
        ping(&mut c);
        if r.is_ok() {
            accepted.push(format!("{what}: {key} = {:?}", info(&mut c, &key)));
            let _: i64 = redis::cmd("DEL").arg(&key).query(&mut c).unwrap();
            continue;
        }
        // Over the existing lock, with REPLACE: the lock must survive.
        let r2 = restore(&mut c, "res", &payload, true);
        if r2.is_ok() {
            accepted.push(format!("{what} (REPLACE)"));
        }
        let exists: i64 = redis::cmd("EXISTS").arg(&key).query(&mut c).unwrap();
        assert_eq!(exists, 0, "{what}: refused, yet {key} exists");
        assert_eq!(dbsize(&mut c), size, "{what}: DBSIZE changed");
        let now = info(&mut c, "res").expect("the existing lock vanished");
        assert_eq!(
            (&now.token, now.fence),
            (&before.token, before.fence),
            "{what}: the existing lock changed"
        );
    }
    assert!(
        accepted.is_empty(),
        "corrupt payloads accepted:\n{}",
        accepted.join("\n")
    );
    let v: String = redis::cmd("GET").arg("plain").query(&mut c).unwrap();
    assert_eq!(v, "v");
    assert_eq!(
        release(&mut c, "res", "tok-A").unwrap(),
        1,
        "owner still owns it"
    );
    let log = s.log();
    for bad in ["crashed", "panicked", "ASSERTION"] {
        assert!(!log.contains(bad), "server log mentions {bad:?}:\n{log}");
    }
    eprintln!(
        "corrupt payloads (seed {:#x}): {} refused (each also with REPLACE over a held lock)",
        seed(4),
        cases.len()
    );
}

/// A refused payload must not leave anything behind, the fence clock
/// included: a value the loader decoded but the server then refused (no EOF
/// marker) must not raise `dlock_last_fence`. Otherwise one refused RESTORE
/// carrying fence 2^63-2 leaves a single fence before every ACQUIRE of a new
/// owner fails with fence exhaustion.
#[test]
fn refused_restore_does_not_move_the_fence_clock() {
    let s = Server::start();
    let mut c = s.conn();
    let fence = acquire(&mut c, "res", "tok-A", 600_000).unwrap().unwrap();
    let l = Layout::of(&mut c, "res", "tok-A", fence);
    let mut moved = vec![];
    let cases = [
        ("opcode 05 instead of EOF", &[0x05u8, 0x01, 0x41][..]),
        ("opcode 02 instead of EOF", &[0x02, 0x00][..]),
        ("payload ends before EOF", &[][..]),
    ];
    for (i, (what, tail)) in cases.into_iter().enumerate() {
        // Rising values, so each case shows whether it moves the clock.
        let far = MAX_FENCE - 3 + i as u64;
        let before = last_fence(&mut c);
        let r = restore(
            &mut c,
            "bad",
            &seal(&l.value(far, b"tok", tail), l.ver),
            false,
        );
        assert!(r.is_err(), "{what}: accepted");
        ping(&mut c);
        let exists: i64 = redis::cmd("EXISTS").arg("bad").query(&mut c).unwrap();
        assert_eq!(exists, 0, "{what}: refused, yet the key exists");
        let after = last_fence(&mut c);
        if after != before {
            moved.push(format!(
                "{what} (fence {far}): dlock_last_fence {before} -> {after}"
            ));
        }
    }
    // What a client sees next (the clock may already be at the bad value).
    let next = acquire(&mut c, "fresh", "tok-B", 60_000);
    let then = acquire(&mut c, "fresh2", "tok-C", 60_000).map_err(|e| e.to_string());
    assert!(
        moved.is_empty(),
        "refused RESTOREs moved the fence clock:\n{}\nnext grants: {next:?}, then {then:?} \
         (wall clock {} us)",
        moved.join("\n"),
        now_us()
    );
    let next = next.unwrap().unwrap();
    assert!(
        next > fence && next < now_us() + 60_000_000,
        "next fence {next}"
    );
}
