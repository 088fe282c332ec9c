//! A holder process frozen (SIGSTOP) past its lease: when it resumes, the
//! guarded writes it had in flight are refused, whichever proof they carry
//! and single or BATCH, and the data shows only live holders' writes.
use super::*;
use common::lock::*;

const RES: &str = "{acct}";
const BALANCE: &str = "{acct}:balance";
const LOG: &str = "{acct}:log";
const WRITES: &str = "{acct}:writes";
/// The holder's lease while it writes: long, so no step races it.
const LEASE_MS: &str = "60000";
/// The lease it shortens to before it freezes: short, since the test waits
/// for its end.
const SHORT_MS: &str = "200";

/// How the frozen holder holds `RES`: the commands it sends (the last one
/// an ACQUIRE that answers its fence), the one that shortens its lease, and
/// the options a later holder's ACQUIRE needs to take `RES` over.
struct Kind {
    name: &'static str,
    setup: &'static [&'static [&'static str]],
    shorten: &'static [&'static str],
    next_holder: &'static [&'static str],
}

const EXTEND_SHORT: &[&str] = &["DLOCK.EXTEND", RES, "A", SHORT_MS];

const PLAIN: Kind = Kind {
    name: "a plain lock",
    setup: &[&["DLOCK.ACQUIRE", RES, "A", LEASE_MS]],
    shorten: EXTEND_SHORT,
    next_holder: &[],
};

/// Each other kind of hold, frozen past its lease.
const KINDS: [Kind; 3] = [
    Kind {
        name: "a SHARED hold",
        setup: &[&["DLOCK.ACQUIRE", RES, "A", LEASE_MS, "SHARED"]],
        shorten: EXTEND_SHORT,
        next_holder: &[],
    },
    Kind {
        name: "a permit of LIMIT 1",
        setup: &[&["DLOCK.ACQUIRE", RES, "A", LEASE_MS, "LIMIT", "1"]],
        shorten: EXTEND_SHORT,
        next_holder: &["LIMIT", "1"],
    },
    Kind {
        name: "a hold bound to a session",
        setup: &[
            &["DLOCK.SESSION", "OPEN", "session-A", LEASE_MS],
            &["DLOCK.ACQUIRE", RES, "A", "0", "SESSION", "session-A"],
        ],
        shorten: &["DLOCK.SESSION", "KEEPALIVE", "session-A", SHORT_MS],
        next_holder: &[],
    },
];

/// A holder process `A` with `RES` held as `kind` says and one accepted
/// guarded write of its own, its lease then shortened and the process
/// frozen (SIGSTOP); returns it and its fence.
fn frozen_holder_after_a_write(s: &Server, kind: &Kind) -> (CliProcess, i64) {
    let tok = "A";
    let mut a = CliProcess::spawn(s);
    let (last, before) = kind.setup.split_last().unwrap();
    for step in before {
        let r = a.run1(&args(step));
        assert!(!r.starts_with("(error)"), "{step:?}: {r}");
    }
    let granted = a.run1(&args(last));
    let fence: i64 = granted
        .strip_prefix("(integer) ")
        .and_then(|f| f.parse().ok())
        .unwrap_or_else(|| panic!("{}: ACQUIRE by the holder answered {granted:?}", kind.name));
    let live = format!("{tok}-0");
    let w = a.run(&guarded_batch(
        RES,
        &Proof::Token(tok.into()),
        &[&["SET", BALANCE, &live], &["RPUSH", LOG, &live]],
    ));
    assert_eq!(
        w,
        ["1) OK", "2) (integer) 1"],
        "{}: the live holder's write",
        kind.name
    );
    let r = a.run1(&args(kind.shorten));
    assert!(
        r.starts_with("(integer) ") && r != "(integer) 0",
        "{}: {:?} answered {r}",
        kind.name,
        kind.shorten
    );
    a.stop();
    (a, fence)
}

/// A stale write: the lines the holder sends, and how each reply line
/// it gets must start.
struct Stale {
    lines: Vec<String>,
    replies: &'static [&'static str],
}

const REFUSED: &str = "(error) NOTHELD dlock: ";

/// A guarded `RPUSH KEYS[2] ARGV[2]` from Lua, proven by the fence ARGV[1]
/// (no spaces or double quotes: redis-cli reads it in double quotes).
const LUA_GUARDED_RPUSH: &str =
    "return redis.call('DLOCK.GUARD',KEYS[1],'FENCE',ARGV[1],'RPUSH',KEYS[2],ARGV[2])";

/// The stale writes: each proof form, single and BATCH, inside `MULTI` and
/// from a Lua script.
fn late_writes(tok: &str, fence: i64) -> Vec<Stale> {
    let (t, f) = (Proof::Token(tok.into()), Proof::Fence(fence));
    let alone = |w: Vec<String>| Stale {
        lines: vec![w.join(" ")],
        replies: &[REFUSED],
    };
    vec![
        alone(guarded(RES, &t, &["SET", BALANCE, "late-token"])),
        alone(guarded(RES, &f, &["RPUSH", LOG, "late-fence"])),
        alone(guarded_batch(
            RES,
            &t,
            &[
                &["SET", BALANCE, "late-token-batch"],
                &["RPUSH", LOG, "late-token-batch"],
            ],
        )),
        alone(guarded_batch(
            RES,
            &f,
            &[&["RPUSH", LOG, "late-fence-batch"], &["INCR", WRITES]],
        )),
        Stale {
            lines: vec![
                "MULTI".into(),
                guarded(RES, &t, &["RPUSH", LOG, "late-multi"]).join(" "),
                "EXEC".into(),
            ],
            replies: &["OK", "QUEUED", "1) (error) NOTHELD dlock: "],
        },
        Stale {
            lines: vec![format!(
                "EVAL \"{LUA_GUARDED_RPUSH}\" 2 {RES} {LOG} {fence} late-lua"
            )],
            replies: &[REFUSED],
        },
    ]
}

