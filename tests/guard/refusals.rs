//! Bad input of every form, refused inner commands, ACL, `maxmemory`,
//! `WRONGTYPE`, huge batches: a clear error, and nothing written (the data,
//! the lock and the replication stream all unchanged).
use super::*;
use common::repl_stream::ReplStream;

const FENCE_RANGE: &str = "ERR fence must be an integer from 1 to 9223372036854775807";
const COUNT_RANGE: &str = "ERR count must be an integer from 1 to 1000";
const ARGC: &str = "ERR dlock: BATCH wants count commands, each its argc (at least 1) then that many arguments, and nothing after them";

fn refused(index: usize, name: &str, why: &str) -> String {
    format!("ERR dlock: command {index} ('{name}') {why}; nothing was run")
}

/// The data and the lock's holder, to compare before and after.
fn state(c: &mut Connection) -> (String, Option<(Vec<u8>, i64)>) {
    (digest(c), info(c, "r").map(|i| (i.token, i.fence)))
}

#[test]
fn bad_arguments_are_refused_and_change_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    let f = grant(&mut c, "r", "t", 60_000).to_string();
    set(&mut c, "d", "kept");
    let mut stream = ReplStream::attach(&s);
    let before = state(&mut c);
    let arity = "ERR wrong number of arguments for 'dlock.guard' command";
    let cases: &[(&[&str], &str)] = &[
        (&["r"], arity),
        (&["r", "TOKEN", "t"], arity),
        (&["r", "TOKEN"], arity),
        (&["r", "OWNER", "t", "SET", "d", "x"], "ERR syntax error"),
        (&["r", "t", "SET", "d", "x"], "ERR syntax error"),
        (
            &["r", "TOKEN", "", "SET", "d", "x"],
            "ERR token must not be empty",
        ),
        (&["r", "FENCE", "0", "SET", "d", "x"], FENCE_RANGE),
        (&["r", "FENCE", "-5", "SET", "d", "x"], FENCE_RANGE),
        (&["r", "FENCE", "1.5", "SET", "d", "x"], FENCE_RANGE),
        (
            &["r", "FENCE", "9223372036854775808", "SET", "d", "x"],
            FENCE_RANGE,
        ),
        (&["r", "FENCE", &f, "BATCH"], arity),
        (&["r", "FENCE", &f, "BATCH", "0", "1", "PING"], COUNT_RANGE),
        (
            &["r", "FENCE", &f, "BATCH", "1001", "1", "PING"],
            COUNT_RANGE,
        ),
        (&["r", "FENCE", &f, "BATCH", "x", "1", "PING"], COUNT_RANGE),
        (&["r", "FENCE", &f, "BATCH", "1", "0", "PING"], ARGC),
        (
            &["r", "FENCE", &f, "BATCH", "1", "4", "SET", "d", "x"],
            ARGC,
        ),
        (&["r", "FENCE", &f, "BATCH", "1", "-1", "SET"], ARGC),
        (
            &[
                "r", "FENCE", &f, "BATCH", "1", "3", "SET", "d", "x", "extra",
            ],
            ARGC,
        ),
        (
            &["r", "FENCE", &f, "BATCH", "2", "3", "SET", "d", "x"],
            arity,
        ),
        (
            &["r", "TOKEN", "t", "SET", "d"],
            &refused(1, "SET", "has the wrong number of arguments"),
        ),
    ];
    for (args, want) in cases {
        let got = err_of(redis::cmd("DLOCK.GUARD").arg(*args).query(&mut c));
        assert_eq!(got, *want, "{args:?}");
        assert_eq!(state(&mut c), before, "{args:?} changed something");
    }
    let check_cases: &[(&[&str], &str)] = &[
        (
            &["r", "TOKEN"],
            "ERR wrong number of arguments for 'dlock.check' command",
        ),
        (
            &["r", "TOKEN", "t", "x"],
            "ERR wrong number of arguments for 'dlock.check' command",
        ),
        (&["r", "BY", "t"], "ERR syntax error"),
        (&["r", "TOKEN", ""], "ERR token must not be empty"),
        (&["r", "FENCE", "0"], FENCE_RANGE),
    ];
    for (args, want) in check_cases {
        let got = err_of(redis::cmd("DLOCK.CHECK").arg(*args).query(&mut c));
        assert_eq!(got, *want, "{args:?}");
    }
    let propagated: Vec<Vec<String>> = stream
        .commands(&mut c)
        .into_iter()
        // The stream's own: a database selection, Valkey's keep-alive ping.
        .filter(|c| !c[0].eq_ignore_ascii_case("SELECT") && !c[0].eq_ignore_ascii_case("PING"))
        .collect();
    assert_eq!(propagated, Vec::<Vec<String>>::new(), "nothing propagated");
    assert_eq!(get(&mut c, "d").as_deref(), Some("kept"));
}

