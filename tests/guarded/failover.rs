//! Across a failover: holder A's master dies while A is frozen, the replica
//! is promoted, B takes the lock there once A's lease (and the promotion
//! quarantine) is over; A, resumed and reconnected to the new master, is
//! refused. The replica and both AOFs received the inner writes of the
//! accepted guarded writes, never `DLOCK.GUARD` itself (a replica that
//! re-checked could decide differently from its master).
use super::*;
use common::lock::*;

const RES: &str = "{acct}";
const BALANCE: &str = "{acct}:balance";
const LOG: &str = "{acct}:log";
/// A's lease while it writes: long, so no step races it.
const LEASE_MS: &str = "60000";
/// The lease A shortens to before it freezes: B waits for its end.
const SHORT_MS: &str = "300";

fn aof_has_no_guard(s: &Server, which: &str) -> Vec<Vec<String>> {
    let cmds = common::aof::commands(s, ".incr.aof");
    assert!(
        !cmds
            .iter()
            .any(|c| c[0].to_ascii_uppercase().starts_with("DLOCK.GUARD")),
        "{which}'s AOF has a DLOCK.GUARD: {cmds:?}"
    );
    cmds
}

/// The AOF has `SET BALANCE value` and `RPUSH LOG value` for each of `values`.
fn aof_has_writes(cmds: &[Vec<String>], which: &str, values: &[&str]) {
    for v in values {
        for (name, key) in [("SET", BALANCE), ("RPUSH", LOG)] {
            assert!(
                cmds.iter().any(|c| c[0].eq_ignore_ascii_case(name)
                    && c.get(1).map(String::as_str) == Some(key)
                    && c.get(2).map(String::as_str) == Some(v)),
                "{which}'s AOF lacks {name} {key} {v}: {cmds:?}"
            );
        }
    }
    assert!(
        !cmds.iter().flatten().any(|a| a.starts_with("late")),
        "{which}'s AOF has a refused write: {cmds:?}"
    );
}

