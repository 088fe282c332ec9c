//! The order-statistics index allocates per queued request: `used_memory`
//! stays flat over thousands of requests that join, are read and leave.
use super::*;
use crate::quiet;

const BATCH: usize = 50;
const ROUNDS: usize = 40;
/// What each request may leave behind, at most (allocator noise).
const SLACK_PER_WAITER: i64 = 128;

/// `BATCH` requests join `r`'s queue (on connections kept open), are read
/// by `DLOCK.POSITION` and `DLOCK.WAITERS`, and leave by `CLIENT UNBLOCK`.
fn one_round(c: &mut Connection, conns: &mut [(i64, Connection)], round: usize) {
    for (i, (_, w)) in conns.iter_mut().enumerate() {
        let cmd = wait_cmd("r", &format!("t{round}-{i}"), &[], 0);
        w.send_packed_command(&cmd.get_packed_command()).unwrap();
    }
    wait_waiters(c, "r", BATCH as i64);
    // The connections' requests arrive in any order: each token stands
    // where the listing shows it.
    let page = waiters_page(c, "r", &["COUNT", "1000"]);
    assert_eq!(positions(&page), (1..=BATCH as i64).collect::<Vec<_>>());
    for (t, at) in tokens(&page).iter().zip(positions(&page)) {
        assert_eq!(position(c, "r", t), Some(at));
    }
    assert_eq!(
        waiters_page(c, "r", &["OFFSET", "25", "COUNT", "5"]).len(),
        5
    );
    // From the middle, the head and the tail: the index is taken apart
    // everywhere.
    let order: Vec<usize> = (0..BATCH)
        .map(|k| {
            if k % 2 == 0 {
                BATCH / 2 + k / 2
            } else {
                BATCH / 2 - 1 - k / 2
            }
        })
        .collect();
    for i in order {
        let (id, w) = &mut conns[i];
        let n: i64 = redis::cmd("CLIENT")
            .arg("UNBLOCK")
            .arg(*id)
            .query(c)
            .unwrap();
        assert_eq!(n, 1);
        assert_eq!(w.recv_response().unwrap(), Value::Nil);
    }
    wait_waiters(c, "r", 0);
}

#[test]
fn used_memory_stays_flat_over_thousands_of_waiters() {
    let _quiet = quiet();
    let s = Server::start();
    let mut c = s.conn();
    acquire(&mut c, "r", "h", 3_600_000).expect("free");
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
    eprintln!("used_memory {before} -> {after} over {waiters} waiters");
    assert!(
        growth < waiters * SLACK_PER_WAITER,
        "used_memory grew {growth} B over {waiters} waiters"
    );
}