#[test]
fn refused_inner_commands_run_nothing_even_after_a_good_one() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "r", "t", 60_000);
    grant(&mut c, "other-lock", "o", 60_000);
    set(&mut c, "d", "kept");
    let before = state(&mut c);
    let can_block = "can block: a guard runs only commands that answer at once";
    let not_in_scripts = "is not allowed inside a script or a transaction";
    let outside = "reaches outside the resource's database";
    let cases: &[(&[&str], String)] = &[
        (
            &["NOSUCHCOMMAND", "d"],
            refused(2, "NOSUCHCOMMAND", "is not a command this server knows"),
        ),
        (&["BLPOP", "l", "0"], refused(2, "BLPOP", can_block)),
        (
            &["BLMOVE", "a", "b", "LEFT", "LEFT", "0"],
            refused(2, "BLMOVE", can_block),
        ),
        (
            &["XREAD", "STREAMS", "s", "0"],
            refused(2, "XREAD", can_block),
        ),
        (
            &["DLOCK.RELEASE", "r", "t"],
            refused(
                2,
                "DLOCK.RELEASE",
                "is a dlock command: a guard runs writes to data, never lock commands",
            ),
        ),
        (
            &["dlock.guard", "r", "TOKEN", "t", "SET", "d", "x"],
            refused(
                2,
                "dlock.guard",
                "is a dlock command: a guard runs writes to data, never lock commands",
            ),
        ),
        (&["MULTI"], refused(2, "MULTI", not_in_scripts)),
        (
            &["EVAL", "return 1", "0"],
            refused(2, "EVAL", not_in_scripts),
        ),
        (
            &["CLIENT", "KILL", "ID", "1"],
            refused(2, "CLIENT", not_in_scripts),
        ),
        (
            &["CONFIG", "SET", "maxmemory", "1"],
            refused(2, "CONFIG", not_in_scripts),
        ),
        (&["SELECT", "1"], refused(2, "SELECT", outside)),
        (&["MOVE", "d", "1"], refused(2, "MOVE", outside)),
        (&["SWAPDB", "0", "1"], refused(2, "SWAPDB", outside)),
        (&["FLUSHALL"], refused(2, "FLUSHALL", outside)),
        (&["FLUSHDB"], refused(2, "FLUSHDB", outside)),
        (&["COPY", "d", "e", "DB", "1"], refused(2, "COPY", outside)),
        (
            &["SET", "other-lock", "x"],
            refused(2, "SET", "writes to a dlock lock's key"),
        ),
        (
            &["DEL", "r"],
            refused(2, "DEL", "writes to a dlock lock's key"),
        ),
        (
            &["PUBLISH", "ch", "m"],
            refused(
                2,
                "PUBLISH",
                "publishes, which a failed BATCH could not take back; guard it alone",
            ),
        ),
        (
            &["GET"],
            refused(2, "GET", "has the wrong number of arguments"),
        ),
    ];
    for (inner, want) in cases {
        let got = err_of(batch(
            &mut c,
            "r",
            &token("t"),
            &[&["SET", "d", "overwritten"], inner],
        ));
        assert_eq!(got, *want, "{inner:?}");
        assert_eq!(state(&mut c), before, "{inner:?} changed something");
    }
    // Alone, PUBLISH runs (a guarded announcement), and the lock key is
    // still refused.
    assert_eq!(
        guard(&mut c, "r", &token("t"), &["PUBLISH", "ch", "m"]).unwrap(),
        Value::Int(0)
    );
    assert_eq!(
        err_of(guard(&mut c, "r", &token("t"), &["SET", "r", "x"])),
        refused(1, "SET", "writes to a dlock lock's key")
    );
    // A read of a lock's key is its own business: WRONGTYPE, as without a guard.
    assert!(
        err_of(guard(&mut c, "r", &token("t"), &["GET", "other-lock"])).starts_with("WRONGTYPE")
    );
    assert_eq!(state(&mut c), before);
}

