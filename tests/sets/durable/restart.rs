//! Sets survive restarts: AOF replay after kill -9 (`appendfsync always`,
//! so no restart quarantine), over a rewritten base with and without the
//! RDB preamble; `SHUTDOWN SAVE` + restart (a clean shutdown: no
//! quarantine either) and `DEBUG RELOAD`. Every member comes back with the
//! same value, fence and absolute deadline; a set whose deadline passed
//! while the server was down is gone on every member; the sets still behave
//! as sets (a retry gets the same fence, a release frees every member).
use super::*;

/// A set as granted: its members, token, mode and fence.
struct Set {
    members: Vec<&'static str>,
    tok: &'static str,
    shared: bool,
    fence: i64,
}

const EX: [&str; 3] = ["x1", "x2", "x3"];
const SH1: [&str; 2] = ["s1", "s2"];
const SH2: [&str; 3] = ["s1", "s2", "s3"];
const QD: [&str; 3] = ["q1", "q2", "q3"];
/// The set whose deadline passes while the server is down.
const DOOMED: [&str; 3] = ["d1", "d2", "d3"];

fn keys() -> Vec<String> {
    strings(&["x1", "x2", "x3", "s1", "s2", "s3", "q1", "q2", "q3"])
}

/// Sets granted at once: exclusive (plain effects), shared (hold effects).
fn granted_at_once(c: &mut Connection) -> Vec<Set> {
    let f = macquire(c, &EX, "t1", 60_000, &[]);
    let r1 = macquire(c, &SH1, "r1", 60_000, &["SHARED"]);
    let r2 = macquire(c, &SH2, "r2", 70_000, &["SHARED"]);
    vec![
        Set {
            members: EX.to_vec(),
            tok: "t1",
            shared: false,
            fence: f,
        },
        Set {
            members: SH1.to_vec(),
            tok: "r1",
            shared: true,
            fence: r1,
        },
        Set {
            members: SH2.to_vec(),
            tok: "r2",
            shared: true,
            fence: r2,
        },
    ]
}

/// A set granted from the queue, and extensions.
fn granted_later(s: &Server, c: &mut Connection, sets: &mut Vec<Set>) {
    macquire(c, &QD[..2], "h", 60_000, &[]);
    let w = Waiter::set(s, c, &QD, "w", &[], 1);
    assert_eq!(mrelease(c, &QD[..2], "h"), 2);
    let (f, _) = w.granted();
    sets.push(Set {
        members: QD.to_vec(),
        tok: "w",
        shared: false,
        fence: f,
    });
    assert_eq!(mextend(c, &EX, "t1", 90_000), 1);
    assert_eq!(mextend(c, &SH1, "r1", 80_000), 1);
}

/// The doomed set, granted and then shortened to end in 3 s: its deadline.
fn doomed(c: &mut Connection) -> i64 {
    macquire(c, &DOOMED, "doomed", 60_000, &[]);
    assert_eq!(mextend(c, &DOOMED, "doomed", 3_000), 1);
    let at: Vec<i64> = DOOMED
        .iter()
        .map(|m| redis::cmd("PEXPIRETIME").arg(*m).query(c).unwrap())
        .collect();
    assert!(at.iter().all(|t| *t == at[0]), "one deadline: {at:?}");
    assert!(at[0] > now_ms(), "still held when the server goes down");
    at[0]
}

fn check_sets(c: &mut Connection, sets: &[Set]) {
    for s in sets {
        assert_eq!(
            assert_set(c, &s.members, s.tok, s.shared),
            s.fence,
            "{}",
            s.tok
        );
    }
}

fn wait_past(deadline: i64) {
    wait_until(Duration::from_secs(10), "the doomed set's deadline", || {
        now_ms() > deadline + 5
    });
}

/// Right after a restart: no quarantine, the same members exactly, every
/// set whole, the doomed set gone everywhere, the fence clock not behind.
fn after_restart(c: &mut Connection, what: &str, before: &[Snapshot], sets: &[Set], mark: i64) {
    assert_eq!(
        dlock_counter(c, "quarantine_ms_left"),
        0,
        "{what}: no quarantine"
    );
    assert_same(what, before, &snapshots(c, &keys()));
    check_sets(c, sets);
    for m in DOOMED {
        assert_eq!(view(c, m), None, "{what}: {m} outlived its deadline");
        assert!(!exists(c, m), "{what}: {m}");
    }
    assert!(
        dlock_counter(c, "last_fence") >= mark,
        "{what}: the fence clock went back"
    );
}

/// The sets still behave as sets.
fn behave(c: &mut Connection, sets: &[Set], mark: i64) {
    let ex = &sets[0];
    assert_eq!(macquire(c, &EX, "t1", 60_000, &[]), ex.fence, "a retry");
    let more = ["x1", "x2", "x3", "x4"];
    let before = snapshots(c, &strings(&more));
    assert!(
        try_macquire(c, &more, "t1", 60_000, &[]).is_err(),
        "holds part of it"
    );
    assert_eq!(
        snapshots(c, &strings(&more)),
        before,
        "a refused retry changed nothing"
    );
    let f = macquire(c, &DOOMED, "fresh", 60_000, &[]);
    assert!(
        f > mark,
        "a new set's fence is above every fence before the restart"
    );
    assert_eq!(try_macquire(c, &QD, "other", 60_000, &[]).unwrap(), None);
    assert_eq!(mrelease(c, &EX, "t1"), 3);
    assert_eq!(mrelease(c, &SH2, "r2"), 3);
    assert_eq!(mrelease(c, &SH1, "r1"), 2);
    assert_eq!(mrelease(c, &QD, "w"), 3);
    assert_eq!(mrelease(c, &DOOMED, "fresh"), 3);
    assert_eq!(dbsize(c), 0);
}

