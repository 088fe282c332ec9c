//! Sets in a real Redis Cluster: every member is a declared key (`COMMAND
//! GETKEYS`), members in different slots get Redis's `CROSSSLOT`, a set
//! under one hash tag works through a cluster client (waiting included),
//! and a set whose members a resharding has split between two nodes gets
//! Redis's `TRYAGAIN`/`ASK` on every set command and is never granted in
//! part on either node.
use super::*;
use common::cluster::{setslot, Cluster};

fn code(r: &RedisResult<impl std::fmt::Debug>) -> String {
    match r {
        Err(e) => e.code().unwrap_or("?").to_string(),
        Ok(v) => panic!("expected an error, got {v:?}"),
    }
}

/// `cmd` right after `ASKING`, on the same connection.
fn asking<T: redis::FromRedisValue>(c: &mut Connection, cmd: &redis::Cmd) -> RedisResult<T> {
    let _: () = redis::cmd("ASKING").query(c)?;
    cmd.query(c)
}

fn getkeys(c: &mut Connection, args: &[&str]) -> Vec<String> {
    redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg(args)
        .query(c)
        .unwrap_or_else(|e| panic!("COMMAND GETKEYS {args:?}: {e}"))
}

#[test]
fn set_members_are_keys_of_one_slot() {
    let cl = Cluster::start(3, 0);
    let mut n = cl.node(0).conn();
    let abc = ["a", "b", "c"];
    assert_eq!(
        getkeys(&mut n, &["DLOCK.MACQUIRE", "3", "a", "b", "c", "t", "1000"]),
        abc
    );
    let waiting = [
        "DLOCK.MACQUIRE",
        "2",
        "a",
        "b",
        "t",
        "1000",
        "SHARED",
        "WAIT",
        "10",
    ];
    assert_eq!(getkeys(&mut n, &waiting), ["a", "b"]);
    assert_eq!(
        getkeys(&mut n, &["DLOCK.MRELEASE", "3", "a", "b", "c", "t"]),
        abc
    );
    assert_eq!(
        getkeys(&mut n, &["DLOCK.MEXTEND", "3", "a", "b", "c", "t", "1000"]),
        abc
    );

    // a, b and c hash to three slots: every node refuses, and so does a
    // cluster client.
    assert_ne!(cl.key_slot("a"), cl.key_slot("b"));
    for i in cl.masters() {
        let mut c = cl.node(i).conn();
        assert_eq!(
            code(&try_macquire(&mut c, &abc, "t", 1000, &[])),
            "CROSSSLOT"
        );
        let mut wait = macquire_cmd(&abc, "t", 1000, &[]);
        wait.arg("WAIT").arg(100);
        assert_eq!(code(&wait.query::<Option<i64>>(&mut c)), "CROSSSLOT");
        assert_eq!(code(&try_mrelease(&mut c, &abc, "t")), "CROSSSLOT");
        assert_eq!(code(&try_mextend(&mut c, &abc, "t", 1000)), "CROSSSLOT");
        assert_eq!(dlock_counter(&mut c, "waiters"), 0);
    }
    let mut cc = cl.conn();
    assert_eq!(
        code(&try_macquire(&mut cc, &abc, "t", 1000, &[])),
        "CROSSSLOT"
    );
    for k in abc {
        assert_eq!(view(&mut cc, k), None, "{k}");
    }

    // One hash tag: one slot, through the cluster client.
    let job = ["{job}:a", "{job}:b", "{job}:c"];
    let owner = cl.node_for_slot(cl.key_slot("{job}"));
    let mut oc = cl.node(owner).conn();
    let f = macquire(&mut cc, &job, "t1", 60_000, &[]);
    assert_eq!(assert_set(&mut oc, &job, "t1", false), f);
    for k in job {
        let v = view(&mut cc, k).unwrap();
        assert_eq!(
            (v.holds[0].token.as_slice(), v.holds[0].fence),
            (&b"t1"[..], f)
        );
    }
    assert_eq!(macquire(&mut cc, &job, "t1", 60_000, &[]), f, "a retry");
    assert_eq!(mextend(&mut cc, &job, "t1", 90_000), 1);
    // A set waiting through its own cluster connection (which waits for
    // replies longer than the set waits).
    let urls: Vec<String> = cl.nodes().iter().map(|s| s.url()).collect();
    let mut wc = redis::cluster::ClusterClientBuilder::new(urls)
        .connection_timeout(Duration::from_secs(10))
        .response_timeout(Duration::from_secs(40))
        .build()
        .unwrap()
        .get_connection()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut cmd = macquire_cmd(&job, "w", 60_000, &[]);
        let _ = tx.send(cmd.arg("WAIT").arg(30_000).query::<Option<i64>>(&mut wc));
    });
    wait_queued(&mut oc, job[0], 1);
    assert_eq!(mrelease(&mut cc, &job, "t1"), 3);
    let wf = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the waiting set got no reply")
        .expect("granted")
        .expect("a fence");
    assert!(wf > f);
    assert_eq!(assert_set(&mut oc, &job, "w", false), wf);
    let shared = ["{job}:d", "{job}:e"];
    let r1 = macquire(&mut cc, &shared, "r1", 60_000, &["SHARED"]);
    let r2 = macquire(&mut cc, &shared, "r2", 60_000, &["SHARED"]);
    assert!(wf < r1 && r1 < r2);
    assert_eq!(assert_set(&mut oc, &shared, "r1", true), r1);
    assert_eq!(mrelease(&mut cc, &job, "w"), 3);
    assert_eq!(mrelease(&mut cc, &shared, "r1"), 2);
    assert_eq!(mrelease(&mut cc, &shared, "r2"), 2);
    assert_eq!(dbsize(&mut oc), 0);
}