#[test]
fn the_resource_of_another_type_is_wrongtype() {
    let s = Server::start();
    let mut c = s.conn();
    set(&mut c, "r", "a string");
    for cmd in ["DLOCK.GUARD", "DLOCK.CHECK"] {
        let mut q = redis::cmd(cmd);
        q.arg(&["r", "TOKEN", "t"]);
        if cmd == "DLOCK.GUARD" {
            q.arg(&["SET", "d", "x"]);
        }
        let e = err_of(q.query(&mut c));
        assert_eq!(
            e,
            "WRONGTYPE Operation against a key holding the wrong kind of value"
        );
    }
    assert_eq!(get(&mut c, "d"), None);
}

#[test]
fn the_callers_acl_applies_to_every_inner_command_and_key() {
    let s = Server::start();
    let mut admin = s.conn();
    grant(&mut admin, "r", "t", 60_000);
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER", "app", "on", ">pw", "+@all", "-set", "~r", "~app:*",
        ])
        .query(&mut admin)
        .unwrap();
    let mut app = s.conn();
    let _: () = redis::cmd("AUTH")
        .arg(&["app", "pw"])
        .query(&mut app)
        .unwrap();
    // A key outside the user's patterns: refused by the server's own check
    // of the guard's keys, before anything runs.
    let e = err_of(guard(
        &mut app,
        "r",
        &token("t"),
        &["HSET", "elsewhere", "f", "v"],
    ));
    assert!(e.starts_with("NOPERM"), "{e}");
    // A command the user may not run: refused as that command alone would be.
    let e = err_of(guard(&mut app, "r", &token("t"), &["SET", "app:x", "v"]));
    assert!(e.starts_with("NOPERM") || e.contains("acl"), "{e}");
    // In a batch, after a command that ran: undone.
    let e = err_of(batch(
        &mut app,
        "r",
        &token("t"),
        &[&["HSET", "app:h", "f", "v"], &["SET", "app:x", "v"]],
    ));
    assert!(
        e.contains("command 2 of 2 failed, so the BATCH was undone"),
        "{e}"
    );
    let exists: i64 = redis::cmd("EXISTS")
        .arg(&["app:h", "app:x"])
        .query(&mut admin)
        .unwrap();
    assert_eq!(exists, 0);
    // What the user may do runs.
    assert_eq!(
        guard(&mut app, "r", &token("t"), &["HSET", "app:h", "f", "v"]).unwrap(),
        Value::Int(1)
    );
}

#[test]
fn at_maxmemory_writes_are_refused_and_deletes_run() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "r", "t", 60_000);
    set(&mut c, "d", "v");
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "maxmemory", "1"])
        .query(&mut c)
        .unwrap();
    let e = err_of(guard(&mut c, "r", &token("t"), &["SET", "e", "v"]));
    assert!(e.starts_with("OOM"), "{e}");
    let e = err_of(batch(
        &mut c,
        "r",
        &token("t"),
        &[&["DEL", "d"], &["SET", "e", "v"]],
    ));
    assert!(e.starts_with("OOM dlock: command 2 of 2 failed"), "{e}");
    assert_eq!(get(&mut c, "d").as_deref(), Some("v"), "the DEL was undone");
    assert_eq!(
        guard(&mut c, "r", &token("t"), &["DEL", "d"]).unwrap(),
        Value::Int(1)
    );
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "maxmemory", "0"])
        .query(&mut c)
        .unwrap();
}

