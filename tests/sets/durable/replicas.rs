//! A replica holds exactly the master's sets after every way a set is
//! granted (at once; from the queue after a release, after its blocker's
//! expiry, after a revoked grant), retried, extended (all members, or
//! nothing when one is lost) and released. Compared after `WAIT 1` on the
//! connection that made the writes, member by member (`DUMP`, digest, key
//! expiry), and as a set: one fence and one deadline on every member.
use super::*;

fn same_on_replica(what: &str, m: &mut Connection, r: &mut Connection, keys: &[String]) {
    assert_same(what, &snapshots(m, keys), &snapshots(r, keys));
}

/// The exact key expiry of every member: one absolute deadline for the set.
fn one_expiry(c: &mut Connection, members: &[&str]) -> i64 {
    let at: Vec<i64> = members
        .iter()
        .map(|m| redis::cmd("PEXPIRETIME").arg(*m).query(c).unwrap())
        .collect();
    assert!(
        at.iter().all(|t| *t == at[0] && *t > 0),
        "{members:?}: {at:?}"
    );
    at[0]
}

#[test]
fn replica_has_every_set_after_grants_retries_extends_and_releases() {
    let (master, replica) = pair();
    let (mut m, mut r) = (master.conn(), replica.conn());
    let ex = ["x:a", "x:b", "x:c"];
    let (sh1, sh2) = (["s:a", "s:b"], ["s:a", "s:b", "s:c"]);
    let keys = strings(&["x:a", "x:b", "x:c", "s:a", "s:b", "s:c"]);

    let f = macquire(&mut m, &ex, "t1", 60_000, &[]);
    let r1 = macquire(&mut m, &sh1, "r1", 60_000, &["SHARED"]);
    let r2 = macquire(&mut m, &sh2, "r2", 50_000, &["SHARED"]);
    assert!(f < r1 && r1 < r2, "each set its own, newer fence");
    wait_replica(&mut m);
    same_on_replica("granted", &mut m, &mut r, &keys);
    assert_eq!(assert_set(&mut r, &ex, "t1", false), f);
    assert_eq!(assert_set(&mut r, &sh1, "r1", true), r1);
    assert_eq!(assert_set(&mut r, &sh2, "r2", true), r2);
    assert_eq!(one_expiry(&mut r, &ex), one_expiry(&mut m, &ex));

    // A retry of the same set: the same fence, every deadline moved.
    let before = one_expiry(&mut m, &ex);
    assert_eq!(macquire(&mut m, &ex, "t1", 70_000, &[]), f);
    assert!(one_expiry(&mut m, &ex) > before);
    wait_replica(&mut m);
    same_on_replica("retried", &mut m, &mut r, &keys);
    assert_eq!(one_expiry(&mut r, &ex), one_expiry(&mut m, &ex));

    // MEXTEND of both kinds.
    assert_eq!(mextend(&mut m, &ex, "t1", 90_000), 1);
    assert_eq!(mextend(&mut m, &sh2, "r2", 80_000), 1);
    wait_replica(&mut m);
    same_on_replica("extended", &mut m, &mut r, &keys);
    assert_eq!(assert_set(&mut r, &ex, "t1", false), f);
    assert_eq!(assert_set(&mut r, &sh2, "r2", true), r2);
    assert_eq!(one_expiry(&mut r, &ex), one_expiry(&mut m, &ex));

    // A set with a lost member extends nothing.
    assert_eq!(release(&mut m, "x:b", "t1"), 1);
    wait_replica(&mut m);
    let lost = snapshots(&mut m, &keys);
    assert_eq!(mextend(&mut m, &ex, "t1", 99_000), 0);
    assert_eq!(
        snapshots(&mut m, &keys),
        lost,
        "a refused MEXTEND changed nothing"
    );
    wait_replica(&mut m);
    same_on_replica("refused extension", &mut m, &mut r, &keys);

    // Releases: the remaining members of each set.
    assert_eq!(mrelease(&mut m, &ex, "t1"), 2);
    assert_eq!(mrelease(&mut m, &sh1, "r1"), 2);
    wait_replica(&mut m);
    same_on_replica("released", &mut m, &mut r, &keys);
    for k in ex {
        assert!(!exists(&mut r, k), "{k} released");
    }
    assert_eq!(assert_set(&mut r, &sh2, "r2", true), r2);
    assert_eq!(mrelease(&mut m, &sh2, "r2"), 3);
    wait_replica(&mut m);
    same_on_replica("all released", &mut m, &mut r, &keys);
    assert_eq!(dbsize(&mut r), 0);
}

