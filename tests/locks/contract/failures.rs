//! Failed commands write nothing: no dirty counter, nothing propagated to
//! replicas.
use super::*;

// ---------------------------------------------------------------- failures write nothing

/// Every way a command can fail against a held lock (and a string key).
fn failed_commands(c: &mut Connection) {
    assert_eq!(acquire(c, b"res", b"other", 10_000), None);
    assert_eq!(release(c, b"res", b"other"), 0);
    assert_eq!(extend(c, b"res", b"other", 10_000), 0);
    assert_eq!(release(c, b"free", b"t"), 0);
    assert_eq!(extend(c, b"free", b"t", 10_000), 0);
    assert_eq!(
        expect_err(c, &[b"DLOCK.ACQUIRE", b"res", b"owner", b"0"]),
        TTL_ERR
    );
    assert_eq!(
        expect_err(c, &[b"DLOCK.EXTEND", b"res", b"owner", b"-5"]),
        TTL_ERR
    );
    assert_eq!(
        expect_err(c, &[b"DLOCK.ACQUIRE", b"res", b"owner", b"10", b"X"]),
        SYNTAX_ERR
    );
    assert_eq!(
        expect_err(c, &[b"DLOCK.RELEASE", b"res", b"owner", b"x"]),
        arity_err("dlock.release")
    );
    assert_eq!(
        expect_err(c, &[b"DLOCK.ACQUIRE", b"str", b"t", b"10"]),
        WRONGTYPE_ERR
    );
    assert_eq!(
        expect_err(c, &[b"DLOCK.RELEASE", b"str", b"t"]),
        WRONGTYPE_ERR
    );
}

fn changes_since_save(c: &mut Connection) -> i64 {
    info_field(c, "persistence", "rdb_changes_since_last_save")
        .expect("rdb_changes_since_last_save")
        .parse()
        .unwrap()
}

#[test]
fn failed_commands_do_not_dirty_the_dataset() {
    let s = Server::start();
    let mut c = s.conn();
    let held = hold(&mut c, b"res", b"owner");
    let _: () = redis::cmd("SET").arg("str").arg("v").query(&mut c).unwrap();
    let before = changes_since_save(&mut c);
    failed_commands(&mut c);
    assert_eq!(changes_since_save(&mut c), before, "a failed command wrote");
    let _: i64 = redis::cmd("DEL").arg("str").query(&mut c).unwrap();
    held.assert_unchanged(&mut c);
    // Successes do count (so save points trigger on lock changes).
    let before = changes_since_save(&mut c);
    assert_eq!(extend(&mut c, b"res", b"owner", LONG_TTL), 1);
    assert_eq!(release(&mut c, b"res", b"owner"), 1);
    assert!(changes_since_save(&mut c) >= before + 2);
}

fn repl_offset(c: &mut Connection) -> i64 {
    info_field(c, "replication", "master_repl_offset")
        .expect("master_repl_offset")
        .parse()
        .unwrap()
}

#[test]
fn failed_commands_propagate_nothing_to_replicas() {
    // No periodic PING into the replication stream during the test.
    let master = Server::builder()
        .arg("--repl-ping-replica-period")
        .arg("3600")
        .arg("--repl-diskless-sync-delay")
        .arg("0")
        .start();
    let replica = Server::builder().replica_of(&master).start();
    replica.wait_for_sync(Duration::from_secs(20));
    let mut c = master.conn();
    let held = hold(&mut c, b"res", b"owner");
    let _: () = redis::cmd("SET").arg("str").arg("v").query(&mut c).unwrap();
    let before = repl_offset(&mut c);
    failed_commands(&mut c);
    assert_eq!(
        repl_offset(&mut c),
        before,
        "a failed command was propagated"
    );
    // The replica holds exactly the master's lock.
    let _: () = redis::cmd("SET")
        .arg("marker")
        .arg("1")
        .query(&mut c)
        .unwrap();
    let mut r = replica.conn();
    wait_until(Duration::from_secs(10), "marker on the replica", || {
        exists(&mut r, b"marker")
    });
    let i = info(&mut r, b"res").expect("lock replicated");
    assert_eq!((i.token, i.fence), (held.token.clone(), held.fence));
    held.assert_unchanged_ttl_only(&mut c);
}
