//! A random mix of prioritized requests (single and set, exclusive, shared
//! and permits, with short waits) from several clients at once, ended by
//! handing every key to prioritized waiters: the replica and the
//! AOF-reloaded master hold exactly what the master holds.
//! Priorities change only who is granted; every grant reaches replicas and
//! the AOF as an effect like any other.
use super::*;
use crate::proxy::Rng;
use std::thread;

const CLIENTS: u64 = 6;
const OPS: usize = 150;
const KEYS: [&str; 6] = ["a", "b", "rw", "sem", "{s}1", "{s}2"];

/// What a client holds, to release or extend.
enum Held {
    One(&'static str, String),
    Set(String),
}

fn run_client(url: String, id: u64) -> (u64, Vec<Held>) {
    let mut c = connect_within(&url, SOON).unwrap();
    let mut rng = Rng::new(0x9e10 ^ id);
    let mut held: Vec<Held> = Vec::new();
    let mut granted = 0;
    for n in 0..OPS {
        let token = format!("c{id}-{n}");
        let priority = rng.below(5);
        let wait = 1 + rng.below(60);
        match rng.below(20) {
            0..=8 => {
                let res = KEYS[rng.below(4) as usize];
                let mut cmd = redis::cmd("DLOCK.ACQUIRE");
                cmd.arg(res).arg(&token).arg(60_000);
                match res {
                    "rw" if rng.below(2) == 0 => {
                        cmd.arg("SHARED");
                    }
                    "sem" => {
                        cmd.arg("LIMIT").arg(3);
                    }
                    _ => {}
                }
                cmd.arg("PRIORITY").arg(priority).arg("WAIT").arg(wait);
                let got: Option<i64> = cmd.query(&mut c).unwrap();
                if got.is_some() {
                    granted += 1;
                    held.push(Held::One(res, token));
                }
            }
            9..=10 => {
                let got: Option<i64> = redis::cmd("DLOCK.MACQUIRE")
                    .arg(2)
                    .arg("{s}1")
                    .arg("{s}2")
                    .arg(&token)
                    .arg(60_000)
                    .arg("PRIORITY")
                    .arg(priority)
                    .arg("WAIT")
                    .arg(wait)
                    .query(&mut c)
                    .unwrap();
                if got.is_some() {
                    granted += 1;
                    held.push(Held::Set(token));
                }
            }
            11..=17 if !held.is_empty() => {
                let h = held.swap_remove(rng.below(held.len() as u64) as usize);
                drop_hold(&mut c, h);
            }
            _ => {
                if let Some(Held::One(res, tok)) = held.first() {
                    assert_eq!(extend(&mut c, *res, tok.as_str(), 60_000), 1);
                }
            }
        }
    }
    (granted, held)
}

fn drop_hold(c: &mut Connection, h: Held) {
    let released: i64 = match h {
        Held::One(res, tok) => release(c, res, tok.as_str()),
        Held::Set(tok) => redis::cmd("DLOCK.MRELEASE")
            .arg(2)
            .arg("{s}1")
            .arg("{s}2")
            .arg(tok)
            .query(c)
            .unwrap(),
    };
    assert!(released > 0, "a hold of 60 s released as lost");
}

/// Waits until `n` requests wait on `res` (of any kind).
fn queued(m: &mut Connection, res: &str, n: usize) {
    wait_until(SOON, &format!("{n} waiting on {res}"), || {
        waiting(m, res).len() == n
    });
}

/// Every key held (by what the mix left, or by the test), two requests of
/// priorities 1 then 3 queued on each single key and a set request on the
/// set; then every hold released, so that what is left is what the queues
/// were handed. The waiters granted first by rank, and the ones left
/// waiting.
fn hand_everything_over(s: &Server, m: &mut Connection, left: Vec<Held>) {
    set_aging(m, AN_HOUR_MS);
    let mut blockers = Vec::new();
    for res in ["a", "b", "rw"] {
        if acquire(m, res, "blk", 60_000).is_some() {
            blockers.push(Held::One(res, "blk".into()));
        }
    }
    for n in 0..3 {
        let tok = format!("blk{n}");
        let got: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
            .arg("sem")
            .arg(&tok)
            .arg(60_000)
            .arg("LIMIT")
            .arg(3)
            .query(m)
            .unwrap();
        if got.is_some() {
            blockers.push(Held::One("sem", tok));
        }
    }
    let set_blocker: Option<i64> = redis::cmd("DLOCK.MACQUIRE")
        .arg(2)
        .arg("{s}1")
        .arg("{s}2")
        .arg("blk")
        .arg(60_000)
        .query(m)
        .unwrap();
    if set_blocker.is_some() {
        blockers.push(Held::Set("blk".into()));
    }
    let mut first = Vec::new();
    let mut behind = Vec::new();
    for res in ["a", "b", "rw", "sem"] {
        for p in [1u16, 3] {
            let mut cmd = redis::cmd("DLOCK.ACQUIRE");
            cmd.arg(res).arg(format!("f{p}")).arg(60_000);
            if res == "sem" {
                cmd.arg("LIMIT").arg(3);
            }
            cmd.arg("PRIORITY").arg(p).arg("WAIT").arg(0);
            let w = Waiter::send(s, cmd);
            queued(m, res, 1 + usize::from(p == 3));
            if p == 3 || res == "sem" {
                first.push(w);
            } else {
                behind.push(w);
            }
        }
    }
    first.push(Waiter::send(
        s,
        redis::cmd("DLOCK.MACQUIRE")
            .arg(2)
            .arg("{s}1")
            .arg("{s}2")
            .arg("fset")
            .arg(60_000)
            .arg("PRIORITY")
            .arg(2)
            .arg("WAIT")
            .arg(0)
            .clone(),
    ));
    queued(m, "{s}1", 1);
    for h in left.into_iter().chain(blockers) {
        drop_hold(m, h);
    }
    for w in &first {
        let (_, _) = w.granted();
    }
    for w in &behind {
        assert!(w.pending(), "a lower priority was granted first");
    }
}

/// Each key exactly: its value (`DUMP`, nil when absent), its digest and
/// its expiry.
fn exactly(c: &mut Connection) -> Vec<(Option<Vec<u8>>, String, i64)> {
    KEYS.iter()
        .map(|k| {
            let payload: Option<Vec<u8>> = redis::cmd("DUMP").arg(*k).query(c).unwrap();
            let at: i64 = redis::cmd("PEXPIRETIME").arg(*k).query(c).unwrap();
            (payload, digest(c, k), at)
        })
        .collect()
}

#[test]
fn replicas_and_the_aof_hold_exactly_what_a_prioritized_mix_left() {
    let _quiet = crate::quiet();
    let mut master = Server::builder().aof("always").start();
    let mut m = master.conn();
    // Short enough that priorities and waiting times meet: a level is
    // worth 5 ms, a wait up to 60 ms.
    set_aging(&mut m, 5);
    let replica = Server::builder().replica_of(&master).start();
    replica.wait_for_sync(Duration::from_secs(30));
    let handoffs = |m: &mut Connection| -> i64 {
        info_field(m, "dlock", "dlock_handoffs")
            .expect("dlock_handoffs")
            .parse()
            .unwrap()
    };
    let before = handoffs(&mut m);
    let clients: Vec<_> = (0..CLIENTS)
        .map(|id| {
            let url = master.url();
            thread::spawn(move || run_client(url, id))
        })
        .collect();
    let mut granted = 0;
    let mut left = Vec::new();
    for t in clients {
        let (n, held) = t.join().unwrap();
        granted += n;
        left.extend(held);
    }
    let handed = handoffs(&mut m) - before;
    assert!(
        granted > 0 && handed > 0,
        "{granted} grants, {handed} handoffs"
    );
    hand_everything_over(&master, &mut m, left);
    let n: i64 = redis::cmd("WAIT").arg(1).arg(10_000).query(&mut m).unwrap();
    assert_eq!(n, 1);
    let on_master = exactly(&mut m);
    assert!(
        on_master.iter().all(|(p, _, _)| p.is_some()),
        "{on_master:?}"
    );
    assert_eq!(exactly(&mut replica.conn()), on_master, "the replica");
    master.restart();
    assert_eq!(exactly(&mut master.conn()), on_master, "the AOF");
}