#[test]
fn replica_follows_sets_granted_from_the_queue() {
    let (master, replica) = pair();
    let (mut m, mut r) = (master.conn(), replica.conn());
    let keys = strings(&["q:1", "q:2", "q:3", "e:1", "e:2", "e:3"]);

    // After a release: the set waits for two members; the first freed one
    // stays reserved, the second hands it the whole set in one command.
    let held = macquire(&mut m, &["q:1", "q:2"], "h", 60_000, &[]);
    let w = Waiter::set(&master, &mut m, &["q:1", "q:2", "q:3"], "w", &[], 1);
    // A single request behind the set on q:3, which is free now.
    let s = Waiter::single(&master, &mut m, "q:3", "single", 2);
    assert!(s.pending(), "the single request waits behind the set");
    let handoffs = dlock_counter(&mut m, "handoffs");
    assert_eq!(release(&mut m, "q:1", "h"), 1);
    let reserved = view(&mut m, "q:1").expect("reserved, not free");
    assert_eq!(
        (reserved.holds.len(), reserved.waiters),
        (0, 1),
        "{reserved:?}"
    );
    wait_replica(&mut m);
    same_on_replica("one member freed", &mut m, &mut r, &keys);
    assert_eq!(release(&mut m, "q:2", "h"), 1);
    let (wf, _) = w.granted();
    assert!(wf > held);
    assert_eq!(
        dlock_counter(&mut m, "handoffs"),
        handoffs + 1,
        "one handoff, the set"
    );
    // The grant was made inside m's RELEASE: m's WAIT covers it.
    wait_replica(&mut m);
    same_on_replica("set handed over", &mut m, &mut r, &keys);
    assert_eq!(assert_set(&mut r, &["q:1", "q:2", "q:3"], "w", false), wf);
    // The set's release hands q:3 to the single request.
    assert_eq!(mrelease(&mut m, &["q:1", "q:2", "q:3"], "w"), 3);
    let (sf, _) = s.granted();
    assert!(sf > wf);
    wait_replica(&mut m);
    same_on_replica("single handed over", &mut m, &mut r, &keys);
    assert_eq!(held_fence(&mut r, "q:3", "single"), sf);
    assert!(!exists(&mut r, "q:1") && !exists(&mut r, "q:2"));

    // After an expiry: the blocker's set is shortened (once the waiter is
    // queued), and a timer hands the set over at its deadline.
    let ef = macquire(&mut m, &["e:1", "e:2"], "short", 60_000, &[]);
    let w = Waiter::set(&master, &mut m, &["e:1", "e:2", "e:3"], "late", &[], 1);
    assert_eq!(mextend(&mut m, &["e:1", "e:2"], "short", 200), 1);
    let (lf, _) = w.granted();
    assert!(lf > ef);
    sync_replica(&mut m);
    same_on_replica("handed over at expiry", &mut m, &mut r, &keys);
    assert_eq!(
        assert_set(&mut r, &["e:1", "e:2", "e:3"], "late", false),
        lf
    );
    assert_eq!(
        assert_set(&mut m, &["e:1", "e:2", "e:3"], "late", false),
        lf
    );
}

/// The fence of `tok`'s plain hold on `key`.
fn held_fence(c: &mut Connection, key: &str, tok: &str) -> i64 {
    let i = held(c, key);
    assert_eq!(i.token, tok.as_bytes(), "{key}: {i:?}");
    i.fence
}

#[test]
fn replica_follows_a_revoked_set_grant() {
    let (master, replica) = pair();
    let (mut m, mut r) = (master.conn(), replica.conn());
    let set = ["v:1", "v:2", "v:3"];
    let keys = strings(&set);
    macquire(&mut m, &set, "holder", 60_000, &["SHARED"]);
    let v1 = Waiter::set(&master, &mut m, &set, "v1", &[], 1);
    let v2 = Waiter::set(&master, &mut m, &set, "v2", &[], 2);
    let [grants, revoked] = ["grants", "revoked_grants"].map(|n| dlock_counter(&mut m, n));
    // v1's set is granted and v1 leaves in the same event-loop turn.
    let mut pipe = redis::pipe();
    pipe.atomic()
        .cmd("DLOCK.MRELEASE")
        .arg(3)
        .arg(&set)
        .arg("holder")
        .cmd("CLIENT")
        .arg("UNBLOCK")
        .arg(v1.id);
    let (rel, unblocked): (i64, i64) = pipe.query(&mut m).unwrap();
    assert_eq!((rel, unblocked), (3, 1));
    assert!(matches!(v1.reply().0, Ok(None)), "unblocked: nil");
    let (f2, _) = v2.granted();
    // One set granted twice (v1, revoked; v2): one revoked grant.
    assert_eq!(dlock_counter(&mut m, "grants"), grants + 2);
    assert_eq!(dlock_counter(&mut m, "revoked_grants"), revoked + 1);
    assert_eq!(assert_set(&mut m, &set, "v2", false), f2);
    assert_no_hold_of(&mut m, &set, "v1");
    wait_blocked_clients(&mut m, 0);
    sync_replica(&mut m);
    same_on_replica("revoked", &mut m, &mut r, &keys);
    assert_eq!(assert_set(&mut r, &set, "v2", false), f2);
    assert_no_hold_of(&mut r, &set, "v1");
}