/// Submits `writes` to the frozen `a`, resumes it, and checks that each
/// was refused with `NOTHELD` and nothing else.
fn resume_and_expect_refusals(a: &mut CliProcess, writes: &[Stale], kind: &Kind) {
    let markers: Vec<u64> = writes.iter().map(|w| a.submit_lines(&w.lines)).collect();
    a.cont();
    for (w, m) in writes.iter().zip(markers) {
        let r = a.replies(m);
        assert!(
            r.len() == w.replies.len() && r.iter().zip(w.replies).all(|(l, p)| l.starts_with(p)),
            "{}: the resumed holder's {:?} answered {r:?}",
            kind.name,
            w.lines
        );
    }
}

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

#[test]
fn a_paused_holder_resumes_and_every_guarded_write_is_refused() {
    paused_holder_is_refused(&PLAIN);
}

/// As above, for every other kind of hold: a SHARED hold, a semaphore's
/// permit, a hold whose session ended while its process was frozen.
#[test]
fn a_paused_holder_of_any_kind_is_refused() {
    for kind in &KINDS {
        paused_holder_is_refused(kind);
    }
}

fn paused_holder_is_refused(kind: &Kind) {
    let s = Server::start();
    let mut c = s.conn();
    // A freezes with its next writes in flight (in its pipe, below), and
    // stays frozen past its lease while B takes the lock and writes.
    let (mut a, fence_a) = frozen_holder_after_a_write(&s, kind);
    let stale = late_writes("A", fence_a);
    let fence_b = grant_when_free(&mut c, RES, "B", kind.next_holder);
    assert!(fence_b > fence_a, "{}", kind.name);
    let (t, f) = (Proof::Token("B".into()), Proof::Fence(fence_b));
    let ok: String = cmd(&guarded(RES, &t, &["SET", BALANCE, "B-1"]))
        .query(&mut c)
        .unwrap();
    assert_eq!(ok, "OK");
    let n: i64 = cmd(&guarded(RES, &f, &["RPUSH", LOG, "B-1"]))
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 2);
    let (ok, n): (String, i64) = cmd(&guarded_batch(
        RES,
        &t,
        &[&["SET", BALANCE, "B-2"], &["RPUSH", LOG, "B-2"]],
    ))
    .query(&mut c)
    .unwrap();
    assert_eq!((ok.as_str(), n), ("OK", 3));
    let (n, w): (i64, i64) = cmd(&guarded_batch(
        RES,
        &f,
        &[&["RPUSH", LOG, "B-3"], &["INCR", WRITES]],
    ))
    .query(&mut c)
    .unwrap();
    assert_eq!((n, w), (4, 1));
    // The same forms as A's late writes inside MULTI and from Lua pass for B.
    let n: i64 = redis::cmd("EVAL")
        .arg(LUA_GUARDED_RPUSH)
        .arg(2)
        .arg(RES)
        .arg(LOG)
        .arg(fence_b)
        .arg("B-lua")
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 5);
    let exec = transaction(
        &mut c,
        &[cmd(&guarded(RES, &t, &["RPUSH", LOG, "B-multi"]))],
    );
    assert_eq!(exec, [redis::Value::Int(6)]);

    resume_and_expect_refusals(&mut a, &stale, kind);

    let what = kind.name;
    assert_eq!(get(&mut c, BALANCE).as_deref(), Some("B-2"), "{what}");
    assert_eq!(
        list(&mut c, LOG),
        ["A-0", "B-1", "B-2", "B-3", "B-lua", "B-multi"],
        "{what}"
    );
    assert_eq!(get(&mut c, WRITES).as_deref(), Some("1"), "{what}");
    // The sequencer check agrees: B holds, A in neither form.
    for (proof, live) in [
        (Proof::Token("B".into()), 1),
        (Proof::Fence(fence_b), 1),
        (Proof::Token("A".into()), 0),
        (Proof::Fence(fence_a), 0),
    ] {
        assert_eq!(check(&mut c, RES, &proof), live, "{what}: CHECK {proof:?}");
    }
    // B's writes still pass after the refusals.
    let ok: String = cmd(&guarded(RES, &t, &["SET", BALANCE, "B-4"]))
        .query(&mut c)
        .unwrap();
    assert_eq!(ok, "OK");
    let r: i64 = redis::cmd("DLOCK.RELEASE")
        .arg(RES)
        .arg("B")
        .query(&mut c)
        .unwrap();
    assert_eq!(r, 1, "{what}");
}

/// Nobody took the lock after the lease ended: the resumed holder is no
/// holder either.
#[test]
fn a_paused_holder_whose_lease_ended_unclaimed_is_refused() {
    let s = Server::start();
    let mut c = s.conn();
    let (mut a, fence_a) = frozen_holder_after_a_write(&s, &PLAIN);
    wait_until(DEADLINE, "the frozen holder's lease to end", || {
        info(&mut c, RES).is_none()
    });
    resume_and_expect_refusals(&mut a, &late_writes("A", fence_a), &PLAIN);
    assert_eq!(get(&mut c, BALANCE).as_deref(), Some("A-0"));
    assert_eq!(list(&mut c, LOG), ["A-0"]);
    assert_eq!(get(&mut c, WRITES), None);
    assert_eq!(info(&mut c, RES), None, "a refused write takes no lock");
}
