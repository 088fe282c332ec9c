//! Every kind of hold proves itself by token and by fence, while it lives;
//! a stale proof runs nothing; the inner command's reply passes through.
use super::*;
use std::time::Duration;

fn as_strs(v: &[String; 2]) -> [&str; 2] {
    [v[0].as_str(), v[1].as_str()]
}

/// `res` held by `tok` with fence `f`: both proofs run a write and pass
/// the check; a token or fence it does not hold runs nothing.
fn proves(c: &mut Connection, res: &str, tok: &str, f: u64) {
    let data = format!("{res}:data");
    let v: String = guard_cmd(res, &token(tok), &["SET", &data, tok])
        .query(c)
        .unwrap();
    assert_eq!(v, "OK", "{res} by token");
    assert_eq!(get(c, &data).as_deref(), Some(tok));
    let n: i64 = guard_cmd(res, &as_strs(&fence(f)), &["APPEND", &data, "+"])
        .query(c)
        .unwrap();
    assert_eq!(n as usize, tok.len() + 1, "{res} by fence");
    assert_eq!(check(c, res, &token(tok)), 1);
    assert_eq!(check(c, res, &as_strs(&fence(f))), 1);
    let before = get(c, &data);
    for proof in [token("not-a-holder"), as_strs(&fence(f + 1))] {
        assert_eq!(err_of(guard(c, res, &proof, &["SET", &data, "x"])), NOTHELD);
        assert_eq!(check(c, res, &proof), 0);
    }
    assert_eq!(get(c, &data), before, "a refused guard wrote nothing");
}

#[test]
fn every_kind_of_hold_proves_itself_by_token_and_by_fence() {
    let s = Server::start();
    let mut c = s.conn();
    let f = grant(&mut c, "plain", "p1", 60_000) as u64;
    proves(&mut c, "plain", "p1", f);
    for (kind, extra) in [
        ("shared", &["SHARED"][..]),
        ("permits", &["LIMIT", "3"]),
        ("owned", &["OWNER", "worker-1"]),
    ] {
        let mut fences = Vec::new();
        for i in 0..2 {
            let tok = format!("{kind}-{i}");
            let f: u64 = redis::cmd("DLOCK.ACQUIRE")
                .arg(kind)
                .arg(&tok)
                .arg(60_000)
                .arg(extra)
                .query(&mut c)
                .unwrap();
            fences.push((tok, f));
        }
        for (tok, f) in &fences {
            proves(&mut c, kind, tok, *f);
        }
    }
    // A set's members each prove the set's token and fence.
    let f: u64 = redis::cmd("DLOCK.MACQUIRE")
        .arg(&[
            2.to_string(),
            "m1".into(),
            "m2".into(),
            "set-tok".into(),
            "60000".into(),
        ])
        .query(&mut c)
        .unwrap();
    proves(&mut c, "m1", "set-tok", f);
    proves(&mut c, "m2", "set-tok", f);
    // A hold bound to a live session.
    let _: i64 = redis::cmd("DLOCK.SESSION")
        .arg(&["OPEN", "s1", "60000"])
        .query(&mut c)
        .unwrap();
    let f: u64 = redis::cmd("DLOCK.ACQUIRE")
        .arg(&["bound", "b1", "60000", "SESSION", "s1"])
        .query(&mut c)
        .unwrap();
    proves(&mut c, "bound", "b1", f);
}

#[test]
fn a_proof_that_no_longer_holds_runs_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    set(&mut c, "data", "before");
    // Released.
    let f = grant(&mut c, "released", "t", 60_000) as u64;
    release(&mut c, "released", "t");
    // Expired: a short lease, waited out until the key is gone.
    let g = grant(&mut c, "expired", "t", 50) as u64;
    wait_until(SOON, "the lease to end", || !exists(&mut c, "expired"));
    // Its hold ended among others' (SHARED): the key is still there.
    let h: u64 = redis::cmd("DLOCK.ACQUIRE")
        .arg(&["readers", "short", "50", "SHARED"])
        .query(&mut c)
        .unwrap();
    let _: u64 = redis::cmd("DLOCK.ACQUIRE")
        .arg(&["readers", "long", "60000", "SHARED"])
        .query(&mut c)
        .unwrap();
    std::thread::sleep(Duration::from_millis(120));
    // Taken over by another holder after release: the old fence is stale.
    let k = grant(&mut c, "taken", "old", 60_000) as u64;
    release(&mut c, "taken", "old");
    grant(&mut c, "taken", "new", 60_000);
    let cases: Vec<(&str, [String; 2])> = vec![
        ("released", fence(f)),
        ("released", ["TOKEN".into(), "t".into()]),
        ("expired", fence(g)),
        ("expired", ["TOKEN".into(), "t".into()]),
        ("readers", fence(h)),
        ("readers", ["TOKEN".into(), "short".into()]),
        ("taken", fence(k)),
        ("taken", ["TOKEN".into(), "old".into()]),
        ("never-held", ["TOKEN".into(), "t".into()]),
    ];
    let counted = |c: &mut Connection, name: &str| -> i64 {
        info_field(c, "dlock", name).unwrap().parse().unwrap()
    };
    let (run, refused) = (
        counted(&mut c, "dlock_guards_run"),
        counted(&mut c, "dlock_guards_not_held"),
    );
    for (res, proof) in &cases {
        let proof = as_strs(proof);
        assert_eq!(
            err_of(guard(&mut c, res, &proof, &["SET", "data", "late"])),
            NOTHELD,
            "{res} {proof:?}"
        );
        assert_eq!(
            err_of(batch(
                &mut c,
                res,
                &proof,
                &[&["SET", "data", "late"], &["DEL", "data"]]
            )),
            NOTHELD,
            "{res} {proof:?}"
        );
        assert_eq!(check(&mut c, res, &proof), 0, "{res} {proof:?}");
    }
    assert_eq!(get(&mut c, "data").as_deref(), Some("before"));
    assert_eq!(
        counted(&mut c, "dlock_guards_not_held") - refused,
        2 * cases.len() as i64
    );
    assert_eq!(counted(&mut c, "dlock_guards_run"), run, "none ran");
}