/// `PEXPIRETIME` of every member, read in one `MULTI`.
fn expiries(c: &mut Connection, members: &[&str]) -> Vec<i64> {
    let mut pipe = redis::pipe();
    pipe.atomic();
    for m in members {
        pipe.cmd("PEXPIRETIME").arg(*m);
    }
    pipe.query(c).unwrap()
}

#[test]
fn every_mextend_gives_every_member_one_deadline() {
    // MEXTEND reads the clock once for all members: with one read per
    // member, a command that crosses a millisecond (likelier with the most
    // members a set may have) leaves the set ending at several moments.
    let (master, replica) = pair();
    let (mut m, mut r) = (master.conn(), replica.conn());
    let names: Vec<String> = (0..128).map(|i| format!("big:{i}")).collect();
    let (ex, sh): (Vec<&str>, Vec<&str>) = names.iter().map(|n| n.as_str()).partition(|n| {
        let i: usize = n[4..].parse().unwrap();
        i < 64
    });
    macquire(&mut m, &ex, "t", 60_000, &[]);
    macquire(&mut m, &sh, "r", 60_000, &["SHARED"]);
    for i in 0..200 {
        for (set, tok) in [(&ex, "t"), (&sh, "r")] {
            assert_eq!(mextend(&mut m, set, tok, 60_000 + i), 1);
            let at = expiries(&mut m, set);
            assert!(
                at.iter().all(|t| *t == at[0]),
                "extension {i} of {tok}: {at:?}"
            );
        }
    }
    wait_replica(&mut m);
    for set in [&ex, &sh] {
        assert_eq!(expiries(&mut r, set), expiries(&mut m, set));
    }
    same_on_replica("extended", &mut m, &mut r, &names);
}

#[test]
fn a_grant_revoked_by_client_kill_kills_nobody_on_the_replica() {
    let (master, replica) = pair();
    let (mut m, mut r) = (master.conn(), replica.conn());
    let set = ["k:1", "k:2"];
    macquire(&mut m, &set, "holder", 60_000, &[]);
    // The master's next client ids are above any the replica gave yet.
    let on_replica = client_id(&mut r);
    let mut spare = Vec::new();
    while spare.len() < 10_000 {
        let mut x = master.conn();
        let id = client_id(&mut x);
        spare.push(x);
        if id > on_replica + 2 {
            break;
        }
    }
    let v = Waiter::set(&master, &mut m, &set, "v", &[], 1);
    // A reader on the replica with the waiter's client id.
    let mut readers = Vec::new();
    let victim = loop {
        let mut x = replica.conn();
        let id = client_id(&mut x);
        assert!(id <= v.id, "replica ids passed the waiter's {}", v.id);
        if id == v.id {
            break x;
        }
        readers.push(x);
    };
    let mut victim = victim;
    let mut pipe = redis::pipe();
    pipe.atomic()
        .cmd("DLOCK.MRELEASE")
        .arg(2)
        .arg(&set)
        .arg("holder")
        .cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(v.id);
    let (rel, killed): (i64, i64) = pipe.query(&mut m).unwrap();
    assert_eq!((rel, killed), (2, 1));
    assert!(v.reply().0.is_err(), "the waiter was killed");
    assert_eq!(dlock_counter(&mut m, "revoked_grants"), 1);
    sync_replica(&mut m);
    same_on_replica("revoked", &mut m, &mut r, &strings(&set));
    let pong: RedisResult<String> = redis::cmd("PING").query(&mut victim);
    assert_eq!(
        pong.ok().as_deref(),
        Some("PONG"),
        "the replica's client was killed"
    );
}
