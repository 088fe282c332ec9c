//! A set changes on replicas and in the AOF in one step: every way a set is
//! granted (at once, exclusive or shared; from the queue inside a release;
//! by the expiry timer; again after a revoked grant) reaches the AOF as one
//! `MULTI`/`EXEC` holding an effect for every member, with one fence and one
//! absolute deadline, and so do `MEXTEND` and `MRELEASE`. A replica applies
//! the same stream, so it never sees part of a set.
use super::aof::{drops, one_grant, Tail, Unit};
use super::*;

fn aof_server() -> Server {
    Server::builder()
        .aof("always")
        .arg("--aof-use-rdb-preamble")
        .arg("no")
        .start()
}

/// The units written since the last look, less the `SELECT` a new file or
/// client starts with.
fn written(t: &mut Tail) -> Vec<Unit> {
    t.fresh()
        .into_iter()
        .filter(|u| !(u.cmds.len() == 1 && u.cmds[0][0] == "SELECT"))
        .collect()
}

/// `units`, which must be one transaction.
fn only(units: Vec<Unit>) -> Vec<Unit> {
    assert_eq!(units.len(), 1, "one unit: {units:#?}");
    assert!(units[0].transaction, "a MULTI/EXEC: {units:#?}");
    units
}

/// `unit` removes `tok`'s hold from every member: a release, or a plain
/// lock handed over in place (`DLOCK.APPLY` of another token replaces it).
fn drops_all(unit: &Unit, members: &[&str], tok: &str) {
    let replaces = |c: &Vec<String>, m: &str| c[0] == "DLOCK.APPLY" && c[1] == m && c[2] != tok;
    for m in members {
        let n = unit
            .cmds
            .iter()
            .filter(|c| drops(c, m, tok) || replaces(c, m))
            .count();
        assert_eq!(n, 1, "{m}: {tok}'s hold dropped once: {unit:#?}");
    }
}

#[test]
fn every_set_change_is_one_transaction_in_the_aof() {
    let s = aof_server();
    let mut c = s.conn();
    let mut t = Tail::new(&s);

    // At once: exclusive (plain effects), then shared (hold effects).
    let ex = ["a", "b", "c"];
    let f = macquire(&mut c, &ex, "t1", 60_000, &[]);
    one_grant(&only(written(&mut t)), &ex, "t1", f);
    let sh = ["s1", "s2", "s3"];
    let r1 = macquire(&mut c, &sh, "r1", 60_000, &["SHARED"]);
    one_grant(&only(written(&mut t)), &sh, "r1", r1);
    let r2 = macquire(&mut c, &sh[..2], "r2", 60_000, &["SHARED"]);
    one_grant(&only(written(&mut t)), &sh[..2], "r2", r2);

    // MEXTEND: every member's new deadline, one for all.
    assert_eq!(mextend(&mut c, &ex, "t1", 90_000), 1);
    let w = only(written(&mut t));
    let u = &w[0];
    let moved: Vec<&Vec<String>> = u.cmds.iter().filter(|c| c[0] == "PEXPIREAT").collect();
    let keys: Vec<&str> = moved.iter().map(|c| c[1].as_str()).collect();
    assert_eq!(keys, ex, "{u:#?}");
    assert!(
        moved.iter().all(|c| c[2] == moved[0][2]),
        "one deadline: {u:#?}"
    );

    // From the queue, inside the release of its last blocker: the release
    // and the grant in one transaction.
    let q = ["q1", "q2", "q3", "q4"];
    macquire(&mut c, &q[..3], "h", 60_000, &[]);
    let waiter = Waiter::set(&s, &mut c, &q, "w", &[], 1);
    written(&mut t);
    assert_eq!(mrelease(&mut c, &q[..3], "h"), 3);
    let (wf, _) = waiter.granted();
    let w = written(&mut t);
    let u = one_grant(&w, &q, "w", wf);
    drops_all(u, &q[..3], "h");
    assert_eq!(w.len(), 1, "{w:#?}");

    // By the expiry timer: the blocker's set is shortened once the waiter
    // is queued.
    let e = ["e1", "e2", "e3"];
    macquire(&mut c, &e[..2], "short", 60_000, &[]);
    let waiter = Waiter::set(&s, &mut c, &e, "late", &[], 1);
    assert_eq!(mextend(&mut c, &e[..2], "short", 200), 1);
    let (lf, _) = waiter.granted();
    one_grant(&written(&mut t), &e, "late", lf);

    // MRELEASE: every member's release in one transaction.
    assert_eq!(mrelease(&mut c, &ex, "t1"), 3);
    drops_all(&only(written(&mut t))[0], &ex, "t1");
    assert_eq!(mrelease(&mut c, &sh, "r1"), 3);
    drops_all(&only(written(&mut t))[0], &sh, "r1");
    // A refused MACQUIRE or MEXTEND writes nothing.
    assert_eq!(try_macquire(&mut c, &e, "other", 1000, &[]).unwrap(), None);
    assert_eq!(mextend(&mut c, &ex, "t1", 1000), 0);
    assert_eq!(written(&mut t), []);
}