#[test]
fn a_batch_too_large_to_undo_is_refused_before_anything_runs() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "r", "t", 60_000);
    let big = "x".repeat(5 << 20);
    let _: () = redis::cmd("SET")
        .arg("big")
        .arg(&big)
        .query(&mut c)
        .unwrap();
    let mut hash = redis::cmd("HSET");
    hash.arg("wide");
    for i in 0..17_000 {
        hash.arg(i).arg(i);
    }
    let _: i64 = hash.query(&mut c).unwrap();
    let before = digest(&mut c);
    let too_big = |i: usize| {
        format!(
            "ERR dlock: command {i} of the BATCH writes more than a batch can undo \
             (1024 keys, 4194304 bytes or 16384 elements saved in all); put it last or guard \
             it alone; nothing was run"
        )
    };
    let e = err_of(batch(
        &mut c,
        "r",
        &token("t"),
        &[&["APPEND", "big", "y"], &["SET", "d", "x"]],
    ));
    assert_eq!(e, too_big(1));
    let e = err_of(batch(
        &mut c,
        "r",
        &token("t"),
        &[
            &["SET", "d", "x"],
            &["HSET", "wide", "a", "b"],
            &["SET", "e", "x"],
        ],
    ));
    assert_eq!(e, too_big(2));
    assert_eq!(digest(&mut c), before);
    // A collection of few large items counts its bytes.
    let item = "i".repeat(3 << 20);
    let _: i64 = redis::cmd("RPUSH")
        .arg("fat")
        .arg(&item)
        .arg(&item)
        .query(&mut c)
        .unwrap();
    let before = digest(&mut c);
    let e = err_of(batch(
        &mut c,
        "r",
        &token("t"),
        &[&["RPUSH", "fat", "y"], &["SET", "d", "x"]],
    ));
    assert_eq!(e, too_big(1));
    // Many keys count one each, existing or not (undone by deleting them).
    let mut mset = vec!["MSET"];
    let names: Vec<String> = (0..1025).map(|i| format!("m{i}")).collect();
    for n in &names {
        mset.push(n);
        mset.push("1");
    }
    let e = err_of(batch(
        &mut c,
        "r",
        &token("t"),
        &[&mset, &["SET", "d", "x"]],
    ));
    assert_eq!(e, too_big(1));
    assert_eq!(digest(&mut c), before);
    mset.truncate(1 + 2 * 1024);
    let v = batch(&mut c, "r", &token("t"), &[&mset, &["SET", "d", "x"]]).unwrap();
    assert_eq!(v, Value::Array(vec![Value::Okay, Value::Okay]));
    // Last, it is never copied; alone, nothing is copied.
    let v = batch(
        &mut c,
        "r",
        &token("t"),
        &[&["SET", "d", "x"], &["APPEND", "big", "y"]],
    )
    .unwrap();
    assert_eq!(
        v,
        Value::Array(vec![Value::Okay, Value::Int((5 << 20) + 1)])
    );
    assert_eq!(
        guard(&mut c, "r", &token("t"), &["HSET", "wide", "a", "b"]).unwrap(),
        Value::Int(1)
    );
    // The most commands a batch takes run, one more is refused.
    let many: Vec<[&str; 2]> = (0..1000).map(|_| ["INCR", "n"]).collect();
    let many: Vec<&[&str]> = many.iter().map(|c| &c[..]).collect();
    let v = batch(&mut c, "r", &token("t"), &many).unwrap();
    assert!(matches!(v, Value::Array(ref a) if a.len() == 1000));
    assert_eq!(get(&mut c, "n").as_deref(), Some("1000"));
}