/// The lock holds among the keys `c`'s node has in `slot`: (key, token,
/// fence) of every hold. `importing`: the node is importing the slot, so
/// each read goes after `ASKING`.
fn holds_in_slot(c: &mut Connection, slot: u16, importing: bool) -> Vec<(String, String, i64)> {
    let keys: Vec<String> = redis::cmd("CLUSTER")
        .arg("GETKEYSINSLOT")
        .arg(slot)
        .arg(100)
        .query(c)
        .unwrap();
    let mut out = Vec::new();
    for k in keys {
        let mut cmd = redis::cmd("DLOCK.INFO");
        cmd.arg(&k);
        let v: Value = if importing {
            asking(c, &cmd).unwrap()
        } else {
            cmd.query(c).unwrap()
        };
        let v = parse_view(&v).unwrap_or_else(|| panic!("{k}: not a held lock"));
        for h in v.holds {
            out.push((k.clone(), String::from_utf8(h.token).unwrap(), h.fence));
        }
    }
    out.sort();
    out
}

#[test]
fn a_set_split_by_resharding_is_never_granted_in_part() {
    let cl = Cluster::start(3, 0);
    let set = ["{s}:a", "{s}:b", "{s}:c"];
    let slot = cl.key_slot("{s}");
    let src = cl.node_for_slot(slot);
    let dst = *cl.masters().iter().find(|&&m| m != src).unwrap();
    let (mut sc, mut dc) = (cl.node(src).conn(), cl.node(dst).conn());
    let f1 = macquire(&mut sc, &set, "t1", 60_000, &[]);
    let mut cmd = macquire_cmd(&set, "w", 60_000, &[]);
    cmd.arg("WAIT").arg(20_000);
    let w = Waiter::send(cl.node(src), cmd);
    wait_queued(&mut sc, set[0], 1);

    setslot(&mut dc, slot, "IMPORTING", cl.id(src));
    setslot(&mut sc, slot, "MIGRATING", cl.id(dst));
    // Every member still on the source: it serves the set (held: nil), and
    // sends the queued set away, since it may not grant a moving slot.
    assert_eq!(
        try_macquire(&mut sc, &set, "t3", 60_000, &[]).unwrap(),
        None
    );
    // One member moves.
    let moved: String = redis::cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(cl.node(dst).port())
        .arg(set[0])
        .arg(0)
        .arg(5000)
        .query(&mut sc)
        .unwrap();
    assert_eq!(moved, "OK");
    assert_eq!(code(&w.reply().0), "TRYAGAIN", "the queued set retries");

    // The set spans two nodes now: every set command gets TRYAGAIN on the
    // source, and on the destination after ASKING (MOVED without it).
    let mut waiting = macquire_cmd(&set, "t3", 60_000, &[]);
    waiting.arg("WAIT").arg(1_000);
    let mut mrel = redis::cmd("DLOCK.MRELEASE");
    mrel.arg(3).arg(&set).arg("t1");
    let mut mext = redis::cmd("DLOCK.MEXTEND");
    mext.arg(3).arg(&set).arg("t1").arg(90_000);
    let cmds = [
        ("MACQUIRE", macquire_cmd(&set, "t3", 60_000, &[])),
        ("MACQUIRE WAIT", waiting),
        ("MRELEASE", mrel),
        ("MEXTEND", mext),
    ];
    for (what, cmd) in &cmds {
        assert_eq!(
            code(&cmd.query::<Value>(&mut sc)),
            "TRYAGAIN",
            "source: {what}"
        );
        assert_eq!(
            code(&asking::<Value>(&mut dc, cmd)),
            "TRYAGAIN",
            "destination: {what}"
        );
        assert_eq!(
            code(&cmd.query::<Value>(&mut dc)),
            "MOVED",
            "destination: {what}"
        );
    }
    // A set none of whose members is on the source: ASK, and the
    // destination, which has none either, TRYAGAIN.
    let fresh = ["{s}:x", "{s}:y"];
    assert_eq!(
        code(&try_macquire(&mut sc, &fresh, "t3", 60_000, &[])),
        "ASK"
    );
    let cmd = macquire_cmd(&fresh, "t3", 60_000, &[]);
    assert_eq!(code(&asking::<Value>(&mut dc, &cmd)), "TRYAGAIN");
    // Single-key commands work where the member is.
    assert_eq!(release(&mut sc, set[1], "t1"), 1);
    for (what, cmd) in &cmds[..2] {
        assert_eq!(
            code(&cmd.query::<Value>(&mut sc)),
            "TRYAGAIN",
            "source: {what}"
        );
    }

    // No node granted any part of a set: t1 keeps what it had, nobody else
    // holds anything.
    let (a, c) = (set[0].to_string(), set[2].to_string());
    let t1 = "t1".to_string();
    assert_eq!(holds_in_slot(&mut dc, slot, true), [(a, t1.clone(), f1)]);
    assert_eq!(holds_in_slot(&mut sc, slot, false), [(c, t1, f1)]);
    for n in [&mut sc, &mut dc] {
        assert_eq!(dlock_counter(n, "waiters"), 0);
        wait_blocked_clients(n, 0);
    }

    // The rest of the slot moves; the set works on its new node.
    cl.migrate_slot(slot, src, dst);
    let mut cc = cl.conn();
    assert_eq!(
        try_macquire(&mut cc, &set, "t3", 60_000, &[]).unwrap(),
        None
    );
    assert_eq!(mrelease(&mut cc, &set, "t1"), 2);
    let f3 = macquire(&mut cc, &set, "t3", 60_000, &[]);
    assert!(f3 > f1);
    assert_eq!(assert_set(&mut dc, &set, "t3", false), f3);
    assert_eq!(holds_in_slot(&mut sc, slot, false), []);
}
