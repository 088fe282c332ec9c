//! The subcommands themselves: `OPEN`, `KEEPALIVE`, `CLOSE`, `KILL`,
//! `INFO`; their replies, every error, `BIND` where no connection is.
use super::*;

#[test]
fn open_answers_one_then_zero_and_takes_the_settings_given() {
    let s = Server::start();
    let mut c = s.conn();
    let before = now_ms();
    assert_eq!(open_with(&mut c, "w", 10_000, &["LOCKDELAY", "500"]), 1);
    let after = now_ms();
    let i = live(&mut c, "w");
    assert_eq!(i.id, b"w");
    assert!(i.ttl > 0 && i.ttl <= 10_000, "{i:?}");
    assert!(
        i.deadline >= before + 10_000 - 5 && i.deadline <= after + 10_000 + 5,
        "deadline {} for a 10 s session opened between {before} and {after}",
        i.deadline
    );
    assert_eq!((i.session_ttl, i.lock_delay, i.bound), (10_000, 500, 0));
    assert_eq!((i.holds, i.waits), (0, 0));
    // A retry: kept alive for the new ttl, with the new (absent) settings.
    assert_eq!(open_with(&mut c, "w", 20_000, &[]), 0);
    let i = live(&mut c, "w");
    assert!(i.ttl > 10_000 && i.ttl <= 20_000, "{i:?}");
    assert_eq!((i.session_ttl, i.lock_delay, i.bound), (20_000, 0, 0));
    assert_eq!(stat(&mut c, "sessions"), 1);
    assert_eq!(stat(&mut c, "sessions_opened"), 1, "a retry opens nothing");
}

#[test]
fn info_is_a_map_in_resp3_and_nil_for_no_session() {
    let s = Server::start();
    let mut c = s.conn_resp3();
    assert_eq!(session_info(&mut c, "none"), None);
    assert_eq!(open_with(&mut c, "w", 10_000, &["LOCKDELAY", "7"]), 1);
    let v: Value = session_cmd("INFO", &["w"]).query(&mut c).unwrap();
    assert!(matches!(v, Value::Map(_)), "RESP3: a map, got {v:?}");
    let i = parse_session(v).unwrap();
    assert_eq!((i.session_ttl, i.lock_delay), (10_000, 7));
}

#[test]
fn keepalive_answers_the_time_left() {
    let s = Server::start();
    let mut c = s.conn();
    open(&mut c, "w", 10_000);
    assert_eq!(keepalive(&mut c, "w", None), 10_000);
    assert_eq!(keepalive(&mut c, "w", Some(30_000)), 30_000);
    let i = live(&mut c, "w");
    assert!(i.ttl > 20_000 && i.ttl <= 30_000, "{i:?}");
    // The ttl given becomes the session's own.
    assert_eq!(i.session_ttl, 30_000);
    assert_eq!(keepalive(&mut c, "w", None), 30_000);
    let e = err_text(&try_keepalive(&mut c, "never", None).unwrap_err());
    assert_eq!(e, NOSESSION);
    assert_eq!(close(&mut c, "w"), 1);
    let e = err_text(&try_keepalive(&mut c, "w", Some(1000)).unwrap_err());
    assert_eq!(e, NOSESSION, "a keep-alive never revives an ended session");
    assert_eq!(session_info(&mut c, "w"), None);
}

#[test]
fn close_and_kill_answer_whether_the_session_existed() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(close(&mut c, "none"), 0);
    assert_eq!(kill(&mut c, "none"), 0);
    let holds: Value = session_cmd("HOLDS", &["none"]).query(&mut c).unwrap();
    assert_eq!(holds, Value::Nil, "HOLDS of no session");
    open(&mut c, "a", 60_000);
    open(&mut c, "b", 60_000);
    assert_eq!(close(&mut c, "a"), 1);
    assert_eq!(kill(&mut c, "b"), 1);
    for id in ["a", "b"] {
        assert_eq!(session_info(&mut c, id), None);
        let holds: Value = session_cmd("HOLDS", &[id]).query(&mut c).unwrap();
        assert_eq!(holds, Value::Nil, "HOLDS of an ended session");
        assert_eq!(close(&mut c, id), 0, "{id} ended");
        assert_eq!(kill(&mut c, id), 0, "{id} ended");
    }
    assert_eq!(stat(&mut c, "sessions"), 0);
    let counts = end_counters(&mut c);
    assert_eq!(counts, [2, 1, 0, 1, 0], "{END_COUNTERS:?}");
}

