//! Refusals and grants that meet in one `MULTI`/`EXEC` turn, and memory
//! over thousands of capped holds.
use super::*;
use redis::ConnectionLike;

#[test]
fn a_refused_extend_and_a_retry_in_one_turn_change_only_what_passes() {
    let s = Server::start();
    let mut c = s.conn();
    fence_of(&mut c, &capped("p", "t", 10_000, 60_000, &[]));
    let f = only(&mut c, "p").fence;
    let replies = transaction(
        &mut c,
        &[
            extend_cmd("p", "t", 60_001),
            extend_cmd("p", "t", 20_000),
            capped("p", "t", 600_000, 60_000, &[]),
            capped("p", "t", 100, 60_000, &[]),
            capped("p", "u", 100, 5, &[]),
        ],
    );
    let err = |v: &Value| match v {
        Value::ServerError(e) => format!("{} {}", e.code(), e.details().unwrap_or_default()),
        other => panic!("expected an error, got {other:?}"),
    };
    ms_left(&err(&replies[0]));
    assert_eq!(replies[1], Value::Int(1));
    ms_left(&err(&replies[2]));
    assert_eq!(replies[3], Value::Int(f), "a retry within the cap");
    assert_eq!(replies[4], Value::Nil);
    let h = only(&mut c, "p");
    assert!(h.ttl <= 100, "the last retry's lease: {h:?}");
}

#[test]
fn a_capped_waiter_granted_by_a_release_in_one_turn_gets_its_cap() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "p", "h", 60_000);
    let url = s.url();
    let waiter = std::thread::spawn(move || {
        let mut w = connect_within(&url, SOON).unwrap();
        capped("p", "w", 600_000, 20_000, &["WAIT", "0"])
            .query::<Option<i64>>(&mut w)
            .unwrap()
    });
    wait_waiters(&mut c, "p", 1);
    // The release hands the lock on inside the transaction; the extend
    // after it, by the new holder's token, is refused past its cap.
    let replies = transaction(
        &mut c,
        &[
            redis::cmd("DLOCK.RELEASE").arg("p").arg("h").clone(),
            extend_cmd("p", "w", 20_001),
            extend_cmd("p", "w", 1_000),
        ],
    );
    assert_eq!(replies[0], Value::Int(1));
    let Value::ServerError(e) = &replies[1] else {
        panic!("{replies:?}")
    };
    ms_left(&format!("{} {}", e.code(), e.details().unwrap_or_default()));
    assert_eq!(replies[2], Value::Int(1));
    let fence = waiter.join().unwrap().expect("granted");
    let h = only(&mut c, "p");
    assert_eq!((h.token.as_str(), h.fence), ("w", fence));
    assert!(h.ttl <= 1_000 && h.maxhold.unwrap() <= 20_000, "{h:?}");
}

#[test]
fn thousands_of_capped_holds_leave_no_memory() {
    let _q = crate::quiet();
    let s = Server::start();
    let mut c = s.conn();
    let round = |c: &mut Connection, r: usize| {
        let mut p = redis::pipe();
        for i in 0..1_000 {
            let res = format!("k{i}");
            p.add_command(capped(&res, "t", 60_000, 30_000, &[]));
            p.add_command(extend_cmd(&res, "t", 20_000));
            p.add_command(extend_cmd(&res, "t", 30_001));
            p.add_command(redis::cmd("DLOCK.RELEASE").arg(&res).arg("t").clone());
        }
        let replies = c
            .req_packed_commands(&p.get_packed_pipeline(), 0, 4_000)
            .unwrap();
        let errors = replies
            .iter()
            .filter(|v| matches!(v, Value::ServerError(_)))
            .count();
        assert_eq!(errors, 1_000, "round {r}: one refusal per hold");
    };
    round(&mut c, 0);
    round(&mut c, 1);
    let before = used_memory_purged(&mut c);
    for r in 2..12 {
        round(&mut c, r);
    }
    let after = used_memory_purged(&mut c);
    assert_eq!(dbsize(&mut c), 0);
    // 10,000 holds: a leak of even 8 bytes each would show.
    assert!(
        after - before < 64 * 1024,
        "used_memory {before} -> {after} over 10,000 capped holds"
    );
}