#[test]
fn a_holder_failed_over_away_from_is_refused_on_the_new_master() {
    let quiet = |b: ServerBuilder| b.aof("always").arg("--shutdown-timeout").arg("0");
    let mut m = quiet(Server::builder()).start();
    let r = quiet(Server::builder().replica_of(&m)).start();
    r.wait_for_sync(DEADLINE);
    // The promotion quarantine lasts the longest TTL seen by default; keep
    // it short (B waits it out anyway).
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "dlock.restart-quarantine", "500"])
        .query(&mut r.conn())
        .unwrap();
    let mut monitor = Monitor::attach(&r);

    // A holds the lock on the master and writes, TOKEN and FENCE, single
    // and BATCH; WAIT on its own connection: the replica has them.
    let mut a = CliProcess::spawn(&m);
    let granted = a.run1(&["DLOCK.ACQUIRE", RES, "A", LEASE_MS].map(String::from));
    let fence_a: i64 = granted
        .strip_prefix("(integer) ")
        .and_then(|f| f.parse().ok())
        .unwrap_or_else(|| panic!("ACQUIRE by A answered {granted:?}"));
    let (t, f) = (Proof::Token("A".into()), Proof::Fence(fence_a));
    assert_eq!(a.run1(&guarded(RES, &t, &["SET", BALANCE, "A-1"])), "OK");
    assert_eq!(
        a.run1(&guarded(RES, &f, &["RPUSH", LOG, "A-1"])),
        "(integer) 1"
    );
    assert_eq!(
        a.run(&guarded_batch(
            RES,
            &f,
            &[&["SET", BALANCE, "A-2"], &["RPUSH", LOG, "A-2"]]
        )),
        ["1) OK", "2) (integer) 2"]
    );
    assert_eq!(
        a.run1(&["WAIT", "1", "5000"].map(String::from)),
        "(integer) 1"
    );
    let mut rc = r.conn();
    assert_eq!(get(&mut rc, BALANCE).as_deref(), Some("A-2"));
    assert_eq!(list(&mut rc, LOG), ["A-1", "A-2"]);
    // What the replica executed: the inner writes, no guard.
    let marker = "guarded-failover-marker";
    let _: () = redis::cmd("SET")
        .arg(marker)
        .arg(1)
        .query(&mut m.conn())
        .unwrap();
    let seen = monitor.until(marker);
    assert!(
        !seen
            .iter()
            .any(|l| l.to_ascii_uppercase().contains("DLOCK.GUARD")),
        "the replica executed a DLOCK.GUARD: {seen:#?}"
    );
    for v in ["A-1", "A-2"] {
        assert!(
            seen.iter()
                .any(|l| l.contains(&format!("\"SET\" \"{BALANCE}\" \"{v}\""))
                    || l.contains(&format!("\"RPUSH\" \"{LOG}\" \"{v}\""))),
            "the replica never executed A's write {v}: {seen:#?}"
        );
    }

    // A shortens its lease (the replica has that too) and freezes; its
    // master dies; the replica is promoted.
    assert_eq!(
        a.run1(&["DLOCK.EXTEND", RES, "A", SHORT_MS].map(String::from)),
        "(integer) 1"
    );
    assert_eq!(
        a.run1(&["WAIT", "1", "5000"].map(String::from)),
        "(integer) 1"
    );
    a.stop();
    m.kill9();
    wait_until(DEADLINE, "the replica to see its master gone", || {
        info_field(&mut rc, "replication", "master_link_status").as_deref() == Some("down")
    });
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut rc)
        .unwrap();
    let fence_b = grant_when_free(&mut rc, RES, "B", &[]);
    assert!(fence_b > fence_a);
    let (tb, fb) = (Proof::Token("B".into()), Proof::Fence(fence_b));
    let ok: String = cmd(&guarded(RES, &tb, &["SET", BALANCE, "B-1"]))
        .query(&mut rc)
        .unwrap();
    assert_eq!(ok, "OK");
    let (ok, n): (String, i64) = cmd(&guarded_batch(
        RES,
        &fb,
        &[&["SET", BALANCE, "B-2"], &["RPUSH", LOG, "B-2"]],
    ))
    .query(&mut rc)
    .unwrap();
    assert_eq!((ok.as_str(), n), ("OK", 3));
    let n: i64 = cmd(&guarded(RES, &tb, &["RPUSH", LOG, "B-1"]))
        .query(&mut rc)
        .unwrap();
    assert_eq!(n, 4);

    // A resumes, reconnects to the new master and writes: all refused.
    let to_new_master =
        a.submit(&["connect", "127.0.0.1", &r.port().to_string()].map(String::from));
    let stale = [
        guarded(RES, &t, &["SET", BALANCE, "late-token"]),
        guarded(RES, &f, &["RPUSH", LOG, "late-fence"]),
        guarded_batch(
            RES,
            &t,
            &[
                &["SET", BALANCE, "late-batch"],
                &["RPUSH", LOG, "late-batch"],
            ],
        ),
        guarded_batch(
            RES,
            &f,
            &[
                &["SET", BALANCE, "late-batch"],
                &["RPUSH", LOG, "late-batch"],
            ],
        ),
    ];
    let markers: Vec<u64> = stale.iter().map(|w| a.submit(w)).collect();
    a.cont();
    assert_eq!(a.replies(to_new_master), Vec::<String>::new(), "connect");
    for (w, mk) in stale.iter().zip(markers) {
        let reply = a.replies(mk);
        assert!(
            reply.len() == 1 && reply[0].starts_with("(error) NOTHELD dlock: "),
            "A's {w:?} on the new master answered {reply:?}"
        );
    }
    // A did reach the new master: its reads are answered there.
    assert_eq!(
        a.run1(&["GET", BALANCE].map(String::from)),
        "\"B-2\"",
        "A's process is connected to the new master"
    );

    assert_eq!(get(&mut rc, BALANCE).as_deref(), Some("B-2"));
    assert_eq!(list(&mut rc, LOG), ["A-1", "A-2", "B-2", "B-1"]);
    assert_eq!(held(&mut rc, RES).fence, fence_b);
    // Both AOFs: the inner writes of the accepted guarded writes, no guard,
    // none of the refused ones.
    let old = aof_has_no_guard(&m, "the old master");
    aof_has_writes(&old, "the old master", &["A-1", "A-2"]);
    let new = aof_has_no_guard(&r, "the promoted replica");
    aof_has_writes(&new, "the promoted replica", &["A-1", "A-2", "B-1", "B-2"]);
}