#[test]
fn ids_are_binary_safe_and_1_to_256_bytes() {
    let s = Server::start();
    let mut c = s.conn();
    let binary: &[u8] = b"a\0b\xff\r\n";
    let n: i64 = redis::cmd("DLOCK.SESSION")
        .arg("OPEN")
        .arg(binary)
        .arg(10_000)
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 1);
    let v: Value = redis::cmd("DLOCK.SESSION")
        .arg("INFO")
        .arg(binary)
        .query(&mut c)
        .unwrap();
    assert_eq!(parse_session(v).unwrap().id, binary);
    let longest = "x".repeat(256);
    open(&mut c, &longest, 10_000);
    for bad in [String::new(), "y".repeat(257)] {
        let e = refused(&mut c, &session_cmd("OPEN", &[&bad, "10000"]));
        assert_eq!(e, ID_LENGTH, "id of {} bytes", bad.len());
        let e = req("r", "t").session(&bad).error(&mut c);
        assert_eq!(e, ID_LENGTH, "ACQUIRE ... SESSION of {} bytes", bad.len());
    }
    assert_eq!(
        stat(&mut c, "sessions"),
        2,
        "nothing opened by the refusals"
    );
    assert!(!exists(&mut c, "r"));
}

#[test]
fn bad_arguments_are_refused_and_change_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    open(&mut c, "live", 10_000);
    for ttl in ["0", "-1", "abc", "1.5", "140737488355329", ""] {
        let e = refused(&mut c, &session_cmd("OPEN", &["new", ttl]));
        assert_eq!(e, TTL_RANGE, "OPEN ttl {ttl:?}");
        let e = refused(&mut c, &session_cmd("KEEPALIVE", &["live", ttl]));
        assert_eq!(e, TTL_RANGE, "KEEPALIVE ttl {ttl:?}");
    }
    for delay in ["-1", "60001", "x", "1.5"] {
        let e = refused(
            &mut c,
            &session_cmd("OPEN", &["new", "1000", "LOCKDELAY", delay]),
        );
        assert_eq!(e, LOCKDELAY_RANGE, "LOCKDELAY {delay:?}");
    }
    for extra in [
        &["LOCKDELAY"][..],
        &["NOPE"],
        &["BIND", "BIND"],
        &["LOCKDELAY", "1", "LOCKDELAY", "1"],
    ] {
        let mut args = vec!["new", "1000"];
        args.extend_from_slice(extra);
        let e = refused(&mut c, &session_cmd("OPEN", &args));
        assert_eq!(e, SYNTAX, "OPEN {args:?}");
    }
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("dlock.max-ttl")
        .arg(60_000)
        .query(&mut c)
        .unwrap();
    let above = "ERR ttl_ms is above dlock.max-ttl (60000)";
    let e = refused(&mut c, &session_cmd("OPEN", &["new", "60001"]));
    assert_eq!(e, above);
    let e = refused(&mut c, &session_cmd("KEEPALIVE", &["live", "60001"]));
    assert_eq!(e, above);
    // The edges of the ranges pass.
    assert_eq!(
        open_with(&mut c, "edge", 60_000, &["LOCKDELAY", "60000"]),
        1
    );
    assert_eq!(live(&mut c, "edge").lock_delay, 60_000);
    assert_eq!(open_with(&mut c, "zero", 1000, &["LOCKDELAY", "0"]), 1);
    // Nothing else was opened, and the live session kept its ttl.
    assert_eq!(session_info(&mut c, "new"), None);
    assert_eq!(stat(&mut c, "sessions"), 3);
    assert!(live(&mut c, "live").ttl <= 10_000);
}

#[test]
fn unknown_subcommands_and_wrong_arity_are_refused() {
    let s = Server::start();
    let mut c = s.conn();
    for args in [
        &["NOPE"][..],
        &[],
        &["OPEN"],
        &["OPEN", "id"],
        &["KEEPALIVE"],
        &["KEEPALIVE", "id", "1000", "2000"],
        &["CLOSE"],
        &["CLOSE", "a", "b"],
        &["KILL"],
        &["INFO"],
        &["INFO", "a", "b"],
        &["HOLDS"],
    ] {
        let e = err_of(redis::cmd("DLOCK.SESSION").arg(args).query(&mut c));
        // The page names Redis's own text; its exact wording differs
        // between a container command's forms, so only its gist is held.
        let lower = e.to_lowercase();
        assert!(
            e.starts_with("ERR")
                && lower.contains("dlock.session")
                && (lower.contains("unknown subcommand")
                    || lower.contains("wrong number of arguments")),
            "{args:?}: {e}"
        );
    }
    assert_eq!(stat(&mut c, "sessions"), 0);
}

