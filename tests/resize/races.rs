//! A resize meeting a grant in one `MULTI`/`EXEC` turn, deterministic, and
//! a replica that applies the turn identically.
use super::*;
use std::time::Duration;

#[test]
fn a_release_then_a_resize_in_one_turn() {
    let master = Server::start();
    let replica = Server::builder().replica_of(&master).start();
    replica.wait_for_sync(Duration::from_secs(30));
    let mut c = master.conn();
    fence_of(&mut c, &permit("sem", "a", 3, &[]));
    fence_of(&mut c, &permit("sem", "b", 3, &[]));
    fence_of(&mut c, &permit("sem", "c", 3, &[]));
    let w1 = Waiter::send(&master, permit("sem", "w1", 3, &["WAIT", "0"]));
    wait_queued(&mut c, "sem", 1);
    let w2 = Waiter::send(&master, permit("sem", "w2", 3, &["WAIT", "0"]));
    wait_queued(&mut c, "sem", 2);
    // The release's handoff is decided on the old limit (w1 gets a's
    // permit), then the resize to 2 leaves three holds over the limit.
    let replies = transaction(
        &mut c,
        &[
            redis::cmd("DLOCK.RELEASE").arg("sem").arg("a").clone(),
            resize_cmd("sem", 2),
        ],
    );
    assert_eq!(replies, [Value::Int(1), Value::Int(3)]);
    w1.granted();
    assert!(w2.pending());
    assert_eq!(holders(&mut c, "sem"), ["b", "c", "w1"]);
    let n: i64 = redis::cmd("WAIT").arg(1).arg(10_000).query(&mut c).unwrap();
    assert_eq!(n, 1);
    let mut r = replica.conn();
    assert_eq!(digest(&mut r, "sem"), digest(&mut c, "sem"));
    assert_eq!(holders(&mut r, "sem"), ["b", "c", "w1"]);
    assert_eq!(field(&mut r, "sem", "limit").as_deref(), Some("2"));
    drop(w2);
}

#[test]
fn a_resize_then_an_acquire_in_one_turn() {
    let master = Server::start();
    let replica = Server::builder().replica_of(&master).start();
    replica.wait_for_sync(Duration::from_secs(30));
    let mut c = master.conn();
    for t in ["a", "b", "c"] {
        fence_of(&mut c, &permit("sem", t, 3, &[]));
    }
    let w = Waiter::send(&master, permit("sem", "w", 3, &["WAIT", "0"]));
    wait_queued(&mut c, "sem", 1);
    // Up to 5: the waiter first (queue order), then the acquire, naming
    // the old limit, joins through the resized mark.
    let replies = transaction(
        &mut c,
        &[
            resize_cmd("sem", 5),
            permit("sem", "d", 3, &[]),
            permit("sem", "e", 3, &[]),
        ],
    );
    assert_eq!(replies[0], Value::Int(3));
    let (fw, _) = w.granted();
    let Value::Int(fd) = replies[1] else {
        panic!("{replies:?}")
    };
    assert!(fd > fw, "the waiter was granted first");
    assert_eq!(replies[2], Value::Nil, "5 of 5");
    assert_eq!(holders(&mut c, "sem"), ["a", "b", "c", "w", "d"]);
    let n: i64 = redis::cmd("WAIT").arg(1).arg(10_000).query(&mut c).unwrap();
    assert_eq!(n, 1);
    let mut r = replica.conn();
    assert_eq!(digest(&mut r, "sem"), digest(&mut c, "sem"));
    assert_eq!(field(&mut r, "sem", "resized").as_deref(), Some("1"));
}