/// Sets before and after a rewrite, then kill -9 and the replay of both.
fn aof_replay(preamble: &str) {
    let mut s = Server::builder()
        .aof("always")
        .arg("--aof-use-rdb-preamble")
        .arg(preamble)
        .start();
    let mut c = s.conn();
    let mut sets = granted_at_once(&mut c);
    rewrite_aof(&mut c);
    granted_later(&s, &mut c, &mut sets);
    let deadline = doomed(&mut c);
    let before = snapshots(&mut c, &keys());
    check_sets(&mut c, &sets);
    let mark = dlock_counter(&mut c, "last_fence");
    s.kill9();
    wait_past(deadline);
    s.restart();
    let mut c = s.conn();
    let what = format!("AOF replay (preamble {preamble})");
    after_restart(&mut c, &what, &before, &sets, mark);
    behave(&mut c, &sets, mark);
}

#[test]
fn aof_replay_over_an_rdb_preamble_keeps_every_set() {
    aof_replay("yes");
}

#[test]
fn aof_replay_over_a_rewritten_aof_keeps_every_set() {
    aof_replay("no");
}

#[test]
fn shutdown_save_and_debug_reload_keep_every_set() {
    let mut s = Server::start();
    let mut c = s.conn();
    let mut sets = granted_at_once(&mut c);
    granted_later(&s, &mut c, &mut sets);
    let deadline = doomed(&mut c);
    let before = snapshots(&mut c, &keys());
    let mark = dlock_counter(&mut c, "last_fence");
    // The server exits before it answers.
    let _: RedisResult<Value> = redis::cmd("SHUTDOWN").arg("SAVE").query(&mut c);
    wait_past(deadline);
    s.restart();
    let mut c = s.conn();
    let previous = info_field(&mut c, "dlock", "dlock_previous_run");
    assert_eq!(previous.as_deref(), Some("clean"));
    after_restart(&mut c, "SHUTDOWN SAVE + restart", &before, &sets, mark);
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut c).unwrap();
    after_restart(&mut c, "DEBUG RELOAD", &before, &sets, mark);
    behave(&mut c, &sets, mark);
}

/// A restart quarantine holds sets as it holds single locks: a retry of a
/// set that survived passes, a new set is refused (nothing changes) or,
/// with `WAIT`, waits the quarantine out in the queue and is then granted.
#[test]
fn a_restart_quarantine_refuses_new_sets_and_queues_waiting_ones() {
    const QUARANTINE_MS: u64 = 3000;
    let mut s = Server::builder()
        .aof("everysec")
        .arg("--dlock.restart-quarantine")
        .arg(QUARANTINE_MS.to_string())
        .start();
    let mut c = s.conn();
    let set = ["{q}a", "{q}b"];
    let f1 = macquire(&mut c, &set, "t1", 60_000, &[]);
    // everysec: on disk within a second, so the set survives the crash.
    std::thread::sleep(Duration::from_millis(1200));
    let mut c = s.crash_and_restart();
    let left: u64 = info_field(&mut c, "dlock", "dlock_quarantine_ms_left")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!(left > 0, "no quarantine after the crash");
    assert_eq!(
        macquire(&mut c, &set, "t1", 60_000, &[]),
        f1,
        "a retry passes"
    );
    let e =
        err_of(macquire_cmd(&["{q}c", "{q}d"], "t2", 60_000, &[]).query::<redis::Value>(&mut c));
    assert!(e.starts_with("QUARANTINE"), "{e}");
    assert!(!exists(&mut c, "{q}c") && !exists(&mut c, "{q}d"));
    let url = s.url();
    let waiter = std::thread::spawn(move || {
        let mut w = redis::Client::open(url).unwrap().get_connection().unwrap();
        w.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        try_macquire(&mut w, &["{q}c", "{q}d"], "t3", 60_000, &["WAIT", "60000"])
    });
    // Reserved while it waits (INFO's reserved form): count blocked clients.
    wait_blocked_clients(&mut c, 1);
    let still: u64 = info_field(&mut c, "dlock", "dlock_quarantine_ms_left")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!(
        still > 0,
        "the checks ran past the quarantine (a slow machine?)"
    );
    let f3 = waiter
        .join()
        .unwrap()
        .unwrap()
        .expect("granted once the quarantine ended");
    assert!(f3 > f1);
    for k in ["{q}c", "{q}d"] {
        let i = held(&mut c, k);
        assert_eq!((i.token.as_slice(), i.fence), (&b"t3"[..], f3), "{k}");
    }
}
