//! Priorities where events meet in one event-loop turn, and memory over
//! thousands of prioritized requests.
use super::*;
use crate::quiet;

/// `DLOCK.ACQUIRE res tok 60000 PRIORITY p WAIT wait_ms` on its own thread.
fn queue_for(s: &Server, res: &str, tok: &str, p: u16, wait_ms: u64) -> Waiter {
    Waiter::send(
        s,
        redis::cmd("DLOCK.ACQUIRE")
            .arg(res)
            .arg(tok)
            .arg(60_000)
            .arg("PRIORITY")
            .arg(p)
            .arg("WAIT")
            .arg(wait_ms)
            .clone(),
    )
}

#[test]
fn a_wait_that_ran_out_and_a_release_in_one_turn_grant_the_next_by_rank() {
    // The head by rank (priority 9) has a wait of 100 ms; a transaction
    // sleeps past it and then releases, before the server's timer could
    // answer the head. The release must skip it and grant the next by rank
    // (priority 5), not the earlier arrival (priority 0).
    let s = Server::start();
    let mut c = s.conn();
    set_aging(&mut c, AN_HOUR_MS);
    acquire(&mut c, "r", "h", 60_000);
    let low = queue_for(&s, "r", "low", 0, 60_000);
    wait_waiters(&mut c, "r", 1);
    let top = queue_for(&s, "r", "top", 9, 100);
    wait_waiters(&mut c, "r", 2);
    let mid = queue_for(&s, "r", "mid", 5, 60_000);
    wait_waiters(&mut c, "r", 3);
    assert_eq!(
        waiting(&mut c, "r"),
        [("top".into(), 9), ("mid".into(), 5), ("low".into(), 0)]
    );
    let replies = transaction(
        &mut c,
        &[
            redis::cmd("DEBUG").arg("SLEEP").arg("0.3").clone(),
            redis::cmd("DLOCK.RELEASE").arg("r").arg("h").clone(),
            redis::cmd("DLOCK.POSITION").arg("r").arg("low").clone(),
        ],
    );
    assert_eq!(replies[1], Value::Int(1));
    assert_eq!(replies[2], Value::Int(1), "low is next once mid holds");
    assert!(matches!(top.reply().0, Ok(None)), "top's wait ran out");
    let (fence, _) = mid.granted();
    assert_eq!(held(&mut c, "r").fence, fence);
    assert!(low.pending());
    release(&mut c, "r", "mid");
    let (_, _) = low.granted();
}

#[test]
fn a_release_and_a_prioritized_newcomer_in_one_turn() {
    // Inside one transaction: the release hands the lock to the waiter by
    // rank at once, so a newcomer of any priority after it finds the lock
    // held; one before it finds it held by the releaser. Neither changes
    // the queue.
    let s = Server::start();
    let mut c = s.conn();
    set_aging(&mut c, AN_HOUR_MS);
    acquire(&mut c, "r", "h", 60_000);
    let w = queue_for(&s, "r", "w", 0, 60_000);
    wait_waiters(&mut c, "r", 1);
    let newcomer = |tok: &str| {
        redis::cmd("DLOCK.ACQUIRE")
            .arg("r")
            .arg(tok)
            .arg(60_000)
            .arg("PRIORITY")
            .arg(1000)
            .clone()
    };
    let replies = transaction(
        &mut c,
        &[
            newcomer("n1"),
            redis::cmd("DLOCK.RELEASE").arg("r").arg("h").clone(),
            newcomer("n2"),
            redis::cmd("DLOCK.WAITERS").arg("r").clone(),
        ],
    );
    assert_eq!(replies[0], Value::Nil);
    assert_eq!(replies[1], Value::Int(1));
    assert_eq!(replies[2], Value::Nil);
    assert_eq!(replies[3], Value::Array(vec![]));
    let (fence, _) = w.granted();
    assert_eq!(held(&mut c, "r").fence, fence);
}

const BATCH: usize = 50;
const ROUNDS: usize = 40;
/// Granted per round by a chain of releases; the rest leave by `CLIENT
/// UNBLOCK`.
const GRANTED: usize = 5;
/// What each request may leave behind, at most (allocator noise).
const SLACK_PER_WAITER: i64 = 128;

/// `BATCH` requests of mixed priorities join `r` (most of them in the
/// middle of the queue), `GRANTED` are served by rank and the rest leave.
fn one_round(c: &mut Connection, conns: &mut [(i64, Connection)], round: usize) {
    for (i, (_, w)) in conns.iter_mut().enumerate() {
        let p = (i * 7 + round) % 10;
        let cmd = redis::cmd("DLOCK.ACQUIRE")
            .arg("r")
            .arg(format!("t{round}-{i}"))
            .arg(60_000)
            .arg("PRIORITY")
            .arg(p)
            .arg("WAIT")
            .arg(0)
            .clone();
        w.send_packed_command(&cmd.get_packed_command()).unwrap();
    }
    wait_waiters(c, "r", BATCH as i64);
    let page = waiting(c, "r");
    let priorities: Vec<i64> = page.iter().map(|(_, p)| *p).collect();
    let mut sorted = priorities.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(priorities, sorted, "round {round}: served by priority");
    let conn_of = |token: &str| -> usize { token.rsplit('-').next().unwrap().parse().unwrap() };
    for (token, _) in &page[GRANTED..] {
        let (id, w) = &mut conns[conn_of(token)];
        let n: i64 = redis::cmd("CLIENT")
            .arg("UNBLOCK")
            .arg(*id)
            .query(c)
            .unwrap();
        assert_eq!(n, 1);
        assert_eq!(w.recv_response().unwrap(), Value::Nil);
    }
    let mut holder = "h".to_string();
    for (token, _) in &page[..GRANTED] {
        release(c, "r", holder.as_str());
        let (_, w) = &mut conns[conn_of(token)];
        assert!(matches!(w.recv_response().unwrap(), Value::Int(_)));
        holder = token.clone();
    }
    release(c, "r", holder.as_str());
    grant(c, "r", "h", 3_600_000);
    wait_waiters(c, "r", 0);
}

#[test]
fn used_memory_stays_flat_over_thousands_of_prioritized_waiters() {
    let _quiet = quiet();
    let s = Server::start();
    let mut c = s.conn();
    set_aging(&mut c, AN_HOUR_MS);
    grant(&mut c, "r", "h", 3_600_000);
    let mut conns: Vec<(i64, Connection)> = (0..BATCH)
        .map(|_| {
            let mut w = s.conn();
            let id: i64 = redis::cmd("CLIENT").arg("ID").query(&mut w).unwrap();
            (id, w)
        })
        .collect();
    one_round(&mut c, &mut conns, 0);
    one_round(&mut c, &mut conns, 1);
    let before = used_memory_purged(&mut c);
    for r in 0..ROUNDS {
        one_round(&mut c, &mut conns, r + 2);
    }
    let after = used_memory_purged(&mut c);
    let waiters = (ROUNDS * BATCH) as i64;
    let growth = after - before;
    eprintln!("used_memory {before} -> {after} over {waiters} prioritized waiters");
    assert!(
        growth < waiters * SLACK_PER_WAITER,
        "used_memory grew {growth} B over {waiters} prioritized waiters"
    );
}
