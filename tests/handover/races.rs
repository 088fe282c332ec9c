//! A handover decided in one event-loop turn with what could race it:
//! the target's `WAIT` running out, and the target's client leaving.
use super::*;

#[test]
fn a_target_whose_wait_ran_out_in_the_same_turn_is_not_granted() {
    // The target's WAIT (50 ms) has run out by the time the RELEASE runs
    // (after a 100 ms sleep in the same MULTI), while its timer cannot
    // run before EXEC ends. Were its timer to answer it first (a machine
    // stalled before the MULTI), the replies would be the same.
    let s = Server::start();
    let mut c = s.conn();
    let fence = grant(&mut c, "r", "h", 60_000);
    let t = queue_for(&s, &mut c, "r", "t", &[], 50);
    let a = queue(&s, &mut c, "r", "a", &[]);
    let replies = transaction(
        &mut c,
        &[
            redis::cmd("DEBUG").arg("SLEEP").arg("0.1").clone(),
            release_to_cmd("r", "h", "t"),
        ],
    );
    let err = match &replies[1] {
        Value::ServerError(e) => format!("{} {}", e.code(), e.details().unwrap_or_default()),
        other => panic!("the handover was answered {other:?}"),
    };
    assert!(err.starts_with("NOTWAITING "), "{err}");
    // h still holds; t was answered nil; a still waits, alone.
    assert_eq!(holders(&mut c, "r"), [("h".to_string(), fence)]);
    match t.reply() {
        (Ok(None), _) => {}
        other => panic!("the target got {:?}", other.0),
    }
    assert_eq!(waiting(&mut c, "r"), ["a"]);
    assert!(a.pending());
    assert_eq!(counter(&mut c, "handovers"), 0);
    assert_eq!(counter(&mut c, "releases"), 0);
}

#[test]
fn a_target_killed_in_the_same_turn_is_revoked_and_the_head_granted() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "r", "h", 60_000);
    let a = queue(&s, &mut c, "r", "a", &[]);
    let t = queue(&s, &mut c, "r", "t", &[]);
    let replies = transaction(
        &mut c,
        &[
            release_to_cmd("r", "h", "t"),
            redis::cmd("CLIENT").arg("KILL").arg("ID").arg(t.id).clone(),
        ],
    );
    assert_eq!(replies, [Value::Int(1), Value::Int(1)]);
    // The grant never reached t: released again, and the head's turn.
    let (fa, _) = a.granted();
    assert_eq!(holders(&mut c, "r"), [("a".to_string(), fa)]);
    assert!(t.reply().0.is_err(), "the killed target got a reply");
    assert_eq!(counter(&mut c, "handovers"), 1);
    assert_eq!(counter(&mut c, "revoked_grants"), 1);
    assert!(waiting(&mut c, "r").is_empty());
}

#[test]
fn a_target_that_holds_already_is_not_waiting_and_nothing_changes() {
    // A `COPY` in the same turn makes the target's token hold the resource
    // (beside the releaser) while its wait is still queued, its answer due
    // in a later timer: the handover is refused as for a target granted
    // already, never an internal error, and the release does not happen.
    let s = Server::start();
    let mut c = s.conn();
    let src_h: i64 = redis::cmd("DLOCK.ACQUIRE")
        .arg("src")
        .arg("h")
        .arg(60_000)
        .arg("SHARED")
        .query(&mut c)
        .unwrap();
    let src_t: i64 = redis::cmd("DLOCK.ACQUIRE")
        .arg("src")
        .arg("t")
        .arg(60_000)
        .arg("SHARED")
        .query(&mut c)
        .unwrap();
    grant(&mut c, "r", "h", 60_000);
    let t = queue(&s, &mut c, "r", "t", &["SHARED"]);
    let replies = transaction(
        &mut c,
        &[
            redis::cmd("COPY")
                .arg("src")
                .arg("r")
                .arg("REPLACE")
                .clone(),
            release_to_cmd("r", "h", "t"),
        ],
    );
    let err = match &replies[1] {
        Value::ServerError(e) => format!("{} {}", e.code(), e.details().unwrap_or_default()),
        other => panic!("the handover was answered {other:?}"),
    };
    assert!(err.starts_with("NOTWAITING "), "{err}");
    let mut held = holders(&mut c, "r");
    held.sort();
    assert_eq!(held, [("h".to_string(), src_h), ("t".to_string(), src_t)]);
    // The wait is answered by the hold its token has.
    let (fence, _) = t.granted();
    assert_eq!(fence, src_t);
    assert_eq!(counter(&mut c, "handovers"), 0);
}