#[test]
fn bind_needs_a_real_client() {
    let s = Server::start();
    let mut c = s.conn();
    // In MULTI of a real client, BIND binds to that client.
    let v = transaction(&mut c, &[session_cmd("OPEN", &["tx", "60000", "BIND"])]);
    assert_eq!(v, [Value::Int(1)]);
    assert_eq!(live(&mut c, "tx").bound, 1);
    // A script has no connection to bind to.
    let e = err_of(
        redis::cmd("EVAL")
            .arg("return redis.call('DLOCK.SESSION', 'OPEN', 'lua', '60000', 'BIND')")
            .arg(0)
            .query(&mut c),
    );
    assert!(e.contains(BIND_NEEDS_CLIENT), "{e}");
    assert_eq!(session_info(&mut c, "lua"), None);
    // Without BIND a script opens a session.
    let n: i64 = redis::cmd("EVAL")
        .arg("return redis.call('DLOCK.SESSION', 'OPEN', 'lua', '60000')")
        .arg(0)
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 1);
    assert_eq!(live(&mut c, "lua").bound, 0);
}

#[test]
fn a_retry_of_open_takes_the_bind_given() {
    let s = Server::start();
    let mut c = s.conn();
    let mut owner = s.conn();
    assert_eq!(open_with(&mut owner, "b", 60_000, &["BIND"]), 1);
    assert_eq!(live(&mut c, "b").bound, 1);
    // Another connection closing ends nothing.
    drop(s.conn());
    // The retry without BIND unbinds it: its connection's close ends nothing.
    assert_eq!(open_with(&mut c, "b", 60_000, &[]), 0);
    assert_eq!(live(&mut c, "b").bound, 0);
    drop(owner);
    // The server has seen the close once a later command of a new
    // connection answers after CLIENT LIST no longer shows it.
    wait_until(SOON, "the owner's connection to close", || {
        let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut c).unwrap();
        list.lines().count() == 1
    });
    assert_eq!(live(&mut c, "b").bound, 0);
    assert_eq!(stat(&mut c, "sessions_disconnected"), 0);
    // A retry with BIND binds it to the connection that sent it.
    let mut first = s.conn();
    let mut second = s.conn();
    let first_id: i64 = redis::cmd("CLIENT").arg("ID").query(&mut first).unwrap();
    assert_eq!(open_with(&mut first, "b", 60_000, &["BIND"]), 0);
    assert_eq!(open_with(&mut second, "b", 60_000, &["BIND"]), 0);
    drop(first);
    wait_until(SOON, "the first connection to close", || {
        let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut c).unwrap();
        !list.contains(&format!("id={first_id} "))
    });
    assert_eq!(live(&mut c, "b").bound, 1, "bound to the second");
    drop(second);
    wait_ended(&mut c, "b");
    assert_eq!(stat(&mut c, "sessions_disconnected"), 1);
}

#[test]
fn a_session_opened_in_a_transaction_binds_the_holds_after_it() {
    let s = Server::start();
    let mut c = s.conn();
    let v = transaction(
        &mut c,
        &[
            session_cmd("OPEN", &["w", "60000"]),
            req("r", "t").session("w").cmd(),
            session_cmd("KEEPALIVE", &["w"]),
        ],
    );
    assert_eq!(v[0], Value::Int(1), "{v:?}");
    let fence = as_int(&v[1]);
    assert_eq!(v[2], Value::Int(60_000));
    assert_eq!(assert_bound(&mut c, "r", "t", "w").fence, fence);
    assert_eq!(live(&mut c, "w").holds, 1);
}

#[test]
fn an_id_whose_holds_are_still_being_released_cannot_be_opened() {
    let s = Server::start();
    let mut c = s.conn();
    open(&mut c, "w", 60_000);
    req("r", "t").session("w").grant(&mut c);
    // In the CLOSE's turn the hold is not settled yet.
    let v = transaction(
        &mut c,
        &[
            session_cmd("CLOSE", &["w"]),
            session_cmd("OPEN", &["w", "60000"]),
            session_cmd("KEEPALIVE", &["w"]),
        ],
    );
    assert_eq!(v[0], Value::Int(1));
    assert_eq!(value_err(&v[1]), ENDING);
    assert_eq!(value_err(&v[2]), NOSESSION);
    // Once settled, the id is free again (the moment is the server's:
    // every answer until then is this refusal).
    wait_until(RELEASED, "the id to open again", || {
        match session_cmd("OPEN", &["w", "60000"]).query::<i64>(&mut c) {
            Ok(n) => {
                assert_eq!(n, 1, "a new session");
                true
            }
            Err(e) => {
                assert_eq!(err_text(&e), ENDING);
                false
            }
        }
    });
    assert!(!exists(&mut c, "r"));
    assert_eq!(live(&mut c, "w").holds, 0);
}