#[test]
fn a_lock_delayed_hold_and_an_ended_session_prove_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    for (id, delay) in [("delayed", "60000"), ("gone", "0")] {
        let _: i64 = redis::cmd("DLOCK.SESSION")
            .arg(&["OPEN", id, "60000", "LOCKDELAY", delay])
            .query(&mut c)
            .unwrap();
        let res = format!("res-{id}");
        let f: u64 = redis::cmd("DLOCK.ACQUIRE")
            .arg(&[res.as_str(), "tok", "60000", "SESSION", id])
            .query(&mut c)
            .unwrap();
        let _: i64 = redis::cmd("DLOCK.SESSION")
            .arg(&["CLOSE", id])
            .query(&mut c)
            .unwrap();
        for proof in [token("tok"), as_strs(&fence(f))] {
            assert_eq!(
                err_of(guard(&mut c, &res, &proof, &["SET", "data", id])),
                NOTHELD,
                "{id}"
            );
            assert_eq!(check(&mut c, &res, &proof), 0, "{id}");
        }
    }
    assert_eq!(get(&mut c, "data"), None);
}

#[test]
fn the_inner_reply_passes_through_in_the_callers_protocol() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "r", "t", 60_000);
    let _: () = redis::cmd("HSET")
        .arg(&["h", "f", "v"])
        .query(&mut c)
        .unwrap();
    assert_eq!(
        guard(&mut c, "r", &token("t"), &["HGETALL", "h"]).unwrap(),
        Value::Array(vec![
            Value::BulkString(b"f".to_vec()),
            Value::BulkString(b"v".to_vec())
        ])
    );
    assert_eq!(
        guard(&mut c, "r", &token("t"), &["GET", "missing"]).unwrap(),
        Value::Nil
    );
    let mut c3 = s.conn_resp3();
    assert_eq!(
        guard(&mut c3, "r", &token("t"), &["HGETALL", "h"]).unwrap(),
        Value::Map(vec![(
            Value::BulkString(b"f".to_vec()),
            Value::BulkString(b"v".to_vec())
        )])
    );
    // The command's own error, as it returns it.
    assert_eq!(
        err_of(guard(&mut c, "r", &token("t"), &["INCR", "h"])),
        "WRONGTYPE Operation against a key holding the wrong kind of value"
    );
    assert_eq!(
        batch(
            &mut c,
            "r",
            &token("t"),
            &[
                &["SET", "a", "1"],
                &["INCR", "a"],
                &["GET", "a"],
                &["EXISTS", "nope"]
            ]
        )
        .unwrap(),
        Value::Array(vec![
            Value::Okay,
            Value::Int(2),
            Value::BulkString(b"2".to_vec()),
            Value::Int(0)
        ])
    );
}

#[test]
fn a_guard_works_from_lua_and_inside_multi() {
    let s = Server::start();
    let mut c = s.conn();
    let f = grant(&mut c, "r", "t", 60_000);
    let script =
        "return redis.call('DLOCK.GUARD', KEYS[1], 'FENCE', ARGV[1], 'SET', KEYS[2], ARGV[2])";
    let v: String = redis::cmd("EVAL")
        .arg(&[script, "2", "r", "d", &f.to_string(), "from-lua"])
        .query(&mut c)
        .unwrap();
    assert_eq!(v, "OK");
    assert_eq!(get(&mut c, "d").as_deref(), Some("from-lua"));
    let stale = (f + 1).to_string();
    let e = err_of(
        redis::cmd("EVAL")
            .arg(&[script, "2", "r", "d", &stale, "stale"])
            .query(&mut c),
    );
    assert!(e.contains("NOTHELD"), "{e}");
    assert_eq!(get(&mut c, "d").as_deref(), Some("from-lua"));
    let replies = transaction(
        &mut c,
        &[
            guard_cmd("r", &token("t"), &["INCR", "n"]),
            guard_cmd("r", &token("x"), &["INCR", "n"]),
            guard_cmd("r", &token("t"), &["INCR", "n"]),
        ],
    );
    assert_eq!(replies.len(), 3);
    assert_eq!(replies[0], Value::Int(1));
    assert!(
        matches!(&replies[1], Value::ServerError(e) if e.code() == "NOTHELD"),
        "{:?}",
        replies[1]
    );
    assert_eq!(replies[2], Value::Int(2));
}

#[test]
fn among_many_holds_each_is_found_by_its_fence() {
    let s = Server::start();
    let mut c = s.conn();
    let fences: Vec<u64> = (0..2000)
        .map(|i| {
            redis::cmd("DLOCK.ACQUIRE")
                .arg(&["many", &format!("r{i}"), "60000", "SHARED"])
                .query(&mut c)
                .unwrap()
        })
        .collect();
    for (i, f) in fences.iter().enumerate().step_by(97) {
        assert_eq!(check(&mut c, "many", &as_strs(&fence(*f))), 1, "hold {i}");
        release(&mut c, "many", &format!("r{i}"));
        assert_eq!(
            check(&mut c, "many", &as_strs(&fence(*f))),
            0,
            "hold {i} released"
        );
    }
    let last = fences.last().copied().unwrap_or_default();
    assert_eq!(check(&mut c, "many", &as_strs(&fence(last + 1))), 0);
}