#[test]
fn a_revoked_set_grant_is_one_transaction_in_the_aof() {
    // The waiter's user is deleted in the grant's turn: the server closes
    // its connection later in that turn and drops the grant's reply; the
    // grant is revoked on every member and the next set granted, outside
    // any command.
    let s = aof_server();
    let mut c = s.conn();
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "wu", "on", ">pw", "~*", "+@all"])
        .query(&mut c)
        .unwrap();
    let set = ["v1", "v2", "v3"];
    macquire(&mut c, &set, "holder", 60_000, &[]);
    let mut w = s.conn();
    let _: () = redis::cmd("AUTH")
        .arg("wu")
        .arg("pw")
        .query(&mut w)
        .unwrap();
    let mut cmd = macquire_cmd(&set, "gone", 60_000, &[]);
    w.send_packed_command(&cmd.arg("WAIT").arg(0).get_packed_command())
        .unwrap();
    wait_queued(&mut c, "v1", 1);
    let next = Waiter::set(&s, &mut c, &set[1..], "next", &[], 2);
    let revoked = dlock_counter(&mut c, "revoked_grants");
    let mut t = Tail::new(&s);
    let mut pipe = redis::pipe();
    pipe.atomic()
        .cmd("DLOCK.MRELEASE")
        .arg(3)
        .arg(&set)
        .arg("holder")
        .cmd("ACL")
        .arg("DELUSER")
        .arg("wu");
    let (rel, deleted): (i64, i64) = pipe.query(&mut c).unwrap();
    assert_eq!((rel, deleted), (3, 1));
    assert!(
        w.recv_response().is_err(),
        "the waiter's connection is closed"
    );
    let (nf, _) = next.granted();
    assert_eq!(dlock_counter(&mut c, "revoked_grants"), revoked + 1);
    let w = written(&mut t);
    // The release and the grant nobody received, then the revocation on
    // every member and the next set's grant.
    assert_eq!(w.len(), 2, "{w:#?}");
    let gone: Vec<i64> = w[0]
        .cmds
        .iter()
        .filter(|c| c[0] == "DLOCK.APPLY" && c[2] == "gone")
        .map(|c| c[3].parse().unwrap())
        .collect();
    assert_eq!(gone.len(), 3, "{w:#?}");
    let granted = one_grant(&w, &set, "gone", gone[0]);
    drops_all(granted, &set, "holder");
    let again = one_grant(&w, &set[1..], "next", nf);
    assert_ne!(granted, again);
    drops_all(again, &set, "gone");
    assert_eq!(assert_set(&mut c, &set[1..], "next", false), nf);
    assert_eq!(info(&mut c, "v1"), None, "revoked, nobody waits for v1");
}

/// dlock does not record which set a hold came from
/// (docs/commands/dlock.macquire.md#reply): a same-token `MACQUIRE` of part
/// of a set it holds is a retry of those members, written as their deadline
/// moves in one `MULTI`/`EXEC`; the member left out keeps its deadline.
#[test]
fn a_subset_of_a_held_set_is_a_retry_of_those_members() {
    let s = aof_server();
    let mut c = s.conn();
    let mut t = Tail::new(&s);
    let set = ["a", "b", "c"];
    let fence = macquire(&mut c, &set, "t", 60_000, &[]);
    written(&mut t);
    let c_deadline: i64 = redis::cmd("PEXPIRETIME").arg("c").query(&mut c).unwrap();
    let r = try_macquire(&mut c, &set[..2], "t", 90_000, &[]);
    assert_eq!(r.ok().flatten(), Some(fence), "a retry: the same fence");
    for k in &set[..2] {
        let ttl: i64 = redis::cmd("PTTL").arg(*k).query(&mut c).unwrap();
        assert!(ttl > 60_000, "{k} retried: {ttl}");
    }
    let after: i64 = redis::cmd("PEXPIRETIME").arg("c").query(&mut c).unwrap();
    assert_eq!(after, c_deadline, "c was not named: untouched");
    only(written(&mut t));
}
