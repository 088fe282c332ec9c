//! The per-hold effects are internal: `DLOCK.ADDHOLD`, `DLOCK.MOVEHOLD`
//! and `DLOCK.DROPHOLD` from a client (directly, in `MULTI`, from a script,
//! on a writable replica) are refused and change nothing: no hold, no
//! deadline, no fence clock, nothing propagated.
use super::kinds::Kinds;
use super::*;

fn internal_err(name: &str) -> String {
    format!("ERR {name} is internal: accepted only from the master link or the AOF")
}

/// Forged effects against the kinds and a free key, well-formed or not.
fn forgeries(k: &Kinds) -> Vec<Vec<String>> {
    let far = (now_ms() + 3_600_000).to_string();
    let max = i64::MAX.to_string();
    let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    vec![
        // A writer slipped in beside the readers, a free key taken, with
        // the fence clock pushed to its ceiling.
        v(&[
            "DLOCK.ADDHOLD",
            &k.shared,
            "f",
            "f",
            "7",
            "exclusive",
            "1",
            &far,
            &max,
        ]),
        v(&[
            "DLOCK.ADDHOLD",
            "free",
            "f",
            "f",
            &max,
            "shared",
            "1",
            &far,
            &max,
        ]),
        v(&[
            "DLOCK.ADDHOLD",
            &k.sem,
            "p4",
            "p4",
            "7",
            "exclusive",
            "3",
            &far,
            "7",
        ]),
        // A hold stretched, a hold ended, a lock of another owner dropped.
        v(&["DLOCK.MOVEHOLD", &k.owner, "a1", &far]),
        v(&["DLOCK.MOVEHOLD", &k.down, "dw", "1"]),
        v(&["DLOCK.DROPHOLD", &k.shared, "r1"]),
        v(&["DLOCK.DROPHOLD", &k.sem, "p1"]),
        // Malformed: still refused as forged, before anything is parsed.
        v(&[
            "DLOCK.ADDHOLD",
            &k.shared,
            "",
            "",
            "0",
            "read",
            "0",
            "-1",
            "x",
        ]),
        v(&["DLOCK.MOVEHOLD", &k.shared, "r1", "soon"]),
    ]
}

#[test]
fn forged_per_hold_effects_are_refused_and_change_nothing() {
    let (master, replica) = pair(&[]);
    let (mut m, mut r) = (master.conn(), replica.conn());
    let k = Kinds::build(&mut m, "forge");
    wait_replica(&mut m);
    let mut keys = k.keys();
    keys.push("free".into());
    let before = snapshots(&mut m, &keys);
    let offset = counter(&mut m, "replication", "master_repl_offset");
    let dirty = counter(&mut m, "persistence", "rdb_changes_since_last_save");
    let fence_mark = counter(&mut m, "dlock", "dlock_last_fence");

    for argv in forgeries(&k) {
        let e = err_of(redis::cmd(&argv[0]).arg(&argv[1..]).query(&mut m));
        assert_eq!(e, internal_err(&argv[0]), "{argv:?}");
        // Inside a transaction: refused at EXEC, the rest still runs.
        let mut pipe = redis::pipe();
        pipe.atomic().cmd(&argv[0]).arg(&argv[1..]).cmd("PING");
        let res: RedisResult<Value> = pipe.query(&mut m);
        let refused = match &res {
            Err(e) => err_text(e) == internal_err(&argv[0]),
            Ok(Value::Array(items)) => matches!(&items[0], Value::ServerError(_)),
            Ok(_) => false,
        };
        assert!(refused, "{argv:?} in MULTI: {res:?}");
        // From a script (the commands deny scripts altogether).
        let script = "return redis.call(unpack(ARGV))";
        let res: RedisResult<Value> = redis::cmd("EVAL")
            .arg(script)
            .arg(0)
            .arg(&argv)
            .query(&mut m);
        assert!(res.is_err(), "{argv:?} from a script: {res:?}");
    }
    assert_same("after forged effects", &before, &snapshots(&mut m, &keys));
    assert!(!exists(&mut m, "free"));
    assert_eq!(
        counter(&mut m, "replication", "master_repl_offset"),
        offset,
        "a forged effect was propagated"
    );
    assert_eq!(
        counter(&mut m, "persistence", "rdb_changes_since_last_save"),
        dirty
    );
    assert_eq!(
        counter(&mut m, "dlock", "dlock_last_fence"),
        fence_mark,
        "a forged effect moved the fence clock"
    );
    k.behave(&mut m);

    // A writable replica refuses them from its clients as well.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("replica-read-only")
        .arg("no")
        .query(&mut r)
        .unwrap();
    let on_replica = snapshots(&mut r, &keys);
    for argv in forgeries(&k) {
        let e = err_of(redis::cmd(&argv[0]).arg(&argv[1..]).query(&mut r));
        assert_eq!(e, internal_err(&argv[0]), "replica: {argv:?}");
    }
    assert_same("replica", &on_replica, &snapshots(&mut r, &keys));
}
